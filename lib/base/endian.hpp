// Little-endian integers, as every tenbin wire and file format stores them
// (the tenbin format, +shm frames and packets, stream positions, zip, npy),
// read from and written to bytes the caller has bounds-checked.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tenbin::detail {

template <std::unsigned_integral T>
T load_le(const std::byte* p) noexcept {
    T v = 0;
    for (std::size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | static_cast<std::uint8_t>(p[i]));
    return v;
}

template <std::unsigned_integral T>
void store_le(std::byte* p, T v) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

// An `n`-byte field (n <= 8), as zip headers have them.
inline std::uint64_t load_le(const std::byte* p, std::size_t n) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
    return v;
}
inline void append_le(std::vector<std::byte>& out, std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

}  // namespace tenbin::detail
