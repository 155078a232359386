// The +shm protocol's bytes (see protocol.hpp).
#include "shm/protocol.hpp"

#include <tenbin/error.hpp>

#include "base/endian.hpp"

#include <cstring>
#include <optional>

namespace tenbin::detail {

using namespace shm_impl;

shm_first parse_shm_first(bytes_view f) {
    if (f.size() < 8 || std::memcmp(f.data(), shm_magic, 8) != 0)
        throw error(errc::bad_magic, "not a shared-memory message (no ~TenShm~ first frame): a +shm receiver got a "
                                     "plain tenbin message; open both ends with +shm, or neither");
    if (f.size() < 16) throw error(errc::bad_header, "shm first frame of " + std::to_string(f.size()) + " bytes");
    const std::uint32_t version = load_le<std::uint32_t>(f.data() + 8);
    if (version != shm_version)
        throw error(errc::unsupported, "shm wire version " + std::to_string(version) + ", this build speaks " +
                                           std::to_string(shm_version));
    const std::uint32_t n = load_le<std::uint32_t>(f.data() + 12);
    if (n == 0 || n > max_side_name || f.size() != 16 + std::size_t{n} + 16)
        throw error(errc::bad_header, "shm first frame: bad side-channel name length " + std::to_string(n) +
                                          " in a frame of " + std::to_string(f.size()) + " bytes");
    shm_first out;
    out.side.assign(reinterpret_cast<const char*>(f.data() + 16), n);
    out.seq = load_le<std::uint64_t>(f.data() + 16 + n);
    out.claim_by = load_le<std::uint64_t>(f.data() + 24 + n);
    return out;
}

std::vector<std::byte> encode_shm_first(const shm_first& f) {
    std::vector<std::byte> out(16 + f.side.size() + 16);
    std::memcpy(out.data(), shm_magic, 8);
    store_le<std::uint32_t>(out.data() + 8, shm_version);
    store_le<std::uint32_t>(out.data() + 12, static_cast<std::uint32_t>(f.side.size()));
    std::memcpy(out.data() + 16, f.side.data(), f.side.size());
    store_le<std::uint64_t>(out.data() + 16 + f.side.size(), f.seq);
    store_le<std::uint64_t>(out.data() + 24 + f.side.size(), f.claim_by);
    return out;
}

shm_descriptor parse_shm_descriptor(bytes_view f) {
    if (f.size() != shm_descriptor_size)
        throw error(errc::bad_header, "shm descriptor of " + std::to_string(f.size()) + " bytes, not 32");
    return {load_le<std::uint64_t>(f.data()), load_le<std::uint64_t>(f.data() + 8), load_le<std::uint64_t>(f.data() + 16), load_le<std::uint64_t>(f.data() + 24)};
}

std::array<std::byte, shm_descriptor_size> encode_shm_descriptor(const shm_descriptor& d) {
    std::array<std::byte, shm_descriptor_size> out{};
    store_le<std::uint64_t>(out.data(), d.segment);
    store_le<std::uint64_t>(out.data() + 8, d.generation);
    store_le<std::uint64_t>(out.data() + 16, d.offset);
    store_le<std::uint64_t>(out.data() + 24, d.length);
    return out;
}

void check_shm_descriptor(const shm_descriptor& d, const tensor_header& h, std::uint64_t seq, std::size_t index) {
    const std::string which = "tensor " + std::to_string(index) + ": ";
    if (d.length != h.nbytes)
        throw error(errc::data_size_mismatch, which + "descriptor of " + std::to_string(d.length) +
                                                  " bytes for a header needing " + std::to_string(h.nbytes));
    if (d.length != 0 && d.generation != seq)
        throw error(errc::bad_header, which + "stale descriptor (generation " + std::to_string(d.generation) +
                                          " in message " + std::to_string(seq) + ")");
    if ((d.length == 0) != (d.segment == 0))
        throw error(errc::bad_header, which + "descriptor names segment 0 for bytes, or a segment for none");
}

void check_shm_extent(const shm_descriptor& d, std::size_t segment_size, dtype type, std::size_t index) {
    const std::string which = "tensor " + std::to_string(index) + ": ";
    if (d.offset > segment_size || d.length > segment_size - d.offset)
        throw error(errc::length_beyond_end, which + "bytes [" + std::to_string(d.offset) + ", +" +
                                                 std::to_string(d.length) + ") past the segment's " +
                                                 std::to_string(segment_size));
    if (d.offset % itemsize(type) != 0)
        throw error(errc::bad_header, which + "offset " + std::to_string(d.offset) + " not aligned for " +
                                          std::string(code(type)));
}

namespace shm_impl {

namespace {

bool is_request(packet t) {
    return t == packet::claim || t == packet::release || t == packet::claim_quiet || t == packet::kick;
}

// Ids a reply of type `t` may carry at most; nothing when `t` is no reply's.
std::optional<std::size_t> most_ids(packet t) {
    switch (t) {
        case packet::fds: return fds_per_packet;
        case packet::ok:
        case packet::gone: return closed_per_reply;
        case packet::ring:
        case packet::cut_off: return 0;
        default: return std::nullopt;
    }
}

[[noreturn]] void bad(const std::string& what) { throw error(errc::bad_header, "shm side channel: " + what); }

}  // namespace

std::string why(cut_reason r) {
    switch (r) {
        case cut_reason::peers_full: return "it serves as many receivers as it may (shm_options::max_peers)";
        case cut_reason::out_of_descriptors: return "it has no file descriptor to spare";
        case cut_reason::bad_request: return "this receiver wrote a malformed request";
        case cut_reason::corrupt_ring: return "this receiver's ring held an entry out of its bounds";
        case cut_reason::held_too_much:
            return "this receiver held more than the sender lets one receiver hold (shm_options::max_held_bytes)";
        case cut_reason::not_reading: return "this receiver did not read the sender's replies";
    }
    return "reason " + std::to_string(static_cast<std::uint64_t>(r));
}

std::array<std::byte, request_size> encode_request(const request& r) {
    std::array<std::byte, request_size> out{};
    store_le<std::uint32_t>(out.data(), static_cast<std::uint32_t>(r.type));
    store_le<std::uint64_t>(out.data() + 8, r.seq);
    return out;
}

request parse_request(bytes_view p) {
    if (p.size() != request_size) bad("a request of " + std::to_string(p.size()) + " bytes, not 16");
    const auto type = static_cast<packet>(load_le<std::uint32_t>(p.data()));
    if (!is_request(type)) bad("a request of unknown type " + std::to_string(static_cast<std::uint32_t>(type)));
    if (load_le<std::uint32_t>(p.data() + 4) != 0) bad("a request whose reserved word is not 0");
    return {type, load_le<std::uint64_t>(p.data() + 8)};
}

std::vector<std::byte> encode_reply(const reply& r) {
    std::vector<std::byte> out(reply_header_size + 8 * r.ids.size());
    store_le<std::uint32_t>(out.data(), static_cast<std::uint32_t>(r.type));
    store_le<std::uint32_t>(out.data() + 4, static_cast<std::uint32_t>(r.ids.size()));
    store_le<std::uint64_t>(out.data() + 8, r.seq);
    const std::uint64_t word = r.type == packet::cut_off ? static_cast<std::uint64_t>(r.reason) : r.clock;
    store_le<std::uint64_t>(out.data() + 16, word);
    for (std::size_t k = 0; k < r.ids.size(); ++k)
        store_le<std::uint64_t>(out.data() + reply_header_size + 8 * k, r.ids[k]);
    return out;
}

reply parse_reply(bytes_view p, std::size_t fds) {
    if (p.size() < reply_header_size) bad("a reply of " + std::to_string(p.size()) + " bytes");
    reply r;
    r.type = static_cast<packet>(load_le<std::uint32_t>(p.data()));
    const std::uint32_t count = load_le<std::uint32_t>(p.data() + 4);
    const std::optional<std::size_t> most = most_ids(r.type);
    if (!most) bad("a reply of unknown type " + std::to_string(static_cast<std::uint32_t>(r.type)));
    if (count > *most) bad("a reply of " + std::to_string(count) + " ids, more than " + std::to_string(*most));
    if (p.size() != reply_header_size + 8 * std::size_t{count})
        bad("a reply of " + std::to_string(p.size()) + " bytes for " + std::to_string(count) + " ids");
    const std::size_t want_fds = r.type == packet::fds ? count : r.type == packet::ring ? 1 : 0;
    if (fds != want_fds)
        bad("a reply with " + std::to_string(fds) + " descriptors where its type carries " + std::to_string(want_fds));
    r.seq = load_le<std::uint64_t>(p.data() + 8);
    const std::uint64_t word = load_le<std::uint64_t>(p.data() + 16);
    if (r.type == packet::cut_off) r.reason = static_cast<cut_reason>(word);
    else r.clock = word;
    r.ids.resize(count);
    for (std::size_t k = 0; k < count; ++k) r.ids[k] = load_le<std::uint64_t>(p.data() + reply_header_size + 8 * k);
    return r;
}

}  // namespace shm_impl

}  // namespace tenbin::detail
