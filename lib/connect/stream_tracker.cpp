#include "connect/stream_tracker.hpp"

#include <tenbin/error.hpp>

#include <algorithm>

#include <time.h>

namespace tenbin::detail {

stream_tracker::stream_tracker(stream_options opt, std::size_t hold_messages, std::uint64_t hold_bytes, bool count_gaps)
    : opt_(opt), count_gaps_(count_gaps), hold_messages_limit_(hold_messages), hold_bytes_limit_(hold_bytes) {
    if (opt_.world_size == 0 || opt_.rank >= opt_.world_size)
        throw error(errc::bad_argument, "rank " + std::to_string(opt_.rank) + " of a world of " +
                                            std::to_string(opt_.world_size) + ": a rank is 0 to world_size - 1");
}

// libstdc++'s steady_clock is CLOCK_MONOTONIC, of which this is the coarse reading.
stream_tracker::clock::time_point stream_tracker::coarse_now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                         std::chrono::nanoseconds(ts.tv_nsec)));
}

// Whether `p` is done with the consumer's epoch `epoch`.
bool stream_tracker::ended(const producer& p, std::uint64_t epoch) const {
    return p.finished || p.epoch > epoch || p.timed_out == epoch;
}

void stream_tracker::add(tracked m, clock::time_point now, std::vector<stream_event>& out) {
    if (!m.position) {
        out.push_back({stream_event::kind::message, std::move(m), 0});
        return;
    }
    const stream_position pos = *m.position;
    if (finished_) {
        // Nothing is taken after the end: kept, it would be held for ever.
        // Not acknowledged either: an acked producer gives it to another
        // consumer once this one leaves (one that redelivered it late).
        if (pos.kind == stream_position::mark::batch) ++counters_.after_end;
        if (m.ack) withhold(*m.ack);
        return;
    }
    auto [it, fresh] = producers_.try_emplace(pos.producer);
    producer& p = it->second;
    if (fresh) p.epoch = pos.epoch;  // joined here: what came before is a gap of its first epoch
    p.heard = now;
    if (pos.kind == stream_position::mark::batch) {
        batch(p, std::move(m), out);
    } else if (pos.epoch >= p.epoch) {
        if (pos.epoch > p.epoch) {
            leave_epoch(p, pos.epoch == p.epoch + 1 && pos.previous ? std::optional(pos.previous) : std::nullopt, out);
            p.epoch = pos.epoch;
        }
        leave_epoch(p, pos.seq, out);
        p.marked = pos.epoch;
        p.finished = pos.kind == stream_position::mark::stream_end;
    }  // else: an end mark had before (a replay)
    try_close(now, out);
}

bool stream_tracker::take_in_order(const stream_position& pos, clock::time_point now) {
    if (finished_ || opt_.world_size != 1 || held_messages_ != 0 || pos.kind != stream_position::mark::batch ||
        pos.epoch != epoch_)
        return false;
    const auto it = producers_.find(pos.producer);
    if (it == producers_.end()) return false;
    producer& p = it->second;
    if (p.epoch != epoch_ || p.finished || p.timed_out || pos.seq != p.next || !p.above.empty()) return false;
    // What batch() and route() would do. try_close() would do nothing:
    // this producer, just heard and still in the epoch, keeps it open, and
    // the time of its first end is already set if there was one (add(),
    // tick() and load() all end in try_close()).
    p.heard = now;
    ++p.next;
    ++p.received;
    p.top = std::max(p.top, p.next);
    ++given_in_epoch_;
    return true;
}

