// write and read: the chunked form over a sink or a source.
//
// The reader never trusts a length field with memory: a header chunk may be
// at most the size of a header of the highest allowed rank, and a data
// chunk's storage grows only as its bytes actually arrive (or is allocated
// at once when the source vouches for that many bytes remaining).
#include <tenbin/io.hpp>

#include "core/chunk_plan.hpp"
#include "core/codec_detail.hpp"
#include "core/diagnostics.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace tenbin {

namespace {

using detail::get_i64;
using detail::str;
using detail::with_context;

// The first block for a payload whose size the source cannot vouch for;
// storage then doubles as bytes arrive, so memory follows the real input.
constexpr std::size_t first_block = std::size_t{64} << 20;
// Scratch used to read past bytes that are checked but not kept.
constexpr std::size_t skip_block = std::size_t{64} << 10;

// A chunk whose preamble has been read: where it starts and its length.
struct chunk_info {
    std::uint64_t at = 0;
    std::uint64_t length = 0;
    std::string what;  // "header chunk of tensor 3", for messages
};

class chunk_reader {
public:
    explicit chunk_reader(source& in) : in_(in) {}

    std::uint64_t offset() const noexcept { return offset_; }

    // Fills `out`; fewer bytes only at end of input.
    std::size_t read_full(mutable_bytes out) {
        std::size_t got = 0;
        while (got < out.size()) {
            const std::size_t n = in_.read_some(out.subspan(got));
            if (n == 0) break;
            got += n;
        }
        offset_ += got;
        return got;
    }

    // Reads a chunk's magic and length. Nothing at all (end of input right
    // here) gives an empty optional; the caller decides if that is clean.
    std::optional<chunk_info> read_preamble(std::string what) {
        std::array<std::byte, chunk_preamble> pre{};
        const std::uint64_t at = offset_;
        const std::size_t got = read_full(pre);
        if (got == 0) return std::nullopt;
        const std::string where = what + " at offset " + str(at);
        if (std::memcmp(pre.data(), chunk_magic, std::min<std::size_t>(got, 8)) != 0)
            throw error(errc::bad_magic, where + ": does not start with ~TenBin~");
        if (got < chunk_preamble)
            throw error(errc::truncated, where + ": input ends " + str(got) +
                                             " bytes into the 16-byte magic and length");
        const std::int64_t len = get_i64(pre.data() + 8);
        if (len < 0) throw error(errc::negative_length, where + ": length is " + std::to_string(len));
        const auto n = static_cast<std::uint64_t>(len);
        if (const auto rem = in_.remaining()) {
            if (n > *rem)
                throw error(errc::length_beyond_end, where + ": length " + str(n) + " but only " +
                                                         str(*rem) + " bytes follow");
            if (chunk_size(n) - chunk_preamble > *rem)
                throw error(errc::truncated, where + ": input ends inside the padding (" +
                                                 str(chunk_size(n) - chunk_preamble) +
                                                 " bytes needed after the length, " + str(*rem) +
                                                 " left)");
        }
        return chunk_info{at, n, std::move(what)};
    }

    [[noreturn]] void truncated(const chunk_info& c) const {
        throw error(errc::truncated, c.what + " at offset " + str(c.at) + ": input ends " +
                                         str(offset_ - c.at) + " bytes into the chunk of " +
                                         str(chunk_size(c.length)) + " bytes");
    }

    // The chunk's payload in fresh aligned storage.
    buffer read_payload(const chunk_info& c) {
        if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
            if (c.length > SIZE_MAX)
                throw error(errc::unsupported, c.what + " at offset " + str(c.at) + ": length " +
                                                   str(c.length) + " does not fit in memory here");
        }
        const auto n = static_cast<std::size_t>(c.length);
        std::size_t cap = in_.remaining() ? n : std::min(n, first_block);
        buffer buf = buffer::allocate(cap);
        std::size_t got = 0;
        for (;;) {
            got += read_full(buf.writable_bytes().subspan(got));
            if (got < cap) truncated(c);
            if (cap == n) return buf;
            cap = n - cap > cap ? 2 * cap : n;
            buffer bigger = buffer::allocate(cap);
            std::memcpy(bigger.writable_bytes().data(), buf.data(), got);
            buf = std::move(bigger);
        }
    }

    // Reads `count` bytes of the chunk and drops them (padding, whose
    // content is not required to be zero, or a payload that is rejected).
    void skip(const chunk_info& c, std::uint64_t count) {
        std::array<std::byte, skip_block> scratch;
        while (count > 0) {
            const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(count, scratch.size()));
            if (read_full({scratch.data(), want}) < want) truncated(c);
            count -= want;
        }
    }

    void skip_padding(const chunk_info& c) { skip(c, chunk_size(c.length) - chunk_preamble - c.length); }

