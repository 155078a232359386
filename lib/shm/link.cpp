// A receiver's side channel to one sender (see link.hpp).
#ifdef __linux__

#include "shm/link.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>

namespace tenbin::detail::shm_impl {

namespace {

// Most claims a link keeps waiting for answers (each one's receive timed
// out): past them the sender answers nothing, and the link is given up.
constexpr std::size_t max_pending = 64;

std::atomic<std::uint64_t> quiet_claims_here{0};

// Milliseconds left until `deadline`, rounded up; 0 once past it.
int left_ms(receive_clock::time_point deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - receive_clock::now());
    return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

[[noreturn]] void interrupted() {
    throw error(errc::closed, "a +shm receive was interrupted: its connection is closing");
}

void throw_if_interrupted(const receiver_state& state) {
    pollfd p{state.interrupted.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) interrupted();
}

// Waits at most until `deadline` for `events` on `fd`: whether they came.
// Throws errc::closed once the receiver is interrupted.
bool wait_for(int fd, short events, receive_clock::time_point deadline, const receiver_state& state) {
    for (;;) {
        pollfd p[2] = {{fd, events, 0}, {state.interrupted.get(), POLLIN, 0}};
        const int rc = ::poll(p, 2, left_ms(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (p[1].revents) interrupted();
        return rc > 0;
    }
}

}  // namespace

mapping::mapping(const std::byte* base, std::size_t size, std::shared_ptr<receiver_state> state)
    : base_(base), size_(size), state_(std::move(state)) {
    state_->mappings.fetch_add(1);
    state_->mapped_bytes.fetch_add(size);
}

receiver_state::receiver_state() : interrupted(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (interrupted.get() < 0) throw os_error("eventfd for a +shm receiver");
}

mapping::~mapping() {
    ::munmap(const_cast<std::byte*>(base_), size_);
    state_->mappings.fetch_sub(1);
    state_->mapped_bytes.fetch_sub(size_);
}

side_link::side_link(const std::string& name, receive_clock::time_point deadline,
                     std::shared_ptr<receiver_state> state)
    : name_(name), state_(std::move(state)) {
    fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (fd_.get() < 0) throw os_error("shm side channel socket");
    socklen_t len = 0;
    const sockaddr_un a = abstract_address(name, len);
    // A Unix connect waits for room in the listener's backlog at most the
    // socket's send timeout: in slices, to see an interruption between them.
    for (;;) {
        throw_if_interrupted(*state_);
        const int ms = std::min(left_ms(deadline), 100);
        const timeval limit{ms / 1000, (ms % 1000) * 1000};
        ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        if (ms > 0 && ::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0) break;
        if (ms > 0 && errno == EINTR) continue;
        if ((errno == EAGAIN || errno == EINPROGRESS) && left_ms(deadline) > 0) continue;
        if (ms == 0 || errno == EAGAIN || errno == EINPROGRESS)
            throw error(errc::timeout, "the +shm sender's side channel '" + name +
                                           "' accepted no connection within the receive timeout (its backlog is "
                                           "full: the sender is stopped or flooded)");
        throw error(errc::io_error, "cannot reach the +shm sender's side channel '" + name +
                                        "' (the sender is gone?): " + std::strerror(errno));
    }
}

std::string side_link::why() const {
    std::lock_guard lock(write_);
    return why_;
}

bool side_link::hung_up() {
    if (broken()) return true;
    pollfd p{fd_.get(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
        std::lock_guard lock(write_);
        fail("the +shm sender closed its side channel");
    }
    return broken();
}

bool side_link::claim(std::uint64_t seq, std::uint64_t claim_by, std::span<const shm_descriptor> descs,
                      receive_clock::time_point deadline, const room_check& room) {
    if (broken()) lost(why());
    if (claim_by != 0 && offset_ && std::all_of(descs.begin(), descs.end(), [&](const shm_descriptor& d) {
            return d.length == 0 || maps_.count(d.segment) != 0;
        })) {
        bool told = false;
        {
            std::lock_guard lock(write_);
            told = tell({seq, false}, packet::claim_quiet);
        }
        if (!told) lost(why());
        // Read after the claim was written: the sender sees it before giving the message up.
        if (static_cast<__int128>(monotonic_ns()) + *offset_ < static_cast<__int128>(claim_by)) {
            state_->quiet_claims.fetch_add(1, std::memory_order_relaxed);
            quiet_claims_here.fetch_add(1, std::memory_order_relaxed);
            return true;
        }
        // Too late to be sure: the answer to a claim says whether it was in time.
    }
    if (pending_.size() >= max_pending && !pending_.count(seq))
        lost("the +shm sender answered none of the last " + std::to_string(max_pending) + " claims");
    pending& mine = pending_[seq];
    for (const shm_descriptor& d : descs)
        if (d.length != 0) mine.segments.insert(d.segment);
    mine.asked = monotonic_ns();
    send_request({packet::claim, seq}, deadline);
    for (;;) {
        std::vector<unique_fd> fds;
        const std::optional<reply> r = next_reply(deadline, fds);
        if (!r) {
            state_->claim_timeouts.fetch_add(1);
            throw error(errc::timeout, "the +shm sender '" + name_ + "' did not answer the claim of message " +
                                           std::to_string(seq) +
                                           " within the receive timeout (its side channel is silent: the sender is "
                                           "stopped, busy or hostile); the message is skipped");
        }
        if (r->type == packet::cut_off) lost("the +shm sender cut this receiver off: " + shm_impl::why(r->reason));
        const auto it = pending_.find(r->seq);
        if (it == pending_.end()) lost("the +shm sender answered a claim this receiver did not make");
        if (r->type == packet::fds) {
            for (std::size_t k = 0; k < r->ids.size(); ++k) {
                if (!it->second.segments.count(r->ids[k]) || maps_.count(r->ids[k]))
                    lost("the +shm sender passed along segment " + std::to_string(r->ids[k]) +
                         ", which the message does not name or this receiver maps already");
                add_segment(r->ids[k], fds[k].get(), room);
            }
            continue;
        }
        if (r->type == packet::ring) {
            if (ring_) lost("the +shm sender handed over a second ring");
            std::unique_ptr<shm_ring> ring;
            try {
                ring = shm_ring::open(fds[0].get());
            } catch (const error&) {
                lost("the +shm sender handed over a ring that is not a sealed memfd of its size");
            }
            std::lock_guard lock(write_);
            ring_ = std::move(ring);
            continue;
        }
        for (std::uint64_t id : r->ids) maps_.erase(id);
        // The sender's clock was read after the claim was sent: clock minus
        // `asked` bounds the offset from above.
        const __int128 offset = static_cast<__int128>(r->clock) - it->second.asked;
        offset_ = offset_ ? std::min(*offset_, offset) : offset;
        pending_.erase(it);
        if (r->seq == seq) return r->type == packet::ok;
        // The late answer to a claim whose receive timed out: the message
        // was skipped, so what the sender gave is given back.
        if (r->type == packet::ok) {
            std::lock_guard lock(write_);
            if (!tell({r->seq, true}, packet::release)) lost(why_);
        }
    }
}

void side_link::release(std::uint64_t seq) noexcept {
    if (broken()) return;
    std::lock_guard lock(write_);
    tell({seq, true}, packet::release);
}

std::shared_ptr<const mapping> side_link::segment(std::uint64_t id) const {
    const auto it = maps_.find(id);
    return it == maps_.end() ? nullptr : it->second;
}

std::optional<reply> side_link::next_reply(receive_clock::time_point deadline, std::vector<unique_fd>& fds) {
    for (;;) {
        if (!wait_for(fd_.get(), POLLIN, deadline, *state_)) return std::nullopt;
        std::array<std::byte, max_reply_size + 1> body{};  // one more: a longer packet shows
        iovec iov{body.data(), body.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_packet)];
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control;
        mh.msg_controllen = sizeof control;
        const ssize_t n = ::recvmsg(fd_.get(), &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        // ECONNRESET: the sender closed with our request unread; what it
        // wrote before (why it refused us) is read next.
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ECONNRESET)) continue;
        // Take every descriptor first, so that none leaks on an error.
        for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (std::size_t j = 0; j < k; ++j) {
                    int f;
                    std::memcpy(&f, CMSG_DATA(c) + j * sizeof(int), sizeof f);
                    fds.emplace_back(f);
                }
            }
        if (n <= 0) lost("the +shm sender closed its side channel");
        if (mh.msg_flags & MSG_CTRUNC) lost("the +shm sender sent more descriptors than a reply carries");
        try {
            return parse_reply({body.data(), static_cast<std::size_t>(n)}, fds.size());
        } catch (const error& e) {
            std::lock_guard lock(write_);
            fail(e.what());
            throw;
        }
    }
}

void side_link::send_request(const request& r, receive_clock::time_point deadline) {
    const auto bytes = encode_request(r);
    for (;;) {
        {
            std::lock_guard lock(write_);
            if (send_packet(fd_.get(), bytes)) return;
        }
        // Refused, the sender wrote why before it closed: read on to it.
        if (errno == EPIPE) return;
        if (errno != EAGAIN) lost(std::string("cannot claim a message: ") + std::strerror(errno));
        if (!wait_for(fd_.get(), POLLOUT, deadline, *state_)) {
            state_->claim_timeouts.fetch_add(1);
            throw error(errc::timeout, "the +shm sender '" + name_ +
                                           "' read none of this receiver's requests within the receive timeout; the "
                                           "message is skipped");
        }
    }
}

bool side_link::tell(ring_entry entry, packet type) noexcept {
    if (broken_) return false;
    if (ring_) {
        switch (ring_->push(encode_ring_entry(entry))) {
            case shm_ring::pushed::ok:
                switch (ring_->asked()) {
                    case shm_ring::nothing: return true;
                    // A kick the socket has no room for is not needed: the
                    // sender has packets to read, and reads the ring first.
                    case shm_ring::kick: send_packet(fd_.get(), encode_request({packet::kick, 0})); return true;
                    default: fail("the +shm sender cut this receiver off"); return false;
                }
            case shm_ring::pushed::corrupt:
                fail("the +shm sender's ring cannot be written: its count of entries read is ahead of those "
                     "written, or further behind than the ring holds");
                return false;
            case shm_ring::pushed::full: break;  // the sender reads the ring before this packet
        }
    }
    if (send_packet(fd_.get(), encode_request({type, entry.seq}))) return true;
    fail(errno == EAGAIN ? "the +shm sender reads neither its ring nor its side channel"
                         : "the +shm sender closed its side channel");
    return false;
}

void side_link::fail(const std::string& why) noexcept {
    if (broken_.exchange(true)) return;
    try {
        why_ = why;
    } catch (...) {
    }
    state_->links_broken.fetch_add(1);
}

void side_link::lost(const std::string& why) {
    {
        std::lock_guard lock(write_);
        fail(why);
    }
    throw error(errc::io_error, "shm side channel '" + name_ + "': " + this->why());
}

void side_link::add_segment(std::uint64_t id, int fd, const room_check& room) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    struct stat st {};
    constexpr int needed = F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE;
    if (seals < 0 || (seals & needed) != needed || ::fstat(fd, &st) != 0 || st.st_size <= 0)
        lost("a shm segment that is not a memfd sealed against shrinking and writes");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (const std::optional<std::string> no = room(size)) {
        {
            std::lock_guard lock(write_);
            fail(*no);
        }
        throw error(errc::limit_exceeded, "shm side channel '" + name_ + "': " + *no);
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) lost("cannot map a segment of " + std::to_string(size) + " bytes: " + std::strerror(errno));
    maps_[id] = std::make_shared<const mapping>(static_cast<const std::byte*>(p), size, state_);
}

}  // namespace tenbin::detail::shm_impl

namespace tenbin::detail {
std::uint64_t shm_quiet_claims() { return shm_impl::quiet_claims_here.load(); }
}  // namespace tenbin::detail

#endif
