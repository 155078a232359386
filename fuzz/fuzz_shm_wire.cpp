// libFuzzer target: the +shm wire parsers a receiver runs on what ZeroMQ
// hands it before it trusts anything (detail::parse_shm_first,
// parse_shm_descriptor, check_shm_descriptor, check_shm_extent), without a
// sender or a side channel.
//
// Input: a 2-byte little-endian length and that many bytes of first frame,
// then records: a dtype byte (value % 11), 8 bytes of segment size, a byte
// for the header's nbytes (odd: the descriptor's own length; even: the
// byte's value) and a length byte (the descriptor frame holds length % 64
// bytes, which follow).
// Properties: a parsed first frame or descriptor encodes back to the same
// bytes; a descriptor parses exactly when it has 32 bytes; the checks pass
// exactly when a model built here says so; only the documented error
// classes come out.
#include "common.hpp"

#include "shm/protocol.hpp"
#include "shm/shm.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

using tenbin::errc;
namespace detail = tenbin::detail;

std::uint64_t load(const std::uint8_t* p, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

void expect(bool ok, bool model, const char* what, const tenbin::error* e) {
    if (ok != model) fuzz::fail(what, e ? e->what() : "(accepted)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    std::size_t n = std::min<std::size_t>(load(data, 2), size - 2);
    const tenbin::bytes_view first_bytes(reinterpret_cast<const std::byte*>(data + 2), n);
    std::uint64_t seq = 1;
    try {
        const detail::shm_first first = detail::parse_shm_first(first_bytes);
        if (first.side.empty() || first.side.size() > 100) fuzz::fail("a side-channel name of a bad length accepted");
        const std::vector<std::byte> again = detail::encode_shm_first(first);
        if (again.size() != n || std::memcmp(again.data(), first_bytes.data(), n) != 0)
            fuzz::fail("a first frame that does not encode back to its bytes");
        seq = first.seq;
    } catch (const tenbin::error& e) {
        if (e.code() != errc::bad_magic && e.code() != errc::bad_header && e.code() != errc::unsupported)
            fuzz::fail("unexpected error class from parse_shm_first:", e.what());
    }

    std::size_t at = 2 + n;
    for (std::size_t index = 0; size - at >= 11; ++index) {
        const auto type = static_cast<tenbin::dtype>(data[at] % 11);
        const std::uint64_t segment_size = load(data + at + 1, 8);
        const std::uint8_t nbytes_byte = data[at + 9];
        const std::size_t len = std::min<std::size_t>(data[at + 10] % 64, size - at - 11);
        const tenbin::bytes_view frame(reinterpret_cast<const std::byte*>(data + at + 11), len);
        at += 11 + len;

        detail::shm_descriptor d;
        try {
            d = detail::parse_shm_descriptor(frame);
        } catch (const tenbin::error& e) {
            if (e.code() != errc::bad_header) fuzz::fail("unexpected error class from parse_shm_descriptor:", e.what());
            expect(false, len == detail::shm_descriptor_size, "parse_shm_descriptor refused 32 bytes", &e);
            continue;
        }
        expect(true, len == detail::shm_descriptor_size, "parse_shm_descriptor accepted a frame not of 32 bytes",
               nullptr);
        const auto again = detail::encode_shm_descriptor(d);
        if (std::memcmp(again.data(), frame.data(), again.size()) != 0)
            fuzz::fail("a descriptor that does not encode back to its bytes");

        tenbin::tensor_header h;
        h.dtype = type;
        h.nbytes = (nbytes_byte & 1) ? d.length : nbytes_byte;
        const bool fits_header =
            d.length == h.nbytes && (d.length == 0 || d.generation == seq) && (d.length == 0) == (d.segment == 0);
        try {
            detail::check_shm_descriptor(d, h, seq, index);
            expect(true, fits_header, "check_shm_descriptor accepted", nullptr);
        } catch (const tenbin::error& e) {
            if (e.code() != errc::bad_header && e.code() != errc::data_size_mismatch)
                fuzz::fail("unexpected error class from check_shm_descriptor:", e.what());
            expect(false, fits_header, "check_shm_descriptor refused", &e);
        }

        // 128-bit sums: the model must not share the checker's overflow.
        const bool inside = static_cast<unsigned __int128>(d.offset) + d.length <= segment_size &&
                            d.offset % tenbin::itemsize(type) == 0;
        try {
            detail::check_shm_extent(d, static_cast<std::size_t>(segment_size), type, index);
            expect(true, inside, "check_shm_extent accepted", nullptr);
        } catch (const tenbin::error& e) {
            if (e.code() != errc::bad_header && e.code() != errc::length_beyond_end)
                fuzz::fail("unexpected error class from check_shm_extent:", e.what());
            expect(false, inside, "check_shm_extent refused", &e);
        }
    }
    return 0;
}
