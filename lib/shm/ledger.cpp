// The +shm sender's bookkeeping (see ledger.hpp).
#include "shm/ledger.hpp"

#include <algorithm>
#include <set>

namespace tenbin::detail::shm_impl {

ledger::sent ledger::add(flight f, time_point now, bool closed_untold) {
    sent out;
    out.seq = next_seq_++;
    // Quiet claims only while nothing forces an answer (see protocol.hpp);
    // half a lease before the give-up at the latest. Fan-out: before the
    // grace too, should every subscriber leave the side channel.
    const auto horizon = opt_.fan_out ? std::min(opt_.lease, opt_.grace) : opt_.lease;
    if (!closed_untold && !untold() && !(opt_.fan_out && peers_.empty())) out.claim_by = now + horizon / 2;
    entry& e = flights_[out.seq];
    e.f = std::move(f);
    e.sent = now;
    out.sooner = deadline(e) < deadline_;
    deadline_ = std::min(deadline_, deadline(e));
    return out;
}

std::optional<flight> ledger::forget(std::uint64_t seq) {
    auto n = flights_.extract(seq);
    if (!n) return std::nullopt;
    for (peer_id p : n.mapped().claimers) peers_[p].holding.erase(seq);
    return std::move(n.mapped().f);
}

std::vector<flight> ledger::clear() {
    std::vector<flight> out;
    for (auto* m : {&flights_, &retiring_}) {
        for (auto& [seq, e] : *m) out.push_back(std::move(e.f));
        m->clear();
    }
    peers_.clear();
    touched_.clear();
    deadline_ = time_point::max();
    return out;
}

void ledger::join(peer_id p) { peers_.try_emplace(p); }

std::vector<peer_id> ledger::peers() const {
    std::vector<peer_id> out;
    for (const auto& [p, b] : peers_) out.push_back(p);
    return out;
}

bool ledger::claim(peer_id p, std::uint64_t seq) {
    book& b = peers_[p];
    b.last = std::max(b.last, seq);
    const auto it = flights_.find(seq);
    if (it == flights_.end()) return false;
    it->second.claimed = true;
    it->second.claimers.insert(p);
    b.holding.insert(seq);
    touched_.push_back(seq);
    return true;
}

std::vector<std::uint64_t> ledger::to_give(peer_id p, std::uint64_t seq) {
    std::vector<std::uint64_t> out;
    const auto it = flights_.find(seq);
    if (it == flights_.end()) return out;
    book& b = peers_[p];
    for (std::uint64_t s : it->second.f.segments)
        if (b.given.insert(s).second) out.push_back(s);
    return out;
}

void ledger::ungive(peer_id p, std::span<const std::uint64_t> segments) {
    book& b = peers_[p];
    for (std::uint64_t s : segments) b.given.erase(s);
}

void ledger::release(peer_id p, std::uint64_t seq) {
    peers_[p].holding.erase(seq);
    if (auto it = flights_.find(seq); it != flights_.end()) {
        it->second.claimers.erase(p);
        touched_.push_back(seq);
    } else if (auto r = retiring_.find(seq); r != retiring_.end()) {
        r->second.claimers.erase(p);
    }
}

void ledger::leave(peer_id p) {
    const auto it = peers_.find(p);
    if (it == peers_.end()) return;
    for (std::uint64_t seq : it->second.holding)
        if (auto f = flights_.find(seq); f != flights_.end()) {
            f->second.claimers.erase(p);
            touched_.push_back(seq);
        } else if (auto r = retiring_.find(seq); r != retiring_.end()) {
            r->second.claimers.erase(p);
        }
    peers_.erase(it);
}

void ledger::closed(std::span<const std::uint64_t> ids) {
    for (std::uint64_t id : ids)
        for (auto& [p, b] : peers_)
            if (b.given.erase(id)) b.closed.push_back(id);
}

std::vector<std::uint64_t> ledger::take_closed(peer_id p, std::size_t most) {
    book& b = peers_[p];
    const auto k = static_cast<std::ptrdiff_t>(std::min(b.closed.size(), most));
    std::vector<std::uint64_t> out(b.closed.begin(), b.closed.begin() + k);
    b.closed.erase(b.closed.begin(), b.closed.begin() + k);
    return out;
}

bool ledger::untold() const {
    return std::any_of(peers_.begin(), peers_.end(), [](const auto& e) { return !e.second.closed.empty(); });
}

time_point ledger::deadline(const entry& e) const {
    return e.sent + (opt_.fan_out && peers_.empty() ? std::min(opt_.lease, opt_.grace) : opt_.lease);
}

bool ledger::finished(std::uint64_t seq, const entry& e, time_point now) const {
    if (!e.claimers.empty()) return false;
    if (!opt_.fan_out) return e.claimed;
    // No subscriber on the side channel yet: the first ones get a moment
    // to claim (the rest of the late-joiner rule is below).
    if (peers_.empty()) return now - e.sent >= opt_.grace;
    // Done once every subscriber on the side channel is past it; one not
    // there yet gets GONE (a late joiner's first message).
    return std::all_of(peers_.begin(), peers_.end(), [&](const auto& p) { return p.second.last >= seq; });
}

void ledger::drop_touched(time_point now, outcome& out) {
    for (std::uint64_t seq : touched_)
        if (auto it = flights_.find(seq); it != flights_.end() && finished(seq, it->second, now)) {
            out.done.push_back(std::move(it->second.f));
            flights_.erase(it);
        }
    touched_.clear();
}

void ledger::settle(time_point now, outcome& out) {
    if (!opt_.fan_out) return drop_touched(now, out);
    for (auto it = flights_.begin(); it != flights_.end();)
        if (finished(it->first, it->second, now)) {
            out.done.push_back(std::move(it->second.f));
            it = flights_.erase(it);
        } else {
            ++it;
        }
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
        entry& e = it->second;
        if (finished(it->first, e, now)) {
            out.done.push_back(std::move(e.f));
            it = flights_.erase(it);
        } else if (now - e.sent >= opt_.lease) {
            ++counters_.leases_expired;
            if (e.claimers.empty()) {
                out.done.push_back(std::move(e.f));
            } else {
                e.unretired = e.f.segments;
                std::sort(e.unretired.begin(), e.unretired.end());
                e.unretired.erase(std::unique(e.unretired.begin(), e.unretired.end()), e.unretired.end());
                retiring_.insert(flights_.extract(it++));
                continue;
            }
            it = flights_.erase(it);
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
        if (!e.unretired.empty() && !e.claimers.empty()) {
            ++it;
            continue;
        }
        for (peer_id p : e.claimers) peers_[p].holding.erase(it->first);
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
