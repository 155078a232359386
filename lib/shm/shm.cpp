// The shared-memory transport. How a message's bytes stay valid:
//
// - The sender's pool draws every block from a memfd segment of its own
//   (sealed against shrinking and growing), mapped read-write by the sender.
// - ZeroMQ carries the headers and one descriptor per tensor. The receiver
//   then CLAIMs the message's sequence number on the sender's side channel
//   (a Unix seqpacket socket in the abstract namespace, named in the
//   message). The sender answers with the segments this receiver has not
//   had yet (read-only descriptors by SCM_RIGHTS) and OK, or GONE when it
//   has given the message up; tensors are made only after OK.
// - The sender keeps a copy of each sent block's buffer (so the pool cannot
//   reuse it) until the message is done with: a PUSH/PAIR message once its
//   claimer RELEASEs it (its last tensor is dropped) or dies; a PUB message
//   once every receiver on the side channel has claimed a later message or
//   claimed and released this one (a receiver not yet on the side channel
//   gets GONE for what was already given up: a late joiner's first
//   messages are skipped, as PUB/SUB may). While no subscriber is on the
//   side channel, a message waits up to a second for the first to claim.
// - Lease: a message not done with `lease` after its send is given up. If a
//   receiver still holds it, its segments are retired: the bytes move to a
//   fresh memfd mapped over the same addresses (the pool keeps its block),
//   the old memfd is closed by the sender, and the holder's own mapping
//   keeps the old pages until it unmaps them. A receiver that claims a
//   given-up message gets GONE and skips it.
#include "shm/shm.hpp"

#include <tenbin/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#ifdef __linux__
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#endif

