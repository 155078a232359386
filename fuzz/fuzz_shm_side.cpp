// libFuzzer target: the +shm side channel's parsers, on both ends
// (shm_impl::parse_request, which the sender runs on what a receiver
// writes; parse_reply, which the receiver runs on what a sender writes),
// and the ring both ends share, with either end's words overwritten at
// will (shm_ring::push and take over plain memory), without a socket.
//
// Input: a mode byte, then
//   mode % 3 == 0: a request packet;
//   mode % 3 == 1: a byte (the descriptors that came with the packet,
//                  % 70), then a reply packet;
//   mode % 3 == 2: a script of 9-byte steps on a ring: an op byte, then a
//                  u64 (op % 4: 0 push it, 1 take, 2 write it to the
//                  writer's count (head), 3 write it to the reader's
//                  (tail)); op / 4 % 4 picks an entry word to overwrite
//                  with the u64 instead when op % 4 == 3 and op >= 128.
// Properties: a packet parses exactly when a model built here says so,
// encodes back to its bytes, and only bad_header comes out; push and take
// do exactly what a model of the ring's words says (entries in order, a
// full ring refused, a count the other end never could have written
// reported corrupt),
// whatever the other end wrote; nothing reads outside the ring (ASan).
#include "common.hpp"

#include "shm/protocol.hpp"
#include "shm/ring.hpp"

#include <cstring>
#include <vector>

namespace {

using tenbin::errc;
using namespace tenbin::detail::shm_impl;

std::uint64_t load(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
std::uint32_t load32(const std::uint8_t* p) { return static_cast<std::uint32_t>(load(p) & 0xffffffffu); }

template <class F>
bool parses(F&& f) {
    try {
        f();
        return true;
    } catch (const tenbin::error& e) {
        if (e.code() != errc::bad_header) fuzz::fail("unexpected error class from a side-channel parser:", e.what());
        return false;
    }
}

void requests(const std::uint8_t* data, std::size_t size) {
    const tenbin::bytes_view b(reinterpret_cast<const std::byte*>(data), size);
    request r;
    const bool ok = parses([&] { r = parse_request(b); });
    std::uint8_t padded[16] = {};
    std::memcpy(padded, data, std::min<std::size_t>(size, 16));
    const std::uint32_t type = load32(padded);
    const bool model = size == 16 && type >= 1 && type <= 4 && load32(padded + 4) == 0;
    if (ok != model) fuzz::fail(ok ? "parse_request accepted a malformed request" : "parse_request refused a request");
    if (ok && std::memcmp(encode_request(r).data(), data, 16) != 0) fuzz::fail("a request that does not encode back");
}

void replies(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return;
    const std::size_t fds = data[0] % 70;
    ++data;
    --size;
    const tenbin::bytes_view b(reinterpret_cast<const std::byte*>(data), size);
    reply r;
    const bool ok = parses([&] { r = parse_reply(b, fds); });
    bool model = size >= 24;
    if (model) {
        const std::uint32_t type = load32(data), count = load32(data + 4);
        const std::size_t most = type == 10 ? 64 : (type == 11 || type == 12) ? 256 : 0;
        const std::size_t want_fds = type == 10 ? count : type == 13 ? 1 : 0;
        model = type >= 10 && type <= 14 && count <= most && size == 24 + 8 * std::uint64_t{count} && fds == want_fds;
    }
    if (ok != model) fuzz::fail(ok ? "parse_reply accepted a malformed reply" : "parse_reply refused a reply");
    if (!ok) return;
    const std::vector<std::byte> again = encode_reply(r);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
        fuzz::fail("a reply that does not encode back");
}

void ring(const std::uint8_t* data, std::size_t size) {
    std::vector<std::uint64_t> words(shm_ring::bytes / 8);
    auto* base = reinterpret_cast<std::byte*>(words.data());
    const auto writer = shm_ring::over(base);
    const auto reader = shm_ring::over(base);
    constexpr std::size_t head = 0, tail = 8, entries = 24;  // word indices (ring.hpp's layout)
    std::uint64_t pushed = 0, taken = 0;                       // each end's own count
    for (std::size_t at = 0; at + 9 <= size; at += 9) {
        const std::uint8_t op = data[at];
        const std::uint64_t v = load(data + at + 1);
        switch (op % 4) {
            case 0: {
                const std::uint64_t t = words[tail];
                const auto want = t > pushed || pushed - t > shm_ring::entries ? shm_ring::pushed::corrupt
                                  : pushed - t == shm_ring::entries            ? shm_ring::pushed::full
                                                                               : shm_ring::pushed::ok;
                if (writer->push(v) != want) fuzz::fail("push disagrees with the ring's words");
                if (want == shm_ring::pushed::ok) {
                    if (words[entries + (pushed % shm_ring::entries)] != v || words[head] != pushed + 1)
                        fuzz::fail("push wrote the wrong words");
                    ++pushed;
                }
                break;
            }
            case 1: {
                const std::uint64_t h = words[head];
                const bool sane = h - taken <= shm_ring::entries;
                std::vector<std::uint64_t> want;
                for (std::uint64_t k = taken; sane && k != h; ++k)
                    want.push_back(words[entries + k % shm_ring::entries]);
                std::vector<std::uint64_t> got;
                if (reader->take([&](std::uint64_t e) { got.push_back(e); }) != sane)
                    fuzz::fail("take disagrees with the ring's words about corruption");
                if (got != want) fuzz::fail("take passed other entries than the ring holds");
                if (sane) {
                    taken = h;
                    if (words[tail] != taken) fuzz::fail("take left the reader's count wrong");
                }
                break;
            }
            case 2: words[head] = v; break;
            default:
                if (op >= 128) words[entries + (op / 4 % 4)] = v;
                else words[tail] = v;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
        case 0: requests(data + 1, size - 1); break;
        case 1: replies(data + 1, size - 1); break;
        default: ring(data + 1, size - 1);
    }
    return 0;
}
