// The +shm receiver: one side-channel link per sender, its segments mapped
// read-only, tensors made from descriptors checked against them.
#ifdef __linux__

#include "shm/internal.hpp"
#include "shm/ring.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <thread>

namespace tenbin::detail {

using namespace shm_impl;

namespace {

std::atomic<std::uint64_t> quiet_claims{0};

// A tensor of at most this many bytes that shares its segment with other
// tensors of its message (the sender copies a message's heap tensors into
// one block) is copied out on receipt: kept alone (labels, keys), it would
// hold the whole block from the sender's pool.
constexpr std::uint64_t copy_out_bytes = 64 * 1024;

struct mapping {
    const std::byte* base = nullptr;
    std::size_t size = 0;
    mapping(const std::byte* b, std::size_t n) : base(b), size(n) {}
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping() { ::munmap(const_cast<std::byte*>(base), size); }
};

// One sender's side channel, as a receiver sees it.
class side_link {
public:
    explicit side_link(const std::string& name) {
        fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        if (fd_.get() < 0) throw os_error("shm side channel socket");
        socklen_t len = 0;
        const sockaddr_un a = abstract_address(name, len);
        if (::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
            throw error(errc::io_error, "cannot reach the shm sender's side channel '" + name +
                                            "' (the sender is gone?): " + std::strerror(errno));
        // A sender that stopped (SIGSTOP, a debugger) fails the claim rather than hang it.
        const timeval limit{claim_timeout_s, 0};
        ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    }

    bool dead() const { return dead_.load(); }

    // Whether the sender closed its end (it writes nothing unasked, so
    // anything readable between claims is its end of file). Receiving
    // thread only.
    bool closed() {
        if (dead()) return true;
        pollfd p{fd_.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) dead_ = true;
        return dead();
    }

    // CLAIMs `seq` of a message described by `descs`: their segments'
    // mappings are then in `segment()`. False for GONE. Quiet (no answer
    // awaited) when every segment is mapped and the sender's clock is
    // surely before `claim_by`.
    bool claim(std::uint64_t seq, std::uint64_t claim_by, std::span<const shm_descriptor> descs) {
        std::lock_guard lock(mutex_);
        if (claim_by != 0 && offset_ && std::all_of(descs.begin(), descs.end(), [&](const shm_descriptor& d) {
                return d.length == 0 || maps_.count(d.segment) != 0;
            })) {
            if (!tell({seq, false}, packet::claim_quiet)) return lost("cannot claim a message");
            // Read after the claim was written: the sender sees it before giving the message up.
            if (static_cast<__int128>(monotonic_ns()) + *offset_ < static_cast<__int128>(claim_by)) {
                quiet_claims.fetch_add(1, std::memory_order_relaxed);
                return true;
            }
            // Too late to be sure: the answer to a claim says whether it was in time.
        }
        const std::uint64_t asked = monotonic_ns();
        // Refused, the sender wrote why before it closed: read on to it.
        if (!send_packet(fd_.get(), encode_request({packet::claim, seq})) && errno != EPIPE)
            return lost("cannot claim a message");
        for (;;) {
            std::array<std::byte, max_reply_size + 1> body{};  // one more: a longer packet shows
            iovec iov{body.data(), body.size()};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_packet)];
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            mh.msg_control = control;
            mh.msg_controllen = sizeof control;
            ssize_t n;
            do n = ::recvmsg(fd_.get(), &mh, MSG_CMSG_CLOEXEC);
            while (n < 0 && errno == EINTR);
            // Take every descriptor first, so that none leaks on an error.
            std::vector<unique_fd> fds;
            for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                    const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                    for (std::size_t j = 0; j < k; ++j) {
                        int f;
                        std::memcpy(&f, CMSG_DATA(c) + j * sizeof(int), sizeof f);
                        fds.emplace_back(f);
                    }
                }
            if (n <= 0) return lost("the shm sender closed its side channel");
            if (mh.msg_flags & MSG_CTRUNC) return lost("a side-channel reply with too many descriptors");
            reply r;
            try {
                r = parse_reply({body.data(), static_cast<std::size_t>(n)}, fds.size());
            } catch (const error&) {
                dead_ = true;
                throw;
            }
            if (r.type == packet::fds) {
                for (std::size_t k = 0; k < r.ids.size(); ++k) add_segment(r.ids[k], fds[k].get());
                continue;
            }
            if (r.type == packet::cut_off) return lost("the shm sender cut this receiver off: " + why(r.reason));
            if (r.type == packet::ring) {
                if (ring_) return lost("a second ring");
                try {
                    ring_ = shm_ring::open(fds[0].get());
                } catch (const error&) {
                    return lost("a ring that is not a sealed memfd of its size");
                }
                continue;
            }
            for (std::uint64_t id : r.ids) maps_.erase(id);
            // The sender's clock was read after `asked`: clock minus `asked` bounds the offset from above.
            const __int128 offset = static_cast<__int128>(r.clock) - asked;
            offset_ = offset_ ? std::min(*offset_, offset) : offset;
            return r.type == packet::ok;
        }
    }

