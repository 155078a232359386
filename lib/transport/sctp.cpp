#include <tenbin/sctp.hpp>

#include "core/chunk_plan.hpp"
#include "core/diagnostics.hpp"
#include "transport/sctp_parts.hpp"

#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

namespace tenbin {

namespace {

using detail::str;

// RFC 6458's flag for an event delivered in place of data. Linux's value;
// other systems define it in <netinet/sctp.h>, which glibc lacks.
#if defined(MSG_NOTIFICATION)
constexpr int notification_flag = MSG_NOTIFICATION;
#elif defined(__linux__)
constexpr int notification_flag = 0x8000;
#else
constexpr int notification_flag = 0;
#endif

constexpr std::size_t default_first_part = 64 * 1024;

[[noreturn]] void throw_errno(const char* what, int e) {
    if (e == EAGAIN || e == EWOULDBLOCK)
        throw error(errc::timeout, std::string(what) +
                                       ": nothing within the socket's timeout (or it is "
                                       "non-blocking and would block)");
    throw error(errc::io_error, std::string(what) + ": " + std::generic_category().message(e));
}

[[noreturn]] void throw_peer_closed(const char* what) {
    throw error(errc::io_error, std::string(what) + ": peer closed the connection");
}

enum class socket_kind { sctp, datagram };

// Message-oriented sockets only: with a byte stream, message boundaries
// (and so the end of a tensor list) would be lost.
socket_kind kind_of(int fd, const char* what) {
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
        const int e = errno;
        if (e == ENOTSOCK || e == EBADF)
            throw error(errc::bad_argument, std::string(what) + ": descriptor " +
                                                std::to_string(fd) + " is not a socket (" +
                                                std::generic_category().message(e) + ")");
        throw_errno(what, e);
    }
    int protocol = 0;
#if defined(SO_PROTOCOL)
    len = sizeof protocol;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) protocol = 0;
#endif
    if (protocol == IPPROTO_SCTP) return socket_kind::sctp;  // one-to-one SCTP is SOCK_STREAM
    if (type == SOCK_SEQPACKET || type == SOCK_DGRAM) return socket_kind::datagram;
    throw error(errc::bad_argument,
                std::string(what) + ": socket " + std::to_string(fd) +
                    " is a byte stream without message boundaries; use tenbin::write/read there");
}

long iov_limit() noexcept {
    static const long limit = [] {
        const long n = sysconf(_SC_IOV_MAX);
#if defined(IOV_MAX)
        return n > 0 ? n : long{IOV_MAX};
#else
        return n > 0 ? n : 16L;
#endif
    }();
    return limit;
}

ssize_t recvmsg_retrying(int fd, msghdr* m, int flags) {
    ssize_t n;
    do n = recvmsg(fd, m, flags);
    while (n < 0 && errno == EINTR);
    return n;
}

// SOCK_SEQPACKET / SOCK_DGRAM: the kernel reports a message's true size to
// a MSG_TRUNC peek, so the buffer is allocated exactly once.
buffer receive_datagram(int fd, std::size_t max_size) {
    msghdr m{};
    const ssize_t size = recvmsg_retrying(fd, &m, MSG_PEEK | MSG_TRUNC);
    if (size < 0) throw_errno("sctp_recv", errno);
    if (size == 0) {
        // End of stream, or an empty message: consume the latter so that
        // the next call does not find it again.
        msghdr drop{};
        recvmsg_retrying(fd, &drop, MSG_DONTWAIT);
        throw_peer_closed("sctp_recv");
    }
    const auto n = static_cast<std::size_t>(size);
    if (n > max_size) {
        msghdr drop{};  // reading into no space discards the whole message
        recvmsg_retrying(fd, &drop, 0);
        throw error(errc::limit_exceeded, "sctp_recv: message of " + str(n) +
                                              " bytes is larger than max_size = " + str(max_size));
    }
    buffer out = buffer::allocate(n);
    iovec iov{out.writable_bytes().data(), n};
    msghdr r{};
    r.msg_iov = &iov;
    r.msg_iovlen = 1;
    const ssize_t got = recvmsg_retrying(fd, &r, 0);
    if (got < 0) throw_errno("sctp_recv", errno);
    if (static_cast<std::size_t>(got) != n || (r.msg_flags & MSG_TRUNC) != 0)
        throw error(errc::io_error, "sctp_recv: peeked a message of " + str(n) + " bytes but read " +
                                        str(static_cast<std::uint64_t>(got)) +
                                        " (is another thread reading this socket?)");
    return out;
}

// SCTP: sizes are not reported, and a large message may come in parts
// marked by MSG_EOR on the last.
buffer receive_sctp(int fd, std::size_t max_size) {
    // Wait for something (honouring SO_RCVTIMEO) before asking its size.
    std::byte probe[1];
    iovec probe_iov{probe, 1};
    msghdr m{};
    m.msg_iov = &probe_iov;
    m.msg_iovlen = 1;
    const ssize_t peeked = recvmsg_retrying(fd, &m, MSG_PEEK);
    if (peeked < 0) throw_errno("sctp_recv", errno);
    if (peeked == 0) throw_peer_closed("sctp_recv");
    // The size of the queued message (or of its first part, when the kernel
    // delivers it in parts); where the system cannot tell, the buffer grows
    // from a default.
    int queued = 0;
    std::size_t hint = 0;
    if (ioctl(fd, FIONREAD, &queued) == 0 && queued > 0) hint = static_cast<std::size_t>(queued);

    const detail::part_reader read = [fd](mutable_bytes space) {
        iovec iov{space.data(), space.size()};
        msghdr r{};
        r.msg_iov = &iov;
        r.msg_iovlen = 1;
        const ssize_t n = recvmsg_retrying(fd, &r, 0);
        if (n < 0) throw_errno("sctp_recv", errno);
        detail::message_part part;
        part.size = static_cast<std::size_t>(n);
        part.end_of_record = (r.msg_flags & MSG_EOR) != 0;
        part.notification = notification_flag != 0 && (r.msg_flags & notification_flag) != 0;
        return part;
    };
    return detail::read_message_parts(read, hint, max_size);
}

}  // namespace

