#include <tenbin/codec.hpp>
#include <tenbin/position.hpp>

#include "core/chunk_plan.hpp"
#include "core/codec_detail.hpp"
#include "core/diagnostics.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <cstring>
#include <string>

namespace tenbin {

static_assert(std::endian::native == std::endian::little,
              "tenbin writes little-endian data by copying memory; a big-endian port must "
              "byte-swap headers and data");

namespace {

using detail::get_i64;
using detail::str;
using detail::with_context;

// An str64: up to 8 characters, NUL padded, as its little-endian word.
constexpr std::uint64_t str64_word(std::string_view s) noexcept {
    std::uint64_t w = 0;
    for (std::size_t i = 0; i < s.size() && i < 8; ++i)
        w |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return w;
}

void put_u64(std::byte* p, std::uint64_t v) noexcept { std::memcpy(p, &v, 8); }

// The dtype whose code is the str64 at `p`, or nothing. One word compare
// per dtype (perf: parsing the text cost about 100 instructions a header):
// a code is two characters and six NULs, so any other byte rejects it, as
// the text parse did.
constexpr auto dtype_words = [] {
    std::array<std::uint64_t, std::size(all_dtypes)> words{};
    for (std::size_t i = 0; i < words.size(); ++i) words[i] = str64_word(code(all_dtypes[i]));
    return words;
}();
static_assert(static_cast<std::size_t>(all_dtypes[std::size(all_dtypes) - 1]) == std::size(all_dtypes) - 1,
              "dtype_words is indexed by the dtype's value");

std::optional<dtype> dtype_of_word(const std::byte* p) noexcept {
    const auto w = static_cast<std::uint64_t>(get_i64(p));
    for (std::size_t i = 0; i < dtype_words.size(); ++i)
        if (w == dtype_words[i]) return all_dtypes[i];
    return std::nullopt;
}

// The characters of an str64 before its trailing NULs: its word's high
// zero bytes (perf: a loop over the bytes cost about 30 instructions a
// header).
std::string_view str64_text(const std::byte* p) noexcept {
    const auto w = static_cast<std::uint64_t>(get_i64(p));
    return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(64 - std::countl_zero(w) + 7) / 8};
}

}  // namespace

// ---- headers --------------------------------------------------------------

namespace {

// The header bytes of a tensor already known to be valid, a word at a
// time (perf: the byte copies of variable length cost about 100
// instructions a header on every send).
void write_header(const tensor_view& t, std::byte* p) noexcept {
    put_u64(p, dtype_words[static_cast<std::size_t>(t.dtype)]);
    put_u64(p + 8, str64_word(t.info));
    put_u64(p + 16, t.ndim());
    for (std::size_t i = 0; i < t.ndim(); ++i) put_u64(p + 24 + 8 * i, static_cast<std::uint64_t>(t.shape[i]));
}

}  // namespace

void encode_header_into(const tensor_view& t, mutable_bytes out) {
    detail::check_dtype(t.dtype);
    detail::check_info(t.info);
    detail::check_rank(t.ndim());
    detail::check_data_size(t.dtype, t.count(), t.data.size());
    if (out.size() != header_size(t.ndim()))
        throw error(errc::bad_argument, "header space of " + str(out.size()) + " bytes; rank " +
                                            str(t.ndim()) + " needs " + str(header_size(t.ndim())));
    write_header(t, out.data());
}

void detail::encode_header_of(tensor_span tensors, std::size_t i, mutable_bytes out) {
    const tensor_view t = tensors[i];
    if (tensors.owner(i) && out.size() == header_size(t.ndim()))
        write_header(t, out.data());
    else
        encode_header_into(t, out);
}

std::vector<std::byte> encode_header(const tensor_view& t) {
    std::vector<std::byte> out(header_size(t.ndim()));
    encode_header_into(t, out);
    return out;
}

