// The +shm sender's side-channel thread: it accepts receivers, answers
// their claims with segments, reads their rings and gives messages back to
// the pool as the ledger says.
#ifdef __linux__

#include "shm/sender.hpp"

#include <algorithm>

#include <fcntl.h>
#include <poll.h>
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
// How long accepting pauses when the process has no descriptor left.
constexpr std::chrono::milliseconds accept_pause{100};

}  // namespace

time_point shm_sender::collect() {
    ledger::outcome out;
    // One `now` for both passes: what is given up below was due before the requests are read.
    const auto now = ledger_clock::now();
    bool expiring = false;
    {
        std::lock_guard lock(mutex_);
        expiring = ledger_.expiring(now);
    }
    // A quiet claim written in time is seen before its message is given up.
    if (expiring)
        for (int fd : peer_fds()) serve(fd);
    time_point next;
    {
        std::lock_guard lock(mutex_);
        take_rings();  // read after `now`, as the sockets are
        next = ledger_.collect(now, out);
        retire(out);
    }
    done_.notify_all();
    return next;  // blocks go back to the pool outside the lock
}

void shm_sender::on_claim(int fd, peer& p, std::uint64_t seq, bool quiet) {
    std::vector<std::uint64_t> segs;
    bool ok = false;
    {
        std::lock_guard lock(mutex_);
        if (p.cut) return;
        const ledger::claimed c = ledger_.claim(fd, seq);
        if (c == ledger::claimed::cut_off) return cut_locked(fd, p, cut_reason::held_too_much);
        ok = c == ledger::claimed::ok;
        // A quiet claimer maps every segment already: no answer. One
        // too late for a given-up message asks again.
        if (quiet) return;
        if (ok) segs = ledger_.to_give(fd, seq);
    }
    // The ring goes with the first answer (no memfd to spare: claims and
    // releases come as packets).
    if (!p.ring && !p.ring_tried) {
        p.ring_tried = true;
        try {
            auto ring = shm_ring::create(p.ring_fd);
            std::lock_guard lock(mutex_);
            p.ring = std::move(ring);
        } catch (const error&) {
        }
    }
    if (p.ring_fd) {
        const int ring_fd = p.ring_fd.get();
        if (!send_packet(fd, encode_reply({.type = packet::ring, .seq = seq}), {&ring_fd, 1}))
            return not_reading(fd, p);
        p.ring_fd = unique_fd();
    }
    std::sort(segs.begin(), segs.end());
    segs.erase(std::unique(segs.begin(), segs.end()), segs.end());
    for (std::size_t at = 0; at < segs.size() && ok; at += fds_per_packet) {
        const std::size_t n = std::min(fds_per_packet, segs.size() - at);
        std::vector<unique_fd> owned;
        std::vector<int> fds;
        for (std::size_t k = 0; k < n && ok; ++k) {
            owned.emplace_back(memory_->read_only_fd(segs[at + k]));
            fds.push_back(owned.back().get());
            ok = fds.back() >= 0;
        }
        if (!ok) {  // no descriptor to spare: these go with a later answer
            std::lock_guard lock(mutex_);
            ledger_.ungive(fd, {segs.begin() + static_cast<std::ptrdiff_t>(at), segs.end()});
            break;
        }
        const std::vector<std::uint64_t> ids(segs.begin() + static_cast<std::ptrdiff_t>(at),
                                             segs.begin() + static_cast<std::ptrdiff_t>(at + n));
        if (!send_packet(fd, encode_reply({.type = packet::fds, .seq = seq, .ids = ids}), fds))
            return not_reading(fd, p);
    }
    if (!ok) on_release(fd, seq);
    // Segments gone since (up to now): the receiver drops its mappings of them.
    note_closed();
    reply r{.type = ok ? packet::ok : packet::gone, .seq = seq};
    {
        std::lock_guard lock(mutex_);
        r.ids = ledger_.take_closed(fd, closed_per_reply);
    }
    r.clock = monotonic_ns();  // read after the claim: the receiver learns our clock
    if (!send_packet(fd, encode_reply(r))) not_reading(fd, p);
    done_.notify_all();  // a send may wait for claims
}

void shm_sender::not_reading(int fd, peer& p) {
    std::lock_guard lock(mutex_);
    cut_locked(fd, p, cut_reason::not_reading);
}

void shm_sender::on_release(int fd, std::uint64_t seq) {
    std::lock_guard lock(mutex_);
    ledger_.release(fd, seq);
}