void stream_tracker::batch(producer& p, tracked&& m, std::vector<stream_event>& out) {
    const std::uint64_t e = m.position->epoch, s = m.position->seq;
    if (e < p.epoch) {
        // Of the epoch before, and not had yet: late (a redelivery), not a duplicate.
        if (e != p.prev.epoch || s < p.prev.next || !p.prev.above.insert(s).second) {
            ++counters_.duplicates;
            return;
        }
        if (counters_.gaps > 0) --counters_.gaps;  // counted missing when the producer left that epoch
        if (s % opt_.world_size != opt_.rank) return;
        return route(std::move(m), out);
    }
    if (e == p.epoch && (s < p.next || p.above.count(s) != 0)) {
        ++counters_.duplicates;
        return;
    }
    if (e > p.epoch) {
        // Its end mark missed (a PUB drops it as any message): the batch
        // tells how many the epoch before had, when that is the one left.
        leave_epoch(p, e == p.epoch + 1 && m.position->previous ? std::optional(m.position->previous) : std::nullopt, out);
        p.epoch = e;
    }
    p.finished = false;
    if (p.timed_out && *p.timed_out < e) p.timed_out.reset();
    if (s == p.next) {
        ++p.next;
        while (!p.above.empty() && *p.above.begin() == p.next) {
            p.above.erase(p.above.begin());
            ++p.next;
        }
    } else {
        p.above.insert(s);
    }
    ++p.received;
    p.top = std::max(p.top, s + 1);
    shard(p, std::move(m), out);
}

void stream_tracker::leave_epoch(producer& p, std::optional<std::uint64_t> count, std::vector<stream_event>& out) {
    const std::uint64_t sent = count ? std::max(*count, p.top) : p.top;
    if (count_gaps_) counters_.gaps += sent > p.received ? sent - p.received : 0;
    const std::size_t w = opt_.world_size;
    if (w > 1) {
        if (opt_.drop_last) {
            // Groups of w the producer completed come out; the rest is the remainder.
            p.top = sent / w * w;
            release_groups(p, p.top, out);
            counters_.dropped_remainder += p.waiting.size();
            for (auto& [seq, m] : p.waiting) held_bytes_ -= m.bytes;
            held_messages_ -= p.waiting.size();
            p.waiting.clear();
        } else {
            const std::uint64_t target = (sent + w - 1) / w;
            const std::optional<tracked>& pad = p.last_given ? p.last_given : last_given_;
            for (; p.given < target && pad; ++p.given) {
                ++counters_.padded;
                tracked again = *pad;
                again.position->epoch = p.epoch;  // given in this producer's epoch
                route(std::move(again), out);
            }
        }
    }
    p.prev = {p.epoch, p.next, p.above};
    p.last_given.reset();
    ++p.epoch;
    p.next = 0;
    p.above.clear();
    p.given = p.top = p.received = 0;
}

void stream_tracker::shard(producer& p, tracked&& m, std::vector<stream_event>& out) {
    const std::size_t w = opt_.world_size;
    if (w == 1) return route(std::move(m), out);
    const std::uint64_t s = m.position->seq;
    if (s % w == opt_.rank) {
        if (!opt_.drop_last) {
            ++p.given;
            p.last_given = last_given_ = m;
            return route(std::move(m), out);
        }
        ++held_messages_;
        held_bytes_ += m.bytes;
        p.waiting.emplace(s, std::move(m));
    }
    // Another rank's batch, or ours: a group is whole once the producer
    // sent its last member.
    release_groups(p, p.top, out);
}

void stream_tracker::release_groups(producer& p, std::uint64_t upto, std::vector<stream_event>& out) {
    const std::size_t w = opt_.world_size;
    for (auto it = p.waiting.begin(); it != p.waiting.end();) {
        if ((it->first / w + 1) * w > upto) break;  // its group is not whole yet
        --held_messages_;
        held_bytes_ -= it->second.bytes;
        ++p.given;
        p.last_given = last_given_ = it->second;
        route(std::move(it->second), out);
        it = p.waiting.erase(it);
    }
}

void stream_tracker::route(tracked&& m, std::vector<stream_event>& out) {
    const std::uint64_t e = m.position->epoch;
    if (e > epoch_) {
        ++held_messages_;
        held_bytes_ += m.bytes;
        later_[e].push_back(std::move(m));
        return;
    }
    if (e < epoch_) ++counters_.late;
    ++given_in_epoch_;
    out.push_back({stream_event::kind::message, std::move(m), 0});
}

void stream_tracker::tick(clock::time_point now, std::vector<stream_event>& out) { try_close(now, out); }

stream_tracker::clock::time_point stream_tracker::deadline() const {
    if (!first_end_ && given_in_epoch_ == 0) return clock::time_point::max();
    auto soonest = clock::time_point::max();
    for (const auto& [name, p] : producers_)
        if (!ended(p, epoch_)) soonest = std::min(soonest, p.heard + opt_.epoch_timeout);
    if (first_end_ && producers_.size() < opt_.expect_producers)
        soonest = std::min(soonest, *first_end_ + opt_.epoch_timeout);
    return soonest;
}

