// Shared by the fuzz targets: what a decoder may throw, and a loud failure.
//
// A target fails (abort, which libFuzzer reports as a crash with the input)
// when the library crashes, reads out of bounds (ASan), hits undefined
// behaviour (UBSan), throws anything but tenbin::error, throws an error class
// a decoder must not produce, or breaks a round-trip property.
#pragma once

#include <tenbin/core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fuzz {

// The classes a decoder reports for malformed or over-limit input. Anything
// else (bad_argument above all) means the decoder accepted input that a
// later layer then refused: an inconsistency worth a crash report.
inline bool decoder_error(tenbin::errc c) {
    using tenbin::errc;
    switch (c) {
    case errc::bad_magic:
    case errc::truncated:
    case errc::length_beyond_end:
    case errc::negative_length:
    case errc::unknown_dtype:
    case errc::odd_chunk_count:
    case errc::data_size_mismatch:
    case errc::bad_header:
    case errc::limit_exceeded:
    case errc::info_mismatch:
    case errc::unsupported:  // a position frame of a later version
        return true;
    default:
        return false;
    }
}

[[noreturn]] inline void fail(const char* what, const char* detail = "") {
    std::fprintf(stderr, "fuzz property violated: %s %s\n", what, detail);
    std::abort();
}

inline void check_error(const tenbin::error& e) {
    if (!decoder_error(e.code())) fail("unexpected error class from a decoder:", e.what());
}

// Whether header `again` is header `original` decoded and encoded again:
// the same bytes, but for the info, whose leading NULs decoding strips (as
// Python does). Both are whole headers (at least 24 bytes).
inline bool same_header(tenbin::bytes_view original, tenbin::bytes_view again) {
    if (original.size() != again.size() || original.size() < 24) return false;
    const std::byte* a = original.data();
    const std::byte* b = again.data();
    if (std::memcmp(a, b, 8) != 0 || std::memcmp(a + 16, b + 16, original.size() - 16) != 0) return false;
    std::size_t lead = 0;
    while (lead < 8 && a[8 + lead] == std::byte{0}) ++lead;
    std::byte info[8] = {};
    std::memcpy(info, a + 8 + lead, 8 - lead);
    return std::memcmp(info, b + 8, 8) == 0;
}

// Small limits keep every iteration fast; the targets also run some inputs
// with the defaults.
inline tenbin::limits small_limits() {
    tenbin::limits lim;
    lim.max_tensors = 64;
    lim.max_rank = 16;
    lim.max_bytes = std::uint64_t{1} << 20;
    return lim;
}

}  // namespace fuzz