private:
    source& in_;
    std::uint64_t offset_ = 0;  // bytes consumed by this read call
};

// Reads and parses a header chunk's payload. Lengths longer than the
// largest allowed header are judged from the first 24 bytes, so they cost
// no memory.
tensor_header read_header(chunk_reader& r, const chunk_info& c, const limits& lim) {
    const std::size_t max_rank = std::min(lim.max_rank, max_supported_rank);
    const std::string where = c.what + " at offset " + str(c.at);
    std::array<std::byte, header_size(max_supported_rank)> h{};
    if (c.length <= header_size(max_rank)) {
        const auto n = static_cast<std::size_t>(c.length);
        if (r.read_full({h.data(), n}) < n) r.truncated(c);
        r.skip_padding(c);
        return with_context(where, [&] { return decode_header({h.data(), n}, lim); });
    }
    if (c.length % 8 != 0)
        throw error(errc::bad_header, where + ": header of " + str(c.length) +
                                          " bytes; a header is 24 + 8 * ndim bytes");
    if (r.read_full({h.data(), 24}) < 24) r.truncated(c);
    const std::int64_t ndim = get_i64(h.data() + 16);
    // Check dtype and info the way decode_header does, as a rank-0 header.
    std::memset(h.data() + 16, 0, 8);
    with_context(where, [&] {
        (void)decode_header({h.data(), 24}, lim);
        // The length is past the largest allowed header: this throws.
        (void)detail::check_header_rank(ndim, c.length, lim);
    });
    throw error(errc::bad_header, where + ": header of " + str(c.length) + " bytes exceeds the largest allowed");
}

}  // namespace

void write(sink& out, tensor_span tensors) {
    // The plan holds preambles, headers and padding; data pieces are the
    // tensors' own bytes, gathered by the sink.
    const detail::chunk_plan plan(tensors);
    out.write(plan.pieces());
}

std::vector<tensor> read(source& in, const read_options& opt) {
    // An empty list means end of input: a read of none would look like it.
    if (opt.count && *opt.count == 0)
        throw error(errc::bad_argument, "read_options::count = 0: an empty list would mean end of input");
    const limits& lim = opt.decode.limits;
    chunk_reader r(in);
    std::vector<tensor> out;
    std::uint64_t total = 0;
    for (std::size_t i = 0;; ++i) {
        if (opt.count && i >= *opt.count) break;
        const std::string name = "tensor " + str(i);
        const auto hc = r.read_preamble("header chunk of " + name);
        if (!hc) break;  // end of input before a header: a clean end
        if (i >= lim.max_tensors)
            throw error(errc::limit_exceeded, hc->what + " at offset " + str(hc->at) + ": more than " +
                                                  str(lim.max_tensors) + " tensors (limits::max_tensors)");
        tensor_header h = read_header(r, *hc, lim);
        // total <= max_bytes so far, so this cannot overflow.
        if (h.nbytes > lim.max_bytes - total)
            throw error(errc::limit_exceeded, "tensors 0.." + str(i) + " hold more than " +
                                                  str(lim.max_bytes) + " bytes (limits::max_bytes)");
        total += h.nbytes;

        const auto dc = r.read_preamble("data chunk of " + name);
        if (!dc)
            throw error(errc::odd_chunk_count, hc->what + " at offset " + str(hc->at) +
                                                   " has no data chunk after it (input ends at offset " +
                                                   str(r.offset()) + ")");
        if (dc->length != h.nbytes) {
            // Reported at once, even where the input's end is unknown (a
            // pipe): reading up to the claimed length first, to tell a
            // length past the end apart, let a peer claiming 2^62 bytes
            // stall the reader for ever.
            throw error(errc::data_size_mismatch,
                        dc->what + " at offset " + str(dc->at) + ": header says " +
                            std::string(code(h.dtype)) + " with " + str(h.nbytes) +
                            " bytes, the data chunk holds " + str(dc->length));
        }
        buffer data = r.read_payload(*dc);
        r.skip_padding(*dc);
        out.emplace_back(h.dtype, std::move(h.shape), std::move(data), std::move(h.info));
    }
    // Nothing read is the end of the stream, not a list with other infos:
    // a replay loop with expect_infos ends as one without does.
    if (opt.decode.expect_infos && !out.empty()) check_infos(out, *opt.decode.expect_infos);
    return out;
}

}  // namespace tenbin
