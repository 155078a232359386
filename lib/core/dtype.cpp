#include <tenbin/dtype.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

namespace tenbin {

// Conversions round to nearest even and keep NaN, infinities and subnormals.
float16 float16::from_float(float f) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u)  // inf or NaN; NaN keeps a quiet payload bit
        return {static_cast<std::uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u))};
    if (mag >= 0x477ff000u)  // rounds to beyond the largest half: inf
        return {static_cast<std::uint16_t>(sign | 0x7c00u)};
    if (mag < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        const float scaled = std::bit_cast<float>(mag) * 16777216.0f;  // 2^24 ulps
        const auto ulps = static_cast<std::uint32_t>(std::nearbyint(scaled));
        return {static_cast<std::uint16_t>(sign | ulps)};
    }
    const std::uint32_t exp_adj = mag - 0x38000000u;  // rebias 127 -> 15
    const std::uint32_t rounded = exp_adj + 0xfffu + ((exp_adj >> 13) & 1u);
    return {static_cast<std::uint16_t>(sign | (rounded >> 13))};
}

float float16::to_float() const noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exp = (bits >> 10) & 0x1fu;
    const std::uint32_t man = bits & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man * 2^-24
        const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

std::ostream& operator<<(std::ostream& out, dtype t) { return out << code(t); }

std::string to_string(dtype t) { return std::string(code(t)); }

}  // namespace tenbin
