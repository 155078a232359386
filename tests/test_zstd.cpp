// zstd layers and .ten.zst files: round trips through memory and files for
// every dtype, large data, short reads both ways, the exact plain bytes
// inside, corrupt and truncated input, and files the zstd tool wrote.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/io.hpp>
#include <tenbin/zstd.hpp>

#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace tenbin;
using test_support::check_same;
using test_support::error_class;
using test_support::error_what;
using test_support::file_bytes;
using test_support::patterned;
using test_support::same_bytes;
using test_support::temp_dir;
namespace fs = std::filesystem;

namespace {

std::vector<tensor> sample() {
    return {patterned(dtype::f4, {3, 700}, "input"), patterned(dtype::i4, {5}, "target", 1),
            patterned(dtype::f8, {}, "scalar", 2),   patterned(dtype::u4, {2, 3}, "u4", 3),
            patterned(dtype::u1, {0}, "empty", 4),   patterned(dtype::f2, {2, 0, 3}, "", 5),
            patterned(dtype::i1, {13}, "bytes", 6)};
}

std::vector<std::byte> plain_bytes(tensor_span tensors) {
    memory_sink m;
    write(m, tensors);
    return m.take();
}

std::vector<std::byte> compress(tensor_span tensors, int level = default_zstd_level) {
    memory_sink m;
    zstd_sink z(m, level);
    write(z, tensors);
    z.finish();
    return m.take();
}

std::vector<tensor> decompress(bytes_view compressed, const read_options& opt = {}) {
    memory_source m(compressed);
    zstd_source z(m);
    return read(z, opt);
}

// Decompressed by libzstd's one-shot API, independently of zstd_source.
std::vector<std::byte> zstd_one_shot(bytes_view compressed) {
    ZSTD_DCtx* d = ZSTD_createDCtx();
    std::vector<std::byte> out;
    std::vector<std::byte> block(1 << 16);
    ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
    for (;;) {
        ZSTD_outBuffer o{block.data(), block.size(), 0};
        const std::size_t r = ZSTD_decompressStream(d, &o, &in);
        REQUIRE_FALSE(ZSTD_isError(r));
        out.insert(out.end(), block.begin(), block.begin() + static_cast<std::ptrdiff_t>(o.pos));
        if (r == 0 && in.pos == in.size) break;
        REQUIRE((o.pos > 0 || in.pos < in.size));
    }
    ZSTD_freeDCtx(d);
    return out;
}

// Returns at most `step` bytes per read, like a pipe or a socket.
class trickle_source final : public source {
public:
    trickle_source(source& inner, std::size_t step) : inner_(inner), step_(step) {}
    std::size_t read_some(mutable_bytes out) override {
        return inner_.read_some(out.first(std::min(out.size(), step_)));
    }

private:
    source& inner_;
    std::size_t step_;
};

// Returns the first `first` bytes in one read, then the rest.
class split_source final : public source {
public:
    split_source(source& inner, std::size_t first) : inner_(inner), first_(first) {}
    std::size_t read_some(mutable_bytes out) override {
        if (first_ == 0) return inner_.read_some(out);
        const std::size_t n = inner_.read_some(out.first(std::min(out.size(), first_)));
        first_ -= n;
        return n;
    }

private:
    source& inner_;
    std::size_t first_;
};

// Writes each piece byte by byte, to check that the sink does not depend on
// how writes are cut.
void write_in_bytes(sink& s, bytes_view all) {
    for (std::size_t i = 0; i < all.size(); ++i) {
        const bytes_view one = all.subspan(i, 1);
        s.write({&one, 1});
    }
}

void put_file(const fs::path& p, bytes_view bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

const std::uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};

bool starts_with_zstd_magic(const std::vector<std::byte>& b) {
    return b.size() >= 4 && std::equal(zstd_magic, zstd_magic + 4, b.begin(),
                                       [](std::uint8_t m, std::byte x) { return std::byte(m) == x; });
}

}  // namespace

