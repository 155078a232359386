// Acknowledged delivery's control messages: what a producer and its
// consumers tell each other beside the batches (see delivery.hpp). Each is
// one frame after the ROUTER's routing id; all integers little endian:
//
//   offset size
//    0      8   "~TenAck~"
//    8      1   version (1)
//    9      1   type: 1 hello, 2 heartbeat, 3 ack, 4 bye, 5 confirm
//   10      6   reserved, 0
//   16          the type's fields:
//
//   hello      1 role (1 producer, 2 consumer), 1 answer wanted (0/1),
//              2 reserved, 4 window (batches the consumer takes unacked),
//              8 incarnation, 1 n + n bytes of name, then the consumer's
//              positions (what it has taken): 4 count, and per producer:
//              1 n + n bytes of name, 8 epoch, 8 next, 4 k, k x 8 taken
//   heartbeat  8 incarnation, 8 epochs done: a producer's, every batch of
//              the epochs before was acknowledged (0 from a consumer)
//   ack        4 count, count x (8 epoch, 8 seq): batches of the
//              receiving producer the consumer is done with
//   bye        nothing: the sender leaves
//   confirm    8 count: the acks a producer has had from the consumer so
//              far (its answer to each ack message)
//
// A malformed message is a typed error (bad_header, bad_magic,
// unsupported, limit_exceeded), never a read past its end; the counts are
// bounded before anything is allocated.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/stream.hpp>

#include <cstdint>
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
    // hello
    peer_role role = peer_role::consumer;
    bool answer = false;
    std::uint32_t window = 0;
    std::string name;
    std::map<std::string, producer_state> taken;  // a consumer's positions
    // hello, heartbeat
    std::uint64_t incarnation = 0;
    // heartbeat
    std::uint64_t epochs_done = 0;
    // ack
    std::vector<batch_id> acks;
    // confirm
    std::uint64_t confirmed = 0;
};

bool is_control_frame(bytes_view frame) noexcept;
std::vector<std::byte> encode_control(const control& c);
control decode_control(bytes_view frame);

}  // namespace tenbin::detail