void shm_sender::drop_peer(int fd) {
    {
        std::lock_guard lock(mutex_);
        peer& p = peers_[fd];
        take_ring(fd, p);  // what it claimed before it went is released with the rest (cut: nothing)
        if (p.ring) p.ring->ask(shm_ring::cut_off);
        ledger_.leave(fd);
        peers_.erase(fd);
    }
    ::close(fd);
}

void shm_sender::run() {
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
        const bool accepting = ledger_clock::now() >= accept_after_;
        std::vector<pollfd> fds{{accepting ? listen_.get() : -1, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
        int period_ms = ring_period_ms;
        {
            std::lock_guard lock(mutex_);
            if (stopping_) return;
            for (auto& [fd, p] : peers_) fds.push_back({fd, POLLIN, 0});
            // Rings are read on each send and, between sends, every
            // period; with nothing in flight after a quiet while, not
            // at all, until the next send wakes this thread.
            const bool quiet = ledger_clock::now() - last_send_ > ring_quiet_after;
            napping_ = quiet && ledger_.in_flight() == 0;
            if (quiet) period_ms = ring_quiet_period_ms;
            if (napping_) period_ms = -1;
        }
        int wait_ms = -1;
        if (next != time_point::max()) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - ledger_clock::now());
            wait_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60000));
        }
        if (period_ms >= 0) wait_ms = wait_ms < 0 ? period_ms : std::min(wait_ms, period_ms);
        const int pause_ms = static_cast<int>(accept_pause.count());
        if (!accepting) wait_ms = wait_ms < 0 ? pause_ms : std::min(wait_ms, pause_ms);
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

void shm_sender::note_closed() {
    std::lock_guard lock(mutex_);
    ledger_.closed(memory_->take_closed());
}

std::vector<int> shm_sender::peer_fds() {
    std::lock_guard lock(mutex_);
    std::vector<int> out;
    for (auto& [fd, p] : peers_) out.push_back(fd);
    return out;
}

void shm_sender::serve(int fd, std::size_t most) {
    for (std::size_t served = 0; served < most; ++served) {
        peer* p = nullptr;
        {
            std::lock_guard lock(mutex_);
            const auto it = peers_.find(fd);
            if (it == peers_.end()) return;  // dropped
            p = &it->second;
        }
        std::array<std::byte, request_size + 1> bytes{};  // one more: a longer packet shows
        const ssize_t n = ::recv(fd, bytes.data(), bytes.size(), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        request req;
        try {
            if (n <= 0) throw error(errc::io_error, "closed");  // closed or died
            req = parse_request({bytes.data(), static_cast<std::size_t>(n)});
        } catch (const error&) {  // or spoke nonsense
            if (n <= 0) return drop_peer(fd);
            std::lock_guard lock(mutex_);
            return cut_locked(fd, *p, cut_reason::bad_request);
        }
        {
            // What the ring holds was written before this packet (a full
            // ring's entries come as packets): in order.
            std::lock_guard lock(mutex_);
            take_ring(fd, *p);
        }
        if (req.type == packet::claim || req.type == packet::claim_quiet)
            on_claim(fd, *p, req.seq, req.type == packet::claim_quiet);
        else if (req.type == packet::release)
            on_release(fd, req.seq);
        // a kick: the loop reads the rings next
    }
}

void shm_sender::accept_peers() {
    for (;;) {
        const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) return;  // none waiting
            // Out of descriptors: the reserve lets one in to be told so.
            reserve_.reset();
            const int late = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
            if (late >= 0) refuse(late, cut_reason::out_of_descriptors);
            reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
            if (late < 0 || !reserve_) {
                accept_after_ = ledger_clock::now() + accept_pause;
                return;
            }
            continue;
        }
        // Only the sender's own user may read its memory.
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid()) {
            ::close(fd);
            std::lock_guard lock(mutex_);
            ++peers_refused_;
            continue;
        }
        bool full = false;
        {
            std::lock_guard lock(mutex_);
            full = peers_.size() >= max_peers_;
        }
        if (full) {
            refuse(fd, cut_reason::peers_full);
            continue;
        }
        std::lock_guard lock(mutex_);
        peers_.emplace(fd, peer{});
        ledger_.join(fd);
    }
}

void shm_sender::refuse(int fd, cut_reason why) {
    {
        std::lock_guard lock(mutex_);
        ++peers_refused_;  // counted before it can hear of it
    }
    tell_cut(fd, why);  // a fresh socket has room for it
    ::close(fd);
}

}  // namespace tenbin::detail

#endif