TEST_CASE("every dtype round-trips through a zstd stream in memory") {
    for (dtype t : all_dtypes) {
        CAPTURE(code(t));
        SUBCASE("shapes") {
            const std::vector<tensor> in{patterned(t, {}, "r0"), patterned(t, {0}, "z"),
                                         patterned(t, {3, 5}, "m", 1), patterned(t, {1, 67}, "odd", 2)};
            const auto compressed = compress(in);
            CHECK(starts_with_zstd_magic(compressed));
            check_same(decompress(compressed), in);
        }
    }
}

TEST_CASE("the decompressed stream is exactly the plain .ten bytes") {
    const auto in = sample();
    for (int level : {1, 3, 9, -5}) {
        CAPTURE(level);
        const auto compressed = compress(in, level);
        CHECK(zstd_one_shot(compressed) == plain_bytes(in));
    }
}

TEST_CASE("large data round-trips and compresses, reading in small pieces") {
    // 24 MiB over three tensors; one of them compressible, one random.
    tensor zeros = tensor::zeros(dtype::f4, {1024, 2048}, "zeros");
    tensor counting = patterned(dtype::u2, {4096, 1024}, "count", 7);
    tensor noise = tensor::zeros(dtype::u8, {1 << 20}, "noise");
    std::mt19937_64 rng(42);
    for (auto& v : noise.mutable_values<std::uint64_t>()) v = rng();
    const std::vector<tensor> in{zeros, counting, noise};

    memory_sink m;
    zstd_sink z(m, 1);
    write(z, in);
    z.finish();
    const std::uint64_t plain = plain_bytes(in).size();
    CHECK(z.bytes_in() == plain);
    CHECK(z.bytes_out() == m.bytes().size());
    CHECK(m.bytes().size() < plain / 2);

    memory_source ms(m.bytes());
    trickle_source slow(ms, 1000);
    zstd_source zs(slow);
    check_same(read(zs), in);
    CHECK(zs.bytes_out() == plain);
    CHECK(zs.bytes_in() == m.bytes().size());
}

TEST_CASE("short reads and writes of any size give the same bytes") {
    const auto in = sample();
    const auto plain = plain_bytes(in);
    const auto compressed = compress(in);
    SUBCASE("compressed input one byte at a time") {
        memory_source ms(compressed);
        trickle_source slow(ms, 1);
        zstd_source z(slow);
        check_same(read(z), in);
    }
    SUBCASE("decompressed output one byte at a time") {
        memory_source ms(compressed);
        zstd_source z(ms);
        std::vector<std::byte> got;
        std::byte one[1];
        while (z.read_some(one) == 1) got.push_back(one[0]);
        CHECK(got == plain);
        CHECK(z.read_some(one) == 0);  // stays at end
    }
    SUBCASE("output buffers of odd sizes") {
        memory_source ms(compressed);
        zstd_source z(ms);
        std::vector<std::byte> got;
        std::vector<std::byte> buf(97);
        while (std::size_t n = z.read_some(buf)) got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        CHECK(got == plain);
    }
    SUBCASE("input written one byte at a time") {
        memory_sink m;
        zstd_sink z(m);
        write_in_bytes(z, plain);
        z.finish();
        CHECK(zstd_one_shot(m.bytes()) == plain);
        check_same(decompress(m.bytes()), in);
    }
}

TEST_CASE("empty streams: no input is truncated (as zstd -d says), an empty frame is an empty list") {
    CHECK(error_class([] { (void)decompress({}); }) == "truncated");
    memory_sink m;
    {
        zstd_sink z(m);
        z.finish();
        const auto once = m.bytes().size();
        CHECK(once > 0);  // a valid, empty frame
        z.finish();       // nothing written since: nothing added
        CHECK(m.bytes().size() == once);
    }
    CHECK(starts_with_zstd_magic(m.bytes()));
    CHECK(decompress(m.bytes()).empty());
    CHECK(zstd_one_shot(m.bytes()).empty());
}

