// Acknowledged delivery's control messages: what a producer and its
// consumers tell each other beside the batches (see delivery.hpp). Each is
// one frame after the ROUTER's routing id; all integers little endian:
//
//   offset size
//    0      8   "~TenAck~"
//    8      1   version (1)
//    9      1   type: 1 hello, 2 heartbeat, 3 ack, 4 bye, 5 confirm
//   10      2   an ack's: the longest its user held one of the batches
//               it acknowledges, in microseconds (at most 65535; 0 not
//               said); else 0 (earlier builds skip these bytes, send 0)
//   12      4   the sender's heartbeat interval in ms (0: not said, as
//               earlier builds, which skip these bytes)
//   16          the type's fields:
//
//   hello      1 role (1 producer, 2 consumer), 1 answer wanted (0/1),
//              1 flags (a consumer's: bit 0 it takes packs, bit 1 it
//              wants no confirmations, bit 2 its heartbeats count what
//              it took), 1 reserved, 4 window (batches the consumer takes unacked),
//              8 incarnation, 1 n + n bytes of name, then the consumer's
//              positions (what it has taken): 4 count, and per producer:
//              1 n + n bytes of name, 8 epoch, 8 next, 4 k, k x 8 taken
//   heartbeat  8 incarnation, 8 tally: a producer's epochs done (every
//              batch of the epochs before was acknowledged); a consumer's
//              batches of the receiving producer its user took since its
//              last hello to it (0 without hello flag bit 2)
//   ack        4 count, count x (8 epoch, 8 seq): batches of the
//              receiving producer the consumer is done with
//   bye        nothing: the sender leaves
//   confirm    8 count: the acks a producer has had from the consumer so
//              far (its answer to each ack message)
//
// A pack carries small batches of a producer to a consumer that takes
// them, in one frame after the routing id (one ZeroMQ message for many
// batches: its cost a message is most of a small batch's):
//
//    0      8   "~TenPack"
//    8      1   version (1)
//    9      3   reserved, 0
//   12      4   count
//   16          count x (8 size, 8 reserved, size bytes: the batch in the
//               single-part form with its position chunk, encode_buffer's
//               chunks), each a multiple of 16 bytes
//
// A malformed message is a typed error (bad_header, bad_magic,
// unsupported, limit_exceeded), never a read past its end; the counts are
// bounded before anything is allocated.
#pragma once

#include "core/chunk_plan.hpp"

#include <tenbin/buffer.hpp>
#include <tenbin/codec.hpp>
#include <tenbin/position.hpp>
#include <tenbin/error.hpp>
#include <tenbin/stream.hpp>
#include <zmq.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

namespace tenbin::detail {

inline constexpr char control_magic[8] = {'~', 'T', 'e', 'n', 'A', 'c', 'k', '~'};
inline constexpr std::uint8_t control_version = 1;
// Bounds on what one control message carries.
inline constexpr std::size_t max_control_acks = 4096;
inline constexpr std::size_t max_reported_producers = 1024;
inline constexpr std::size_t max_reported_taken = 65536;

enum class control_type : std::uint8_t { hello = 1, heartbeat = 2, ack = 3, bye = 4, confirm = 5 };
enum class peer_role : std::uint8_t { producer = 1, consumer = 2 };

struct batch_id {
    std::uint64_t epoch = 0;
    std::uint64_t seq = 0;
    friend auto operator<=>(const batch_id&, const batch_id&) = default;
};

struct control {
    control_type type = control_type::heartbeat;
    // every type, as received: the sender's heartbeat interval (ms, 0 not said)
    std::uint32_t heartbeat_ms = 0;
    // hello
    peer_role role = peer_role::consumer;
    bool answer = false;
    std::uint32_t window = 0;
    bool packs = false;  // a consumer that takes packs
    bool unconfirmed = false;  // a consumer that wants no confirmations (on_take)
    bool reports_taken = false;  // a consumer whose heartbeats' tally counts what it took
    std::string name;
    std::map<std::string, producer_state> taken;  // a consumer's positions
    // hello, heartbeat
    std::uint64_t incarnation = 0;
    // heartbeat: a producer's epochs done, or a consumer's batches taken
    std::uint64_t tally = 0;
    // ack
    std::vector<batch_id> acks;
    std::uint16_t held_us = 0;  // the longest its user held one (us, at most 65535)
    // confirm
    std::uint64_t confirmed = 0;
};

bool is_control_frame(bytes_view frame) noexcept;
// `heartbeat_ms`: the sender's interval, which every message carries.
std::vector<std::byte> encode_control(const control& c, std::uint32_t heartbeat_ms = 0);
control decode_control(bytes_view frame);

inline constexpr char pack_magic[8] = {'~', 'T', 'e', 'n', 'P', 'a', 'c', 'k'};
inline constexpr std::size_t max_pack_batches = 4096;

// A pack being made: batches appended (copied), then sent as one frame.
class pack_writer {
public:
    // Throws what encode_buffer throws (nothing is appended then).
    void append(tensor_span tensors, const stream_position& position);
    // Room for `batches` in all, each the size of the first (perf: the
    // bytes are not copied again as the pack grows).
    void expect(std::size_t batches);
    std::size_t count() const noexcept { return count_; }
    bool empty() const noexcept { return count_ == 0; }
    // The frame (valid until the next append or release).
    bytes_view frame() const noexcept { return bytes_; }
    // The frame as a message that takes its bytes over (no copy); the
    // writer starts a new pack.
    zmq::message_t release();

private:
    std::vector<std::byte> bytes_;
    std::size_t count_ = 0;
    chunk_plan plan_;  // each batch's, its memory kept
};

bool is_pack_frame(bytes_view frame) noexcept;
// Calls `each(position, tensors)` for each batch of `pack`, whose tensors
// keep the frame alive (no copy; but for one not aligned for its dtype). A batch that does not decode is
// `each(position or nothing, error)`, and the next is read; a malformed pack
// (its sizes, count or header) throws a typed error after the batches
// before the fault.
struct pack_entry {
    std::optional<stream_position> position;
    std::vector<tensor> tensors;
    std::optional<error> fault;  // the batch did not decode
};
void read_pack(const buffer& pack, const decode_options& opt, const std::function<void(pack_entry&&)>& each);

}  // namespace tenbin::detail
