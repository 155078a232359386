// The +shm sender's record of its messages in flight and of the receivers
// on its side channel (peers): who claimed what, who holds what, which
// segments each peer has a descriptor of, and when a message is done with.
// No clock, no system call, no lock of its own: the sender calls it under
// its lock with the time, and its tests drive it through time by hand.
//
// The sender keeps a copy of each sent block's buffer (so the pool cannot
// reuse it) until the message is done with:
// - PUSH/PAIR: once its claimer RELEASEs it (its last tensor is dropped)
//   or leaves (its side channel closed: a receiver's tensors keep its side
//   channel open, so it holds nothing any more).
// - PUB (fan-out): once every peer has claimed a later message or claimed
//   and released this one. A peer not on the side channel yet gets GONE
//   for what was already given up: a late joiner's first messages are
//   skipped, as PUB/SUB may. While no peer is on the side channel, a
//   message waits up to `grace` for the first to claim.
// - PUB, laggards: a message nobody holds is given up `laggard_after` its
//   send for the peers not past it yet (a stopped or slow subscriber), as
//   PUB/SUB drops for a slow subscriber: each such peer counts a drop here,
//   and skips the message (GONE) when it gets to it. `block_laggards`
//   waits for them instead, up to the lease.
// - Lease: a message not done with `lease` after its send is given up. If
//   a peer still holds it, its segments must be retired before its blocks
//   go back to the pool (memory.hpp: the bytes move to fresh pages, the
//   holder keeps the old ones). A retire that fails (no descriptor or
//   memory to spare) keeps the message out of the pool until its holders
//   let go, or a later retire succeeds: its block is never written while a
//   receiver maps it. A peer that claims a given-up message gets GONE and
//   skips it.
// - Cut off: a peer whose claims would hold more than `max_held_bytes`
//   while another peer is there (it claims and never releases; alone, it
//   only holds the sender back), or that the sender drops for writing
//   nonsense or not reading, is cut off: it claims nothing more, and what
//   it held is retired as soon as nobody else needs it (not at the lease):
//   its pages stay its own, the pool gets fresh ones.
// - PUSH/PAIR sends wait while `max_unclaimed` messages per peer are sent
//   and not claimed (sent before a peer last left, they no longer count:
//   they went to its closed pipe): what a killed receiver loses is what
//   ZeroMQ had queued to it, as over tcp, not the hundreds of small +shm
//   messages the kernel's socket buffers hold.
#pragma once

#include <tenbin/buffer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace tenbin::detail::shm_impl {

using ledger_clock = std::chrono::steady_clock;
using time_point = ledger_clock::time_point;
using peer_id = int;

// What the ledger has done (see shm_sender_counters).
struct ledger_counters {
    std::uint64_t leases_expired = 0;
    std::uint64_t retires_failed = 0;
    std::uint64_t peers_cut_off = 0;
    std::uint64_t laggard_drops = 0;
};

struct ledger_options {
    std::chrono::milliseconds lease{60000};
    bool fan_out = false;
    std::chrono::milliseconds grace{1000};
    std::uint64_t max_held_bytes = 0;  // 0: no bound
    std::chrono::milliseconds laggard_after{1000};
    bool block_laggards = false;
    std::size_t max_unclaimed = 0;  // per peer; 0: no bound
};

// What keeps a message's blocks from the pool, and which segments they are.
struct flight {
    std::vector<buffer> holders;
    std::vector<std::uint64_t> segments;
};

class ledger {
public:
    explicit ledger(ledger_options o) : opt_(o) {}

    const ledger_options& options() const noexcept { return opt_; }

    struct sent {
        std::uint64_t seq = 0;
        // Until when a claim that does not wait for its answer is sure to
        // be seen; nothing: claims wait.
        std::optional<time_point> claim_by;
        bool sooner = false;  // due before any message already in flight
    };
    // Records message `f`, sent at `now`. `closed_untold`: segments were
    // closed that peers have not been told of yet (see closed()).
    sent add(flight f, time_point now, bool closed_untold);
    // Forgets message `seq` (its send failed).
    std::optional<flight> forget(std::uint64_t seq);
    // Forgets every message and peer (the sender stops).
    std::vector<flight> clear();
    // Whether one more message may be sent now (the unclaimed bound).
    bool may_send() const;

