// tenbin: following producers' streams as a consumer: epochs, positions,
// gaps and duplicates, and the state a trainer saves to resume.
//
// A producer that numbers its messages (connection_options::producer or
// stream) sends each batch with its position: the producer's name, its
// epoch and the batch's sequence number in it (see position.hpp), and
// marks the end of each epoch and of the stream. A consumer (a loader, or
// a connection receiving) then:
//
// - yields the batches of one epoch and stops at its end: the consumer's
//   epoch ends when every producer that took part in it (sent anything of
//   it, or took part in the one before and has not ended its stream) has
//   ended it; a producer that sends a later epoch's batch has ended the
//   earlier one. A producer silent for `epoch_timeout` while the others
//   have ended the epoch (it died, say) is waited for no longer: the epoch
//   ends without it, counted in `producers_timed_out`; so does an epoch
//   whose producers were all silent that long after some of its batches
//   came (its end marks lost: a PUB drops them as any message; or they all
//   died). A batch of a later epoch that comes first is kept for that epoch's iteration; one of an
//   epoch already over (from a producer that was waited for no longer) is
//   given in the current one, counted in `late`.
// - drops a batch whose position it has had already (a replaying producer,
//   a redelivery), counted in `duplicates`, and counts the batches an
//   epoch's end says were sent but never came in `gaps`.
// - shards the stream for distributed training: with `world_size` W, rank
//   r takes the batches whose sequence number is r modulo W, of every
//   producer; every rank then gets the same number of batches per epoch:
//   `drop_last` drops the remainder (batches of an incomplete group of W,
//   counted in `dropped_remainder`), otherwise ranks short of the others
//   are given one of their batches again (`padded`), as torch's
//   DistributedSampler pads.
//
// Messages without a position are given as they come, outside any epoch.
#pragma once

#include <tenbin/config.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// How a consumer follows numbered streams (see above).
struct stream_options {
    /// How long a producer that has not ended an epoch others have ended
    /// may stay silent before the epoch ends without it.
    std::chrono::milliseconds epoch_timeout{30000};
    /// Producers an epoch waits for (0: those the stream has shown). A
    /// consumer knows of a producer once a message of it came: set this
    /// when one producer may end an epoch before another's first message
    /// arrives (producers started one after the other, say). Those that
    /// never come are waited for `epoch_timeout` after the first end.
    std::size_t expect_producers = 0;
    /// This consumer's rank among `world_size` consumers of the same stream.
    std::size_t rank = 0;
    /// Consumers taking shares of the stream (1: all of it).
    std::size_t world_size = 1;
    /// With world_size > 1: drop an epoch's remainder (true) or pad the
    /// ranks that get fewer batches (false).
    bool drop_last = true;
};

/// Where a consumer stands in one producer's stream.
struct producer_state {
    /// The producer's epoch.
    std::uint64_t epoch = 0;
    /// Every batch of `epoch` before this sequence number was taken.
    std::uint64_t next = 0;
    /// Batches of `epoch` at or after `next` taken too (out of order).
    std::vector<std::uint64_t> taken{};
    /// The producer ended its stream.
    bool finished = false;
    /// Field-wise equality.
    friend bool operator==(const producer_state&, const producer_state&) = default;
};

/// What a consumer has taken of its streams: save it with a checkpoint,
/// and give it back to resume where it was (loader::load_state).
struct stream_state {
    /// The consumer's epoch (the one its iteration is in).
    std::uint64_t epoch = 0;
    /// By producer name.
    std::map<std::string, producer_state> producers{};
    /// Field-wise equality.
    friend bool operator==(const stream_state&, const stream_state&) = default;
};

/// What a consumer counted of its streams so far.
struct stream_counters {
    std::uint64_t gaps = 0;                 ///< batches an epoch's end says were sent, never received
    std::uint64_t duplicates = 0;           ///< batches received again, dropped
    std::uint64_t late = 0;                 ///< batches of an epoch already over, given in the current one
    std::uint64_t epochs = 0;               ///< epochs ended
    std::uint64_t producers_timed_out = 0;  ///< times an epoch ended without a silent producer
    std::uint64_t dropped_remainder = 0;    ///< batches dropped to give every rank as many (drop_last)
    std::uint64_t padded = 0;               ///< batches given again to give every rank as many
    std::uint64_t after_end = 0;            ///< batches received after the stream's end, dropped
};

/// `state` as JSON: {"epoch": E, "producers": {"NAME": {"epoch": E,
/// "next": N, "taken": [...], "finished": false}, ...}}.
[[nodiscard]] std::string to_json(const stream_state& state);
/// The state `to_json` wrote. Throws bad_argument naming what is wrong.
[[nodiscard]] stream_state stream_state_from_json(std::string_view json);

}  // namespace tenbin
TENBIN_API_END
