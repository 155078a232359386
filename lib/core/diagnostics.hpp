// Internal to the library: how every layer writes an error, so that the
// same fault reads the same wherever it is found.
#pragma once

#include <tenbin/dtype.hpp>
#include <tenbin/error.hpp>

#include "base/endian.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace tenbin::detail {

// Decimal text of a count, size or offset.
inline std::string str(std::uint64_t n) { return std::to_string(n); }

// Runs `f`; a tenbin error it throws gets `where: ` in front of its
// message. `where` is a string or a callable giving one, called only on
// failure (decode_list runs this once per tensor, and building the text
// there cost several allocations each).
template <class W, class F>
auto with_context(W&& where, F&& f) {
    try {
        return f();
    } catch (const error& e) {
        if constexpr (std::is_invocable_v<W&>)
            throw error(e.code(), std::string(where()) + ": " + e.what());
        else
            throw error(e.code(), std::string(where) + ": " + e.what());
    }
}

// The int64 stored at `p`.
inline std::int64_t get_i64(const std::byte* p) noexcept { return static_cast<std::int64_t>(load_le<std::uint64_t>(p)); }

// The checks an encodable tensor passes, each throwing bad_argument.
// `info`: at most 8 ASCII bytes, neither first nor last a NUL (decoders
// strip those).
void check_info(std::string_view info);
// A dtype value inside the enumeration.
void check_dtype(dtype t);
// A rank the library handles (max_supported_rank).
void check_rank(std::size_t ndim);
// `count` elements of `t` take exactly `bytes` bytes.
void check_data_size(dtype t, std::uint64_t count, std::size_t bytes);

}  // namespace tenbin::detail