TEST_CASE("concatenated frames read as one stream; flush makes data readable before the end") {
    const auto a = sample();
    const std::vector<tensor> b{patterned(dtype::i8, {9}, "b")};
    memory_sink m;
    zstd_sink z(m);
    write(z, a);
    z.flush();
    const std::size_t after_flush = m.bytes().size();
    {
        // Everything written so far decodes from the bytes out so far,
        // though the frame is still open.
        const std::vector<std::byte> partial(m.bytes());
        memory_source ms(partial);
        zstd_source zs(ms);
        read_options opt;
        opt.count = a.size();
        check_same(read(zs, opt), a);
        // ... and then the open frame is reported, not taken for the end.
        CHECK(error_class([&] { (void)read(zs); }) == "truncated");
    }
    z.finish();
    CHECK(m.bytes().size() > after_flush);
    write(z, b);
    z.finish();
    std::vector<tensor> all = a;
    all.insert(all.end(), b.begin(), b.end());
    check_same(decompress(m.bytes()), all);
}

TEST_CASE("a stream cut anywhere inside a frame is truncated") {
    const std::vector<tensor> in{patterned(dtype::f4, {40}, "x"), patterned(dtype::u1, {3}, "y")};
    const auto compressed = compress(in);
    REQUIRE(compressed.size() > 20);
    for (std::size_t cut = 1; cut < compressed.size(); ++cut) {
        CAPTURE(cut);
        const bytes_view part(compressed.data(), cut);
        CHECK(error_class([&] { (void)decompress(part); }) == "truncated");
    }
    const std::string text = error_what([&] { (void)decompress({compressed.data(), compressed.size() - 1}); });
    CHECK(text.find("inside a frame") != std::string::npos);
}

TEST_CASE("corrupt compressed input is an io_error naming zstd's reason; the source stays failed") {
    const auto in = sample();
    const auto good = compress(in);
    SUBCASE("not zstd at all") {
        const auto plain = plain_bytes(in);
        const std::string text = error_what([&] { (void)decompress(plain); });
        CHECK(error_class([&] { (void)decompress(plain); }) == "io_error");
        CHECK(text.find("corrupt zstd input") != std::string::npos);
        CHECK(text.find("Unknown frame descriptor") != std::string::npos);
    }
    SUBCASE("flipped bits anywhere after the magic") {
        // Each flip that changes the content is caught: by the block
        // decoder, by tenbin's own checks on what comes out, or at the
        // latest by the frame's checksum. A few bits of the zstd format
        // change nothing (an unused header bit, padding in bit streams);
        // those decode to the right tensors.
        std::mt19937 rng(7);
        int caught = 0;
        for (int trial = 0; trial < 200; ++trial) {
            auto bad = good;
            const std::size_t at = 4 + rng() % (bad.size() - 4);
            bad[at] ^= std::byte(1u << (rng() % 8));
            CAPTURE(at);
            std::vector<tensor> out;
            const std::string cls = error_class([&] { out = decompress(bad); });
            if (cls == "no error")
                check_same(out, in);
            else
                ++caught;
        }
        CHECK(caught > 180);
    }
    SUBCASE("a flipped checksum") {
        auto bad = good;
        bad.back() ^= std::byte{0x40};
        const std::string text = error_what([&] { (void)decompress(bad); });
        CHECK(text.find("checksum") != std::string::npos);
    }
    SUBCASE("a frame that is not zstd, whatever the reads' sizes") {
        // libzstd alone, given this one byte and then the rest, ends an
        // empty legacy frame; the source checks the magic number first.
        const std::vector<std::uint8_t> raw = {0x28, 0x27, 0xb5, 0x2f, 0xfd, 0x01, 0x00, 0x00, 0xe9, 0xd8, 0x51};
        std::vector<std::byte> bytes(raw.size());
        std::transform(raw.begin(), raw.end(), bytes.begin(), [](std::uint8_t b) { return std::byte(b); });
        for (std::size_t split = 1; split <= bytes.size(); ++split) {
            CAPTURE(split);
            memory_source ms(bytes);
            split_source cut(ms, split);
            zstd_source z(cut);
            std::vector<std::byte> buf(64);
            const std::string text = error_what([&] { while (z.read_some(buf) > 0) {} });
            CHECK(text.find("Unknown frame descriptor") != std::string::npos);
        }
        // A good stream read one byte at a time still passes its magic.
        memory_source ms(good);
        trickle_source one(ms, 1);
        zstd_source z(one);
        check_same(read(z), in);
    }
    SUBCASE("garbage after the last frame") {
        auto bad = good;
        for (char c : std::string("garbage!")) bad.push_back(std::byte(c));
        CHECK(error_class([&] { (void)decompress(bad); }) == "io_error");
    }
    SUBCASE("errors stick") {
        auto bad = good;
        bad.back() ^= std::byte{0x40};
        memory_source ms(bad);
        zstd_source z(ms);
        std::vector<std::byte> buf(1 << 20);
        CHECK(error_class([&] { while (z.read_some(buf) > 0) {} }) == "io_error");
        CHECK(error_class([&] { (void)z.read_some(buf); }) == "io_error");
    }
}

