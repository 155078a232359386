// The shm wire: the first frame and the descriptors (see shm.hpp).
#include "shm/internal.hpp"

#include <cstring>

namespace tenbin::detail {

using namespace shm_impl;

shm_first parse_shm_first(bytes_view f) {
    if (f.size() < 8 || std::memcmp(f.data(), shm_magic, 8) != 0)
        throw error(errc::bad_magic, "not a shared-memory message (no ~TenShm~ first frame): a +shm receiver got a "
                                     "plain tenbin message; open both ends with +shm, or neither");
    if (f.size() < 16) throw error(errc::bad_header, "shm first frame of " + std::to_string(f.size()) + " bytes");
    const std::uint32_t version = load_u32(f.data() + 8);
    if (version != shm_version)
        throw error(errc::unsupported, "shm wire version " + std::to_string(version) + ", this build speaks " +
                                           std::to_string(shm_version));
    const std::uint32_t n = load_u32(f.data() + 12);
    if (n == 0 || n > max_side_name || f.size() != 16 + std::size_t{n} + 8)
        throw error(errc::bad_header, "shm first frame: bad side-channel name length " + std::to_string(n) +
                                          " in a frame of " + std::to_string(f.size()) + " bytes");
    shm_first out;
    out.side.assign(reinterpret_cast<const char*>(f.data() + 16), n);
    out.seq = load_u64(f.data() + 16 + n);
    return out;
}

std::vector<std::byte> encode_shm_first(const shm_first& f) {
    std::vector<std::byte> out(16 + f.side.size() + 8);
    std::memcpy(out.data(), shm_magic, 8);
    store_u32(out.data() + 8, shm_version);
    store_u32(out.data() + 12, static_cast<std::uint32_t>(f.side.size()));
    std::memcpy(out.data() + 16, f.side.data(), f.side.size());
    store_u64(out.data() + 16 + f.side.size(), f.seq);
    return out;
}

shm_descriptor parse_shm_descriptor(bytes_view f) {
    if (f.size() != shm_descriptor_size)
        throw error(errc::bad_header, "shm descriptor of " + std::to_string(f.size()) + " bytes, not 32");
    return {load_u64(f.data()), load_u64(f.data() + 8), load_u64(f.data() + 16), load_u64(f.data() + 24)};
}

}  // namespace tenbin::detail