namespace tenbin::detail {

namespace {

std::uint64_t load_u64(const std::byte* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
    return v;
}
std::uint32_t load_u32(const std::byte* p) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
    return v;
}
void store_u64(std::byte* p, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void store_u32(std::byte* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

// Longest abstract socket name (sun_path minus its leading NUL).
constexpr std::size_t max_side_name = 100;

}  // namespace

shm_first parse_shm_first(bytes_view f) {
    if (f.size() < 8 || std::memcmp(f.data(), shm_magic, 8) != 0)
        throw error(errc::bad_magic, "not a shared-memory message (no ~TenShm~ first frame): a +shm receiver got a "
                                     "plain tenbin message; open both ends with +shm, or neither");
    if (f.size() < 16) throw error(errc::bad_header, "shm first frame of " + std::to_string(f.size()) + " bytes");
    const std::uint32_t version = load_u32(f.data() + 8);
    if (version != shm_version)
        throw error(errc::unsupported, "shm wire version " + std::to_string(version) + ", this build speaks " +
                                           std::to_string(shm_version));
    const std::uint32_t n = load_u32(f.data() + 12);
    if (n == 0 || n > max_side_name || f.size() != 16 + std::size_t{n} + 8)
        throw error(errc::bad_header, "shm first frame: bad side-channel name length " + std::to_string(n) +
                                          " in a frame of " + std::to_string(f.size()) + " bytes");
    shm_first out;
    out.side.assign(reinterpret_cast<const char*>(f.data() + 16), n);
    out.seq = load_u64(f.data() + 16 + n);
    return out;
}

std::vector<std::byte> encode_shm_first(const shm_first& f) {
    std::vector<std::byte> out(16 + f.side.size() + 8);
    std::memcpy(out.data(), shm_magic, 8);
    store_u32(out.data() + 8, shm_version);
    store_u32(out.data() + 12, static_cast<std::uint32_t>(f.side.size()));
    std::memcpy(out.data() + 16, f.side.data(), f.side.size());
    store_u64(out.data() + 16 + f.side.size(), f.seq);
    return out;
}

shm_descriptor parse_shm_descriptor(bytes_view f) {
    if (f.size() != shm_descriptor_size)
        throw error(errc::bad_header, "shm descriptor of " + std::to_string(f.size()) + " bytes, not 32");
    return {load_u64(f.data()), load_u64(f.data() + 8), load_u64(f.data() + 16), load_u64(f.data() + 24)};
}

#ifndef __linux__

std::shared_ptr<shm_sender> make_shm_sender(std::size_t, std::chrono::milliseconds, bool) {
    throw error(errc::unsupported, "the +shm transport needs Linux (memfd_create, SCM_RIGHTS)");
}
std::shared_ptr<shm_receiver> make_shm_receiver() {
    throw error(errc::unsupported, "the +shm transport needs Linux (memfd_create, SCM_RIGHTS)");
}
tensor_pool& shm_pool(shm_sender&) { throw error(errc::unsupported, "+shm needs Linux"); }
bool shm_send(shm_sender&, zmq::socket_ref, tensor_span, std::span<const zmq::const_buffer>,
              std::optional<std::chrono::milliseconds>) {
    throw error(errc::unsupported, "+shm needs Linux");
}
void shm_close(shm_sender&, std::chrono::milliseconds) {}
std::size_t shm_in_flight(shm_sender&) { return 0; }
std::optional<std::vector<tensor>> shm_receive(shm_receiver&, std::span<const zmq::message_t>,
                                               const decode_options&) {
    throw error(errc::unsupported, "+shm needs Linux");
}

#else

namespace {

enum : std::uint32_t { msg_claim = 1, msg_release = 2, msg_fds = 10, msg_ok = 11, msg_gone = 12 };
// Descriptors per SCM_RIGHTS packet (the kernel allows 253).
constexpr std::size_t fds_per_packet = 64;
// How long a PUB message waits for a first subscriber on the side channel.
constexpr std::chrono::milliseconds fan_out_grace{1000};
// Seconds a receiver waits for the sender's answer to a claim.
constexpr long claim_timeout_s = 30;
// Closed segment ids per reply; more wait for the next one.
constexpr std::size_t closed_per_reply = 256;

[[noreturn]] void sys_fail(const std::string& what) {
    throw error(errc::io_error, what + ": " + std::strerror(errno));
}

struct fd_guard {
    int fd = -1;
    explicit fd_guard(int f = -1) : fd(f) {}
    fd_guard(fd_guard&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    fd_guard& operator=(fd_guard&&) = delete;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
    int release() { return std::exchange(fd, -1); }
};

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    a.sun_path[0] = '\0';
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return a;
}

int new_segment_fd(std::size_t size) {
    fd_guard fd(::memfd_create("tenbin-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd.fd < 0) sys_fail("memfd_create");
    if (::ftruncate(fd.fd, static_cast<off_t>(size)) != 0) sys_fail("ftruncate of a shm segment");
    // Sealed: a receiver's mapping can never lose pages under it (SIGBUS).
    if (::fcntl(fd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) sys_fail("sealing a shm segment");
    return fd.release();
}

// The pool's memory: each block a memfd segment of its own.
class shm_memory final : public pool_memory {
public:
    struct segment {
        std::uint64_t id;
        int fd;
        std::size_t size;
    };

    mutable_bytes allocate(std::size_t size) override {
        if (size == 0) size = buffer_alignment;
        fd_guard fd(new_segment_fd(size));
        void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
        if (p == MAP_FAILED) sys_fail("mapping a shm segment");
        std::lock_guard lock(mutex_);
        segments_[static_cast<std::byte*>(p)] = {next_id_++, fd.release(), size};
        return {static_cast<std::byte*>(p), size};
    }

    void deallocate(mutable_bytes block) noexcept override {
        std::lock_guard lock(mutex_);
        const auto it = segments_.find(block.data());
        if (it == segments_.end()) return;
        ::munmap(block.data(), it->second.size);
        ::close(it->second.fd);
        closed_.push_back(it->second.id);
        segments_.erase(it);
    }

    // The segment holding [p, p + n) and p's offset in it.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> find(const std::byte* p, std::size_t n) {
        std::lock_guard lock(mutex_);
        auto it = segments_.upper_bound(const_cast<std::byte*>(p));
        if (it == segments_.begin()) return std::nullopt;
        --it;
        const auto off = static_cast<std::size_t>(p - it->first);
        if (off > it->second.size || n > it->second.size - off) return std::nullopt;
        return std::pair{it->second.id, std::uint64_t{off}};
    }

    // A read-only descriptor of segment `id` (-1 when it is gone).
    int read_only_fd(std::uint64_t id) {
        std::lock_guard lock(mutex_);
        for (auto& [base, s] : segments_)
            if (s.id == id) {
                const std::string path = "/proc/self/fd/" + std::to_string(s.fd);
                return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            }
        return -1;
    }

    // Moves segment `id`'s bytes to a fresh memfd mapped at the same
    // address and closes the old one; holders' mappings keep the old pages.
    void retire(std::uint64_t id) noexcept {
        std::lock_guard lock(mutex_);
        for (auto& [base, s] : segments_) {
            if (s.id != id) continue;
            try {
                fd_guard fd(new_segment_fd(s.size));
                for (std::size_t done = 0; done < s.size;) {
                    const ssize_t w = ::pwrite(fd.fd, base + done, s.size - done, static_cast<off_t>(done));
                    if (w <= 0) return;  // keep the old segment: still correct, only not retired
                    done += static_cast<std::size_t>(w);
                }
                if (::mmap(base, s.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.fd, 0) == MAP_FAILED)
                    return;
                ::close(s.fd);
                closed_.push_back(s.id);
                s.fd = fd.release();
                s.id = next_id_++;
                ++retired_;
            } catch (...) {
            }
            return;
        }
    }

    std::vector<std::uint64_t> take_closed() {
        std::lock_guard lock(mutex_);
        return std::exchange(closed_, {});
    }

private:
    std::mutex mutex_;
    std::map<std::byte*, segment> segments_;
    std::uint64_t next_id_ = 1;
    std::vector<std::uint64_t> closed_;
    std::uint64_t retired_ = 0;
};

bool send_packet(int fd, std::span<const std::byte> bytes, std::span<const int> fds = {}) {
    iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_packet)];
    if (!fds.empty()) {
        mh.msg_control = control;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    for (;;) {
        const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n >= 0) return true;
        if (errno != EINTR) return false;
    }
}

std::array<std::byte, 16> request(std::uint32_t type, std::uint64_t seq) {
    std::array<std::byte, 16> p{};
    store_u32(p.data(), type);
    store_u64(p.data() + 8, seq);
    return p;
}

}  // namespace

// ---- sender ----------------------------------------------------------------

class shm_sender {
public:
    struct flight {
        std::vector<buffer> holders;       // keep the blocks from the pool
        std::vector<std::uint64_t> segments;
        std::chrono::steady_clock::time_point sent;
        std::set<int> claimers;  // peers holding it
        bool claimed = false;
    };
    struct peer {
        std::uint64_t last = 0;  // highest sequence number claimed
        std::set<std::uint64_t> given;  // segments this peer has a descriptor of
        std::set<std::uint64_t> holding;
        std::vector<std::uint64_t> closed;  // segments gone, to tell it
    };

    shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out)
        : memory_(std::make_shared<shm_memory>()),
          pool_(pool_options{.max_bytes = pool_bytes, .max_buffers = 1024, .wait = std::nullopt}, memory_),
          lease_(lease),
          fan_out_(fan_out) {
        std::random_device rd;
        const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
        name_ = "tenbin-shm-" + std::to_string(::getpid()) + "-" + std::to_string(r);
        listen_.fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (listen_.fd < 0) sys_fail("shm side channel socket");
        socklen_t len = 0;
        const sockaddr_un a = abstract_address(name_, len);
        if (::bind(listen_.fd, reinterpret_cast<const sockaddr*>(&a), len) != 0) sys_fail("binding the shm side channel");
        if (::listen(listen_.fd, 64) != 0) sys_fail("listening on the shm side channel");
        wake_.fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (wake_.fd < 0) sys_fail("eventfd");
        thread_ = std::thread([this] { run(); });
    }

    ~shm_sender() { stop(); }

    void stop() {
        {
            std::lock_guard lock(mutex_);
            if (stopping_) return;
            stopping_ = true;
        }
        wake();
        if (thread_.joinable()) thread_.join();
        for (auto& [fd, p] : peers_) ::close(fd);
        peers_.clear();
        std::map<std::uint64_t, flight> dropped;
        {
            std::lock_guard lock(mutex_);
            dropped.swap(flights_);
        }
    }

    tensor_pool& pool() { return pool_; }

    std::size_t in_flight() {
        std::lock_guard lock(mutex_);
        return flights_.size();
    }

    // Waits until every message was claimed (or given up), at most `linger`.
    void drain(std::chrono::milliseconds linger) {
        std::unique_lock lock(mutex_);
        done_.wait_for(lock, linger, [&] {
            if (fan_out_) return flights_.empty();
            return std::all_of(flights_.begin(), flights_.end(), [](auto& f) { return f.second.claimed; });
        });
    }

    bool send(zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              std::optional<std::chrono::milliseconds> timeout) {
        flight f;
        std::vector<shm_descriptor> descs(tensors.size());
        std::vector<std::size_t> copy_in;  // tensors not from the pool
        std::size_t copy_bytes = 0;
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const tensor_view v = tensors[i];
            if (v.data.empty()) continue;
            const buffer* owner = tensors.owner(i);
            if (owner && owner->owned())
                if (auto where = memory_->find(v.data.data(), v.data.size())) {
                    descs[i] = {where->first, 0, where->second, v.data.size()};
                    f.holders.push_back(*owner);
                    f.segments.push_back(where->first);
                    continue;
                }
            copy_in.push_back(i);
            copy_bytes += (v.data.size() + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
        }
        if (!copy_in.empty()) {
            // One block for all of them: one segment, one descriptor to hand over.
            std::optional<tensor> block = pool_.try_acquire(
                dtype::u1, {static_cast<std::int64_t>(copy_bytes)}, {}, timeout.value_or(std::chrono::milliseconds::max()));
            if (!block) return false;
            std::byte* base = block->mutable_bytes().data();
            const auto where = memory_->find(base, copy_bytes);
            if (!where) throw error(errc::io_error, "a shm pool block outside its segments");
            std::size_t at = 0;
            for (std::size_t i : copy_in) {
                const bytes_view src = tensors[i].data;
                std::memcpy(base + at, src.data(), src.size());
                descs[i] = {where->first, 0, where->second + at, src.size()};
                at += (src.size() + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
            }
            f.holders.push_back(block->data());
            f.segments.push_back(where->first);
        }

        std::uint64_t seq = 0;
        {
            std::lock_guard lock(mutex_);
            seq = next_seq_++;
        }
        for (shm_descriptor& d : descs) d.generation = d.segment ? seq : 0;
        // Frames: built before the first is sent, so the message goes whole or not at all.
        std::vector<zmq::message_t> frames;
        frames.reserve(envelope.size() + 1 + 2 * tensors.size());
        for (const zmq::const_buffer& e : envelope) frames.emplace_back(e.data(), e.size());
        const std::vector<std::byte> first = encode_shm_first({name_, seq});
        frames.emplace_back(first.data(), first.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const tensor_view v = tensors[i];
            zmq::message_t h(header_size(v.ndim()));
            encode_header_into(v, {static_cast<std::byte*>(h.data()), h.size()});
            frames.push_back(std::move(h));
            zmq::message_t d(shm_descriptor_size);
            auto* p = static_cast<std::byte*>(d.data());
            store_u64(p, descs[i].segment);
            store_u64(p + 8, descs[i].generation);
            store_u64(p + 16, descs[i].offset);
            store_u64(p + 24, descs[i].length);
            frames.push_back(std::move(d));
        }
        f.sent = std::chrono::steady_clock::now();
        {
            std::lock_guard lock(mutex_);
            flights_.emplace(seq, std::move(f));
        }
        wake();  // its lease starts
        const auto flags = zmq::send_flags::none;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const bool more = i + 1 < frames.size();
            std::optional<std::size_t> r;
            for (;;) {
                try {
                    r = socket.send(frames[i], more ? flags | zmq::send_flags::sndmore : flags);
                    break;
                } catch (const zmq::error_t& e) {
                    if (e.num() != EINTR) {
                        forget(seq);
                        throw;
                    }
                }
            }
            if (!r) {  // only the first frame can time out (whole messages count for the HWM)
                forget(seq);
                return false;
            }
        }
        return true;
    }

private:
    void forget(std::uint64_t seq) {
        std::map<std::uint64_t, flight>::node_type n;
        std::lock_guard lock(mutex_);
        n = flights_.extract(seq);
    }

    void wake() {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t r = ::write(wake_.fd, &one, sizeof one);
    }

    // Whether message `seq` is done with (under the lock).
    bool finished(std::uint64_t seq, const flight& f, std::chrono::steady_clock::time_point now) const {
        if (!f.claimers.empty()) return false;
        if (!fan_out_) return f.claimed;
        // No subscriber on the side channel yet: the first ones get a
        // moment to claim (the rest of the late-joiner rule is below).
        if (peers_.empty()) return now - f.sent >= fan_out_grace;
        // Fan-out: done once every subscriber on the side channel is past
        // it; one not there yet gets GONE (a late joiner's first message).
        return std::all_of(peers_.begin(), peers_.end(), [&](auto& p) { return p.second.last >= seq; });
    }

    // Drops finished and expired messages; returns when the next lease ends.
    std::chrono::steady_clock::time_point collect() {
        std::vector<flight> dropped;
        auto next = std::chrono::steady_clock::time_point::max();
        {
            std::lock_guard lock(mutex_);
            const auto now = std::chrono::steady_clock::now();
            for (auto it = flights_.begin(); it != flights_.end();) {
                if (finished(it->first, it->second, now)) {
                    dropped.push_back(std::move(it->second));
                    it = flights_.erase(it);
                } else if (now - it->second.sent >= lease_) {
                    // Given up: a holder keeps the old pages, the pool gets fresh ones.
                    if (!it->second.claimers.empty())
                        for (std::uint64_t s : it->second.segments) memory_->retire(s);
                    for (int p : it->second.claimers) peers_[p].holding.erase(it->first);
                    it->second.claimed = true;
                    dropped.push_back(std::move(it->second));
                    it = flights_.erase(it);
                } else {
                    next = std::min(next, it->second.sent + (peers_.empty() && fan_out_ ? fan_out_grace : lease_));
                    ++it;
                }
            }
        }
        done_.notify_all();
        dropped.clear();  // blocks go back to the pool outside the lock
        return next;
    }

    void on_claim(int fd, peer& p, std::uint64_t seq) {
        std::vector<std::uint64_t> segs;
        bool ok = false;
        {
            std::lock_guard lock(mutex_);
            p.last = std::max(p.last, seq);
            if (auto it = flights_.find(seq); it != flights_.end()) {
                ok = true;
                it->second.claimed = true;
                it->second.claimers.insert(fd);
                p.holding.insert(seq);
                for (std::uint64_t s : it->second.segments)
                    if (p.given.insert(s).second) segs.push_back(s);
            }
        }
        std::sort(segs.begin(), segs.end());
        segs.erase(std::unique(segs.begin(), segs.end()), segs.end());
        for (std::size_t at = 0; at < segs.size(); at += fds_per_packet) {
            const std::size_t n = std::min(fds_per_packet, segs.size() - at);
            std::vector<int> fds;
            std::vector<std::byte> body(8 + 8 * n);
            store_u32(body.data(), msg_fds);
            store_u32(body.data() + 4, static_cast<std::uint32_t>(n));
            for (std::size_t k = 0; k < n; ++k) {
                const int ro = memory_->read_only_fd(segs[at + k]);
                if (ro < 0) {
                    for (int x : fds) ::close(x);
                    ok = false;
                    fds.clear();
                    break;
                }
                fds.push_back(ro);
                store_u64(body.data() + 8 + 8 * k, segs[at + k]);
            }
            if (!ok) break;
            const bool sent = send_packet(fd, body, fds);
            for (int x : fds) ::close(x);
            if (!sent) return drop_peer(fd);
        }
        if (!ok) on_release(fd, p, seq);
        // Segments gone since: the receiver drops its mappings of them.
        std::vector<std::uint64_t> gone;
        const std::size_t k = std::min(p.closed.size(), closed_per_reply);
        gone.assign(p.closed.begin(), p.closed.begin() + static_cast<std::ptrdiff_t>(k));
        p.closed.erase(p.closed.begin(), p.closed.begin() + static_cast<std::ptrdiff_t>(k));
        std::vector<std::byte> reply(8 + 8 * gone.size());
        store_u32(reply.data(), ok ? msg_ok : msg_gone);
        store_u32(reply.data() + 4, static_cast<std::uint32_t>(gone.size()));
        for (std::size_t k = 0; k < gone.size(); ++k) store_u64(reply.data() + 8 + 8 * k, gone[k]);
        if (!send_packet(fd, reply)) drop_peer(fd);
    }

    void on_release(int fd, peer& p, std::uint64_t seq) {
        std::lock_guard lock(mutex_);
        p.holding.erase(seq);
        if (auto it = flights_.find(seq); it != flights_.end()) it->second.claimers.erase(fd);
    }

    void drop_peer(int fd) {
        {
            std::lock_guard lock(mutex_);
            peer& p = peers_[fd];
            for (std::uint64_t seq : p.holding)
                if (auto it = flights_.find(seq); it != flights_.end()) it->second.claimers.erase(fd);
            peers_.erase(fd);
        }
        ::close(fd);
    }

    void run() {
        for (;;) {
            const auto next = collect();
            for (std::uint64_t id : memory_->take_closed())
                for (auto& [fd, p] : peers_)
                    if (p.given.erase(id)) p.closed.push_back(id);
            std::vector<pollfd> fds{{listen_.fd, POLLIN, 0}, {wake_.fd, POLLIN, 0}};
            {
                std::lock_guard lock(mutex_);
                if (stopping_) return;
                for (auto& [fd, p] : peers_) fds.push_back({fd, POLLIN, 0});
            }
            int wait_ms = -1;
            if (next != std::chrono::steady_clock::time_point::max()) {
                const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
                wait_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60000));
            }
            const int rc = ::poll(fds.data(), fds.size(), wait_ms);
            if (rc < 0 && errno != EINTR) return;
            if (rc <= 0) continue;
            if (fds[1].revents) {
                std::uint64_t v = 0;
                [[maybe_unused]] const ssize_t r = ::read(wake_.fd, &v, sizeof v);
            }
            if (fds[0].revents & POLLIN) accept_peers();
            for (std::size_t i = 2; i < fds.size(); ++i) {
                if (!fds[i].revents) continue;
                const int fd = fds[i].fd;
                std::array<std::byte, 16> req{};
                const ssize_t n = ::recv(fd, req.data(), req.size(), MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (n != 16) {  // closed, died, or spoke nonsense
                    drop_peer(fd);
                    continue;
                }
                peer* p = nullptr;
                {
                    std::lock_guard lock(mutex_);
                    p = &peers_[fd];
                }
                const std::uint32_t type = load_u32(req.data());
                const std::uint64_t seq = load_u64(req.data() + 8);
                if (type == msg_claim) on_claim(fd, *p, seq);
                else if (type == msg_release) on_release(fd, *p, seq);
                else drop_peer(fd);
            }
        }
    }