    void join(peer_id p);
    bool has_peer(peer_id p) const { return peers_.count(p) != 0; }
    std::vector<peer_id> peers() const;
    enum class claimed { ok, gone, cut_off };
    // Peer `p` claims message `seq`: gone when it was given up (or `p` is
    // no peer), cut_off when holding it would take `p` past
    // max_held_bytes: `p` is cut off (see cut()).
    claimed claim(peer_id p, std::uint64_t seq);
    // The segments of message `seq` peer `p` has no descriptor of yet,
    // noted as given.
    std::vector<std::uint64_t> to_give(peer_id p, std::uint64_t seq);
    // Segments to_give() returned that could not be passed along after all.
    void ungive(peer_id p, std::span<const std::uint64_t> segments);
    void release(peer_id p, std::uint64_t seq);
    // Peer `p`'s side channel closed: what it held is released.
    void leave(peer_id p);
    // Peer `p` is cut off while it may still map what it held: that is
    // retired before it goes back to the pool.
    void cut(peer_id p);

    // Segments the pool closed: each peer that had one is told with its
    // next answer (take_closed), and unmaps it.
    void closed(std::span<const std::uint64_t> ids);
    // At most `most` of the closed segments peer `p` has not been told of.
    std::vector<std::uint64_t> take_closed(peer_id p, std::size_t most);
    // Whether some peer has closed segments to be told of.
    bool untold() const;

    // Messages leaving the ledger: they go back to the pool (destroy them
    // outside the sender's lock).
    struct outcome {
        std::vector<flight> done;
    };
    // On a send: the messages done with by now, without giving any up
    // (PUSH/PAIR: only those claimed or released since).
    void settle(time_point now, outcome& out);
    // Whether collect(now) would give a message up: the sender reads every
    // pending request first, so that a claim written in time is seen.
    bool expiring(time_point now) const;
    // The side-channel thread's pass: messages done with or given up by
    // `now`. Returns when the next is due (time_point::max(): none).
    time_point collect(time_point now, outcome& out);

    // The segments of messages given up while held that are still to be
    // retired; the sender tries each and says how it went (retired).
    std::vector<std::uint64_t> to_retire() const;
    void retired(std::uint64_t segment, bool ok);
    // Given-up messages whose segments are all retired, or whose holders
    // let go: back to the pool.
    void sweep(outcome& out);
    // Segments kept out of the pool because their retire failed.
    std::size_t pinned() const;
    const ledger_counters& counters() const noexcept { return counters_; }

    // Whether nothing in flight waits for a receiver: PUB, nothing in
    // flight; PUSH/PAIR, every message claimed.
    bool settled() const;
    // Messages not given back yet: in flight, or given up and still held.
    std::size_t in_flight() const noexcept { return flights_.size() + retiring_.size(); }

private:
    struct entry {
        flight f;
        time_point sent;
        std::uint64_t bytes = 0;     // its blocks' bytes
        std::set<peer_id> claimers;  // peers holding it
        bool claimed = false;
        bool orphaned = false;                 // a cut-off peer held it: retire before reuse
        std::vector<std::uint64_t> unretired;  // given up while held: segments not yet retired
        bool failed = false;                   // a retire of one failed
    };
    struct book {
        std::uint64_t last = 0;          // highest sequence number claimed
        std::uint64_t held_bytes = 0;    // of the messages it holds
        std::set<std::uint64_t> given;   // segments it has a descriptor of
        std::set<std::uint64_t> holding;
        std::vector<std::uint64_t> closed;  // segments gone, to tell it
    };
    using entries = std::map<std::uint64_t, entry>;

    time_point deadline(const entry& e) const;
    bool finished(std::uint64_t seq, const entry& e, time_point now);
    // Moves flight `it` out: to `out`, or to be retired first; the next.
    entries::iterator finish(entries::iterator it, outcome& out);
    // Moves flight `it` to the retiring ones; the next.
    entries::iterator to_retiring(entries::iterator it);
    void unhold(peer_id p, std::uint64_t seq, entry& e);
    void drop_touched(time_point now, outcome& out);
    // Whether message `seq` counts against the unclaimed bound.
    bool counts_unclaimed(std::uint64_t seq, const entry& e) const { return !e.claimed && seq >= counted_from_; }

    ledger_options opt_;
    std::uint64_t next_seq_ = 1;
    entries flights_;
    entries retiring_;  // given up while held, or held by a cut-off peer
    std::map<peer_id, book> peers_;
    // No message in flight is due before this (the next full pass).
    time_point deadline_ = time_point::max();
    std::vector<std::uint64_t> touched_;  // claimed or released since last looked at
    std::size_t unclaimed_ = 0;           // sent since counted_from_, not claimed
    std::uint64_t counted_from_ = 1;      // the first message sent after a peer last left
    ledger_counters counters_;
};

}  // namespace tenbin::detail::shm_impl
