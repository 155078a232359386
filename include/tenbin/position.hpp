// tenbin: where a message stands in its producer's stream, and the frame
// that carries it.
//
// A producer that numbers its messages sends one more frame after each
// message's tenbin frames (the multipart form), or one more chunk after its
// chunks (the single-part form): the position frame. Its layout, all
// integers little endian:
//
//   offset size
//    0      8   "~TenPos~"
//    8      1   version (1)
//    9      1   mark: 0 a batch, 1 the end of an epoch, 2 the end of the stream
//   10      2   reserved, 0
//   12      4   n, the bytes of the producer's name (1 to 64 ASCII characters)
//   16      8   incarnation: made up at each start of the producer
//   24      8   epoch
//   32      8   seq: a batch's place in its epoch, from 0; for an end, the
//               number of batches the producer sent in that epoch
//   40      8   when it was sent: CLOCK_REALTIME nanoseconds (0: unknown)
//   48      8   the batches the producer sent in the epoch before (0 in
//               epoch 0): a consumer that missed that epoch's end mark
//               (a PUB drops it like any message) still counts its gaps
//   56      n   the producer's name
//   56+n  0-7 NUL, to a multiple of 8 bytes (a reader takes the frame
//               without them too)
//
// Python tensorcom pairs frames (and chunks) with zip, which drops an odd
// last one: its receivers take a numbered batch as a plain one. An end mark
// has no tensors, which tensorcom's receivers cannot take: a connection
// refuses to send one with `tensorcom_compatible`.
#pragma once

#include <tenbin/buffer.hpp>

#include <cstdint>
#include <string>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// First bytes of a position frame.
inline constexpr char position_magic[8] = {'~', 'T', 'e', 'n', 'P', 'o', 's', '~'};
/// The position frame's version this build writes and reads.
inline constexpr std::uint8_t position_version = 1;
/// Longest producer name a position frame carries.
inline constexpr std::size_t max_producer_name = 64;

/// Where a message stands in its producer's stream.
struct stream_position {
    /// What the message is.
    enum class mark : std::uint8_t {
        batch = 0,      ///< a batch of tensors
        epoch_end = 1,  ///< the producer's epoch `epoch` is over; no tensors
        stream_end = 2  ///< the producer sends nothing more; no tensors
    };
    /// The producer's name: stable across its restarts when the user gives
    /// one, made up otherwise.
    std::string producer;
    /// Made up at each start of the producer, so that a restart is seen.
    std::uint64_t incarnation = 0;
    /// The epoch, counted from 0.
    std::uint64_t epoch = 0;
    /// A batch's place in its epoch, from 0; for an end, how many batches
    /// the producer sent in the epoch.
    std::uint64_t seq = 0;
    /// What the message is.
    mark kind = mark::batch;
    /// When it was sent: CLOCK_REALTIME in nanoseconds (0: unknown).
    std::uint64_t sent_ns = 0;
    /// How many batches the producer sent in the epoch before this one.
    std::uint64_t previous = 0;
    /// Field-wise equality.
    friend bool operator==(const stream_position&, const stream_position&) = default;
};

/// "batch", "epoch_end", "stream_end".
[[nodiscard]] const char* name(stream_position::mark m) noexcept;

/// Bytes of the position frame of `p`.
[[nodiscard]] std::size_t position_frame_size(const stream_position& p) noexcept;
/// The position frame of `p`. Throws bad_argument for a producer name that
/// is empty, longer than max_producer_name or not printable ASCII.
[[nodiscard]] std::vector<std::byte> encode_position(const stream_position& p);
/// Writes the position frame of `p` into `out` (position_frame_size bytes).
void encode_position_into(const stream_position& p, mutable_bytes out);
/// Whether `frame` starts like a position frame (its magic): no tensor
/// header and no chunk does.
[[nodiscard]] bool is_position_frame(bytes_view frame) noexcept;
/// Parses a position frame. Throws bad_header for one of the wrong size or
/// with a bad name or mark, unsupported for another version.
[[nodiscard]] stream_position decode_position(bytes_view frame);

}  // namespace tenbin
TENBIN_API_END