namespace detail {

buffer read_message_parts(const part_reader& read, std::size_t size_hint, std::size_t max_size) {
    const std::size_t first = std::min(size_hint != 0 ? size_hint : default_first_part, max_size);
    buffer space = buffer::allocate(first);
    for (;;) {  // one message per turn, until one is not a notification
        std::size_t used = 0;
        bool notification = false;
        bool complete = false;
        while (!complete) {
            if (used == space.size()) {
                if (used == max_size) break;  // and more is coming
                const std::size_t grown = std::min(max_size, std::max<std::size_t>(2 * used, 4096));
                buffer bigger = buffer::allocate(grown);
                if (used != 0) std::memcpy(bigger.writable_bytes().data(), space.data(), used);
                space = std::move(bigger);
            }
            const message_part part = read(space.writable_bytes().subspan(used));
            notification = notification || part.notification;
            used += part.size;
            if (part.end_of_record)
                complete = true;
            else if (part.size == 0)
                throw error(errc::io_error, used == 0 ? "sctp_recv: peer closed the connection"
                                                      : "sctp_recv: peer closed the connection "
                                                        "inside a message");
        }
        if (complete && !notification) {
            // Keep no more than twice the message alive.
            if (2 * used < space.size()) return buffer::copy(space.bytes().first(used));
            return space.slice(0, used);
        }
        if (!complete) {
            // Read the rest, so that the next call starts at a message.
            std::uint64_t total = used;
            // Never read: left uninitialised (zeroing 64 KiB per refused
            // message was most of the fuzz target's time).
            constexpr std::size_t scratch_size = 64 * 1024;
            const auto scratch = std::make_unique_for_overwrite<std::byte[]>(scratch_size);
            for (;;) {
                const message_part part = read(mutable_bytes(scratch.get(), scratch_size));
                total += part.size;
                if (part.end_of_record) break;
                if (part.size == 0)
                    throw error(errc::io_error, "sctp_recv: peer closed the connection inside a message");
            }
            if (!notification)
                throw error(errc::limit_exceeded, "sctp_recv: message of " + str(total) +
                                                      " bytes is larger than max_size = " + str(max_size));
        }
        // A notification: skipped.
    }
}

}  // namespace detail

void sctp_send(int fd, const sockaddr* dest, socklen_t dest_len, tensor_span tensors) {
    if ((dest == nullptr) != (dest_len == 0))
        throw error(errc::bad_argument, "sctp_send: dest is " +
                                            std::string(dest ? "set" : "null") + " but dest_len is " +
                                            std::to_string(dest_len));
    if (tensors.empty())
        throw error(errc::bad_argument,
                    "sctp_send: an empty tensor list would be a zero-length message, which SCTP "
                    "refuses and a SOCK_SEQPACKET reader takes for end of stream");
    kind_of(fd, "sctp_send");

    const detail::chunk_plan plan(tensors);  // checks every tensor
    const auto pieces = plan.pieces();
    std::vector<iovec> iov;
    buffer flat;
    if (pieces.size() <= static_cast<std::size_t>(iov_limit())) {
        iov.reserve(pieces.size());
        for (bytes_view p : pieces)
            iov.push_back({const_cast<std::byte*>(p.data()), p.size()});  // sendmsg only reads
    } else {
        // Too many pieces for one sendmsg: the single copy of encode_buffer.
        flat = buffer::allocate(plan.size());
        plan.copy_to(flat.writable_bytes());
        iov.push_back({flat.writable_bytes().data(), flat.size()});
    }

    msghdr m{};
    m.msg_name = const_cast<sockaddr*>(dest);
    m.msg_namelen = dest_len;
    m.msg_iov = iov.data();
    m.msg_iovlen = iov.size();
    ssize_t sent;
    do sent = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        const int e = errno;
        if (e == EPIPE || e == ECONNRESET) throw_peer_closed("sctp_send");
        if (e == EMSGSIZE)
            throw error(errc::io_error, "sctp_send: message of " + str(plan.size()) +
                                            " bytes is too long for this socket (for SCTP or AF_UNIX, raise "
                                            "SO_SNDBUF; a UDP datagram holds at most 65,507 bytes)");
        throw_errno("sctp_send", e);
    }
    if (static_cast<std::size_t>(sent) != plan.size())
        throw error(errc::io_error, "sctp_send: partial send of " + str(static_cast<std::uint64_t>(sent)) +
                                        " of " + str(plan.size()) + " bytes on a message socket");
}

std::vector<tensor> sctp_recv(int fd, std::size_t max_size, const decode_options& opt) {
    const buffer message = kind_of(fd, "sctp_recv") == socket_kind::sctp
                               ? receive_sctp(fd, max_size)
                               : receive_datagram(fd, max_size);
    return decode_buffer(message, opt);
}

}  // namespace tenbin
