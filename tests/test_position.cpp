// Stream positions: the position frame's bytes, its checks, and decoders
// that take a message with one after its tenbin frames.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/core.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace tenbin;
using test_support::check_same;
using test_support::error_text;
using test_support::patterned;

namespace {

stream_position sample_position() {
    stream_position p;
    p.producer = "shard-07";
    p.incarnation = 0x1122334455667788ull;
    p.epoch = 3;
    p.seq = 41;
    p.sent_ns = 1700000000123456789ull;
    p.previous = 9;
    return p;
}

}  // namespace

TEST_CASE("a position frame is the documented bytes and reads back whole") {
    const stream_position p = sample_position();
    const std::vector<std::byte> f = encode_position(p);
    REQUIRE(f.size() == 56 + 8);  // a multiple of 8: no padding
    CHECK(position_frame_size(p) == f.size());
    CHECK(std::memcmp(f.data(), "~TenPos~", 8) == 0);
    CHECK(std::to_integer<int>(f[8]) == 1);  // version
    CHECK(std::to_integer<int>(f[9]) == 0);  // a batch
    CHECK(std::to_integer<int>(f[12]) == 8);  // name length, little endian
    CHECK(std::to_integer<int>(f[16]) == 0x88);  // incarnation's low byte first
    CHECK(std::to_integer<int>(f[24]) == 3);
    CHECK(std::to_integer<int>(f[32]) == 41);
    CHECK(std::to_integer<int>(f[48]) == 9);
    CHECK(std::memcmp(f.data() + 56, "shard-07", 8) == 0);
    CHECK(is_position_frame(f));
    CHECK(decode_position(f) == p);

    for (auto m : {stream_position::mark::epoch_end, stream_position::mark::stream_end}) {
        stream_position q = p;
        q.kind = m;
        CHECK(decode_position(encode_position(q)).kind == m);
    }
    CHECK(std::string(name(stream_position::mark::epoch_end)) == "epoch_end");

    // Another name length: NULs pad the frame to a multiple of 8 bytes, so
    // the frames after it stay aligned; the unpadded frame reads too.
    stream_position q = p;
    q.producer = "bench";
    const std::vector<std::byte> g = encode_position(q);
    REQUIRE(g.size() == 64);
    CHECK(std::memcmp(g.data() + 56, "bench\0\0\0", 8) == 0);
    CHECK(decode_position(g) == q);
    CHECK(decode_position(bytes_view(g.data(), 61)) == q);
    std::vector<std::byte> dirty = g;
    dirty[63] = std::byte{1};
    CHECK_THROWS_AS(decode_position(dirty), error);
    CHECK_THROWS_AS(decode_position(bytes_view(g.data(), 62)), error);
}

TEST_CASE("producer names that cannot travel are refused; malformed frames are typed errors") {
    stream_position p = sample_position();
    for (const std::string& bad : {std::string(), std::string(65, 'a'), std::string("two words"), std::string("\x01")}) {
        p.producer = bad;
        CHECK(error_text([&] { (void)encode_position(p); }).rfind("bad_argument: a producer name", 0) == 0);
    }
    p.producer = std::string(64, 'n');
    CHECK(decode_position(encode_position(p)).producer == p.producer);

    const std::vector<std::byte> good = encode_position(sample_position());
    auto with = [&](std::size_t at, int value) {
        std::vector<std::byte> f = good;
        f[at] = static_cast<std::byte>(value);
        return f;
    };
    CHECK(error_text([&] { (void)decode_position(with(8, 2)); }) ==
          "unsupported: position frame version 2; this build reads 1");
    CHECK(error_text([&] { (void)decode_position(with(9, 3)); }) == "bad_header: position frame: unknown mark 3");
    CHECK(error_text([&] { (void)decode_position(with(12, 9)); }).rfind("bad_header: position frame of 64 bytes", 0) == 0);
    CHECK(error_text([&] { (void)decode_position(with(58, ' ')); }) ==
          "bad_header: position frame: a producer name that is not printable ASCII");
    CHECK(error_text([&] { (void)decode_position(std::span(good).first(47)); }) ==
          "bad_header: a position frame of 47 bytes, under 56");
    CHECK(error_text([&] { (void)decode_position(with(0, 'x')); }) == "bad_magic: not a position frame (no ~TenPos~)");
    CHECK_FALSE(is_position_frame(std::span(good).first(7)));
}

TEST_CASE("decode_list and decode_buffer take a message with a position frame last, and refuse one elsewhere") {
    const std::vector<tensor> batch = {patterned(dtype::f4, {3, 5}, "input"), patterned(dtype::i4, {3}, "target")};
    const std::vector<std::byte> pos = encode_position(sample_position());

    std::vector<buffer> frames = encode_list(batch);
    frames.push_back(buffer::copy(pos));
    check_same(decode_list(frames), batch);

    // The single-part form: one more chunk.
    std::vector<bytes_view> payloads;
    for (const buffer& f : frames) payloads.push_back(f.bytes());
    check_same(decode_buffer(encode_chunks(payloads)), batch);
    // No tensors, only a position (an epoch's end): the empty list.
    CHECK(decode_buffer(encode_chunks(std::vector<bytes_view>{bytes_view(pos)})).empty());

    // A position that is not last leaves an odd pair behind it.
    std::vector<buffer> misplaced = encode_list(batch);
    misplaced.insert(misplaced.begin() + 2, buffer::copy(pos));
    CHECK(error_text([&] { (void)decode_list(misplaced); }) ==
          "bad_header: a position frame (frame 2) that is not the message's last");
    // A broken one is refused even where nobody asks for the position.
    std::vector<std::byte> broken = pos;
    broken[9] = std::byte{7};
    frames.back() = buffer::copy(broken);
    CHECK(error_text([&] { (void)decode_list(frames); }) == "bad_header: position frame: unknown mark 7");
}