namespace {

// decode_header writing into the parts of a tensor-to-be, the info given
// to `set_info` as a view of `h`'s info field; returns nbytes. Lets
// decode_list fill the tensors of its result in place (perf: moving a
// header into a tensor and the tensor into the list cost about 100
// instructions a tensor).
template <class SetInfo>
std::uint64_t decode_header_into(bytes_view h, const limits& lim, dtype& dtype_out, shape_t& shape,
                                 SetInfo&& set_info) {
    if (h.size() < 24 || h.size() % 8 != 0)
        throw error(errc::bad_header, "header of " + str(h.size()) +
                                          " bytes; a header is 24 + 8 * ndim bytes");
    const std::byte* p = h.data();

    const auto dt = dtype_of_word(p);
    if (!dt) {
        const std::string_view dcode = str64_text(p);
        std::string shown;
        for (char c : dcode) shown += (c >= 32 && c < 127) ? c : '?';
        throw error(errc::unknown_dtype, "dtype code '" + shown + "' is not one of f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8");
    }
    dtype_out = *dt;

    std::string_view info = str64_text(p + 8);
    if (static_cast<std::uint64_t>(get_i64(p + 8)) & 0x8080808080808080)
        for (std::size_t i = 0; i < info.size(); ++i)
            if (const auto c = static_cast<unsigned char>(info[i]); c > 127)
                throw error(errc::bad_header, "info byte " + str(i) + " is " + str(c) + "; infos are ASCII");
    // As Python does: NULs go from both ends (the trailing ones are padding),
    // those inside stay.
    while (!info.empty() && info.front() == '\0') info.remove_prefix(1);
    set_info(info);

    const std::size_t words = detail::check_header_rank(get_i64(p + 16), h.size(), lim);

    shape.resize(words);
    std::uint64_t count = 1;
    bool overflow = false, has_zero = false;
    for (std::size_t i = 0; i < words; ++i) {
        const std::int64_t d = get_i64(p + 24 + 8 * i);
        if (d < 0)
            throw error(errc::bad_header, "dimension " + str(i) + " is " + std::to_string(d) + ", negative");
        shape[i] = d;
        const auto u = static_cast<std::uint64_t>(d);
        if (u != 0 && count > UINT64_MAX / u) overflow = true;
        has_zero = has_zero || u == 0;
        count *= u;
    }
    // A zero dimension anywhere makes the tensor empty whatever the others say.
    if (has_zero) overflow = false, count = 0;
    if (overflow || count > UINT64_MAX / itemsize(*dt))
        throw error(errc::bad_header, "the shape's byte size overflows 64 bits");
    const std::uint64_t nbytes = count * itemsize(*dt);
    if (nbytes > lim.max_bytes)
        throw error(errc::limit_exceeded, "tensor of " + str(nbytes) +
                                              " bytes exceeds limits::max_bytes = " + str(lim.max_bytes));
    return nbytes;
}

}  // namespace

std::size_t detail::check_header_rank(std::int64_t ndim, std::uint64_t header_bytes, const limits& lim) {
    const std::uint64_t words = (header_bytes - 24) / 8;
    if (ndim < 0 || static_cast<std::uint64_t>(ndim) != words)
        throw error(errc::bad_header, "ndim is " + std::to_string(ndim) + " but the header of " +
                                          str(header_bytes) + " bytes holds " + str(words) + " dims");
    if (words > lim.max_rank || words > max_supported_rank)
        throw error(errc::limit_exceeded,
                    "rank " + str(words) + " exceeds " +
                        (words > lim.max_rank ? "limits::max_rank = " + str(lim.max_rank)
                                              : "the supported maximum of " + str(max_supported_rank)));
    return static_cast<std::size_t>(words);
}

tensor_header decode_header(bytes_view h, const limits& lim) {
    tensor_header out;
    // out.info is empty: appending is inlined where assigning calls into
    // libstdc++ (perf: 35 instructions a header).
    out.nbytes = decode_header_into(h, lim, out.dtype, out.shape,
                                    [&](std::string_view info) { out.info.append(info.data(), info.size()); });
    return out;
}

// ---- the list form --------------------------------------------------------

std::vector<buffer> encode_list(tensor_span tensors) {
    std::vector<buffer> out;
    out.reserve(2 * tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view t = tensors[i];
        buffer h = buffer::allocate(header_size(t.ndim()));
        with_context([&] { return "tensor " + str(i); }, [&] { encode_header_into(t, h.writable_bytes()); });
        out.push_back(std::move(h));
        const buffer* owner = tensors.owner(i);
        out.push_back(owner ? *owner : buffer::borrow(t.data));
    }
    return out;
}