    void release(std::uint64_t seq) noexcept {
        if (dead()) return;
        std::lock_guard lock(mutex_);
        tell({seq, true}, packet::release);
    }

    std::shared_ptr<const mapping> segment(std::uint64_t id) {
        std::lock_guard lock(mutex_);
        const auto it = maps_.find(id);
        return it == maps_.end() ? nullptr : it->second;
    }

private:
    // Tells the sender of a quiet claim or a release (under the lock):
    // through the ring once there is one, with a KICK when the sender asks
    // for it; a packet of `type` before. False when the sender is gone or
    // has cut this receiver off.
    bool tell(ring_entry entry, packet type) noexcept {
        if (!ring_) return send_packet(fd_.get(), encode_request({type, entry.seq}));
        // Full (the sender is behind): kick it and wait for room; a packet
        // instead could overtake the ring's entries (a release before its claim).
        for (int tries = 0; !ring_->push(encode_ring_entry(entry)); ++tries) {
            if (tries == claim_timeout_s * 10000) return false;
            if (tries % 100 == 0 && !send_packet(fd_.get(), encode_request({packet::kick, 0}))) return false;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        switch (ring_->asked()) {
            case shm_ring::nothing: return true;
            case shm_ring::kick: return send_packet(fd_.get(), encode_request({packet::kick, 0}));
            default: return false;  // cut off
        }
    }

    [[noreturn]] bool lost(const std::string& why) {
        dead_ = true;
        throw error(errc::io_error, "shm side channel: " + why);
    }

    // Maps a segment read-only after checking it cannot shrink under us,
    // nor be written by anyone but its sender.
    void add_segment(std::uint64_t id, int fd) {
        const int seals = ::fcntl(fd, F_GET_SEALS);
        struct stat st {};
        constexpr int needed = F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE;
        if (seals < 0 || (seals & needed) != needed || ::fstat(fd, &st) != 0 || st.st_size <= 0)
            lost("a shm segment that is not a memfd sealed against shrinking and writes");
        const auto size = static_cast<std::size_t>(st.st_size);
        void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) throw os_error("mapping a shm segment");
        maps_[id] = std::make_shared<const mapping>(static_cast<const std::byte*>(p), size);
    }

    std::mutex mutex_;
    unique_fd fd_;
    std::atomic<bool> dead_{false};
    std::map<std::uint64_t, std::shared_ptr<const mapping>> maps_;
    std::unique_ptr<shm_ring> ring_;  // from the sender's first answer
    // Upper bound of the sender's clock minus ours (ns), once answered.
    std::optional<__int128> offset_;
};

// Keeps one message's mappings; gives the message back when its last
// tensor is dropped.
struct message_keeper {
    std::shared_ptr<side_link> link;
    std::uint64_t seq;
    std::vector<std::shared_ptr<const mapping>> maps;
    ~message_keeper() { link->release(seq); }
};

}  // namespace

