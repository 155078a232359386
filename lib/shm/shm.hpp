// The shared-memory transport (`+shm` URLs) behind `connection`: the sender's
// segments, pool and side channel, the receiver's mappings. Linux only.
//
// Wire (over ZeroMQ, ipc): [envelope...] first, header_0, desc_0, header_1,
// desc_1, ...: the multipart form with every data frame replaced by a
// 32-byte descriptor. `first` = "~TenShm~", u32 version, u32 name length,
// the sender's side-channel name, u64 sequence number, u64 claim-by time
// (see shm_first). All integers little endian. A plain multipart receiver takes `first` for a header and fails.
#pragma once

#include <tenbin/codec.hpp>
#include <tenbin/pool.hpp>
#include <tenbin/position.hpp>

#include <zmq.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tenbin::detail {

inline constexpr std::uint32_t shm_version = 3;
inline constexpr std::size_t shm_descriptor_size = 32;

// Where one tensor's bytes lie: `length` bytes at `offset` in segment
// `segment`, written for message `generation` (its sequence number).
// Segment 0 is "no bytes" (an empty tensor).
struct shm_descriptor {
    std::uint64_t segment = 0;
    std::uint64_t generation = 0;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
};

// The first frame, parsed.
struct shm_first {
    std::string side;  // the sender's side-channel name (abstract namespace)
    std::uint64_t seq = 0;
    // The sender's CLOCK_MONOTONIC (ns) until which a claim sent without
    // waiting for the answer is sure to be seen before the message can be
    // given up; 0: claim and wait for the answer.
    std::uint64_t claim_by = 0;
};

// Parsers of the wire, for the receiver and the fuzz target: bad input is a
// tenbin::error (bad_magic, bad_header), never a read out of bounds.
shm_first parse_shm_first(bytes_view frame);
shm_descriptor parse_shm_descriptor(bytes_view frame);
std::vector<std::byte> encode_shm_first(const shm_first& f);
std::array<std::byte, shm_descriptor_size> encode_shm_descriptor(const shm_descriptor& d);
// Descriptor `d` of tensor `index` against its header and its message's
// sequence number `seq`, before anything is claimed: data_size_mismatch,
// bad_header.
void check_shm_descriptor(const shm_descriptor& d, const tensor_header& h, std::uint64_t seq, std::size_t index);
// Whether `d`'s bytes lie inside a mapped segment of `segment_size` bytes,
// aligned for `type`: length_beyond_end, bad_header.
void check_shm_extent(const shm_descriptor& d, std::size_t segment_size, dtype type, std::size_t index);

class shm_sender;
class shm_receiver;

// Fails with errc::unsupported off Linux.
std::shared_ptr<shm_sender> make_shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out);
std::shared_ptr<shm_receiver> make_shm_receiver();

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
// message or bad descriptors.
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt);

}  // namespace tenbin::detail
