// The +shm sender's bookkeeping (see ledger.hpp).
#include "shm/ledger.hpp"

#include <algorithm>

namespace tenbin::detail::shm_impl {

ledger::sent ledger::add(flight f, time_point now, bool closed_untold) {
    sent out;
    out.seq = next_seq_++;
    // Quiet claims only while nothing forces an answer (see protocol.hpp);
    // half the time to the give-up at the latest. Fan-out: before the
    // grace too, should every subscriber leave the side channel, and
    // before a laggard's give-up.
    auto horizon = opt_.lease;
    if (opt_.fan_out) horizon = std::min(horizon, opt_.grace);
    if (opt_.fan_out && !opt_.block_laggards) horizon = std::min(horizon, opt_.laggard_after);
    if (!closed_untold && !untold() && !(opt_.fan_out && peers_.empty())) out.claim_by = now + horizon / 2;
    entry& e = flights_[out.seq];
    e.f = std::move(f);
    e.sent = now;
    for (const buffer& b : e.f.holders) e.bytes += b.size();
    ++unclaimed_;
    out.sooner = deadline(e) < deadline_;
    deadline_ = std::min(deadline_, deadline(e));
    return out;
}

std::optional<flight> ledger::forget(std::uint64_t seq) {
    const auto it = flights_.find(seq);
    if (it == flights_.end()) return std::nullopt;
    if (counts_unclaimed(seq, it->second)) --unclaimed_;
    for (peer_id p : std::set<peer_id>(it->second.claimers)) unhold(p, seq, it->second);
    flight f = std::move(it->second.f);
    flights_.erase(it);
    return f;
}

std::vector<flight> ledger::clear() {
    std::vector<flight> out;
    for (entries* m : {&flights_, &retiring_}) {
        for (auto& [seq, e] : *m) out.push_back(std::move(e.f));
        m->clear();
    }
    peers_.clear();
    touched_.clear();
    deadline_ = time_point::max();
    unclaimed_ = 0;
    return out;
}

bool ledger::may_send() const {
    if (opt_.fan_out || opt_.max_unclaimed == 0) return true;
    return unclaimed_ < opt_.max_unclaimed * std::max<std::size_t>(peers_.size(), 1);
}

void ledger::join(peer_id p) { peers_.try_emplace(p); }

std::vector<peer_id> ledger::peers() const {
    std::vector<peer_id> out;
    for (const auto& [p, b] : peers_) out.push_back(p);
    return out;
}

ledger::claimed ledger::claim(peer_id p, std::uint64_t seq) {
    const auto pb = peers_.find(p);
    if (pb == peers_.end()) return claimed::gone;
    book& b = pb->second;
    b.last = std::max(b.last, seq);
    const auto it = flights_.find(seq);
    if (it == flights_.end()) return claimed::gone;
    entry& e = it->second;
    if (!e.claimers.count(p)) {
        // One message of any size may be held; more, up to the bound, as
        // long as another peer is there to need the pool (alone, holding
        // it all is backpressure).
        if (opt_.max_held_bytes != 0 && b.held_bytes != 0 && b.held_bytes + e.bytes > opt_.max_held_bytes &&
            peers_.size() > 1) {
            cut(p);
            return claimed::cut_off;
        }
        e.claimers.insert(p);
        b.held_bytes += e.bytes;
        b.holding.insert(seq);
    }
    if (counts_unclaimed(seq, e)) --unclaimed_;
    e.claimed = true;
    touched_.push_back(seq);
    return claimed::ok;
}

std::vector<std::uint64_t> ledger::to_give(peer_id p, std::uint64_t seq) {
    std::vector<std::uint64_t> out;
    const auto it = flights_.find(seq);
    const auto pb = peers_.find(p);
    if (it == flights_.end() || pb == peers_.end()) return out;
    for (std::uint64_t s : it->second.f.segments)
        if (pb->second.given.insert(s).second) out.push_back(s);
    return out;
}

void ledger::ungive(peer_id p, std::span<const std::uint64_t> segments) {
    if (auto pb = peers_.find(p); pb != peers_.end())
        for (std::uint64_t s : segments) pb->second.given.erase(s);
}

void ledger::unhold(peer_id p, std::uint64_t seq, entry& e) {
    if (!e.claimers.erase(p)) return;
    if (auto pb = peers_.find(p); pb != peers_.end()) {
        pb->second.held_bytes -= e.bytes;
        pb->second.holding.erase(seq);
    }
}

void ledger::release(peer_id p, std::uint64_t seq) {
    if (auto it = flights_.find(seq); it != flights_.end()) {
        unhold(p, seq, it->second);
        touched_.push_back(seq);
    } else if (auto r = retiring_.find(seq); r != retiring_.end()) {
        unhold(p, seq, r->second);
    }
}

void ledger::leave(peer_id p) {
    const auto pb = peers_.find(p);
    if (pb == peers_.end()) return;
    for (std::uint64_t seq : std::set<std::uint64_t>(pb->second.holding)) release(p, seq);
    peers_.erase(p);
    // What it had not claimed yet went to its closed pipe, or to another
    // receiver: either way it no longer holds sends back.
    counted_from_ = next_seq_;
    unclaimed_ = 0;
}

void ledger::cut(peer_id p) {
    const auto pb = peers_.find(p);
    if (pb == peers_.end()) return;
    for (std::uint64_t seq : pb->second.holding)
        for (entries* m : {&flights_, &retiring_})
            if (auto it = m->find(seq); it != m->end()) {
                it->second.claimers.erase(p);
                it->second.orphaned = true;
                touched_.push_back(seq);
            }
    peers_.erase(pb);
    ++counters_.peers_cut_off;
}

void ledger::closed(std::span<const std::uint64_t> ids) {
    for (std::uint64_t id : ids)
        for (auto& [p, b] : peers_)
            if (b.given.erase(id)) b.closed.push_back(id);
}

std::vector<std::uint64_t> ledger::take_closed(peer_id p, std::size_t most) {
    std::vector<std::uint64_t> out;
    const auto pb = peers_.find(p);
    if (pb == peers_.end()) return out;
    std::vector<std::uint64_t>& c = pb->second.closed;
    const auto k = static_cast<std::ptrdiff_t>(std::min(c.size(), most));
    out.assign(c.begin(), c.begin() + k);
    c.erase(c.begin(), c.begin() + k);
    return out;
}

bool ledger::untold() const {
    return std::any_of(peers_.begin(), peers_.end(), [](const auto& e) { return !e.second.closed.empty(); });
}

time_point ledger::deadline(const entry& e) const {
    auto wait = opt_.lease;
    if (opt_.fan_out && peers_.empty()) wait = std::min(wait, opt_.grace);
    else if (opt_.fan_out && !opt_.block_laggards) wait = std::min(wait, opt_.laggard_after);
    return e.sent + wait;
}

bool ledger::finished(std::uint64_t seq, const entry& e, time_point now) {
    if (!e.claimers.empty()) return false;
    if (!opt_.fan_out) return e.claimed || e.orphaned;
    // No subscriber on the side channel yet: the first ones get a moment
    // to claim (the rest of the late-joiner rule is below).
    if (peers_.empty()) return now - e.sent >= opt_.grace;
    // Done once every subscriber on the side channel is past it; one not
    // there yet gets GONE (a late joiner's first message).
    return std::all_of(peers_.begin(), peers_.end(), [&](const auto& p) { return p.second.last >= seq; });
}

ledger::entries::iterator ledger::finish(entries::iterator it, outcome& out) {
    if (it->second.orphaned) return to_retiring(it);
    out.done.push_back(std::move(it->second.f));
    return flights_.erase(it);
}

ledger::entries::iterator ledger::to_retiring(entries::iterator it) {
    std::vector<std::uint64_t>& u = it->second.unretired;
    u = it->second.f.segments;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    auto node = flights_.extract(it++);
    retiring_.insert(std::move(node));
    return it;
}

void ledger::drop_touched(time_point now, outcome& out) {
    for (std::uint64_t seq : touched_)
        if (auto it = flights_.find(seq); it != flights_.end() && finished(seq, it->second, now)) finish(it, out);
    touched_.clear();
}

void ledger::settle(time_point now, outcome& out) {
    if (!opt_.fan_out) return drop_touched(now, out);
    for (auto it = flights_.begin(); it != flights_.end();)
        it = finished(it->first, it->second, now) ? finish(it, out) : std::next(it);
}

bool ledger::expiring(time_point now) const {
    if (!opt_.fan_out && now < deadline_) return false;
    return std::any_of(flights_.begin(), flights_.end(), [&](const auto& e) { return now >= deadline(e.second); });
}

time_point ledger::collect(time_point now, outcome& out) {
    // PUSH/PAIR: between deadlines only the messages claimed or released
    // since can be done with (no scan of all in flight).
    if (!opt_.fan_out && now < deadline_) {
        drop_touched(now, out);
        return deadline_;
    }
    auto next = time_point::max();
    for (auto it = flights_.begin(); it != flights_.end();) {
        const std::uint64_t seq = it->first;
        entry& e = it->second;
        if (finished(seq, e, now)) {
            it = finish(it, out);
        } else if (opt_.fan_out && !opt_.block_laggards && !peers_.empty() && e.claimers.empty() &&
                   now - e.sent >= opt_.laggard_after) {
            // Every subscriber not past it lags: given up for them.
            for (const auto& [p, b] : peers_) counters_.laggard_drops += b.last < seq;
            it = finish(it, out);
        } else if (now - e.sent >= opt_.lease) {
            ++counters_.leases_expired;
            if (counts_unclaimed(seq, e)) --unclaimed_;
            if (!e.claimers.empty() || e.orphaned) {
                it = to_retiring(it);
            } else {
                out.done.push_back(std::move(e.f));
                it = flights_.erase(it);
            }
        } else {
            next = std::min(next, deadline(e));
            ++it;
        }
    }
    deadline_ = next;
    touched_.clear();
    return next;
}

std::vector<std::uint64_t> ledger::to_retire() const {
    std::set<std::uint64_t> out;
    for (const auto& [seq, e] : retiring_) out.insert(e.unretired.begin(), e.unretired.end());
    return {out.begin(), out.end()};
}

void ledger::retired(std::uint64_t segment, bool ok) {
    for (auto& [seq, e] : retiring_) {
        const auto it = std::find(e.unretired.begin(), e.unretired.end(), segment);
        if (it == e.unretired.end()) continue;
        if (ok) {
            e.unretired.erase(it);
        } else if (!e.failed) {
            e.failed = true;
            ++counters_.retires_failed;
        }
    }
}

void ledger::sweep(outcome& out) {
    for (auto it = retiring_.begin(); it != retiring_.end();) {
        entry& e = it->second;
        if (!e.unretired.empty() && (!e.claimers.empty() || e.orphaned)) {
            ++it;
            continue;
        }
        for (peer_id p : std::set<peer_id>(e.claimers)) unhold(p, it->first, e);
        out.done.push_back(std::move(e.f));
        it = retiring_.erase(it);
    }
}

std::size_t ledger::pinned() const {
    std::size_t n = 0;
    for (const auto& [seq, e] : retiring_)
        if (e.failed) n += e.unretired.size();
    return n;
}

bool ledger::settled() const {
    if (opt_.fan_out) return flights_.empty();
    return std::all_of(flights_.begin(), flights_.end(), [](const auto& e) { return e.second.claimed; });
}

}  // namespace tenbin::detail::shm_impl
