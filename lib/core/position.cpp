#include <tenbin/error.hpp>
#include <tenbin/position.hpp>

#include "base/endian.hpp"

#include <algorithm>
#include <cstring>

namespace tenbin {

namespace {

constexpr std::size_t fixed_part = 56;

// Frames are padded to 8 bytes: libzmq lays a message's frames out one
// after another in its receive buffer, and a frame of odd size would leave
// the next messages' tensors unaligned (each then copied to be aligned).
constexpr std::size_t padded(std::size_t n) { return (n + 7) / 8 * 8; }

bool printable(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
}

void check_name(std::string_view name) {
    if (name.empty() || name.size() > max_producer_name || !printable(name))
        throw error(errc::bad_argument, "a producer name is 1 to " + std::to_string(max_producer_name) +
                                            " printable ASCII characters without spaces, not '" +
                                            std::string(name.substr(0, 80)) + "'");
}

}  // namespace

const char* name(stream_position::mark m) noexcept {
    switch (m) {
    case stream_position::mark::batch: return "batch";
    case stream_position::mark::epoch_end: return "epoch_end";
    case stream_position::mark::stream_end: return "stream_end";
    }
    return "unknown";
}

std::size_t position_frame_size(const stream_position& p) noexcept { return padded(fixed_part + p.producer.size()); }

void encode_position_into(const stream_position& p, mutable_bytes out) {
    check_name(p.producer);
    if (out.size() != position_frame_size(p))
        throw error(errc::bad_argument, "a position frame of " + std::to_string(position_frame_size(p)) +
                                            " bytes, given room for " + std::to_string(out.size()));
    std::byte* b = out.data();
    std::memset(b, 0, out.size());
    std::memcpy(b, position_magic, sizeof position_magic);
    b[8] = std::byte{position_version};
    b[9] = static_cast<std::byte>(p.kind);
    detail::store_le(b + 12, static_cast<std::uint32_t>(p.producer.size()));
    detail::store_le(b + 16, p.incarnation);
    detail::store_le(b + 24, p.epoch);
    detail::store_le(b + 32, p.seq);
    detail::store_le(b + 40, p.sent_ns);
    detail::store_le(b + 48, p.previous);
    std::memcpy(b + fixed_part, p.producer.data(), p.producer.size());
}

std::vector<std::byte> encode_position(const stream_position& p) {
    check_name(p.producer);
    std::vector<std::byte> out(position_frame_size(p));
    encode_position_into(p, out);
    return out;
}

bool is_position_frame(bytes_view frame) noexcept {
    return frame.size() >= sizeof position_magic &&
           std::memcmp(frame.data(), position_magic, sizeof position_magic) == 0;
}

stream_position decode_position(bytes_view f) {
    if (!is_position_frame(f)) throw error(errc::bad_magic, "not a position frame (no ~TenPos~)");
    if (f.size() < fixed_part)
        throw error(errc::bad_header, "a position frame of " + std::to_string(f.size()) + " bytes, under " +
                                          std::to_string(fixed_part));
    const auto version = static_cast<std::uint8_t>(f[8]);
    if (version != position_version)
        throw error(errc::unsupported, "position frame version " + std::to_string(version) + "; this build reads " +
                                           std::to_string(position_version));
    const auto kind = static_cast<std::uint8_t>(f[9]);
    if (kind > static_cast<std::uint8_t>(stream_position::mark::stream_end))
        throw error(errc::bad_header, "position frame: unknown mark " + std::to_string(kind));
    const std::uint32_t n = detail::load_le<std::uint32_t>(f.data() + 12);
    // Unpadded frames are read too (the first builds sent them).
    if (n == 0 || n > max_producer_name || (f.size() != fixed_part + n && f.size() != padded(fixed_part + n)))
        throw error(errc::bad_header, "position frame of " + std::to_string(f.size()) +
                                          " bytes with a producer name of " + std::to_string(n));
    if (std::any_of(f.begin() + static_cast<std::ptrdiff_t>(fixed_part + n), f.end(), [](std::byte b) { return b != std::byte{0}; }))
        throw error(errc::bad_header, "position frame: padding after the producer name that is not NUL");
    stream_position p;
    p.kind = static_cast<stream_position::mark>(kind);
    p.incarnation = detail::load_le<std::uint64_t>(f.data() + 16);
    p.epoch = detail::load_le<std::uint64_t>(f.data() + 24);
    p.seq = detail::load_le<std::uint64_t>(f.data() + 32);
    p.sent_ns = detail::load_le<std::uint64_t>(f.data() + 40);
    p.previous = detail::load_le<std::uint64_t>(f.data() + 48);
    p.producer.assign(reinterpret_cast<const char*>(f.data() + fixed_part), n);
    if (!printable(p.producer)) throw error(errc::bad_header, "position frame: a producer name that is not printable ASCII");
    return p;
}

}  // namespace tenbin
