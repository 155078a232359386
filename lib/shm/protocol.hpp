// The +shm protocol: every byte a sender and its receivers exchange, built
// and parsed here only. Parsers take bytes from a peer that may be hostile:
// bad input is a tenbin::error (bad_magic, bad_header, unsupported), never
// a read out of bounds. All integers little endian.
//
// How a message's bytes stay valid:
//
// - The sender's pool draws every block from a memfd segment of its own
//   (sealed against shrinking and growing), mapped read-write by the sender.
// - ZeroMQ carries the message: [envelope...] first, header_0, desc_0,
//   header_1, desc_1, ...: the multipart form with every data frame
//   replaced by a descriptor. A plain multipart receiver takes `first` for
//   a header and fails.
// - The receiver then CLAIMs the message's sequence number on the sender's
//   side channel (a Unix seqpacket socket in the abstract namespace, named
//   in `first`). The sender answers with the segments this receiver has not
//   had yet (read-only descriptors by SCM_RIGHTS) and OK, or GONE when it
//   has given the message up; tensors are made only after OK.
// - Quiet claims: a round trip per message costs more than the copy of a
//   MiB, so a receiver that already maps every segment a message names
//   claims it without waiting for the answer (the sender sends none) when
//   it is still before the message's claim-by time (`first`): the sender's
//   clock, read by the receiver after the claim was written, as an upper
//   bound learnt from OK answers (they carry the sender's clock: robust to
//   time namespaces). Claim-by is 0 (claim and wait) while the sender has
//   closed segments to tell receivers of (so their mappings stay bounded);
//   the ledger (ledger.hpp) says when else. The sender reads every pending
//   request before it gives any message up, so a quiet claim written in
//   time is always seen.
// - Quiet claims and RELEASEs go through a ring in shared memory once the
//   sender's first answer has handed it over (ring.hpp), not as packets: a
//   packet wakes the side-channel thread, a ring entry waits for the
//   sender's next send (or its thread's next period).
// - When a message is done with, given up, and what a receiver still
//   holding it keeps: see ledger.hpp.
//
// Layouts:
//
//   first       "~TenShm~", u32 version, u32 name length n (1..100), the
//               side-channel name (n bytes), u64 sequence number, u64
//               claim-by (the sender's CLOCK_MONOTONIC, ns; 0: wait)
//   descriptor  u64 segment, u64 generation (the message's sequence
//               number), u64 offset, u64 length: 32 bytes
//   request     u32 type (claim, release, claim_quiet, kick), u32 0, u64
//               sequence number (0 for a kick): 16 bytes, receiver to
//               sender; only a claim gets replies
//   reply       u32 type (fds, ok, gone, ring, cut_off), u32 count, u64 the
//               sequence number of the claim it answers (0: none), u64 the
//               sender's clock (ok, gone), why (cut_off) or 0, count u64
//               segment ids (fds: the segments of the descriptors passed
//               along, in order; ok, gone: segments the sender closed
//               since). A claim's answer is fds and ring replies, then ok
//               or gone; a receiver that stopped waiting for one (its
//               receive timed out) knows it by its sequence number when it
//               comes. A cut_off is the sender's last word before it
//               closes the side channel: at once for a receiver it refuses.
//   ring entry  u64: sequence number << 1, | 1 for a release
#pragma once

#include <tenbin/codec.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tenbin::detail {

inline constexpr std::uint32_t shm_version = 4;
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

shm_first parse_shm_first(bytes_view frame);
std::vector<std::byte> encode_shm_first(const shm_first& f);
shm_descriptor parse_shm_descriptor(bytes_view frame);
std::array<std::byte, shm_descriptor_size> encode_shm_descriptor(const shm_descriptor& d);
// Descriptor `d` of tensor `index` against its header and its message's
// sequence number `seq`, before anything is claimed: data_size_mismatch,
// bad_header.
void check_shm_descriptor(const shm_descriptor& d, const tensor_header& h, std::uint64_t seq, std::size_t index);
// Whether `d`'s bytes lie inside a mapped segment of `segment_size` bytes,
// aligned for `type`: length_beyond_end, bad_header.
void check_shm_extent(const shm_descriptor& d, std::size_t segment_size, dtype type, std::size_t index);

namespace shm_impl {

// Longest side-channel name (sun_path minus its leading NUL).
inline constexpr std::size_t max_side_name = 100;
// Descriptors per SCM_RIGHTS packet (the kernel allows 253).
inline constexpr std::size_t fds_per_packet = 64;
// Closed segment ids per reply; more wait for the next one.
inline constexpr std::size_t closed_per_reply = 256;

enum class packet : std::uint32_t {
    claim = 1,
    release = 2,
    claim_quiet = 3,
    kick = 4,
    fds = 10,
    ok = 11,
    gone = 12,
    ring = 13,
    cut_off = 14,
};

// Why a sender cuts a receiver off.
enum class cut_reason : std::uint64_t {
    peers_full = 1,          // it serves shm_options::max_peers receivers already
    out_of_descriptors = 2,  // it has no descriptor to spare
    bad_request = 3,         // the receiver wrote a malformed request
    corrupt_ring = 4,        // ... or a ring entry out of its bounds
    held_too_much = 5,       // it claimed more than shm_options::max_held_bytes without releasing
    not_reading = 6,         // it did not read the sender's replies
};
// "it serves as many receivers as it may (shm_options::max_peers)", ...
std::string why(cut_reason r);

inline constexpr std::size_t request_size = 16;
inline constexpr std::size_t reply_header_size = 24;
inline constexpr std::size_t max_reply_size = reply_header_size + 8 * closed_per_reply;

struct request {
    packet type = packet::claim;
    std::uint64_t seq = 0;
};

struct reply {
    packet type = packet::ok;
    std::uint64_t seq = 0;    // of the claim answered
    std::uint64_t clock = 0;  // ok, gone
    std::vector<std::uint64_t> ids{};
    cut_reason reason{};  // cut_off
};

std::array<std::byte, request_size> encode_request(const request& r);
// bad_header: not 16 bytes, not a request's type, a nonzero reserved word.
request parse_request(bytes_view packet_bytes);

std::vector<std::byte> encode_reply(const reply& r);
// A reply that came with `fds` descriptors. bad_header: shorter than its
// header, a size its count does not give, not a reply's type, more ids than
// a reply of its type carries, or descriptors a reply of its type does
// not carry (fds: one per id; ring: one; ok, gone, cut_off: none).
reply parse_reply(bytes_view packet_bytes, std::size_t fds);

struct ring_entry {
    std::uint64_t seq = 0;
    bool release = false;
};
inline std::uint64_t encode_ring_entry(ring_entry e) noexcept { return e.seq << 1 | (e.release ? 1 : 0); }
inline ring_entry parse_ring_entry(std::uint64_t word) noexcept { return {word >> 1, (word & 1) != 0}; }

}  // namespace shm_impl

}  // namespace tenbin::detail
