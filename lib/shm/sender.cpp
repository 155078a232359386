// The +shm sender: its pool, its messages in flight and the side-channel
// thread that hands segments to receivers and takes messages back.
#ifdef __linux__

#include "shm/memory.hpp"
#include "shm/ring.hpp"

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tenbin::detail {

using namespace shm_impl;

namespace {

// How often the thread reads the rings while messages are in flight and
// nothing else wakes it: often while the sender sends (blocks come back
// between sends), seldom once it has been quiet a while (nobody waits for
// them: a pool that does asks for kicks).
constexpr int ring_period_ms = 2;
constexpr int ring_quiet_period_ms = 100;
constexpr std::chrono::milliseconds ring_quiet_after{100};

// Copy-ins of at least this many bytes use streaming stores: their
// destination (a pool block last written many messages ago) is out of the
// caches, and the bytes are for another process. Smaller ones may find
// their block still cached, where memcpy is faster (measured: bench shm).
constexpr std::size_t stream_bytes = std::size_t{4} << 20;

// Copies `n` bytes to 64-byte-aligned `dst`, past this core's caches
// (x86-64: SSE2 streaming stores, no read of the destination first).
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) {
#if defined(__x86_64__)
    const std::size_t body = n / 64 * 64;
    for (std::size_t i = 0; i < body; i += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + body, src + body, n - body);
    _mm_sfence();  // the streamed bytes are visible before the message is sent
#else
    std::memcpy(dst, src, n);
#endif
}

}  // namespace

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
        std::unique_ptr<shm_ring> ring;     // its quiet claims and releases
        unique_fd ring_fd;                   // the ring's memfd, until handed over
    };

    shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out)
        : memory_(std::make_shared<shm_memory>()),
          pool_(pool_options{.max_bytes = pool_bytes, .max_buffers = 1024, .wait = std::nullopt}, memory_),
          lease_(lease),
          fan_out_(fan_out) {
        std::random_device rd;
        const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
        name_ = "tenbin-shm-" + std::to_string(::getpid()) + "-" + std::to_string(r);
        listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (listen_.get() < 0) throw os_error("shm side channel socket");
        socklen_t len = 0;
        const sockaddr_un a = abstract_address(name_, len);
        if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) throw os_error("binding the shm side channel");
        if (::listen(listen_.get(), 64) != 0) throw os_error("listening on the shm side channel");
        wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (wake_.get() < 0) throw os_error("eventfd");
        memory_->wake_on_wait(wake_.get());
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
        memory_->wake_on_wait(-1);
        for (auto& [fd, p] : peers_) {
            if (p.ring) p.ring->ask(shm_ring::cut_off);
            ::close(fd);
        }
        peers_.clear();
        std::map<std::uint64_t, flight> dropped;
        {
            std::lock_guard lock(mutex_);
            dropped.swap(flights_);
        }
        dropped.clear();
        // Receivers may still hold what was in flight, or claim it after
        // the stop: none of the pool's blocks is handed out again (they
        // leave as their last holders drop them); a fresh pool replaces it.
        pool_ = tensor_pool(pool_.options(), memory_);
    }

    tensor_pool& pool() { return pool_; }

    std::size_t in_flight() {
        std::lock_guard lock(mutex_);
        return flights_.size();
    }

    // Waits until every message was claimed (or given up), at most `linger`.
    void drain(std::chrono::milliseconds linger) {
        {
            std::lock_guard lock(mutex_);
            draining_ = true;  // receivers kick the thread after each ring entry
        }
        wake();
        std::unique_lock lock(mutex_);
        done_.wait_for(lock, linger, [&] {
            if (fan_out_) return flights_.empty();
            return std::all_of(flights_.begin(), flights_.end(), [](auto& f) { return f.second.claimed; });
        });
    }

    bool send(zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              const stream_position* position, std::optional<std::chrono::milliseconds> timeout) {
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
        settle();
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
                if (copy_bytes >= stream_bytes) stream_copy(base + at, src.data(), src.size());
                else std::memcpy(base + at, src.data(), src.size());
                descs[i] = {where->first, 0, where->second + at, src.size()};
                at += (src.size() + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
            }
            f.holders.push_back(block->data());
            f.segments.push_back(where->first);
        }

        std::uint64_t seq = 0, claim_by = 0;
        {
            std::lock_guard lock(mutex_);
            seq = next_seq_++;
            // Quiet claims only while nothing forces an answer (see internal.hpp);
            // read before f.sent, so half a lease before the give-up at the latest.
            // Fan-out: before the grace too, should every subscriber leave the side channel.
            const auto horizon = fan_out_ ? std::min<std::chrono::milliseconds>(lease_, fan_out_grace) : lease_;
            const bool untold =
                std::any_of(peers_.begin(), peers_.end(), [](auto& e) { return !e.second.closed.empty(); });
            if (!untold && !memory_->has_closed() && !(fan_out_ && peers_.empty()))
                claim_by = monotonic_ns() + static_cast<std::uint64_t>(
                                                std::chrono::duration_cast<std::chrono::nanoseconds>(horizon).count() / 2);
        }
        for (shm_descriptor& d : descs) d.generation = d.segment ? seq : 0;
        // Frames: built before the first is sent, so the message goes whole or not at all.
        std::vector<zmq::message_t> frames;
        frames.reserve(envelope.size() + 2 + 2 * tensors.size());
        for (const zmq::const_buffer& e : envelope) frames.emplace_back(e.data(), e.size());
        const std::vector<std::byte> first = encode_shm_first({name_, seq, claim_by});
        frames.emplace_back(first.data(), first.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const tensor_view v = tensors[i];
            zmq::message_t h(header_size(v.ndim()));
            encode_header_into(v, {static_cast<std::byte*>(h.data()), h.size()});
            frames.push_back(std::move(h));
            const auto d = encode_shm_descriptor(descs[i]);
            frames.emplace_back(d.data(), d.size());
        }
        if (position) {
            frames.emplace_back(position_frame_size(*position));
            encode_position_into(*position, {static_cast<std::byte*>(frames.back().data()), frames.back().size()});
        }
        f.sent = std::chrono::steady_clock::now();
        bool sooner = false;
        {
            std::lock_guard lock(mutex_);
            sooner = deadline(f) < deadline_ || std::exchange(napping_, false);
            last_send_ = f.sent;
            deadline_ = std::min(deadline_, deadline(f));
            flights_.emplace(seq, std::move(f));
        }
        if (sooner) wake();  // the thread sleeps past its lease, or naps
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

    // What receivers appended to their rings, and the messages that leaves
    // done with (their blocks back to the pool): the sender's thread, on
    // each send, so that a copy-in takes the block given back last.
    void settle() {
        std::vector<flight> dropped;
        {
            std::lock_guard lock(mutex_);
            take_rings();
            const auto now = std::chrono::steady_clock::now();
            if (fan_out_) {
                for (auto it = flights_.begin(); it != flights_.end();)
                    if (finished(it->first, it->second, now)) {
                        dropped.push_back(std::move(it->second));
                        it = flights_.erase(it);
                    } else {
                        ++it;
                    }
            } else {
                drop_touched(now, dropped);
            }
        }
        if (!dropped.empty()) done_.notify_all();
    }

    // Every peer's ring entries (under the lock). A corrupt ring is read no
    // more, and its peer is cut off (the thread drops it at the hang-up).
    void take_rings() {
        for (auto& [fd, p] : peers_)
            if (!take_ring(fd, p)) {
                p.ring->ask(shm_ring::cut_off);
                p.ring.reset();
                ::shutdown(fd, SHUT_RDWR);
            }
    }

    // Peer `fd`'s ring entries (under the lock): false when it is corrupt.
    bool take_ring(int fd, peer& p) {
        return !p.ring || p.ring->take([&](std::uint64_t e) {
            if (e & 1) release_locked(fd, p, e >> 1);
            else claim_locked(fd, p, e >> 1);
        });
    }

    // PUSH/PAIR: moves the messages claimed or released since that are
    // done with into `dropped` (under the lock).
    void drop_touched(std::chrono::steady_clock::time_point now, std::vector<flight>& dropped) {
        for (std::uint64_t seq : touched_)
            if (auto it = flights_.find(seq); it != flights_.end() && finished(seq, it->second, now)) {
                dropped.push_back(std::move(it->second));
                flights_.erase(it);
            }
        touched_.clear();
    }

    void wake() {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t r = ::write(wake_.get(), &one, sizeof one);
    }

    // When message `f` is given up unless done with (under the lock).
    std::chrono::steady_clock::time_point deadline(const flight& f) const {
        return f.sent + (fan_out_ && peers_.empty() ? std::min<std::chrono::milliseconds>(lease_, fan_out_grace) : lease_);
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
        bool expiring = false, full = false;
        // One `now` for both passes: what is given up below was due before the requests are read.
        const auto now = std::chrono::steady_clock::now();
        {
            std::lock_guard lock(mutex_);
            // PUSH/PAIR: between deadlines only the messages claimed or
            // released since can be done with (no scan of all in flight).
            full = fan_out_ || now >= deadline_;
            if (full)
                for (auto& [seq, f] : flights_) expiring = expiring || now >= deadline(f);
        }
        // A quiet claim written in time is seen before its message is given up.
        if (expiring)
            for (int fd : peer_fds()) serve(fd);
        {
            std::lock_guard lock(mutex_);
            take_rings();  // read after `now`, as the sockets are
            if (!full) {
                drop_touched(now, dropped);
                next = deadline_;
            }
            for (auto it = flights_.begin(); full && it != flights_.end();) {
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
                    next = std::min(next, deadline(it->second));
                    ++it;
                }
            }
            if (full) {
                deadline_ = next;
                touched_.clear();
            }
        }
        done_.notify_all();
        dropped.clear();  // blocks go back to the pool outside the lock
        return next;
    }

    // Peer `fd` claims message `seq` (under the lock): false when it was given up.
    bool claim_locked(int fd, peer& p, std::uint64_t seq) {
        p.last = std::max(p.last, seq);
        const auto it = flights_.find(seq);
        if (it == flights_.end()) return false;
        it->second.claimed = true;
        it->second.claimers.insert(fd);
        p.holding.insert(seq);
        touched_.push_back(seq);
        return true;
    }

    void release_locked(int fd, peer& p, std::uint64_t seq) {
        p.holding.erase(seq);
        if (auto it = flights_.find(seq); it != flights_.end()) {
            it->second.claimers.erase(fd);
            touched_.push_back(seq);
        }
    }

    void on_claim(int fd, peer& p, std::uint64_t seq, bool quiet) {
        std::vector<std::uint64_t> segs;
        bool ok = false;
        {
            std::lock_guard lock(mutex_);
            ok = claim_locked(fd, p, seq);
            // A quiet claimer maps every segment already: no answer. One
            // too late for a given-up message asks again.
            if (quiet) return;
            if (ok)
                for (std::uint64_t s : flights_.at(seq).segments)
                    if (p.given.insert(s).second) segs.push_back(s);
        }
        // The ring goes with the first answer.
        if (p.ring_fd) {
            std::array<std::byte, 16> body{};
            store_le<std::uint32_t>(body.data(), msg_ring);
            const int ring_fd = p.ring_fd.get();
            if (!send_packet(fd, body, {&ring_fd, 1})) return drop_peer(fd);
            p.ring_fd = unique_fd();
        }
        std::sort(segs.begin(), segs.end());
        segs.erase(std::unique(segs.begin(), segs.end()), segs.end());
        for (std::size_t at = 0; at < segs.size(); at += fds_per_packet) {
            const std::size_t n = std::min(fds_per_packet, segs.size() - at);
            std::vector<int> fds;
            std::vector<std::byte> body(16 + 8 * n);
            store_le<std::uint32_t>(body.data(), msg_fds);
            store_le<std::uint32_t>(body.data() + 4, static_cast<std::uint32_t>(n));
            for (std::size_t k = 0; k < n; ++k) {
                const int ro = memory_->read_only_fd(segs[at + k]);
                if (ro < 0) {
                    for (int x : fds) ::close(x);
                    ok = false;
                    fds.clear();
                    break;
                }
                fds.push_back(ro);
                store_le<std::uint64_t>(body.data() + 16 + 8 * k, segs[at + k]);
            }
            if (!ok) break;
            const bool sent = send_packet(fd, body, fds);
            for (int x : fds) ::close(x);
            if (!sent) return drop_peer(fd);
        }
        if (!ok) on_release(fd, p, seq);
        // Segments gone since (up to now): the receiver drops its mappings of them.
        note_closed();
        std::vector<std::uint64_t> gone;
        {
            std::lock_guard lock(mutex_);
            const std::size_t k = std::min(p.closed.size(), closed_per_reply);
            gone.assign(p.closed.begin(), p.closed.begin() + static_cast<std::ptrdiff_t>(k));
            p.closed.erase(p.closed.begin(), p.closed.begin() + static_cast<std::ptrdiff_t>(k));
        }
        std::vector<std::byte> reply(16 + 8 * gone.size());
        store_le<std::uint32_t>(reply.data(), ok ? msg_ok : msg_gone);
        store_le<std::uint32_t>(reply.data() + 4, static_cast<std::uint32_t>(gone.size()));
        store_le<std::uint64_t>(reply.data() + 8, monotonic_ns());  // read after the claim: the receiver learns our clock
        for (std::size_t k = 0; k < gone.size(); ++k) store_le<std::uint64_t>(reply.data() + 16 + 8 * k, gone[k]);
        if (!send_packet(fd, reply)) drop_peer(fd);
    }

    void on_release(int fd, peer& p, std::uint64_t seq) {
        std::lock_guard lock(mutex_);
        release_locked(fd, p, seq);
    }

    void drop_peer(int fd) {
        {
            std::lock_guard lock(mutex_);
            peer& p = peers_[fd];
            take_ring(fd, p);  // what it claimed before it went is released with the rest
            if (p.ring) p.ring->ask(shm_ring::cut_off);
            for (std::uint64_t seq : p.holding)
                if (auto it = flights_.find(seq); it != flights_.end()) {
                    it->second.claimers.erase(fd);
                    touched_.push_back(seq);
                }
            peers_.erase(fd);
        }
        ::close(fd);
    }

    void run() {
        for (;;) {
            {
                // Kicks while a pool waits for blocks or a close lingers;
                // asked for before collect() reads the rings.
                std::lock_guard lock(mutex_);
                const bool hurry = memory_->waited_on() || draining_;
                for (auto& [fd, p] : peers_)
                    if (p.ring) p.ring->ask(hurry ? shm_ring::kick : shm_ring::nothing);
            }
            const auto next = collect();
            note_closed();
            std::vector<pollfd> fds{{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
            int period_ms = ring_period_ms;
            {
                std::lock_guard lock(mutex_);
                if (stopping_) return;
                for (auto& [fd, p] : peers_) fds.push_back({fd, POLLIN, 0});
                // Rings are read on each send and, between sends, every
                // period; with nothing in flight after a quiet while, not
                // at all, until the next send wakes this thread.
                const bool quiet = std::chrono::steady_clock::now() - last_send_ > ring_quiet_after;
                napping_ = quiet && flights_.empty();
                if (quiet) period_ms = ring_quiet_period_ms;
                if (napping_) period_ms = -1;
            }
            int wait_ms = -1;
            if (next != std::chrono::steady_clock::time_point::max()) {
                const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
                wait_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60000));
            }
            if (period_ms >= 0) wait_ms = wait_ms < 0 ? period_ms : std::min(wait_ms, period_ms);
            const int rc = ::poll(fds.data(), fds.size(), wait_ms);
            if (rc < 0 && errno != EINTR) return;
            if (rc <= 0) continue;
            if (fds[1].revents) {
                std::uint64_t v = 0;
                [[maybe_unused]] const ssize_t r = ::read(wake_.get(), &v, sizeof v);
            }
            if (fds[0].revents & POLLIN) accept_peers();
            for (std::size_t i = 2; i < fds.size(); ++i)
                if (fds[i].revents) serve(fds[i].fd, 64);  // a busy peer does not hold up the others
        }
    }

    // Segments the pool closed, to tell the peers that had them.
    void note_closed() {
        std::lock_guard lock(mutex_);
        for (std::uint64_t id : memory_->take_closed())
            for (auto& [fd, p] : peers_)
                if (p.given.erase(id)) p.closed.push_back(id);
    }

    std::vector<int> peer_fds() {
        std::lock_guard lock(mutex_);
        std::vector<int> out;
        for (auto& [fd, p] : peers_) out.push_back(fd);
        return out;
    }

    // The requests waiting on peer `fd`'s socket (at most `most`; all by default).
    void serve(int fd, std::size_t most = std::numeric_limits<std::size_t>::max()) {
        for (std::size_t served = 0; served < most; ++served) {
            peer* p = nullptr;
            {
                std::lock_guard lock(mutex_);
                const auto it = peers_.find(fd);
                if (it == peers_.end()) return;  // dropped
                p = &it->second;
            }
            std::array<std::byte, 16> req{};
            const ssize_t n = ::recv(fd, req.data(), req.size(), MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) return;
            if (n != 16) {  // closed, died, or spoke nonsense
                drop_peer(fd);
                return;
            }
            const std::uint32_t type = load_le<std::uint32_t>(req.data());
            const std::uint64_t seq = load_le<std::uint64_t>(req.data() + 8);
            if (type == msg_claim || type == msg_claim_quiet) on_claim(fd, *p, seq, type == msg_claim_quiet);
            else if (type == msg_release) on_release(fd, *p, seq);
            else if (type != msg_kick) drop_peer(fd);  // a kick: the loop reads the rings next
        }
    }

    void accept_peers() {
        for (;;) {
            const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
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
            peer p;
            try {
                p.ring = shm_ring::create(p.ring_fd);
            } catch (const error&) {
                // No memfd to spare: this peer's claims and releases come as packets.
            }
            std::lock_guard lock(mutex_);
            peers_.emplace(fd, std::move(p));
        }
    }

    std::shared_ptr<shm_memory> memory_;
    tensor_pool pool_;
    std::chrono::milliseconds lease_;
    bool fan_out_;
    std::string name_;
    unique_fd listen_;
    unique_fd wake_;
    std::mutex mutex_;
    std::condition_variable done_;
    std::uint64_t next_seq_ = 1;
    std::map<std::uint64_t, flight> flights_;
    // Peers: added, removed and changed by the thread only (under the lock
    // where collect() reads them).
    std::map<int, peer> peers_;
    // No message in flight is due before this (the thread's next full scan).
    std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
    std::vector<std::uint64_t> touched_;  // claimed or released since last looked at
    bool stopping_ = false;
    bool draining_ = false;  // close() lingers: receivers kick after each ring entry
    bool napping_ = false;   // the thread sleeps until a send, not reading the rings
    std::chrono::steady_clock::time_point last_send_;
    std::thread thread_;
};

std::shared_ptr<shm_sender> make_shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out) {
    return std::make_shared<shm_sender>(pool_bytes, lease, fan_out);
}
tensor_pool& shm_pool(shm_sender& s) { return s.pool(); }
bool shm_send(shm_sender& s, zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              const stream_position* position, std::optional<std::chrono::milliseconds> timeout) {
    return s.send(socket, tensors, envelope, position, timeout);
}
void shm_close(shm_sender& s, std::chrono::milliseconds linger) {
    s.drain(linger);
    s.stop();
}
std::size_t shm_in_flight(shm_sender& s) { return s.in_flight(); }

}  // namespace tenbin::detail

#endif