TEST_CASE("a frame needing a window above max_window_log is refused; invalid settings are unsupported") {
    // Level 19 on 8 MiB uses an 8 MiB window (2^23).
    const std::vector<tensor> in{patterned(dtype::u1, {8 << 20}, "big")};
    const auto compressed = compress(in, 19);
    memory_source ms(compressed);
    zstd_source z(ms, 20);
    const std::string text = error_what([&] { (void)read(z); });
    CHECK(text.find("corrupt zstd input") != std::string::npos);
    CHECK(text.find("memory") != std::string::npos);  // "Frame requires too much memory for decoding"
    memory_source ms2(compressed);
    zstd_source wide(ms2, 24);
    check_same(read(wide), in);

    memory_source empty({});
    CHECK(error_class([&] { zstd_source bad(empty, 5); }) == "unsupported");
}

TEST_CASE("tenbin limits still apply to decompressed streams") {
    const auto compressed = compress(std::vector<tensor>{patterned(dtype::f4, {1000})});
    read_options opt;
    opt.decode.limits.max_bytes = 1000;
    CHECK(error_class([&] { (void)decompress(compressed, opt); }) == "limit_exceeded");
}

TEST_CASE(".ten.zst files save and load transparently, chosen by name or by option") {
    temp_dir dir;
    const auto in = sample();
    const fs::path plain = dir / "a.ten";
    const fs::path zst = dir / "a.ten.zst";
    save(plain, in);
    save(zst, in);
    const auto plain_file = file_bytes(plain);
    const auto zst_file = file_bytes(zst);
    CHECK(starts_with_zstd_magic(zst_file));
    CHECK_FALSE(starts_with_zstd_magic(plain_file));
    CHECK(zstd_one_shot(zst_file) == plain_file);
    check_same(load(zst), in);
    check_same(load_mmap(zst), in);  // decompressed into memory
    for (const tensor& t : load_mmap(zst)) CHECK(t.data().writable());

    SUBCASE("the option overrides the name") {
        file_options none;
        none.compression = compression::none;
        save(dir / "n.ten.zst", in, none);
        CHECK(file_bytes(dir / "n.ten.zst") == plain_file);
        check_same(load(dir / "n.ten.zst", none), in);
        check_same(load_mmap(dir / "n.ten.zst", none), in);
        CHECK(error_class([&] { (void)load(dir / "n.ten.zst"); }) == "io_error");  // taken as zstd

        file_options z;
        z.compression = compression::zstd;
        z.zstd_level = 12;
        save(dir / "z.ten", in, z);
        CHECK(zstd_one_shot(file_bytes(dir / "z.ten")) == plain_file);
        check_same(load(dir / "z.ten", z), in);
        CHECK(error_class([&] { (void)load(dir / "z.ten"); }) == "bad_magic");  // taken as plain
    }
    SUBCASE("names: .ten.zst passes the check, other .zst names need nocheck") {
        CHECK(error_class([&] { save(dir / "a.zst", in); }) == "bad_extension");
        CHECK(error_class([&] { save(dir / "a.ten.gz", in); }) == "bad_extension");
        file_options nocheck;
        nocheck.nocheck = true;
        save(dir / "a.zst", in, nocheck);  // still compressed by name
        CHECK(starts_with_zstd_magic(file_bytes(dir / "a.zst")));
        check_same(load(dir / "a.zst", nocheck), in);
    }
    SUBCASE("empty lists") {
        save(dir / "e.ten.zst", std::vector<tensor>{});
        CHECK(!file_bytes(dir / "e.ten.zst").empty());
        CHECK(load(dir / "e.ten.zst").empty());
        // Zero bytes are not a zstd stream (zstd -d refuses them), and more
        // likely a save cut short than an empty list, which takes a frame.
        put_file(dir / "zero.ten.zst", {});
        CHECK(error_class([&] { (void)load(dir / "zero.ten.zst"); }) == "truncated");
        CHECK(error_class([&] { (void)load_mmap(dir / "zero.ten.zst"); }) == "truncated");
    }
    SUBCASE("corrupt and truncated files name the file") {
        auto bad = zst_file;
        bad[bad.size() / 2] ^= std::byte{0xff};
        bad.back() ^= std::byte{0xff};
        put_file(dir / "bad.ten.zst", bad);
        const std::string text = error_what([&] { (void)load(dir / "bad.ten.zst"); });
        CHECK(error_class([&] { (void)load(dir / "bad.ten.zst"); }) == "io_error");
        CHECK(text.find("bad.ten.zst") != std::string::npos);

        put_file(dir / "cut.ten.zst", bytes_view(zst_file).first(zst_file.size() - 3));
        CHECK(error_class([&] { (void)load(dir / "cut.ten.zst"); }) == "truncated");
        CHECK(error_class([&] { (void)load_mmap(dir / "cut.ten.zst"); }) == "truncated");
    }
    SUBCASE("limits and expected infos apply") {
        file_options lim;
        lim.decode.limits.max_tensors = 2;
        CHECK(error_class([&] { (void)load(zst, lim); }) == "limit_exceeded");
        file_options infos;
        infos.decode.expect_infos = std::vector<std::string>{"wrong"};
        CHECK(error_class([&] { (void)load(zst, infos); }) == "info_mismatch");
        // A file is one list: an empty one has other infos than expected,
        // compressed or not.
        save(dir / "none.ten.zst", std::vector<tensor>{});
        save(dir / "none.ten", std::vector<tensor>{});
        CHECK(error_class([&] { (void)load(dir / "none.ten.zst", infos); }) == "info_mismatch");
        CHECK(error_class([&] { (void)load(dir / "none.ten", infos); }) == "info_mismatch");
    }
}

