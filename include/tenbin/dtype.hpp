// tenbin: element types, spelled with NumPy's short codes as the format does.
#pragma once

#include <tenbin/config.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

TENBIN_API_BEGIN
namespace tenbin {

/// Every element type of the format. `u4` is included although the Python
/// implementation cannot handle it (its table misspells the code).
enum class dtype : std::uint8_t { f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 };

inline constexpr dtype all_dtypes[] = {dtype::f2, dtype::f4, dtype::f8, dtype::i1,
                                       dtype::i2, dtype::i4, dtype::i8, dtype::u1,
                                       dtype::u2, dtype::u4, dtype::u8};

/// Bytes per element: 1, 2, 4 or 8.
[[nodiscard]] constexpr std::size_t itemsize(dtype t) noexcept {
    switch (t) {
    case dtype::i1: case dtype::u1: return 1;
    case dtype::f2: case dtype::i2: case dtype::u2: return 2;
    case dtype::f4: case dtype::i4: case dtype::u4: return 4;
    default: return 8;
    }
}

/// False for a value outside the enumeration (a cast from a bad integer).
[[nodiscard]] constexpr bool is_valid(dtype t) noexcept { return static_cast<unsigned>(t) <= static_cast<unsigned>(dtype::u8); }

/// The format's code: "f4", "u1", ...; "invalid" for a value outside the
/// enumeration.
[[nodiscard]] constexpr std::string_view code(dtype t) noexcept {
    constexpr std::string_view codes[] = {"f2", "f4", "f8", "i1", "i2", "i4",
                                          "i8", "u1", "u2", "u4", "u8"};
    return is_valid(t) ? codes[static_cast<int>(t)] : "invalid";
}

/// The dtype of a code, or nothing for a code outside the format.
[[nodiscard]] constexpr std::optional<dtype> parse_dtype(std::string_view c) noexcept {
    for (dtype t : all_dtypes)
        if (code(t) == c) return t;
    return std::nullopt;
}

/// Writes the code ("f4"), as the format spells it.
std::ostream& operator<<(std::ostream& out, dtype t);
/// The code, as a string ("f4").
[[nodiscard]] std::string to_string(dtype t);

[[nodiscard]] constexpr bool is_float(dtype t) noexcept {
    return t == dtype::f2 || t == dtype::f4 || t == dtype::f8;
}
[[nodiscard]] constexpr bool is_signed(dtype t) noexcept {
    return is_float(t) || t == dtype::i1 || t == dtype::i2 || t == dtype::i4 || t == dtype::i8;
}

/// IEEE 754 binary16, stored as its bits. C++20 has no half type; this one
/// only converts, so that f2 data can be read and written as float.
struct float16 {
    /// The binary16 bit pattern (sign, 5 exponent bits, 10 mantissa bits).
    std::uint16_t bits = 0;
    /// Rounds `f` to the nearest binary16 (ties to even); overflow gives
    /// infinity and NaN stays NaN.
    static float16 from_float(float f) noexcept;
    /// The exact float value of these bits.
    float to_float() const noexcept;
    /// Bitwise equality (so +0 != -0 and NaN == the same NaN).
    friend bool operator==(float16, float16) = default;
};

namespace detail {
template <class T> struct dtype_of_impl;
template <> struct dtype_of_impl<float16> { static constexpr dtype value = dtype::f2; };
template <> struct dtype_of_impl<float> { static constexpr dtype value = dtype::f4; };
template <> struct dtype_of_impl<double> { static constexpr dtype value = dtype::f8; };
template <> struct dtype_of_impl<std::int8_t> { static constexpr dtype value = dtype::i1; };
template <> struct dtype_of_impl<std::int16_t> { static constexpr dtype value = dtype::i2; };
template <> struct dtype_of_impl<std::int32_t> { static constexpr dtype value = dtype::i4; };
template <> struct dtype_of_impl<std::int64_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of_impl<std::uint8_t> { static constexpr dtype value = dtype::u1; };
template <> struct dtype_of_impl<std::uint16_t> { static constexpr dtype value = dtype::u2; };
template <> struct dtype_of_impl<std::uint32_t> { static constexpr dtype value = dtype::u4; };
template <> struct dtype_of_impl<std::uint64_t> { static constexpr dtype value = dtype::u8; };
// On LP64 Linux std::int64_t is long, and long long (what many APIs and
// literals use) is a type of its own with the same 8 bytes.
template <class T>
    requires(std::is_same_v<T, long long> && !std::is_same_v<long long, std::int64_t> && sizeof(T) == 8)
struct dtype_of_impl<T> { static constexpr dtype value = dtype::i8; };
template <class T>
    requires(std::is_same_v<T, unsigned long long> && !std::is_same_v<unsigned long long, std::uint64_t> &&
             sizeof(T) == 8)
struct dtype_of_impl<T> { static constexpr dtype value = dtype::u8; };
}  // namespace detail

/// The dtype that stores C++ type T (float -> f4, std::uint8_t -> u1, ...).
template <class T>
inline constexpr dtype dtype_of = detail::dtype_of_impl<std::remove_cv_t<T>>::value;

/// True when T has a dtype.
template <class T>
concept element = requires { detail::dtype_of_impl<std::remove_cv_t<T>>::value; };

}  // namespace tenbin
TENBIN_API_END