    void accept_peers() {
        for (;;) {
            const int fd = ::accept4(listen_.fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) return;
            // Only the sender's own user may read its memory.
            ucred cred{};
            socklen_t len = sizeof cred;
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid()) {
                ::close(fd);
                continue;
            }
            // A peer that stops reading its replies is dropped, not waited for.
            const timeval limit{1, 0};
            ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
            std::lock_guard lock(mutex_);
            peers_[fd];
        }
    }

    std::shared_ptr<shm_memory> memory_;
    tensor_pool pool_;
    std::chrono::milliseconds lease_;
    bool fan_out_;
    std::string name_;
    fd_guard listen_;
    fd_guard wake_;
    std::mutex mutex_;
    std::condition_variable done_;
    std::uint64_t next_seq_ = 1;
    std::map<std::uint64_t, flight> flights_;
    // Peers: added, removed and changed by the thread only (under the lock
    // where collect() reads them).
    std::map<int, peer> peers_;
    bool stopping_ = false;
    std::thread thread_;
};

std::shared_ptr<shm_sender> make_shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out) {
    return std::make_shared<shm_sender>(pool_bytes, lease, fan_out);
}
tensor_pool& shm_pool(shm_sender& s) { return s.pool(); }
bool shm_send(shm_sender& s, zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              std::optional<std::chrono::milliseconds> timeout) {
    return s.send(socket, tensors, envelope, timeout);
}
void shm_close(shm_sender& s, std::chrono::milliseconds linger) {
    s.drain(linger);
    s.stop();
}
std::size_t shm_in_flight(shm_sender& s) { return s.in_flight(); }

