// The +shm protocol (lib/shm/protocol.hpp) and ring (lib/shm/ring.hpp):
// each packet and frame built and parsed back, each malformed one refused
// with its class; the ring over plain memory, its peer's words corrupted.
#include "shm/protocol.hpp"
#include "shm/ring.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace tenbin;
using namespace tenbin::detail;
using namespace tenbin::detail::shm_impl;

namespace {

// The class and text of what `f` throws ("" and "none" when nothing).
template <class F>
std::pair<std::string, std::string> thrown(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return {std::string(name(e.code())), e.what()};
    }
    return {"none", ""};
}

std::vector<std::byte> bytes_of(std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v) out.push_back(static_cast<std::byte>(b));
    return out;
}

}  // namespace

TEST_CASE("the first frame and the descriptor: parsed back, malformed ones refused") {
    const auto first = encode_shm_first({"side", 42, 123456789});
    const shm_first f = parse_shm_first(first);
    CHECK(f.side == "side");
    CHECK(f.seq == 42);
    CHECK(f.claim_by == 123456789);
    std::vector<std::byte> bad(first.begin(), first.end() - 8);  // version 1's length
    CHECK(thrown([&] { parse_shm_first(bad); }).first == "bad_header");
    bad = first;
    bad[12] = std::byte{200};  // name longer than the frame
    CHECK(thrown([&] { parse_shm_first(bad); }).first == "bad_header");
    bad = first;
    bad[8] = std::byte{9};  // version
    CHECK(thrown([&] { parse_shm_first(bad); }).first == "unsupported");
    bad = first;
    bad[0] = std::byte{'x'};
    CHECK(thrown([&] { parse_shm_first(bad); }).first == "bad_magic");
    CHECK(thrown([] { parse_shm_descriptor(std::vector<std::byte>(33)); }).first == "bad_header");
    const shm_descriptor d{3, 42, 128, 4000};
    const auto e = encode_shm_descriptor(d);
    const shm_descriptor back = parse_shm_descriptor(e);
    CHECK(back.segment == 3);
    CHECK(back.generation == 42);
    CHECK(back.offset == 128);
    CHECK(back.length == 4000);
}

TEST_CASE("requests: built and parsed back; a wrong size, type or reserved word is bad_header") {
    for (packet t : {packet::claim, packet::release, packet::claim_quiet, packet::kick}) {
        const auto b = encode_request({t, 77});
        const request r = parse_request(b);
        CHECK(r.type == t);
        CHECK(r.seq == 77);
    }
    std::vector<std::byte> b(17);
    CHECK(thrown([&] { parse_request(b); }).second.find("17 bytes") != std::string::npos);
    const auto ok = encode_request({packet::claim, 1});
    auto bad = std::vector<std::byte>(ok.begin(), ok.end());
    bad[0] = std::byte{11};  // a reply's type
    CHECK(thrown([&] { parse_request(bad); }).first == "bad_header");
    bad = std::vector<std::byte>(ok.begin(), ok.end());
    bad[5] = std::byte{1};
    CHECK(thrown([&] { parse_request(bad); }).second.find("reserved") != std::string::npos);
}

TEST_CASE("replies: built and parsed back; counts, sizes and descriptors checked against their type") {
    const reply r{packet::ok, 42, 123, {5, 6, 7}};
    const auto b = encode_reply(r);
    CHECK(b.size() == 24 + 24);
    const reply back = parse_reply(b, 0);
    CHECK(back.type == packet::ok);
    CHECK(back.seq == 42);
    CHECK(back.clock == 123);
    CHECK(back.ids == r.ids);
    // fds: one descriptor per id, no more than a packet carries.
    const auto fds = encode_reply({packet::fds, 1, 0, {1, 2}});
    CHECK(parse_reply(fds, 2).ids.size() == 2);
    CHECK(thrown([&] { parse_reply(fds, 1); }).second.find("1 descriptors") != std::string::npos);
    CHECK(thrown([&] { parse_reply(encode_reply({packet::fds, 1, 0, std::vector<std::uint64_t>(65)}), 65); }).first ==
          "bad_header");
    // ring: one descriptor, no ids.
    CHECK(parse_reply(encode_reply({packet::ring, 1, 0, {}}), 1).type == packet::ring);
    CHECK(thrown([&] { parse_reply(encode_reply({packet::ring, 1, 0, {}}), 0); }).first == "bad_header");
    CHECK(thrown([&] { parse_reply(encode_reply({packet::ring, 1, 0, {1}}), 1); }).first == "bad_header");
    // ok, gone: no descriptor.
    CHECK(thrown([&] { parse_reply(b, 1); }).first == "bad_header");
    // A count the size does not give, a short packet, a request's type.
    auto bad = b;
    bad[4] = std::byte{4};
    CHECK(thrown([&] { parse_reply(bad, 0); }).second.find("for 4 ids") != std::string::npos);
    CHECK(thrown([&] { parse_reply(bytes_of({11, 0, 0, 0}), 0); }).first == "bad_header");
    // A cut_off says why.
    reply cut;
    cut.type = packet::cut_off;
    cut.reason = cut_reason::peers_full;
    const reply cut_back = parse_reply(encode_reply(cut), 0);
    CHECK(cut_back.reason == cut_reason::peers_full);
    CHECK(why(cut_back.reason).find("max_peers") != std::string::npos);
    bad = b;
    bad[0] = std::byte{1};
    CHECK(thrown([&] { parse_reply(bad, 0); }).second.find("unknown type") != std::string::npos);
    bad = b;
    bad[6] = std::byte{1};  // a count of 65536
    CHECK(thrown([&] { parse_reply(bad, 0); }).second.find("more than") != std::string::npos);
}

TEST_CASE("ring entries carry a sequence number and whether it is a release") {
    for (bool release : {false, true}) {
        const ring_entry e = parse_ring_entry(encode_ring_entry({12345, release}));
        CHECK(e.seq == 12345);
        CHECK(e.release == release);
    }
}

TEST_CASE("a ring passes entries in order until full; a count the other end cannot have written is corrupt") {
    std::vector<std::uint64_t> memory(shm_ring::bytes / 8);
    auto* base = reinterpret_cast<std::byte*>(memory.data());
    auto writer = shm_ring::over(base);
    auto reader = shm_ring::over(base);
    std::vector<std::uint64_t> got;
    for (std::uint64_t k = 0; k < shm_ring::entries; ++k) REQUIRE(writer->push(k) == shm_ring::pushed::ok);
    CHECK(writer->push(999) == shm_ring::pushed::full);
    REQUIRE(reader->take([&](std::uint64_t e) { got.push_back(e); }));
    CHECK(got.size() == shm_ring::entries);
    CHECK(got.back() == shm_ring::entries - 1);
    CHECK(writer->push(999) == shm_ring::pushed::ok);  // room again
    // The reader's count ahead of what was written: never room, never a wait.
    const std::uint64_t tail = memory[8];
    memory[8] = tail + 10;
    CHECK(writer->push(1) == shm_ring::pushed::corrupt);
    memory[8] = tail;
    // The writer's count far past what the ring holds.
    memory[0] = std::uint64_t{1} << 40;
    CHECK_FALSE(reader->take([](std::uint64_t) {}));
    // ... or behind what was taken.
    memory[0] = 1;
    CHECK_FALSE(reader->take([](std::uint64_t) {}));
}