void stream_tracker::try_close(clock::time_point now, std::vector<stream_event>& out) {
    while (!finished_ && !producers_.empty()) {
        // Too much kept back for later epochs ends the current one, as
        // many times as it takes to come under the bounds.
        const bool forced = held_messages_ > hold_messages_limit_ || held_bytes_ > hold_bytes_limit_;
        bool stragglers_silent = true;
        for (const auto& [name, p] : producers_) {
            if (ended(p, epoch_)) {
                if (!first_end_) first_end_ = now;
            } else if (now - p.heard < opt_.epoch_timeout) {
                stragglers_silent = false;
            }
        }
        // Producers expected but not known yet wait from the epoch's first end.
        const std::size_t unknown =
            producers_.size() < opt_.expect_producers ? opt_.expect_producers - producers_.size() : 0;
        if (unknown && first_end_ && now - *first_end_ < opt_.epoch_timeout) stragglers_silent = false;
        // Every producer silent that long, something given and no end come
        // (a PUB dropped it, or they all died): the epoch is over too.
        const bool all_silent = !first_end_ && given_in_epoch_ > 0 && stragglers_silent;
        const bool all_ended = unknown == 0 && std::all_of(producers_.begin(), producers_.end(),
                                                           [&](const auto& e) { return ended(e.second, epoch_); });
        if (!all_ended) {
            if (!forced && !(first_end_ && stragglers_silent) && !all_silent) return;
            // The stated rule: the epoch ends without them.
            counters_.producers_timed_out += unknown;
            for (auto& [name, p] : producers_)
                if (!ended(p, epoch_)) {
                    p.timed_out = epoch_;
                    ++counters_.producers_timed_out;
                }
        }
        first_end_.reset();
        const bool marked = std::any_of(producers_.begin(), producers_.end(),
                                        [&](const auto& e) { return e.second.marked == epoch_; });
        // Finished, the last silent ones timed out with this epoch: the
        // stream is over (one that comes back finds the consumer finished).
        const bool all_finished =
            std::any_of(producers_.begin(), producers_.end(), [](const auto& e) { return e.second.finished; }) &&
            std::all_of(producers_.begin(), producers_.end(),
                        [&](const auto& e) { return e.second.finished || e.second.timed_out == epoch_; });
        // An epoch nothing was given in, that no producer ended with a mark
        // (they all began after it: a consumer resumed, or joined late), is
        // no iteration of the consumer's: skipped.
        if (given_in_epoch_ != 0 || marked) {
            out.push_back({stream_event::kind::epoch_end, {}, epoch_});
            ++counters_.epochs;
        }
        if (all_finished && later_.empty()) {
            out.push_back({stream_event::kind::stream_end, {}, epoch_});
            finished_ = true;
            return;
        }
        // Straight to the next epoch anyone is in: a hostile epoch number
        // must not cost one turn of this loop per epoch skipped.
        std::uint64_t next = epoch_ + 1;
        if (given_in_epoch_ == 0 && !marked) {
            next = UINT64_MAX;
            for (const auto& [name, p] : producers_)
                if (!p.finished && p.epoch > epoch_) next = std::min(next, p.epoch);
            if (!later_.empty()) next = std::min(next, later_.begin()->first);
            if (next == UINT64_MAX) next = epoch_ + 1;
        }
        epoch_ = next;
        given_in_epoch_ = 0;
        last_given_.reset();
        if (auto it = later_.find(epoch_); it != later_.end()) {
            for (tracked& m : it->second) {
                --held_messages_;
                held_bytes_ -= m.bytes;
                ++given_in_epoch_;
                out.push_back({stream_event::kind::message, std::move(m), 0});
            }
            later_.erase(it);
        }
    }
}