TEST_CASE("files the zstd tool compressed load, and files saved here decompress with it") {
    if (std::system("command -v zstd >/dev/null 2>&1") != 0) {
        MESSAGE("the zstd program is not installed: skipped");
        return;
    }
    temp_dir dir;
    int checked = 0;
    const auto manifest = test_support::manifest();
    for (const auto& entry : manifest["files"]) {
        if (entry["kind"].get<std::string>() != "ten") continue;
        const std::string name = entry["path"].get<std::string>();
        CAPTURE(name);
        const fs::path original = test_support::vectors_dir() / name;
        const fs::path packed = dir / (fs::path(name).filename().string() + ".zst");
        const std::string cmd = "zstd -q -f -19 -o '" + packed.string() + "' '" + original.string() + "'";
        REQUIRE(std::system(cmd.c_str()) == 0);
        check_same(load(packed), load(original));
        ++checked;
    }
    CHECK(checked >= 10);

    const auto in = sample();
    save(dir / "ours.ten.zst", in);
    save(dir / "ours.ten", in);
    const std::string cmd = "zstd -q -d -f -o '" + (dir / "back.ten").string() + "' '" +
                            (dir / "ours.ten.zst").string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
    CHECK(file_bytes(dir / "back.ten") == file_bytes(dir / "ours.ten"));
}