class shm_receiver {
public:
    std::optional<std::vector<tensor>> receive(std::span<const zmq::message_t> frames, const decode_options& opt) {
        if (frames.empty()) throw error(errc::bad_header, "an empty shm message");
        const shm_first first = parse_shm_first({frames[0].data<std::byte>(), frames[0].size()});
        if (frames.size() % 2 != 1)
            throw error(errc::odd_chunk_count, "shm message of " + std::to_string(frames.size()) +
                                                   " frames: a header without a descriptor");
        const std::size_t n = frames.size() / 2;
        if (n > opt.limits.max_tensors)
            throw error(errc::limit_exceeded, std::to_string(n) + " tensors, more than limits::max_tensors");
        // Everything the message says is checked before anything is claimed.
        std::vector<tensor_header> headers(n);
        std::vector<shm_descriptor> descs(n);
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const zmq::message_t& h = frames[1 + 2 * i];
            headers[i] = decode_header({h.data<std::byte>(), h.size()}, opt.limits);
            const zmq::message_t& d = frames[2 + 2 * i];
            descs[i] = parse_shm_descriptor({d.data<std::byte>(), d.size()});
            check_shm_descriptor(descs[i], headers[i], first.seq, i);
            total += headers[i].nbytes;
            if (total > opt.limits.max_bytes)
                throw error(errc::limit_exceeded, "message of more than limits::max_bytes");
        }
        std::shared_ptr<side_link> link = link_for(first.side);
        bool ok = false;
        try {
            ok = link->claim(first.seq, first.claim_by, descs);
        } catch (...) {
            links_.erase(first.side);
            throw;
        }
        if (!ok) return std::nullopt;
        // From here on the keeper gives the message back, also on an error.
        auto keeper = std::make_shared<message_keeper>();
        keeper->link = link;
        keeper->seq = first.seq;
        const buffer::keeper_type shared = keeper;
        std::vector<std::uint64_t> segments;
        for (const shm_descriptor& d : descs)
            if (d.length != 0) segments.push_back(d.segment);
        std::sort(segments.begin(), segments.end());
        std::vector<tensor> out;
        out.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const shm_descriptor& d = descs[i];
            buffer b;  // an empty tensor holds nothing
            if (d.length != 0) {
                std::shared_ptr<const mapping> m = link->segment(d.segment);
                if (!m)
                    throw error(errc::bad_header, "tensor " + std::to_string(i) + ": unknown shm segment " +
                                                      std::to_string(d.segment));
                check_shm_extent(d, m->size, headers[i].dtype, i);
                const bytes_view bytes{m->base + d.offset, static_cast<std::size_t>(d.length)};
                const auto [lo, hi] = std::equal_range(segments.begin(), segments.end(), d.segment);
                if (d.length <= copy_out_bytes && hi - lo > 1) {
                    b = buffer::copy(bytes).read_only();
                } else {
                    b = buffer::share(shared, {const_cast<std::byte*>(bytes.data()), bytes.size()}, false);
                    if (std::find(keeper->maps.begin(), keeper->maps.end(), m) == keeper->maps.end())
                        keeper->maps.push_back(std::move(m));
                }
            }
            out.emplace_back(headers[i].dtype, std::move(headers[i].shape), std::move(b), headers[i].info);
        }
        // Checked on the tensors, as every decoder does: refused, they give the message back at once.
        if (opt.expect_infos) check_infos(out, *opt.expect_infos);
        return out;
    }

private:
    std::shared_ptr<side_link> link_for(const std::string& side) {
        if (auto it = links_.find(side); it != links_.end()) {
            if (!it->second->dead()) return it->second;
            links_.erase(it);
        }
        auto link = std::make_shared<side_link>(side);
        // Senders come and go: forget those gone, and their mappings (the
        // tensors still alive keep theirs).
        for (auto it = links_.begin(); it != links_.end();) it = it->second->closed() ? links_.erase(it) : std::next(it);
        links_[side] = link;
        return link;
    }

    std::map<std::string, std::shared_ptr<side_link>> links_;
};

std::uint64_t shm_quiet_claims() { return quiet_claims.load(); }
std::shared_ptr<shm_receiver> make_shm_receiver(const shm_options&) { return std::make_shared<shm_receiver>(); }
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt) {
    return r.receive(frames, opt);
}

}  // namespace tenbin::detail

#endif