namespace {

// decode_list's body over any frame source: `frames.size()`,
// `frames.bytes(i)` and `frames.take(i)` (frame i's data buffer: a copy, or
// the frame itself given up), as detail::list_source has them. Fills `out`,
// reusing its storage.
template <class Frames>
void fill_list(Frames& frames, const decode_options& opt, std::vector<tensor>& out) {
    const limits& lim = opt.limits;
    const std::size_t n = frames.size();
    if (n % 2 != 0) {
        for (std::size_t i = 0; i < n; ++i)
            if (is_position_frame(frames.bytes(i)))
                throw error(errc::bad_header, "a position frame (frame " + str(i) + ") that is not the message's last");
        const bytes_view first = frames.bytes(0);
        if (first.size() >= 8 && std::memcmp(first.data(), shm_magic, 8) == 0)
            throw error(errc::odd_chunk_count, "a shared-memory (+shm) message, which only a receiver opened with "
                                               "+shm can take (the sender's URL has +shm, this receiver's not)");
        throw error(errc::odd_chunk_count,
                    "an odd frame count: the last frame (" + str(n - 1) + ", a header) has no data after it");
    }
    if (n / 2 > lim.max_tensors)
        throw error(errc::limit_exceeded, str(n / 2) + " tensors exceed limits::max_tensors = " +
                                              str(lim.max_tensors));
    out.clear();
    out.reserve(n / 2);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < n / 2; ++i) {
        auto where = [&] { return "tensor " + str(i) + " (frame " + str(2 * i) + ")"; };
        // Filled in place. The header decode checks info, rank and element
        // count, and the data size is checked here: the public
        // constructor's checks would repeat them (perf: they cost about a
        // fifth of a small message's decode).
        tensor& t = out.emplace_back();
        const auto parts = detail::tensor_access::parts(t);
        const std::uint64_t nbytes = with_context(where, [&] {
            return decode_header_into(frames.bytes(2 * i), lim, parts.dtype, parts.shape,
                                      [&](std::string_view info) { detail::tensor_access::set_info_field(t, info); });
        });
        const std::size_t size = frames.bytes(2 * i + 1).size();
        if (size != nbytes)
            throw error(errc::data_size_mismatch,
                        where() + ": header says " + std::string(code(parts.dtype)) + " with " + str(nbytes) +
                            " bytes, the data holds " + str(size));
        total += nbytes;
        if (total > lim.max_bytes)
            throw error(errc::limit_exceeded, "tensors 0.." + str(i) + " hold " + str(total) +
                                                  " bytes, over limits::max_bytes = " + str(lim.max_bytes));
        parts.data = frames.take(2 * i + 1);
    }
    if (opt.expect_infos) check_infos(out, *opt.expect_infos);
}

// Buffers as a frame source: `Span` of const buffers are copied (a shared
// reference each), of mutable ones moved out.
template <class Span>
struct buffer_frames {
    Span frames;
    std::size_t size() const noexcept { return frames.size(); }
    bytes_view bytes(std::size_t i) const noexcept { return frames[i].bytes(); }
    buffer take(std::size_t i) { return std::move(frames[i]); }
};

// Frames or chunks with a trailing position frame split off (parsed, so a
// malformed one is refused even where it is not asked for).
template <class Span>
Span without_position(Span frames, std::optional<stream_position>* position) {
    if (frames.size() % 2 == 0 || !is_position_frame(frames.back().bytes())) return frames;
    stream_position p = decode_position(frames.back().bytes());
    if (position) *position = std::move(p);
    return frames.first(frames.size() - 1);
}

}  // namespace

std::vector<tensor> decode_list(std::span<const buffer> frames, const decode_options& opt) {
    buffer_frames<std::span<const buffer>> source{without_position(frames, nullptr)};
    std::vector<tensor> out;
    fill_list(source, opt, out);
    return out;
}

void detail::decode_list_into(list_source& frames, const decode_options& opt, std::vector<tensor>& out) {
    fill_list(frames, opt, out);
}

// ---- the chunked form -----------------------------------------------------

buffer encode_chunks(std::span<const bytes_view> payloads) {
    std::size_t total = 0;
    for (bytes_view p : payloads) total += chunk_size(p.size());
    buffer out = buffer::allocate(total);
    std::byte* at = out.writable_bytes().data();
    for (bytes_view p : payloads) {
        detail::write_preamble(at, p.size());
        if (!p.empty()) std::memcpy(at + chunk_preamble, p.data(), p.size());
        const bytes_view pad = detail::padding_for(p.size());
        std::memset(at + chunk_preamble + p.size(), 0, pad.size());
        at += chunk_size(p.size());
    }
    return out;
}

