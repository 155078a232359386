// The consumer's side of numbered streams (see tenbin/stream.hpp): which
// received message is given when, and where the consumer stands. Pure
// bookkeeping with the clock passed in: a loader runs it on its thread, a
// connection on its caller's, the tests on a made-up clock.
#pragma once

#include <tenbin/position.hpp>
#include <tenbin/stream.hpp>
#include <tenbin/tensor.hpp>

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tenbin::detail {

// Acked delivery's acknowledgement of a batch, sent as its last holder
// drops it (delivery_consumer.cpp). One withheld is never sent: the batch
// stays the consumer's, and goes to another consumer once this one leaves.
struct ack_token;
void withhold(const ack_token& token) noexcept;
// Sends it now (unless withheld or sent), though holders remain.
void acknowledge_now(const ack_token& token) noexcept;
// The user took the batch now (on_release): its acknowledgement says how
// long the user held it, and a producer lets its next large batch wait a
// moment for a consumer whose user works on its batches (its `settle`).
void mark_taken(const ack_token& token) noexcept;

// One received message on its way to the consumer.
struct tracked {
    std::vector<tensor> tensors;
    std::optional<stream_position> position;  // a batch's; none for unnumbered messages
    std::uint64_t bytes = 0;                  // its tensors' bytes
    // Its envelope, when it had one (a topic frame): shared, since a batch
    // given twice (padding) is copied.
    std::shared_ptr<std::vector<zmq::message_t>> envelope{};
    // Acked delivery: acknowledges the batch when dropped (ack_mode::on_take:
    // dropped as the user takes the batch, or as it is dropped unseen;
    // on_release: its tensors hold it too).
    std::shared_ptr<const ack_token> ack{};
};

// What the tracker gives: a message, or the end of the consumer's epoch.
struct stream_event {
    enum class kind { message, epoch_end, stream_end };
    kind what = kind::message;
    tracked message{};
    std::uint64_t epoch = 0;  // the epoch that ended
};

class stream_tracker {
public:
    using clock = std::chrono::steady_clock;
    // The `now` of add(): the time of the kernel's last tick, a few
    // milliseconds behind clock::now() on the same clock, and cheaper
    // (perf: read once a message; it only dates when a producer was last
    // heard, against timeouts of seconds).
    static clock::time_point coarse_now() noexcept;

    // Batches of later epochs kept back: at most `hold_messages` and
    // `hold_bytes`; past them the current epoch ends without the producers
    // it still waits for (counted as timed out).
    // `count_gaps` false: the stream is shared among consumers (acked
    // delivery), so what one does not get is no gap.
    stream_tracker(stream_options opt, std::size_t hold_messages, std::uint64_t hold_bytes, bool count_gaps = true);

    // Takes one received message at `now`; appends what is ready to `out`.
    void add(tracked m, clock::time_point now, std::vector<stream_event>& out);
    // The common case without add()'s general path (perf: a numbered batch
    // then costs about what a plain one does): a batch of the current epoch,
    // next in order from a producer already in it, with nothing kept back
    // and one rank. True: counted as add() would, to be given on now; false:
    // nothing done, add() it.
    bool take_in_order(const stream_position& pos, clock::time_point now);
    // Ends the epoch if its silent producers timed out by `now`.
    void tick(clock::time_point now, std::vector<stream_event>& out);
    // When tick() could next end the epoch (time_point::max(): not by time).
    clock::time_point deadline() const;

    // The epoch whose batches are being given.
    std::uint64_t epoch() const noexcept { return epoch_; }
    // Every producer ended its stream (and the last epoch was ended).
    bool finished() const noexcept { return finished_; }
    const stream_counters& counters() const noexcept { return counters_; }
    // Batches kept back for later epochs or for their rank's group.
    std::size_t held_messages() const noexcept { return held_messages_; }

    // What was received, less `pending` (positions given and not yet taken
    // by the user), as the state to resume from; `consumer_epoch` is the
    // epoch the user's iteration is in.
    stream_state state(std::uint64_t consumer_epoch, const std::vector<stream_position>& pending) const;
    // Starts over from `s`: batches at or before its positions are
    // duplicates from now on. What was kept back is taken again as if it
    // came now: what `s` has is dropped, the rest is appended to `out` or
    // kept as before.
    void load(const stream_state& s, clock::time_point now, std::vector<stream_event>& out);
    // Whether a batch at `p` is one `s` says was taken.
    static bool taken_in(const stream_state& s, const stream_position& p);

private:
    struct producer {
        std::uint64_t epoch = 0;          // its epoch the received batches are of
        std::uint64_t next = 0;           // every seq below received (or counted lost)
        std::set<std::uint64_t> above;    // seqs at or after `next` received
        std::optional<std::uint64_t> marked;  // the last epoch it ended with an end mark
        bool finished = false;            // it ended its stream
        std::optional<std::uint64_t> timed_out;  // the consumer epoch it was no longer waited for in
        clock::time_point heard{};
        // What was received of the epoch before `epoch` (a redelivered or
        // late batch of it is no duplicate).
        struct record {
            std::uint64_t epoch = UINT64_MAX, next = 0;
            std::set<std::uint64_t> above;
        } prev;
        // Sharding (world_size > 1) within `epoch`.
        std::map<std::uint64_t, tracked> waiting;  // this rank's batches waiting for their group
        std::optional<tracked> last_given;         // for padding
        std::uint64_t given = 0;                   // this rank's batches given in `epoch`
        std::uint64_t top = 0;                     // one past the highest seq received in `epoch`
        std::uint64_t received = 0;                // distinct seqs received in `epoch`
    };

    bool ended(const producer& p, std::uint64_t epoch) const;
    void batch(producer& p, tracked&& m, std::vector<stream_event>& out);
    // `p` leaves its epoch for the next: gaps counted, its rank's share
    // completed, what it received of it kept as `prev`.
    void leave_epoch(producer& p, std::optional<std::uint64_t> count, std::vector<stream_event>& out);
    // This rank's share of `p`'s batches (all of them with world_size 1).
    void shard(producer& p, tracked&& m, std::vector<stream_event>& out);
    void release_groups(producer& p, std::uint64_t upto, std::vector<stream_event>& out);
    // Gives a batch in its epoch: now, or kept for a later one.
    void route(tracked&& m, std::vector<stream_event>& out);
    void try_close(clock::time_point now, std::vector<stream_event>& out);

    stream_options opt_;
    bool count_gaps_;
    std::size_t hold_messages_limit_;
    std::uint64_t hold_bytes_limit_;
    std::uint64_t epoch_ = 0;
    std::uint64_t given_in_epoch_ = 0;  // messages given in epoch_
    std::optional<clock::time_point> first_end_;  // when a producer first ended epoch_
    std::optional<tracked> last_given_;  // this rank's, for padding a producer it got none of
    bool finished_ = false;
    std::map<std::string, producer> producers_;
    std::map<std::uint64_t, std::deque<tracked>> later_;  // kept for later epochs
    std::size_t held_messages_ = 0;
    std::uint64_t held_bytes_ = 0;
    stream_counters counters_;
};

}  // namespace tenbin::detail