// ---- receiver --------------------------------------------------------------

namespace {

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
        fd_.fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd_.fd < 0) sys_fail("shm side channel socket");
        socklen_t len = 0;
        const sockaddr_un a = abstract_address(name, len);
        if (::connect(fd_.fd, reinterpret_cast<const sockaddr*>(&a), len) != 0)
            throw error(errc::io_error, "cannot reach the shm sender's side channel '" + name +
                                            "' (the sender is gone?): " + std::strerror(errno));
        // A sender that stopped (SIGSTOP, a debugger) fails the claim rather than hang it.
        const timeval limit{claim_timeout_s, 0};
        ::setsockopt(fd_.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        ::setsockopt(fd_.fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    }

    bool dead() const { return dead_.load(); }

    // Whether the sender closed its end (it writes nothing unasked, so
    // anything readable between claims is its end of file). Receiving
    // thread only.
    bool closed() {
        if (dead()) return true;
        pollfd p{fd_.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) dead_ = true;
        return dead();
    }

    // CLAIMs `seq`: the mappings it needs are then in `maps()`. False for GONE.
    bool claim(std::uint64_t seq) {
        std::lock_guard lock(mutex_);
        const auto req = request(msg_claim, seq);
        if (!send_packet(fd_.fd, req)) return lost("cannot claim a message");
        for (;;) {
            std::array<std::byte, 8 + 8 * closed_per_reply> body{};
            iovec iov{body.data(), body.size()};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_packet)];
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            mh.msg_control = control;
            mh.msg_controllen = sizeof control;
            ssize_t n;
            do n = ::recvmsg(fd_.fd, &mh, MSG_CMSG_CLOEXEC);
            while (n < 0 && errno == EINTR);
            // Take every descriptor first, so that none leaks on an error.
            std::vector<fd_guard> fds;
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
            if (n < 8 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) return lost("a malformed side-channel reply");
            const std::uint32_t type = load_u32(body.data());
            const std::uint32_t count = load_u32(body.data() + 4);
            if (static_cast<std::size_t>(n) != 8 + std::size_t{count} * 8) return lost("a malformed side-channel reply");
            if (type == msg_fds) {
                if (fds.size() != count) return lost("a side-channel reply with the wrong number of descriptors");
                for (std::size_t k = 0; k < count; ++k) add_segment(load_u64(body.data() + 8 + 8 * k), fds[k].fd);
                continue;
            }
            if ((type != msg_ok && type != msg_gone) || !fds.empty()) return lost("a malformed side-channel reply");
            for (std::size_t k = 0; k < count; ++k) maps_.erase(load_u64(body.data() + 8 + 8 * k));
            return type == msg_ok;
        }
    }

    void release(std::uint64_t seq) noexcept {
        if (dead()) return;
        std::lock_guard lock(mutex_);
        send_packet(fd_.fd, request(msg_release, seq));
    }

    std::shared_ptr<const mapping> segment(std::uint64_t id) {
        std::lock_guard lock(mutex_);
        const auto it = maps_.find(id);
        return it == maps_.end() ? nullptr : it->second;
    }

