// tenbin: the codec, with the names of the Python module.
//
// Byte layout (all integers little-endian int64):
//
//   header  = [dtype code, info, ndim, dim_0, ..., dim_(ndim-1)]
//             dtype code and info are up to 8 ASCII bytes, NUL padded
//   data    = count(shape) * itemsize bytes, C order, little endian
//   list    = [header_0, data_0, header_1, data_1, ...]        (multipart form)
//   chunk   = "~TenBin~", int64 n, n bytes, zeros up to a multiple of 64
//   buffer  = chunk(header_0) chunk(data_0) chunk(header_1) ...  (.ten form)
//
// A chunk's payload starts 16 bytes after the chunk, so payloads are 16-byte
// aligned relative to the start of a buffer, not 64.
//
// Every function here works only on its arguments: calls from any number of
// threads at once are safe, also on the same (unchanging) input. A function
// that throws has allocated nothing that outlives the call.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/tensor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// Bounds on what a decoder accepts; every decoder checks its input against
/// them before allocating. Raise them when your data needs it: the error
/// names the field to raise.
struct limits {
    /// Tensors per message, buffer, file or `read` call.
    std::size_t max_tensors = 1u << 16;
    /// Rank of one tensor (Python's encoder refuses ranks above 9).
    std::size_t max_rank = 16;
    /// Bytes of tensor data in one message, buffer, file or `read` call.
    std::uint64_t max_bytes = std::uint64_t{1} << 34;  // 16 GiB
};

/// What a decoder checks besides the format.
struct decode_options {
    /// Bounds checked before anything is allocated.
    tenbin::limits limits{};
    /// When set, the decoded infos must equal these (errc::info_mismatch).
    std::optional<std::vector<std::string>> expect_infos{};
};

/// A decoded header: everything about a tensor but its bytes.
struct tensor_header {
    /// Element type.
    tenbin::dtype dtype = tenbin::dtype::u1;
    /// The tensor's name, NULs stripped from both ends (as Python does).
    std::string info;
    /// Dimensions (empty for rank 0).
    shape_t shape;
    std::uint64_t nbytes = 0;  ///< count(shape) * itemsize(dtype)
};

inline constexpr char chunk_magic[8] = {'~', 'T', 'e', 'n', 'B', 'i', 'n', '~'};
/// First bytes of a `+shm` message (its first frame): a plain receiver
/// names shared memory in its error.
inline constexpr char shm_magic[8] = {'~', 'T', 'e', 'n', 'S', 'h', 'm', '~'};
/// Magic plus length field in front of every chunk payload.
inline constexpr std::size_t chunk_preamble = 16;
/// Chunk payloads are zero-padded up to a multiple of this.
inline constexpr std::size_t chunk_padding = 64;

/// Bytes of a header for a tensor of rank `ndim`: 24 + 8 * ndim.
[[nodiscard]] constexpr std::size_t header_size(std::size_t ndim) noexcept { return 24 + 8 * ndim; }
/// Bytes a chunk with an `n`-byte payload occupies.
[[nodiscard]] constexpr std::uint64_t chunk_size(std::uint64_t n) noexcept {
    return chunk_preamble + (n + chunk_padding - 1) / chunk_padding * chunk_padding;
}

// ---- headers --------------------------------------------------------------

/// The header bytes of `t`. Throws bad_argument when the info cannot be
/// encoded, the shape is invalid or the data size does not match it.
[[nodiscard]] std::vector<std::byte> encode_header(const tensor_view& t);
/// Writes the header of `t` into `out`, which must hold exactly
/// `header_size(t.ndim())` bytes.
void encode_header_into(const tensor_view& t, mutable_bytes out);
/// Parses a header. Throws bad_header, unknown_dtype or limit_exceeded.
[[nodiscard]] tensor_header decode_header(bytes_view header, const limits& lim = {});

// ---- the list (multipart) form -------------------------------------------

/// [header_0, data_0, ...]. Each data buffer is the tensor's own buffer
/// (shared, no copy) when the list holds tensors, and borrows the view's
/// bytes when it holds views.
[[nodiscard]] std::vector<buffer> encode_list(tensor_span tensors);
/// Tensors from [header_0, data_0, ...]. Each tensor's bytes are the data
/// buffer itself (no copy), so it keeps that frame alive. Throws
/// odd_chunk_count, data_size_mismatch, the header errors, limit_exceeded
/// or info_mismatch.
[[nodiscard]] std::vector<tensor> decode_list(std::span<const buffer> frames, const decode_options& opt = {});

// ---- the chunked form ----------------------------------------------------

/// One buffer holding each byte string as a chunk.
[[nodiscard]] buffer encode_chunks(std::span<const bytes_view> payloads);
/// The payloads of the chunks of `chunked`, as slices of it (no copy).
/// Throws bad_magic, truncated, negative_length, length_beyond_end or
/// limit_exceeded (more than 2 * max_tensors chunks).
[[nodiscard]] std::vector<buffer> decode_chunks(const buffer& chunked, const limits& lim = {});

/// Size of `encode_buffer(tensors)` in bytes.
[[nodiscard]] std::size_t encoded_size(tensor_span tensors);
/// The chunked form of `tensors` in one new 64-byte-aligned buffer.
[[nodiscard]] buffer encode_buffer(tensor_span tensors);
/// Writes the chunked form into `out` (exactly `encoded_size` bytes): the
/// one copy of the data, straight into e.g. an outgoing message.
void encode_buffer_into(tensor_span tensors, mutable_bytes out);
/// Tensors viewing `chunked` (no copy of data); they keep it alive.
[[nodiscard]] std::vector<tensor> decode_buffer(const buffer& chunked, const decode_options& opt = {});
/// The same over bytes the caller owns: the tensors borrow them, so the
/// caller keeps `chunked` alive while they are used.
[[nodiscard]] std::vector<tensor> decode_buffer(bytes_view chunked, const decode_options& opt = {});

}  // namespace tenbin
TENBIN_API_END
