// The messages of the load and fault tests: each carries who sent it, a
// sequence number and a checksum, so a receiver can tell a lost, duplicated
// or corrupted message from a good one.
//
//   [meta: u4 [4] = {tag, seq low, seq high, FNV-1a of data},
//    data: u1 [n], byte i = (seq * 131 + i * 7 + tag) mod 256]
#pragma once

#include <tenbin/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace faults {

inline std::uint32_t fnv1a(tenbin::bytes_view b) {
    std::uint32_t h = 2166136261u;
    for (std::byte c : b) h = (h ^ static_cast<std::uint8_t>(c)) * 16777619u;
    return h;
}

inline std::uint8_t data_byte(std::uint32_t tag, std::uint64_t seq, std::size_t i) {
    return static_cast<std::uint8_t>(seq * 131 + i * 7 + tag);
}

// `size` bytes of data; by default it varies with seq (16..79 bytes).
inline std::vector<tenbin::tensor> make_message(std::uint32_t tag, std::uint64_t seq, std::size_t size = 0) {
    if (size == 0) size = 16 + seq % 64;
    std::vector<std::uint8_t> data(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = data_byte(tag, seq, i);
    const std::uint32_t sum = fnv1a(std::as_bytes(std::span(data)));
    std::vector<std::uint32_t> meta{tag, static_cast<std::uint32_t>(seq), static_cast<std::uint32_t>(seq >> 32), sum};
    const auto n = static_cast<std::int64_t>(size);
    return {tenbin::tensor::from_vector(std::move(meta), {4}, "meta"),
            tenbin::tensor::from_vector(std::move(data), {n}, "data")};
}

struct stamp {
    std::uint32_t tag;
    std::uint64_t seq;
};

// The tag and seq of a message, after checking every byte of it. Returns
// an explanation in `why` and false when anything is off.
inline bool check_message(const std::vector<tenbin::tensor>& m, stamp& out, std::string& why) {
    if (m.size() != 2 || m[0].info() != "meta" || m[1].info() != "data" || m[0].dtype() != tenbin::dtype::u4 ||
        m[0].shape() != tenbin::shape_t{4} || m[1].dtype() != tenbin::dtype::u1) {
        why = "wrong structure";
        return false;
    }
    const auto meta = m[0].values<std::uint32_t>();
    const auto data = m[1].data().bytes();
    out.tag = meta[0];
    out.seq = meta[1] | std::uint64_t{meta[2]} << 32;
    if (fnv1a(data) != meta[3]) {
        why = "checksum mismatch at seq " + std::to_string(out.seq);
        return false;
    }
    for (std::size_t i = 0; i < data.size(); ++i)
        if (static_cast<std::uint8_t>(data[i]) != data_byte(out.tag, out.seq, i)) {
            why = "content mismatch at seq " + std::to_string(out.seq) + " byte " + std::to_string(i);
            return false;
        }
    return true;
}

}  // namespace faults