private:
    [[noreturn]] bool lost(const std::string& why) {
        dead_ = true;
        throw error(errc::io_error, "shm side channel: " + why);
    }

    // Maps a segment read-only after checking it cannot shrink under us.
    void add_segment(std::uint64_t id, int fd) {
        const int seals = ::fcntl(fd, F_GET_SEALS);
        struct stat st {};
        if (seals < 0 || !(seals & F_SEAL_SHRINK) || ::fstat(fd, &st) != 0 || st.st_size <= 0)
            lost("a shm segment that is not a sealed memfd");
        const auto size = static_cast<std::size_t>(st.st_size);
        void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) sys_fail("mapping a shm segment");
        maps_[id] = std::make_shared<const mapping>(static_cast<const std::byte*>(p), size);
    }

    std::mutex mutex_;
    fd_guard fd_;
    std::atomic<bool> dead_{false};
    std::map<std::uint64_t, std::shared_ptr<const mapping>> maps_;
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
            const std::string which = "tensor " + std::to_string(i) + ": ";
            if (descs[i].length != headers[i].nbytes)
                throw error(errc::data_size_mismatch, which + "descriptor of " + std::to_string(descs[i].length) +
                                                          " bytes for a header needing " +
                                                          std::to_string(headers[i].nbytes));
            if (descs[i].length != 0 && descs[i].generation != first.seq)
                throw error(errc::bad_header, which + "stale descriptor (generation " +
                                                  std::to_string(descs[i].generation) + " in message " +
                                                  std::to_string(first.seq) + ")");
            if ((descs[i].length == 0) != (descs[i].segment == 0))
                throw error(errc::bad_header, which + "descriptor names segment 0 for bytes, or a segment for none");
            total += headers[i].nbytes;
            if (total > opt.limits.max_bytes)
                throw error(errc::limit_exceeded, "message of more than limits::max_bytes");
        }
        if (opt.expect_infos) {
            if (opt.expect_infos->size() != n)
                throw error(errc::info_mismatch, "expected " + std::to_string(opt.expect_infos->size()) +
                                                     " tensors, got " + std::to_string(n));
            for (std::size_t i = 0; i < n; ++i)
                if ((*opt.expect_infos)[i] != headers[i].info)
                    throw error(errc::info_mismatch, "tensor " + std::to_string(i) + " is '" + headers[i].info +
                                                         "', expected '" + (*opt.expect_infos)[i] + "'");
        }

        std::shared_ptr<side_link> link = link_for(first.side);
        bool ok = false;
        try {
            ok = link->claim(first.seq);
        } catch (...) {
            links_.erase(first.side);
            throw;
        }
        if (!ok) return std::nullopt;
        // From here on the keeper gives the message back, also on an error.
        auto keeper = std::make_shared<message_keeper>();
        keeper->link = link;
        keeper->seq = first.seq;
        std::vector<std::pair<const std::byte*, std::size_t>> where(n);
        for (std::size_t i = 0; i < n; ++i) {
            const shm_descriptor& d = descs[i];
            if (d.length == 0) continue;
            std::shared_ptr<const mapping> m = link->segment(d.segment);
            const std::string which = "tensor " + std::to_string(i) + ": ";
            if (!m) throw error(errc::bad_header, which + "unknown shm segment " + std::to_string(d.segment));
            if (d.offset > m->size || d.length > m->size - d.offset)
                throw error(errc::length_beyond_end, which + "bytes [" + std::to_string(d.offset) + ", +" +
                                                         std::to_string(d.length) + ") past the segment's " +
                                                         std::to_string(m->size));
            if (d.offset % itemsize(headers[i].dtype) != 0)
                throw error(errc::bad_header, which + "offset " + std::to_string(d.offset) + " not aligned for " +
                                                  std::string(code(headers[i].dtype)));
            where[i] = {m->base + d.offset, static_cast<std::size_t>(d.length)};
            if (std::find(keeper->maps.begin(), keeper->maps.end(), m) == keeper->maps.end())
                keeper->maps.push_back(std::move(m));
        }
        std::vector<tensor> out;
        out.reserve(n);
        const buffer::keeper_type shared = keeper;
        for (std::size_t i = 0; i < n; ++i) {
            buffer b = where[i].first
                           ? buffer::share(shared, {const_cast<std::byte*>(where[i].first), where[i].second}, false)
                           : buffer::share(shared, {}, false);
            out.emplace_back(headers[i].dtype, std::move(headers[i].shape), std::move(b), headers[i].info);
        }
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

std::shared_ptr<shm_receiver> make_shm_receiver() { return std::make_shared<shm_receiver>(); }
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt) {
    return r.receive(frames, opt);
}

#endif

}  // namespace tenbin::detail