stream_state stream_tracker::state(std::uint64_t consumer_epoch, const std::vector<stream_position>& pending) const {
    stream_state s;
    s.epoch = consumer_epoch;
    // Received but not taken: given and pending, or still kept here.
    std::map<std::string, std::vector<const stream_position*>> untaken;
    for (const stream_position& q : pending) untaken[q.producer].push_back(&q);
    for (const auto& [e, list] : later_)
        for (const tracked& m : list) untaken[m.position->producer].push_back(&*m.position);
    for (const auto& [name, p] : producers_)
        for (const auto& [seq, m] : p.waiting) untaken[name].push_back(&*m.position);

    for (const auto& entry : producers_) {
        // Not a structured binding: clang 14 cannot capture one in a lambda.
        const std::string& name = entry.first;
        const producer& p = entry.second;
        producer_state ps{p.epoch, p.next, {p.above.begin(), p.above.end()}, p.finished};
        std::uint64_t epoch = p.epoch, next = p.next;
        std::set<std::uint64_t> taken(p.above.begin(), p.above.end());
        const auto& mine = untaken[name];
        // A batch still untaken of the epoch before: stand in that one.
        const bool in_prev = std::any_of(mine.begin(), mine.end(), [&](const stream_position* q) {
            return q->epoch < p.epoch && q->epoch == p.prev.epoch;
        });
        if (in_prev) {
            epoch = p.prev.epoch;
            next = p.prev.next;
            taken = p.prev.above;
        }
        // One older than what is remembered here (a consumer whose queue
        // holds several short epochs): the consumer takes its queue in
        // order, so nothing of the producer after that batch was taken.
        const stream_position* oldest = nullptr;
        for (const stream_position* q : mine)
            if (q->kind == stream_position::mark::batch && q->epoch < epoch &&
                (!oldest || q->epoch < oldest->epoch || (q->epoch == oldest->epoch && q->seq < oldest->seq)))
                oldest = q;
        if (oldest) {
            epoch = oldest->epoch;
            next = oldest->seq;
            taken.clear();
        }
        std::set<std::uint64_t> out_of_it;
        for (const stream_position* q : mine)
            if (q->epoch == epoch && q->kind == stream_position::mark::batch) out_of_it.insert(q->seq);
        if (!out_of_it.empty() && *out_of_it.begin() < next) {
            for (std::uint64_t k = *out_of_it.begin(); k < next; ++k) taken.insert(k);
            next = *out_of_it.begin();
        }
        for (std::uint64_t k : out_of_it) taken.erase(k);
        while (!taken.empty() && *taken.begin() == next) {
            taken.erase(taken.begin());
            ++next;
        }
        ps.epoch = epoch;
        ps.next = next;
        ps.taken.assign(taken.begin(), taken.end());
        ps.finished = p.finished && !in_prev && !oldest && out_of_it.empty();
        s.producers.emplace(name, std::move(ps));
    }
    return s;
}

bool stream_tracker::taken_in(const stream_state& s, const stream_position& p) {
    const auto it = s.producers.find(p.producer);
    if (it == s.producers.end()) return false;
    const producer_state& ps = it->second;
    if (p.epoch != ps.epoch) return p.epoch < ps.epoch;
    return p.seq < ps.next || std::binary_search(ps.taken.begin(), ps.taken.end(), p.seq);
}

void stream_tracker::load(const stream_state& s, clock::time_point now, std::vector<stream_event>& out) {
    std::vector<tracked> kept;
    for (auto& [e, list] : later_)
        for (tracked& m : list) kept.push_back(std::move(m));
    for (auto& [name, p] : producers_)
        for (auto& [seq, m] : p.waiting) kept.push_back(std::move(m));
    producers_.clear();
    later_.clear();
    held_messages_ = 0;
    held_bytes_ = 0;
    finished_ = false;
    given_in_epoch_ = 0;
    first_end_.reset();
    last_given_.reset();
    epoch_ = s.epoch;
    for (const auto& [name, ps] : s.producers) {
        producer& p = producers_[name];
        p.epoch = ps.epoch;
        p.next = ps.next;
        p.above.insert(ps.taken.begin(), ps.taken.end());
        p.finished = ps.finished;
        p.received = ps.next + ps.taken.size();
        p.top = ps.taken.empty() ? ps.next : ps.taken.back() + 1;
        p.heard = now;
    }
    for (tracked& m : kept) add(std::move(m), now, out);
    // Producers the state says ended start the epoch's clock (or end it).
    try_close(now, out);
}

}  // namespace tenbin::detail
