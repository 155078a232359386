// The shared-memory transport (`+shm` URLs) behind `connection`: the sender's
// segments, pool and side channel, the receiver's mappings. Linux only.
// The protocol is protocol.hpp's.
#pragma once

#include <tenbin/codec.hpp>
#include <tenbin/pool.hpp>
#include <tenbin/position.hpp>

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tenbin::detail {

class shm_sender;
class shm_receiver;

// How a sender or a receiver behaves; each side reads its own fields.
struct shm_options {
    // Sender: bytes of shared memory its pool may hold (sent messages not
    // yet given back included).
    std::size_t pool_bytes = std::size_t{1} << 30;
    // Sender: a message not given back this long after its send is given
    // up (see ledger.hpp).
    std::chrono::milliseconds lease{60000};
    // Sender: PUB (every receiver on the side channel gets each message).
    bool fan_out = false;
    // Sender: receivers on the side channel at once; more are refused (each
    // costs the sender a socket and a ring). A same-user process can fill
    // them, never disturb those already in.
    std::size_t max_peers = 64;
    // Sender: bytes of messages one receiver may have claimed and not
    // released while another is on the side channel; past them it is cut
    // off (what it held stops costing the pool: see ledger.hpp). 0: three
    // quarters of pool_bytes.
    std::uint64_t max_held_bytes = 0;
    // Sender, PUB: a message nobody holds is given up this long after its
    // send for the subscribers that have not got to it (counted in
    // laggard_drops; they skip it), unless block_laggards: then it waits
    // for them, up to the lease, and a full pool makes send() wait.
    std::chrono::milliseconds laggard_after{1000};
    bool block_laggards = false;
    // Sender, PUSH/PAIR: send() waits while this many messages per
    // receiver are sent and not claimed (0: no bound), so that a killed
    // receiver loses about what it would over tcp. ZeroMQ's send and
    // receive high-water marks together are the match.
    std::size_t max_unclaimed = 32;

    // Receiver: how long a receive waits on a sender's side channel (to
    // connect, to be read, for the answer to a claim); unset: 30 s. A
    // receive past it throws errc::timeout and skips the message.
    std::optional<std::chrono::milliseconds> claim_timeout;
    // Receiver: senders (side channels) at once. Past them the least
    // recently used one no tensor holds is closed; if every one is held,
    // the message is refused (limit_exceeded).
    std::size_t max_senders = 64;
    // Receiver: segments mapped at once, all senders together (the kernel
    // allows some 65,000 mappings per process). Idle senders' go first.
    std::size_t max_mappings = 16384;
    // Receiver: bytes mapped at once, all senders together.
    std::uint64_t max_mapped_bytes = std::uint64_t{64} << 30;
};

// What a sender has done and holds. Counters only grow (Prometheus
// `_total`, named in the comment); the others are gauges.
struct shm_sender_counters {
    std::uint64_t peers = 0;  // tenbin_shm_peers: receivers on the side channel now
    // tenbin_shm_peers_refused_total: side-channel connections refused (at
    // max_peers, out of descriptors, another user's)
    std::uint64_t peers_refused = 0;
    std::uint64_t leases_expired = 0;    // tenbin_shm_leases_expired_total: messages given up at their lease
    std::uint64_t segments_retired = 0;  // tenbin_shm_segments_retired_total: held ones moved out of the pool
    // tenbin_shm_retires_failed_total: retires that failed (no descriptor
    // or memory to spare); the block stays out of the pool instead.
    std::uint64_t retires_failed = 0;
    std::uint64_t blocks_pinned = 0;  // tenbin_shm_blocks_pinned: blocks out of the pool for a failed retire
    // tenbin_shm_peers_cut_off_total: receivers cut off (held too much,
    // wrote nonsense, read no replies)
    std::uint64_t peers_cut_off = 0;
    // tenbin_shm_laggard_drops_total: PUB messages given up for a
    // subscriber that had not got to them (one per subscriber and message)
    std::uint64_t laggard_drops = 0;
    // tenbin_shm_copy_ins_total: messages whose tensors (some or all) were
    // not the pool's and were copied into it; tenbin_shm_copy_in_bytes_total
    std::uint64_t copy_ins = 0;
    std::uint64_t copy_in_bytes = 0;
};

// What a receiver maps and has done (as shm_sender_counters).
struct shm_receiver_counters {
    std::uint64_t senders = 0;       // tenbin_shm_senders: side channels open now
    std::uint64_t mappings = 0;      // tenbin_shm_mappings: segments mapped now (tensors kept included)
    std::uint64_t mapped_bytes = 0;  // tenbin_shm_mapped_bytes
    std::uint64_t quiet_claims = 0;  // tenbin_shm_quiet_claims_total: claims that did not wait for the answer
    // tenbin_shm_messages_skipped_total: messages the sender gave up before
    // the claim (a late subscriber, a laggard, a lease) and so skipped
    std::uint64_t messages_skipped = 0;
    std::uint64_t claim_timeouts = 0;  // tenbin_shm_claim_timeouts_total: side channels silent past claim_timeout
    // tenbin_shm_links_broken_total: side channels given up (the sender
    // closed, cut this receiver off, or wrote what it may not)
    std::uint64_t links_broken = 0;
    std::uint64_t refused = 0;          // tenbin_shm_refused_total: messages refused at a bound (max_*)
    std::uint64_t senders_evicted = 0;  // tenbin_shm_senders_evicted_total: idle side channels closed for room
};

// Fails with errc::unsupported off Linux.
std::shared_ptr<shm_sender> make_shm_sender(const shm_options& o);
std::shared_ptr<shm_receiver> make_shm_receiver(const shm_options& o = {});
shm_sender_counters shm_counters(shm_sender& s);
shm_receiver_counters shm_counters(shm_receiver& r);
// Any thread: a receive waiting for a sender, now or later, gives up with
// errc::closed (its connection is closing).
void shm_interrupt(shm_receiver& r) noexcept;

// The sender's pool: tensors from it are sent without a copy.
tensor_pool& shm_pool(shm_sender& s);
// Sends `tensors` (copied into the pool unless they are its own) on
// `socket` after the `envelope` frames, and the position frame of
// `position` (when given) last. False when `timeout` (or the socket's send
// timeout) expired: nothing was sent.
bool shm_send(shm_sender& s, zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              const stream_position* position, std::optional<std::chrono::milliseconds> timeout);
// Waits at most `linger` for receivers to claim what was sent, then stops
// the side channel. Received tensors stay valid.
void shm_close(shm_sender& s, std::chrono::milliseconds linger);
// Messages sent and not yet given back by every receiver (for tests).
std::size_t shm_in_flight(shm_sender& s);
// Claims this process sent without waiting for the answer (for tests).
std::uint64_t shm_quiet_claims();

// Tensors of one shm message (frames after the envelope), or nothing when
// the sender had already given the message up (a late subscriber, an
// expired lease): the caller skips it. Throws tenbin::error for a plain
// message or bad descriptors, errc::timeout when the sender's side channel
// stays silent past claim_timeout, io_error when the link to the sender
// broke (this message, or a release since: a hostile or gone sender),
// limit_exceeded past a bound (max_senders, max_mappings,
// max_mapped_bytes). Messages of other senders are unaffected.
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt);

}  // namespace tenbin::detail