std::vector<buffer> decode_chunks(const buffer& chunked, const limits& lim) {
    std::vector<buffer> out;
    out.reserve(4);  // a tensor and a position without growing (perf: small batches)
    const std::byte* base = chunked.data();
    const std::size_t size = chunked.size();
    std::size_t at = 0;
    while (at < size) {
        const std::size_t left = size - at;
        // Built only for an error: this loop runs for every chunk.
        auto where = [&] { return "chunk " + str(out.size()) + " at offset " + str(at); };
        if (out.size() >= 2 * lim.max_tensors)
            throw error(errc::limit_exceeded, where() + ": more than " + str(lim.max_tensors) +
                                                  " tensors (limits::max_tensors)");
        // Bytes that differ from the magic are not tenbin, however few.
        if (std::memcmp(base + at, chunk_magic, std::min<std::size_t>(left, 8)) != 0)
            throw error(errc::bad_magic, where() + ": does not start with ~TenBin~");
        if (left < 8)
            throw error(errc::truncated, where() + ": input ends " + str(left) + " bytes into the magic");
        if (left < chunk_preamble)
            throw error(errc::truncated, where() + ": input ends inside the length field");
        const std::int64_t len = get_i64(base + at + 8);
        if (len < 0)
            throw error(errc::negative_length, where() + ": length is " + std::to_string(len));
        const auto n = static_cast<std::uint64_t>(len);
        if (n > left - chunk_preamble)
            throw error(errc::length_beyond_end, where() + ": length " + str(n) + " but only " +
                                                     str(left - chunk_preamble) + " bytes follow");
        if (chunk_size(n) > left)
            throw error(errc::truncated, where() + ": input ends inside the padding (" +
                                             str(chunk_size(n)) + " bytes needed, " + str(left) + " left)");
        out.push_back(chunked.slice(at + chunk_preamble, n));
        at += chunk_size(n);
    }
    return out;
}

std::size_t encoded_size(tensor_span tensors) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view t = tensors[i];
        total += chunk_size(header_size(t.ndim())) + chunk_size(t.data.size());
    }
    return total;
}

void encode_buffer_into(tensor_span tensors, mutable_bytes out) {
    const detail::chunk_plan plan(tensors);
    if (out.size() != plan.size())
        throw error(errc::bad_argument, "output of " + str(out.size()) + " bytes; the encoding needs " +
                                            str(plan.size()));
    plan.copy_to(out);
}

buffer encode_buffer(tensor_span tensors) {
    const detail::chunk_plan plan(tensors);
    buffer out = buffer::allocate(plan.size());
    plan.copy_to(out.writable_bytes());
    return out;
}

void detail::decode_buffer_into(const buffer& chunked, const decode_options& opt, std::vector<tensor>& out,
                                std::optional<stream_position>* position) {
    // One more chunk than the tensors' for a position.
    limits lim = opt.limits;
    lim.max_tensors = std::min(lim.max_tensors, SIZE_MAX / 2 - 1) + 1;
    std::vector<buffer> all = decode_chunks(chunked, lim);
    const std::span<buffer> chunks = without_position(std::span<buffer>(all), position);
    if (chunks.size() % 2 != 0)
        throw error(errc::odd_chunk_count, str(chunks.size()) + " chunks: header chunk " +
                                               str(chunks.size() - 1) + " has no data chunk after it");
    buffer_frames<std::span<buffer>> source{chunks};
    fill_list(source, opt, out);
}

void detail::align_received(std::vector<tensor>& tensors) {
    for (tensor& t : tensors)
        if (!t.data().aligned_to(itemsize(t.dtype()))) t = t.aligned();
}

std::vector<tensor> decode_buffer(const buffer& chunked, const decode_options& opt) {
    std::vector<tensor> out;
    detail::decode_buffer_into(chunked, opt, out, nullptr);
    return out;
}

std::vector<tensor> decode_buffer(bytes_view chunked, const decode_options& opt) {
    return decode_buffer(buffer::borrow(chunked), opt);
}

}  // namespace tenbin
