#include <tenbin/error.hpp>

namespace tenbin {

std::string_view name(errc code) noexcept {
    switch (code) {
    case errc::bad_magic: return "bad_magic";
    case errc::truncated: return "truncated";
    case errc::length_beyond_end: return "length_beyond_end";
    case errc::negative_length: return "negative_length";
    case errc::unknown_dtype: return "unknown_dtype";
    case errc::odd_chunk_count: return "odd_chunk_count";
    case errc::data_size_mismatch: return "data_size_mismatch";
    case errc::bad_header: return "bad_header";
    case errc::limit_exceeded: return "limit_exceeded";
    case errc::bad_argument: return "bad_argument";
    case errc::info_mismatch: return "info_mismatch";
    case errc::bad_extension: return "bad_extension";
    case errc::io_error: return "io_error";
    case errc::timeout: return "timeout";
    case errc::bad_url: return "bad_url";
    case errc::unsupported: return "unsupported";
    case errc::bad_certificate: return "bad_certificate";
    case errc::closed: return "closed";
    }
    return "unknown_error";
}

bool is_malformed(errc code) noexcept { return code >= errc::bad_magic && code <= errc::bad_header; }

error::error(errc code, const std::string& message) : std::runtime_error(message), code_(code) {}

}  // namespace tenbin
