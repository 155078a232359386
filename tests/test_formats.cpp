// Conversion formats: .npy, .npz, .safetensors, load_any/save_any, and
// NumPy reading what we write and the other way round.
#include "support.hpp"
#include "io/formats_detail.hpp"

#include <doctest/doctest.h>
#include <tenbin/formats.hpp>
#include <tenbin/io.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <string>

#include <spawn.h>
#include <zlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

using namespace tenbin;
using namespace test_support;

namespace {

// A list with the awkward cases: every dtype, rank 0, zero-size, sizes not
// a multiple of 64, long, empty and non-ASCII names.
std::vector<named_tensor> sample() {
    const shape_t shapes[] = {{3, 5}, {}, {7}, {2, 0, 4}, {1, 65}, {4, 1, 3}};
    std::vector<named_tensor> out;
    unsigned seed = 1;
    for (dtype t : all_dtypes) {
        out.push_back({"t_" + std::string(code(t)), patterned(t, shapes[seed % 6], {}, seed)});
        ++seed;
    }
    out.push_back({"a_name_longer_than_eight", patterned(dtype::f4, {2, 2}, {}, 20)});
    out.push_back({"gr\xc3\xb6\xc3\x9f" "e", patterned(dtype::u2, {3}, {}, 21)});
    return out;
}

// The support overloads for tensors, beside this one for named lists.
using test_support::check_same;

void check_same(const std::vector<named_tensor>& got, const std::vector<named_tensor>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].name == want[i].name);
        check_same(got[i].value, want[i].value);
        // The info carries the name when it fits.
        CHECK(got[i].value.info() == (got[i].name.size() <= 8 && std::all_of(got[i].name.begin(), got[i].name.end(),
                                                                          [](char c) { return c > 0; })
                                          ? got[i].name
                                          : std::string()));
    }
}

buffer as_buffer(const std::vector<std::byte>& v) { return buffer::copy(v); }

std::string text_of(const std::vector<std::byte>& v, std::size_t from, std::size_t n) {
    return {reinterpret_cast<const char*>(v.data() + from), n};
}

std::uint32_t get_u32(const std::vector<std::byte>& v, std::size_t at) {
    std::uint32_t x = 0;
    for (int i = 3; i >= 0; --i) x = (x << 8) | static_cast<std::uint8_t>(v[at + i]);
    return x;
}

// Offsets of every record with `sig` in an archive (test archives hold no
// data that looks like a signature).
std::vector<std::size_t> find_sig(const std::vector<std::byte>& v, std::uint32_t sig) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i + 4 <= v.size(); ++i)
        if (get_u32(v, i) == sig) out.push_back(i);
    return out;
}

// An .npy file with `dict` as its header text and `data` after it.
std::vector<std::byte> npy_with(const std::string& dict, std::size_t data_bytes, int major = 1) {
    std::vector<std::byte> v;
    const std::string magic = "\x93NUMPY";
    for (char c : magic) v.push_back(static_cast<std::byte>(c));
    v.push_back(static_cast<std::byte>(major));
    v.push_back(std::byte{0});
    const std::size_t len_size = major == 1 ? 2 : 4;
    for (std::size_t i = 0; i < len_size; ++i) v.push_back(static_cast<std::byte>(dict.size() >> (8 * i)));
    for (char c : dict) v.push_back(static_cast<std::byte>(c));
    for (std::size_t i = 0; i < data_bytes; ++i) v.push_back(static_cast<std::byte>(i));
    return v;
}

// A .safetensors file with `header` as its JSON text and `data_bytes` of data.
std::vector<std::byte> st_with(const std::string& header, std::size_t data_bytes) {
    std::vector<std::byte> v(8);
    for (int i = 0; i < 8; ++i) v[i] = static_cast<std::byte>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
    for (char c : header) v.push_back(static_cast<std::byte>(c));
    for (std::size_t i = 0; i < data_bytes; ++i) v.push_back(static_cast<std::byte>(i));
    return v;
}

// Every proper prefix of `whole` is refused with a tenbin::error (never a
// crash, never success).
template <class Decode>
void every_prefix_fails(const std::vector<std::byte>& whole, Decode decode) {
    for (std::size_t n = 0; n < whole.size(); ++n) {
        CAPTURE(n);
        const buffer part = buffer::copy({whole.data(), n});
        CHECK(error_class([&] { decode(part); }) != "no error");
    }
}

}  // namespace

// ---- .npy -------------------------------------------------------------------------

TEST_CASE("npy round-trips every dtype and shape, with NumPy's header") {
    const shape_t shapes[] = {{}, {0}, {7}, {3, 5}, {2, 0, 4}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 2}};
    for (dtype t : all_dtypes) {
        for (const shape_t& s : shapes) {
            CAPTURE(code(t));
            CAPTURE(s.size());
            const tensor x = patterned(t, s);
            const std::vector<std::byte> file = encode_npy(x);
            const std::uint16_t hlen = static_cast<std::uint16_t>(file[8]) | static_cast<std::uint16_t>(file[9]) << 8;
            CHECK((10 + hlen) % 64 == 0);
            CHECK(file.size() == 10 + hlen + x.nbytes());
            CHECK(static_cast<char>(file[9 + hlen]) == '\n');
            const tensor back = decode_npy(as_buffer(file));
            check_same(back, x);
            CHECK(back.info().empty());
        }
    }
}

TEST_CASE("npy headers are NumPy's, byte for byte") {
    const std::vector<std::byte> f = encode_npy(patterned(dtype::f4, {3, 5}));
    const std::string header = text_of(f, 10, 118);
    CHECK(text_of(f, 0, 10) == std::string("\x93NUMPY\x01\x00\x76\x00", 10));
    // Room to grow the first dimension: 21 - len("3") spaces, then padding.
    CHECK(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }" + std::string(20, ' ')));
    CHECK(header.ends_with(" \n"));
    CHECK(text_of(encode_npy(patterned(dtype::u1, {4})), 10, 50) == "{'descr': '|u1', 'fortran_order': False, 'shape': ");
    CHECK(text_of(encode_npy(patterned(dtype::u1, {4})), 60, 6) == "(4,), ");
    CHECK(text_of(encode_npy(patterned(dtype::i8, {})), 60, 6) == "(), } ");
}

TEST_CASE("npy data is a slice of the input when aligned, a copy otherwise") {
    const tensor x = patterned(dtype::f8, {4, 4});
    const std::vector<std::byte> file = encode_npy(x);
    const buffer whole = buffer::copy(file);
    const tensor t = decode_npy(whole);
    CHECK(t.data().data() == whole.data() + 128);
    CHECK(t.data().keeper() == whole.keeper());

    // The same file one byte into a buffer: misaligned data is copied.
    std::vector<std::byte> shifted(1);
    shifted.insert(shifted.end(), file.begin(), file.end());
    const buffer outer = buffer::copy(shifted);
    const tensor u = decode_npy(outer.slice(1, file.size()));
    CHECK(u.data().aligned_to(8));
    CHECK(u.data().keeper() != outer.keeper());
    check_same(u, x);
}

TEST_CASE("npy: big-endian data is swapped; Fortran order only where it does not matter") {
    const auto be = npy_with("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }\n", 8);
    const tensor t = decode_npy(as_buffer(be));
    REQUIRE(t.dtype() == dtype::i4);
    CHECK(t.values<std::int32_t>()[0] == 0x00010203);
    CHECK(t.values<std::int32_t>()[1] == 0x04050607);
    // A single byte has no order.
    CHECK(decode_npy(as_buffer(npy_with("{'descr': '>u1', 'fortran_order': False, 'shape': (3,)}", 3))).nbytes() == 3);

    const auto f2d = npy_with("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24);
    CHECK(error_class([&] { (void)decode_npy(as_buffer(f2d)); }) == "unsupported");
    CHECK(error_what([&] { (void)decode_npy(as_buffer(f2d)); }).find("fortran_order") != std::string::npos);
    const auto f1d = npy_with("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 6, 1), }", 24);
    CHECK(decode_npy(as_buffer(f1d)).shape() == shape_t{1, 6, 1});
}

TEST_CASE("npy header dicts are parsed strictly") {
    struct row {
        std::string dict;
        std::string error;
    };
    const row ok = {"{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", "no error"};
    const row rows[] = {
        ok,
        {"{\"descr\": \"<i2\", \"shape\": (3,), \"fortran_order\": False}  \n", "no error"},
        {"{'descr':'<i2','fortran_order':False,'shape':(3L,)}", "no error"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (3), }", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': [3], }", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (-3,), }", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (03,), }", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (99999999999999999999,), }", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (3,), 'extra': 1}", "bad_header"},
        {"{'descr': '<i2', 'descr': '<i2', 'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False}", "bad_header"},
        {"{'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': false, 'shape': (3,)}", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (3,)} x", "bad_header"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (3,)", "bad_header"},
        {"{'descr': '<i2, 'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"{'descr': '<\\i2', 'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"{'descr': '<i2' 'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"'descr': '<i2', 'fortran_order': False, 'shape': (3,)}", "bad_header"},
        {"", "bad_header"},
        {"{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}", "unsupported"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,)}", "unsupported"},
        {"{'descr': '|f4', 'fortran_order': False, 'shape': (3,)}", "unsupported"},
        {"{'descr': [('x', '<i2')], 'fortran_order': False, 'shape': (3,)}", "unsupported"},
    };
    for (const row& r : rows) {
        CAPTURE(r.dict);
        const std::size_t bytes = r.dict.find("'|b1'") != std::string::npos ? 3 : 6;
        CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(r.dict, bytes))); }) == r.error);
    }
    // The message points into the dict.
    CHECK(error_what([&] { (void)decode_npy(as_buffer(npy_with(rows[8].dict, 6))); })
              .find("unexpected key 'extra'") != std::string::npos);
}

TEST_CASE("npy: preamble, versions, sizes and limits") {
    const std::string dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }";
    CHECK(decode_npy(as_buffer(npy_with(dict, 6, 2))).shape() == shape_t{3});
    CHECK(decode_npy(as_buffer(npy_with(dict, 6, 3))).shape() == shape_t{3});
    CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(dict, 6, 4))); }) == "unsupported");
    CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(dict, 5))); }) == "truncated");
    CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(dict, 7))); }) == "data_size_mismatch");
    auto bad = npy_with(dict, 6);
    bad[1] = std::byte{'n'};
    CHECK(error_class([&] { (void)decode_npy(as_buffer(bad)); }) == "bad_magic");
    // A header length beyond the file, and beyond the limit.
    auto longer = npy_with(dict, 6);
    longer[8] = std::byte{0xff};
    longer[9] = std::byte{0xff};
    CHECK(error_class([&] { (void)decode_npy(as_buffer(longer)); }) == "truncated");
    format_options small;
    small.max_header_bytes = 16;
    CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(dict, 6)), small); }) == "limit_exceeded");
    format_options few;
    few.limits.max_bytes = 4;
    CHECK(error_class([&] { (void)decode_npy(as_buffer(npy_with(dict, 6)), few); }) == "limit_exceeded");
    few = {};
    few.limits.max_rank = 2;
    CHECK(error_class([&] {
              (void)decode_npy(as_buffer(npy_with("{'descr': '<i2', 'fortran_order': False, 'shape': (1, 1, 1)}", 2)), few);
          }) == "limit_exceeded");
    // An element count beyond 64 bits.
    CHECK(error_class([&] {
              (void)decode_npy(as_buffer(npy_with(
                  "{'descr': '<i2', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2)}", 0)));
          }) == "bad_header");
}

TEST_CASE("npy: every truncation of a valid file is refused") {
    every_prefix_fails(encode_npy(patterned(dtype::u2, {3, 3})), [](const buffer& b) { (void)decode_npy(b); });
    every_prefix_fails(encode_npy(patterned(dtype::f8, {})), [](const buffer& b) { (void)decode_npy(b); });
}

// ---- .npz -------------------------------------------------------------------------

TEST_CASE("npz round-trips names, dtypes, rank 0 and zero-size tensors") {
    const auto want = sample();
    const std::vector<std::byte> file = encode_npz(want);
    check_same(decode_npz(as_buffer(file)), want);
    CHECK(decode_npz(as_buffer(encode_npz(std::vector<named_tensor>{}))).empty());

    // Unnamed tensors get NumPy's positional names.
    std::vector<named_tensor> unnamed = {{"", patterned(dtype::u1, {2})}, {"x", patterned(dtype::u1, {1})},
                                         {"", patterned(dtype::u1, {3})}};
    const auto back = decode_npz(as_buffer(encode_npz(unnamed)));
    REQUIRE(back.size() == 3);
    CHECK(back[0].name == "arr_0");
    CHECK(back[1].name == "x");
    CHECK(back[2].name == "arr_2");
}

TEST_CASE("npz writing refuses names it cannot store") {
    std::vector<named_tensor> twice = {{"a", patterned(dtype::u1, {2})}, {"a", patterned(dtype::u1, {2})}};
    CHECK(error_class([&] { (void)encode_npz(twice); }) == "bad_argument");
    CHECK(error_what([&] { (void)encode_npz(twice); }).find("'a'") != std::string::npos);
    std::vector<named_tensor> clash = {{"arr_1", patterned(dtype::u1, {2})}, {"", patterned(dtype::u1, {2})}};
    CHECK(error_class([&] { (void)encode_npz(clash); }) == "bad_argument");
    std::vector<named_tensor> bad_utf8 = {{"a\xff", patterned(dtype::u1, {2})}};
    CHECK(error_class([&] { (void)encode_npz(bad_utf8); }) == "bad_argument");
    CHECK(error_class([&] { (void)encode_safetensors(bad_utf8); }) == "bad_argument");
}

TEST_CASE("one rule for names: NUL is refused by every reader and writer") {
    const std::vector<named_tensor> nul = {{std::string("a\0b", 3), patterned(dtype::u1, {2})}};
    CHECK(error_class([&] { (void)encode_npz(nul); }) == "bad_argument");
    CHECK(error_class([&] { (void)encode_safetensors(nul); }) == "bad_argument");
    // The same names read from files: refused with the same words.
    const auto st = st_with(R"({"a\u0000b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 2);
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(st)); }) == "bad_header");
    CHECK(error_what([&] { (void)decode_safetensors(as_buffer(st)); }).find("NUL") != std::string::npos);
    // An archive written with "aXb", then the name's X turned into NUL in
    // both headers (a zip's checksums do not cover names).
    std::vector<std::byte> npz = encode_npz(std::vector<named_tensor>{{"aXb", patterned(dtype::u1, {2})}});
    std::size_t patched = 0;
    for (std::size_t i = 0; i + 7 <= npz.size(); ++i)
        if (text_of(npz, i, 7) == "aXb.npy") {
            npz[i + 1] = std::byte{0};
            ++patched;
        }
    REQUIRE(patched == 2);
    CHECK(error_class([&] { (void)decode_npz(as_buffer(npz)); }) == "bad_header");
    CHECK(error_what([&] { (void)decode_npz(as_buffer(npz)); }).find("NUL") != std::string::npos);
    // What a reader accepts, the writers take back.
    const auto ok = st_with(R"({"a\u0001b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 2);
    const auto back = decode_safetensors(as_buffer(ok));
    CHECK(decode_safetensors(as_buffer(encode_safetensors(back)))[0].name == "a\1b");
    CHECK(decode_npz(as_buffer(encode_npz(back)))[0].name == "a\1b");
}

TEST_CASE("the empty file of every format is refused or empty, never undefined") {
    // An empty buffer's data() is null: decoders must not hand it to memcmp
    // (UBSan caught the npy decoder doing so).
    const buffer nothing;
    CHECK(error_class([&] { (void)decode_npy(nothing); }) == "truncated");
    CHECK(error_class([&] { (void)decode_npz(nothing); }) != "no error");
    CHECK(error_class([&] { (void)decode_safetensors(nothing); }) == "truncated");
    temp_dir dir;
    for (const char* name : {"e.ten", "e.ten.zst", "e.npy", "e.npz", "e.safetensors"}) {
        CAPTURE(name);
        const fs::path path = dir / name;
        std::ofstream(path, std::ios::binary).close();
        REQUIRE(fs::file_size(path) == 0);
        const std::string_view n = name;
        if (n.ends_with(".ten")) {
            // Zero tensors: the empty list, as Python reads it.
            CHECK(load(path).empty());
            CHECK(load_mmap(path).empty());
            CHECK(load_any(path).empty());
        } else if (n.ends_with(".zst")) {
            // Not a zstd frame: nothing says what it held.
            CHECK(error_class([&] { (void)load(path); }) != "no error");
            CHECK(error_class([&] { (void)load_mmap(path); }) != "no error");
            CHECK(error_class([&] { (void)load_any(path); }) != "no error");
        } else {
            CHECK(error_class([&] { (void)load_any(path); }) != "no error");
            // The .ten loaders, told to ignore the name, read zero tensors.
            file_options any;
            any.nocheck = true;
            CHECK(load(path, any).empty());
            CHECK(load_mmap(path, any).empty());
        }
    }
    CHECK(error_class([&] { (void)load_npy(dir / "e.npy"); }) == "truncated");
    CHECK(error_class([&] { (void)load_npz(dir / "e.npz"); }) != "no error");
    CHECK(error_class([&] { (void)load_safetensors(dir / "e.safetensors"); }) == "truncated");
}

TEST_CASE("the safetensors writer takes 80,000 metadata keys and 65,536 tensors in linear time") {
    // Each took 15 to 45 s when every key went into an ordered JSON object
    // that searched the keys before it.
    safetensors_metadata meta;
    for (int i = 0; i < 80000; ++i) meta.emplace_back("k" + std::to_string(i), std::to_string(i));
    std::vector<named_tensor> many;
    for (int i = 0; i < 65536; ++i) many.push_back({"t" + std::to_string(i), patterned(dtype::u1, {1}, {}, i)});
    const auto file = encode_safetensors(many, meta);
    const auto back = decode_safetensors_with_metadata(as_buffer(file));
    CHECK(back.metadata == meta);
    REQUIRE(back.tensors.size() == many.size());
    CHECK(back.tensors.back().name == "t65535");
    check_same(back.tensors.back().value, many.back().value);
    // Duplicates are still found.
    meta.emplace_back("k5", "again");
    CHECK(error_what([&] { (void)encode_safetensors(many, meta); }).find("'k5' given twice") != std::string::npos);
}

TEST_CASE("npz archives are checked against their central directory") {
    const std::vector<named_tensor> two = {{"a", patterned(dtype::i4, {5})}, {"b", patterned(dtype::i4, {3})}};
    const std::vector<std::byte> good = encode_npz(two);
    const auto locals = find_sig(good, 0x04034b50);
    const auto centrals = find_sig(good, 0x02014b50);
    const auto ends = find_sig(good, 0x06054b50);
    REQUIRE(locals.size() == 2);
    REQUIRE(centrals.size() == 2);
    REQUIRE(ends.size() == 1);
    auto decode = [](const std::vector<std::byte>& v) { return decode_npz(buffer::copy(v)); };

    SUBCASE("a compressed member is unsupported, by name") {
        auto v = good;
        store_le(v, locals[1] + 8, 2, 8);
        store_le(v, centrals[1] + 10, 2, 8);
        CHECK(error_class([&] { decode(v); }) == "unsupported");
        const std::string m = error_what([&] { decode(v); });
        CHECK(m.find("'b.npy'") != std::string::npos);
        CHECK(m.find("deflate") != std::string::npos);
    }
    SUBCASE("an encrypted member is unsupported") {
        auto v = good;
        store_le(v, centrals[0] + 8, 2, 1);
        CHECK(error_class([&] { decode(v); }) == "unsupported");
    }
    SUBCASE("corrupt data fails its CRC-32") {
        auto v = good;
        v[centrals[0] - 1] ^= std::byte{1};  // the last data byte of b
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        CHECK(error_what([&] { decode(v); }).find("CRC-32") != std::string::npos);
    }
    SUBCASE("a local header offset beyond the members") {
        auto v = good;
        store_le(v, centrals[1] + 42, 4, static_cast<std::uint32_t>(centrals[0] + 4));
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        store_le(v, centrals[1] + 42, 4, 0xfffffff0);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
    }
    SUBCASE("a member whose data runs into the next one overlaps it") {
        auto v = good;
        const std::uint32_t size = get_u32(v, centrals[0] + 20) + 8;
        for (std::size_t at : {locals[0] + 18, locals[0] + 22, centrals[0] + 20, centrals[0] + 24}) store_le(v, at, 4, size);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        CHECK(error_what([&] { decode(v); }).find("overlaps") != std::string::npos);
    }
    SUBCASE("two entries for one member") {
        auto v = good;
        store_le(v, centrals[1] + 42, 4, 0);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
    }
    SUBCASE("local and central headers disagree") {
        auto v = good;
        store_le(v, locals[0] + 14, 4, get_u32(v, locals[0] + 14) ^ 1);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
    }
    SUBCASE("the end record's counts and offsets must hold") {
        auto v = good;
        store_le(v, ends[0] + 8, 2, 3);
        store_le(v, ends[0] + 10, 2, 3);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        v = good;
        store_le(v, ends[0] + 16, 4, get_u32(v, ends[0] + 16) - 1);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        v = good;
        store_le(v, ends[0] + 12, 4, 0xffffff00);
        CHECK(error_class([&] { decode(v); }) == "bad_header");
        v = good;
        store_le(v, ends[0] + 4, 2, 1);
        CHECK(error_class([&] { decode(v); }) == "unsupported");
        format_options one;
        one.limits.max_tensors = 1;
        CHECK(error_class([&] { (void)decode_npz(buffer::copy(good), one); }) == "limit_exceeded");
    }
    SUBCASE("members that are not .npy files") {
        auto v = good;
        v[centrals[0] + 46 + 2] = std::byte{'t'};  // "a.tpy"
        v[locals[0] + 30 + 2] = std::byte{'t'};
        CHECK(error_class([&] { decode(v); }) == "unsupported");
    }
    SUBCASE("a bad npy member names the member") {
        auto v = good;
        const std::size_t data = locals[1] + 30 + 5, size = get_u32(v, centrals[1] + 20);
        v[data + 1] = std::byte{'X'};  // b.npy's magic, with a CRC-32 to match
        const auto crc = static_cast<std::uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(&v[data]), size));
        store_le(v, locals[1] + 14, 4, crc);
        store_le(v, centrals[1] + 16, 4, crc);
        CHECK(error_class([&] { decode(v); }) == "bad_magic");
        CHECK(error_what([&] { decode(v); }).find("member 'b.npy'") != std::string::npos);
    }
    SUBCASE("ZIP64 end records are followed") {
        const std::size_t e = ends[0];
        std::vector<std::byte> v(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(e));
        auto le = [&](std::uint64_t x, int n) {
            for (int i = 0; i < n; ++i) v.push_back(static_cast<std::byte>(x >> (8 * i)));
        };
        le(0x06064b50, 4), le(44, 8), le(45, 2), le(45, 2), le(0, 4), le(0, 4);
        le(2, 8), le(2, 8), le(get_u32(good, e + 12), 8), le(get_u32(good, e + 16), 8);
        le(0x07064b50, 4), le(0, 4), le(e, 8), le(1, 4);
        le(0x06054b50, 4), le(0, 2), le(0, 2), le(0xffff, 2), le(0xffff, 2), le(0xffffffff, 4), le(0xffffffff, 4), le(0, 2);
        const auto back = decode(v);
        REQUIRE(back.size() == 2);
        CHECK(back[1].name == "b");
        check_same(back[1].value, two[1].value);
        // A locator pointing elsewhere.
        store_le(v, v.size() - 22 - 20 + 8, 4, static_cast<std::uint32_t>(e + 1));
        CHECK(error_class([&] { decode(v); }) == "bad_header");
    }
    SUBCASE("not a zip at all") {
        std::vector<std::byte> junk(100, std::byte{'x'});
        CHECK(error_class([&] { decode(junk); }) == "bad_magic");
    }
    SUBCASE("every truncation is refused") {
        every_prefix_fails(good, [](const buffer& b) { (void)decode_npz(b); });
    }
}

// ---- .safetensors -------------------------------------------------------------------

TEST_CASE("safetensors round-trips in the given order with an aligned data section") {
    const auto want = sample();
    const std::vector<std::byte> file = encode_safetensors(want);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(file[i]);
    CHECK((8 + n) % 8 == 0);
    CHECK(text_of(file, 8, 2) == "{\"");
    check_same(decode_safetensors(as_buffer(file)), want);
    CHECK(decode_safetensors(as_buffer(encode_safetensors(std::vector<named_tensor>{}))).empty());
}

TEST_CASE("safetensors tensors come in data order, whatever the header order") {
    const std::string h =
        R"({"b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}, "__metadata__": {"format": "pt"},)"
        R"( "a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}, "z": {"dtype": "F32", "shape": [0], "data_offsets": [6, 6]}})";
    const auto got = decode_safetensors(as_buffer(st_with(h, 6)));
    REQUIRE(got.size() == 3);
    CHECK(got[0].name == "a");
    CHECK(got[0].value.dtype() == dtype::i2);
    CHECK(got[1].name == "b");
    CHECK(got[1].value.shape() == shape_t{2});
    CHECK(got[2].name == "z");
    CHECK(got[2].value.nbytes() == 0);
    const safetensors_contents with = decode_safetensors_with_metadata(as_buffer(st_with(h, 6)));
    CHECK(with.metadata == safetensors_metadata{{"format", "pt"}});
    CHECK(with.tensors.size() == 3);
}

TEST_CASE("safetensors metadata is written first and read back in order") {
    const auto want = sample();
    const safetensors_metadata meta = {{"format", "pt"}, {"note", "gr\xc3\xbc\xc3\x9f" "e \"quoted\""}, {"a", ""}};
    const std::vector<std::byte> file = encode_safetensors(want, meta);
    // Hugging Face's loaders look for it; the safetensors library puts it first.
    CHECK(text_of(file, 8, 30) == R"({"__metadata__":{"format":"pt")");
    const safetensors_contents got = decode_safetensors_with_metadata(as_buffer(file));
    CHECK(got.metadata == meta);
    check_same(got.tensors, want);
    check_same(decode_safetensors(as_buffer(file)), want);

    // None given, none written; none read from a file without it.
    const std::vector<std::byte> plain = encode_safetensors(want);
    CHECK(text_of(plain, 8, 200).find("__metadata__") == std::string::npos);
    CHECK(decode_safetensors_with_metadata(as_buffer(plain)).metadata.empty());

    temp_dir dir;
    save_safetensors(dir / "m.safetensors", want, meta);
    const safetensors_contents loaded = load_safetensors_with_metadata(dir / "m.safetensors");
    CHECK(loaded.metadata == meta);
    check_same(loaded.tensors, want);

    const safetensors_metadata twice = {{"format", "pt"}, {"format", "tf"}};
    CHECK(error_what([&] { (void)encode_safetensors(want, twice); }).find("'format' given twice") != std::string::npos);
    CHECK(error_class([&] { (void)encode_safetensors(want, {{"k\xff", "v"}}); }) == "bad_argument");
    CHECK(error_class([&] { (void)encode_safetensors(want, {{"k", "v\xc3"}}); }) == "bad_argument");
    CHECK(error_class([&] { save_safetensors(dir / "bad.safetensors", want, twice); }) == "bad_argument");
    CHECK(!std::filesystem::exists(dir / "bad.safetensors"));
}

TEST_CASE("safetensors headers are checked as strictly as tenbin chunks") {
    struct row {
        std::string header;
        std::size_t data;
        std::string error;
        std::string says;
    };
    const std::string a = R"("a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]})";
    const row rows[] = {
        {"{" + a + "}", 4, "no error", ""},
        {"{" + a + "}    ", 4, "no error", ""},
        {"{" + a + "}", 6, "bad_header", "belong to no tensor"},
        {"{" + a + "}", 2, "length_beyond_end", "run past the data section"},
        {R"({"a": {"dtype": "I16", "shape": [3], "data_offsets": [0, 4]}})", 4, "data_size_mismatch", "need 6"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [4, 0]}})", 4, "bad_header", "end before"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [2, 6]}})", 6, "bad_header", "belong to no tensor"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
         6, "bad_header", "overlap"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}, "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
         8, "bad_header", "twice"},
        {R"({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 4, "unsupported", "BF16"},
        {R"({"a": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}})", 4, "unsupported", "BOOL"},
        {R"({"a": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", 4, "unsupported", "F8_E4M3"},
        {R"({"a": {"dtype": "I16", "shape": [-2], "data_offsets": [0, 4]}})", 4, "bad_header", "dimension 0"},
        {R"({"a": {"dtype": "I16", "shape": [2.0], "data_offsets": [0, 4]}})", 4, "bad_header", "dimension 0"},
        {R"({"a": {"dtype": "I16", "shape": 2, "data_offsets": [0, 4]}})", 4, "bad_header", "shape"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0]}})", 4, "bad_header", "data_offsets"},
        {R"({"a": {"dtype": "I16", "shape": [2]}})", 4, "bad_header", "needs"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4], "x": 1}})", 4, "bad_header", "'x'"},
        {R"({"a": {"dtype": 3, "shape": [2], "data_offsets": [0, 4]}})", 4, "bad_header", "dtype"},
        {R"({"a": [1]})", 4, "bad_header", "not an object"},
        {R"({"__metadata__": {"k": 1}})", 0, "bad_header", "__metadata__"},
        {R"({"__metadata__": {"k": "1", "k": "2"}})", 0, "bad_header", "'k' twice"},
        {R"({"a": {"dtype": "I16", "dtype": "U8", "shape": [2], "data_offsets": [0, 4]}})", 4, "bad_header",
         "'dtype' twice"},
        {R"({"a": {"dtype": "I16", "shape": [4294967296, 4294967296, 2], "data_offsets": [0, 4]}})", 4, "bad_header",
         "overflows"},
        {R"([1, 2])", 0, "bad_header", "start with"},
        {R"({"a": )", 0, "bad_header", "JSON"},
        {"{\"a\xff\": 1}", 0, "bad_header", "JSON"},
        {"", 0, "bad_header", "start with"},
        {"{}", 0, "no error", ""},
        // Deep nesting is refused where it starts.
        {"{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}", 0, "bad_header", "not an object"},
        {R"({"a": {"dtype": "I16", "shape": [[2]], "data_offsets": [0, 4]}})", 4, "bad_header", "dimension 0"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4, 4]}})", 4, "bad_header", "two offsets"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, -4]}})", 4, "bad_header", "end offset"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": {}}})", 4, "bad_header", "two offsets"},
        {R"({"__metadata__": {"k": {"deeper": "1"}}})", 0, "bad_header", "value of 'k'"},
        {R"({"__metadata__": [], "a": 1})", 0, "bad_header", "'__metadata__' is not an object"},
        {R"({"__metadata__": {}, "__metadata__": {}})", 0, "bad_header", "twice"},
        {R"({"a": null})", 0, "bad_header", "not an object"},
        {R"({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}} {})", 4, "bad_header", "JSON"},
    };
    for (const row& r : rows) {
        CAPTURE(r.header);
        const auto file = st_with(r.header, r.data);
        CHECK(error_class([&] { (void)decode_safetensors(as_buffer(file)); }) == r.error);
        if (!r.says.empty()) {
            const std::string m = error_what([&] { (void)decode_safetensors(as_buffer(file)); });
            CAPTURE(m);
            CHECK(m.find(r.says) != std::string::npos);
        }
    }
}

TEST_CASE("safetensors headers of many keys parse in linear time and are bounded by max_tensors") {
    // 300,000 keys: with a tree of ordered objects, each insert searched
    // those before it (hours); read as it is parsed, a fraction of a second.
    std::string header = "{";
    for (int i = 0; i < 300000; ++i)
        header += (i ? ",\"" : "\"") + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
    header += "}";
    const auto file = st_with(header, 0);
    format_options many;
    many.limits.max_tensors = 300000;
    CHECK(decode_safetensors(as_buffer(file), many).size() == 300000);
    // The default bound refuses the 65,537th key as it is read.
    const std::string m = error_what([&] { (void)decode_safetensors(as_buffer(file)); });
    CHECK(m.find("limits::max_tensors = 65536") != std::string::npos);
}

TEST_CASE("safetensors: header lengths, limits and truncation") {
    auto v = st_with("{}", 0);
    // A length of 2^63: beyond the file.
    v[7] = std::byte{0x80};
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(v)); }) == "length_beyond_end");
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(std::vector<std::byte>(5))); }) == "truncated");
    format_options small;
    small.max_header_bytes = 4;
    const auto file = encode_safetensors(sample());
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(file), small); }) == "limit_exceeded");
    CHECK(error_what([&] { (void)decode_safetensors(as_buffer(file), small); }).find("max_header_bytes") !=
          std::string::npos);
    format_options few;
    few.limits.max_tensors = 3;
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(file), few); }) == "limit_exceeded");
    few = {};
    few.limits.max_bytes = 10;
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(file), few); }) == "limit_exceeded");
    few = {};
    few.limits.max_rank = 1;
    CHECK(error_class([&] { (void)decode_safetensors(as_buffer(file), few); }) == "limit_exceeded");
    every_prefix_fails(encode_safetensors(std::vector<named_tensor>{{"x", patterned(dtype::f4, {3})},
                                                                    {"y", patterned(dtype::u1, {})}}),
                       [](const buffer& b) { (void)decode_safetensors(b); });
    std::vector<named_tensor> reserved = {{"__metadata__", patterned(dtype::u1, {1})}};
    CHECK(error_class([&] { (void)encode_safetensors(reserved); }) == "bad_argument");
}

// ---- files, load_any / save_any ----------------------------------------------------

TEST_CASE("files of every format round-trip through load_any and save_any") {
    temp_dir dir;
    const auto want = sample();
    for (const char* name : {"x.npz", "x.safetensors"}) {
        CAPTURE(name);
        save_any(dir / name, want);
        check_same(load_any(dir / name), want);
    }
    save_npy(dir / "one.npy", want[0].value);
    check_same(load_npy(dir / "one.npy"), want[0].value);
    const auto one = load_any(dir / "one.npy");
    REQUIRE(one.size() == 1);
    CHECK(one[0].name.empty());

    CHECK(format_of("a.ten.zst") == file_format::ten);
    CHECK(format_of("dir.npz/a.ten") == file_format::ten);
    CHECK(format_of("a.safetensors") == file_format::safetensors);
    CHECK(!format_of("a.txt"));
    CHECK(!format_of("npz"));
    CHECK(error_class([&] { save_any(dir / "x.txt", want); }) == "bad_extension");
    CHECK(error_class([&] { (void)load_any(dir / "x.txt"); }) == "bad_extension");
    CHECK(error_class([&] { save_any(dir / "two.npy", want); }) == "bad_argument");
    CHECK(!fs::exists(dir / "two.npy"));
    CHECK(error_class([&] { (void)load_any(dir / "missing.npz"); }) == "io_error");
    // Errors name the file.
    {
        std::ofstream(dir / "bad.safetensors") << "12345678";
    }
    CHECK(error_what([&] { (void)load_any(dir / "bad.safetensors"); }).find("bad.safetensors") != std::string::npos);
}

TEST_CASE("a failed write leaves an existing file of any format whole, and no new one") {
    temp_dir dir;
    const auto want = sample();
    std::vector<named_tensor> big{{"big", tensor::zeros(dtype::u1, {4 << 20})}};
    for (const char* name : {"x.npy", "x.npz", "x.safetensors", "x.ten"}) {
        CAPTURE(name);
        const std::vector<named_tensor> old{want[0]};
        save_any(dir / name, old);
        auto fails = [&](const fs::path& p) {
            return test_support::with_file_size_limit(1 << 20, [&] { return error_class([&] { save_any(p, big); }); });
        };
        CHECK(fails(dir / name) == "io_error");
        check_same(load_any(dir / name)[0].value, old[0].value);
        CHECK(fails(dir / ("new-" + std::string(name))) == "io_error");
        CHECK(!fs::exists(dir / ("new-" + std::string(name))));
    }
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
    CHECK(files == 4);  // no temporary left behind
}

TEST_CASE("names that cannot be infos are refused when writing .ten, never truncated") {
    temp_dir dir;
    const fs::path out = dir / "out.ten";
    std::vector<named_tensor> list = {{"short", patterned(dtype::u1, {2})},
                                      {"much_too_long", patterned(dtype::u1, {2})}};
    CHECK(error_class([&] { save_any(out, list); }) == "bad_argument");
    const std::string m = error_what([&] { save_any(out, list); });
    CHECK(m.find("'much_too_long'") != std::string::npos);
    CHECK(!fs::exists(out));
    list[1].name = "caf\xc3\xa9";
    CHECK(error_class([&] { save_any(out, list); }) == "bad_argument");
    CHECK(error_class([&] { (void)to_tensors(list); }) == "bad_argument");
    list[1].name = "abcdefgh";
    save_any(out, list);
    const auto back = load(out);
    REQUIRE(back.size() == 2);
    CHECK(back[1].info() == "abcdefgh");
    const auto again = named(back);
    CHECK(again[0].name == "short");
    CHECK(to_tensors(again)[1].info() == "abcdefgh");
}

TEST_CASE("every valid .ten vector survives each format and back") {
    temp_dir dir;
    const auto m = manifest();
    int done = 0;
    for (const auto& entry : m["files"]) {
        if (entry["kind"] != "ten") continue;
        const std::string path = entry["path"];
        CAPTURE(path);
        const auto original = load_any(vectors_dir() / path);
        // .npz and .safetensors give unnamed tensors NumPy's names.
        std::vector<named_tensor> want = original;
        for (std::size_t i = 0; i < want.size(); ++i)
            if (want[i].name.empty()) want[i] = {"arr_" + std::to_string(i), want[i].value.with_info("arr_" + std::to_string(i))};
        for (const char* ext : {".npz", ".safetensors"}) {
            CAPTURE(ext);
            const fs::path f = dir / (path + ext);
            save_any(f, original);
            const auto back = load_any(f);
            check_same(back, want);
            // And back to .ten: the same tensors; byte-identical to the
            // vector when every tensor had a name.
            const fs::path t = dir / (path + ext + ".ten");
            save_any(t, back);
            const auto again = load(t);
            REQUIRE(again.size() == want.size());
            for (std::size_t i = 0; i < again.size(); ++i) {
                check_same(again[i], want[i].value);
                CHECK(again[i].info() == want[i].name);
            }
            if (std::none_of(original.begin(), original.end(), [](const named_tensor& n) { return n.name.empty(); }))
                CHECK(same_bytes(read_file(t).bytes(), read_file(vectors_dir() / path).bytes()));
        }
        for (std::size_t i = 0; i < original.size(); ++i) {
            const fs::path f = dir / (path + std::to_string(i) + ".npy");
            save_any(f, std::span(&original[i], 1));
            check_same(load_npy(f), original[i].value);
        }
        ++done;
    }
    CHECK(done >= 10);
}

// ---- NumPy ----------------------------------------------------------------------------

namespace {

// Runs tests/peers/formats_peer.py MODE DIR with $TENBIN_PYTHON; returns
// its exit status (its output goes to the test's log).
int run_peer(const std::string& mode, const fs::path& dir) {
    const char* python = std::getenv("TENBIN_PYTHON");
    const char* tests = std::getenv("TENBIN_TESTS_DIR");
    REQUIRE_MESSAGE((python && tests), "TENBIN_PYTHON and TENBIN_TESTS_DIR must be set (meson test sets them)");
    std::vector<std::string> args = {python, std::string(tests) + "/peers/formats_peer.py", mode, dir.string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn " << args[0] << ": " << std::strerror(rc));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) REQUIRE(errno == EINTR);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

nlohmann::json describe(const std::string& name, const tensor& t) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string h;
    for (std::byte b : t.data().bytes()) {
        h += hex[static_cast<unsigned>(b) >> 4];
        h += hex[static_cast<unsigned>(b) & 15];
    }
    return {{"name", name}, {"dtype", std::string(code(t.dtype()))}, {"shape", t.shape()}, {"hex", h}};
}

}  // namespace

TEST_CASE("NumPy reads the .npy and .npz files we write, and our safetensors") {
    temp_dir dir;
    const auto list = sample();
    nlohmann::json expected = {{"npy", nlohmann::json::object()}, {"npz", nlohmann::json::object()},
                               {"safetensors", nlohmann::json::object()}};
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string f = numbered("t", i) + ".npy";
        save_npy(dir / f, list[i].value);
        expected["npy"][f] = describe("", list[i].value);
    }
    auto all = nlohmann::json::array();
    for (const auto& n : list) all.push_back(describe(n.name, n.value));
    save_npz(dir / "all.npz", list);
    expected["npz"]["all.npz"] = all;
    save_npz(dir / "none.npz", std::vector<named_tensor>{});
    expected["npz"]["none.npz"] = nlohmann::json::array();
    save_safetensors(dir / "all.safetensors", list);
    expected["safetensors"]["all.safetensors"] = all;
    const safetensors_metadata meta = {{"format", "pt"}, {"z", "\xc3\xa9t\xc3\xa9"}, {"a", "x"}};
    save_safetensors(dir / "meta.safetensors", list, meta);
    expected["safetensors"]["meta.safetensors"] = all;
    expected["safetensors_metadata"]["meta.safetensors"] = meta;
    std::ofstream(dir / "expected.json") << expected.dump();
    CHECK(run_peer("check", dir.path()) == 0);
}

TEST_CASE("we read the .npy and .npz files NumPy writes") {
    temp_dir dir;
    REQUIRE(run_peer("write", dir.path()) == 0);
    std::ifstream in(dir / "expected.json");
    const auto expected = nlohmann::json::parse(in);
    REQUIRE(expected["npy"].size() >= 12);
    // Named, not structured, bindings: clang 14 cannot capture those (CAPTURE).
    for (const auto& item : expected["npy"].items()) {
        const std::string file = item.key();
        const auto& want = item.value();
        CAPTURE(file);
        CHECK(describe("", load_npy(dir / file)) == want);
    }
    for (const auto& item : expected["npz"].items()) {
        const std::string file = item.key();
        const auto& want = item.value();
        CAPTURE(file);
        auto got = nlohmann::json::array();
        for (const auto& n : load_npz(dir / file)) got.push_back(describe(n.name, n.value));
        CHECK(got == want);
    }
    for (const auto& item : expected["refused"].items()) {
        const std::string file = item.key();
        const auto& cls = item.value();
        CAPTURE(file);
        CHECK(error_class([&] { (void)load_any(dir / file); }) == cls.get<std::string>());
    }
}

// ---- .npz with ZIP64 ------------------------------------------------------------------

namespace {

constexpr std::uint64_t ff = 0xffffffff;

std::uint64_t le(bytes_view v, std::uint64_t at, std::size_t n) {
    REQUIRE(at + n <= v.size());
    return detail::load_le(v.data() + at, n);
}

// What ZIP64 changes in a local or central header: "made by" (central
// only), "version needed", the size and offset fields (offset: central
// only), and the values of its ZIP64 extra field (none without one).
struct zip_entry {
    std::uint64_t made_by, version, csize, usize, offset;
    std::vector<std::uint64_t> wide;
    bool operator==(const zip_entry&) const = default;
};

std::ostream& operator<<(std::ostream& out, const zip_entry& e) {
    out << std::hex << "{made by " << e.made_by << ", version " << e.version << ", sizes " << e.csize << " "
        << e.usize << ", offset " << e.offset << ", ZIP64 extra:";
    for (std::uint64_t w : e.wide) out << " " << w;
    return out << "}" << std::dec;
}

// The values of the extra field of `len` bytes at `at`, which must be a
// single ZIP64 field when not empty.
std::vector<std::uint64_t> zip64_values(bytes_view v, std::uint64_t at, std::uint64_t len) {
    std::vector<std::uint64_t> out;
    if (len == 0) return out;
    CHECK(le(v, at, 2) == 1);
    CHECK(le(v, at + 2, 2) == len - 4);
    for (std::uint64_t q = at + 4; q + 8 <= at + len; q += 8) out.push_back(le(v, q, 8));
    return out;
}

zip_entry local_at(bytes_view v, std::uint64_t at) {
    REQUIRE(le(v, at, 4) == 0x04034b50);
    return {0, le(v, at + 4, 2), le(v, at + 18, 4), le(v, at + 22, 4), 0,
            zip64_values(v, at + 30 + le(v, at + 26, 2), le(v, at + 28, 2))};
}

zip_entry central_at(bytes_view v, std::uint64_t at) {
    REQUIRE(le(v, at, 4) == 0x02014b50);
    return {le(v, at + 4, 2), le(v, at + 6, 2), le(v, at + 20, 4), le(v, at + 24, 4), le(v, at + 42, 4),
            zip64_values(v, at + 46 + le(v, at + 28, 2), le(v, at + 30, 2))};
}

// Checks the records after the central directory of `count` entries at
// `cd_offset`: when `zip64`, a ZIP64 end record (right after the directory)
// with the real values and its locator; then the classic end record, whose
// count, size and offset fields hold `classic`.
void check_end(bytes_view v, std::uint64_t count, std::uint64_t cd_offset, bool zip64,
               std::array<std::uint64_t, 3> classic) {
    const std::uint64_t end = v.size() - 22;
    REQUIRE(le(v, end, 4) == 0x06054b50);
    CHECK(le(v, end + 8, 2) == classic[0]);
    CHECK(le(v, end + 10, 2) == classic[0]);
    CHECK(le(v, end + 12, 4) == classic[1]);
    CHECK(le(v, end + 16, 4) == classic[2]);
    CHECK((le(v, end - 20, 4) == 0x07064b50) == zip64);
    if (!zip64) return;
    const std::uint64_t locator = end - 20, record = locator - 56;
    CHECK(le(v, locator + 4, 4) == 0);  // the record's disk
    CHECK(le(v, locator + 8, 8) == record);
    CHECK(le(v, locator + 16, 4) == 1);  // disks
    CHECK(le(v, record, 4) == 0x06064b50);
    CHECK(le(v, record + 4, 8) == 44);
    CHECK(le(v, record + 12, 2) == 45);
    CHECK(le(v, record + 14, 2) == 45);
    CHECK(le(v, record + 16, 8) == 0);  // disks
    CHECK(le(v, record + 24, 8) == count);
    CHECK(le(v, record + 32, 8) == count);
    CHECK(le(v, record + 40, 8) == record - cd_offset);
    CHECK(le(v, record + 48, 8) == cd_offset);
}

nlohmann::json digest(const std::string& name, const tensor& t) {
    return {{"name", name},
            {"dtype", std::string(code(t.dtype()))},
            {"shape", t.shape()},
            {"sha256", sha256_hex(t.data().bytes())}};
}

// NumPy reads the archive `file` in `dir`: np.load lists `names` and gives
// `spot` (some of them) as they are; Python's zipfile (and unzip, when
// installed) find every CRC-32 right.
void check_python_reads(const fs::path& dir, const std::string& file, const std::vector<std::string>& names,
                        const std::vector<named_tensor>& spot) {
    auto tensors = nlohmann::json::array();
    for (const auto& n : spot) tensors.push_back(digest(n.name, n.value));
    nlohmann::json expected;
    expected["npz_spot"][file] = {{"names", names}, {"tensors", tensors}};
    std::ofstream(dir / "expected.json") << expected.dump();
    CHECK(run_peer("check", dir) == 0);
}

}  // namespace

TEST_CASE("npz: ZIP64 wherever a field would overflow (limits lowered to small archives)") {
    const std::vector<named_tensor> three = {{"a", patterned(dtype::u1, {100}, {}, 1)},
                                             {"b", patterned(dtype::u1, {300}, {}, 2)},
                                             {"c", patterned(dtype::f4, {2, 3}, {}, 3)}};
    const std::vector<std::byte> plain = encode_npz(three);
    const auto locals = find_sig(plain, 0x04034b50), centrals = find_sig(plain, 0x02014b50);
    REQUIRE(locals.size() == 3);
    REQUIRE(centrals.size() == 3);
    const std::uint64_t cd_offset = centrals[0], cd_size = plain.size() - 22 - cd_offset;
    std::vector<std::uint64_t> sizes;
    for (std::size_t c : centrals) sizes.push_back(le(plain, c + 20, 4));
    auto write = [&](const detail::npz_limits& limits) { return detail::plan_npz(three, limits).concat(); };
    // The ZIP format's own limits: no ZIP64 byte.
    CHECK(write({}) == plain);
    check_end(plain, 3, cd_offset, false, {3, cd_size, cd_offset});

    std::vector<std::byte> v;
    SUBCASE("a member as large as the limit: its sizes in ZIP64 extra fields") {
        CHECK(write({.member_size = sizes[1] + 1}) == plain);
        v = write({.member_size = sizes[1]});
        const auto l = find_sig(v, 0x04034b50), c = find_sig(v, 0x02014b50);
        REQUIRE(l.size() == 3);
        REQUIRE(c.size() == 3);
        CHECK(local_at(v, l[0]) == local_at(plain, locals[0]));
        CHECK(local_at(v, l[1]) == zip_entry{0, 45, ff, ff, 0, {sizes[1], sizes[1]}});
        CHECK(local_at(v, l[2]) == local_at(plain, locals[2]));
        CHECK(l[2] == locals[2] + 20);
        CHECK(central_at(v, c[0]) == central_at(plain, centrals[0]));
        CHECK(central_at(v, c[1]) == zip_entry{0x032d, 45, ff, ff, l[1], {sizes[1], sizes[1]}});
        CHECK(central_at(v, c[2]) == zip_entry{0x0314, 20, sizes[2], sizes[2], l[2], {}});
        check_end(v, 3, c[0], false, {3, cd_size + 20, c[0]});
    }
    SUBCASE("a local header at the offset limit: the offset in its central ZIP64 extra field") {
        v = write({.offset = locals[2]});
        // The members are as before; so is b, below the limit.
        CHECK(std::equal(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(cd_offset), v.begin()));
        const auto c = find_sig(v, 0x02014b50);
        REQUIRE(c.size() == 3);
        CHECK(c[0] == cd_offset);
        CHECK(central_at(v, c[1]) == central_at(plain, centrals[1]));
        CHECK(central_at(v, c[2]) == zip_entry{0x032d, 45, sizes[2], sizes[2], ff, {locals[2]}});
        // The central directory lies beyond the limit too.
        check_end(v, 3, cd_offset, true, {3, cd_size + 12, ff});
    }
    // A limit the value reaches adds a ZIP64 end record and sets the
    // classic one's fields to `classic`, leaving all before them as it was;
    // one above the value changes nothing.
    auto end_records_only = [&](const detail::npz_limits& reached, const detail::npz_limits& above,
                                std::array<std::uint64_t, 3> classic) {
        CHECK(write(above) == plain);
        v = write(reached);
        CHECK(std::equal(plain.begin(), plain.end() - 22, v.begin()));
        check_end(v, 3, cd_offset, true, classic);
    };
    SUBCASE("the central directory at the offset limit: a ZIP64 end record") {
        end_records_only({.offset = cd_offset}, {.offset = cd_offset + 1}, {3, cd_size, ff});
    }
    SUBCASE("as many members as the limit: a ZIP64 end record") {
        end_records_only({.members = 3}, {.members = 4}, {0xffff, cd_size, cd_offset});
    }
    SUBCASE("a central directory as large as the limit: a ZIP64 end record") {
        end_records_only({.directory_size = cd_size}, {.directory_size = cd_size + 1}, {3, ff, cd_offset});
    }
    SUBCASE("everything at once") {
        v = write({.members = 1, .member_size = 1, .offset = 1, .directory_size = 1});
        const auto l = find_sig(v, 0x04034b50), c = find_sig(v, 0x02014b50);
        REQUIRE(l.size() == 3);
        REQUIRE(c.size() == 3);
        for (std::size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(local_at(v, l[i]) == zip_entry{0, 45, ff, ff, 0, {sizes[i], sizes[i]}});
            // The first member's offset, 0, is below the limit.
            std::vector<std::uint64_t> wide = {sizes[i], sizes[i]};
            if (i > 0) wide.push_back(l[i]);
            CHECK(central_at(v, c[i]) == zip_entry{0x032d, 45, ff, ff, i > 0 ? ff : 0, wide});
        }
        check_end(v, 3, c[0], true, {0xffff, ff, ff});
        every_prefix_fails(v, [](const buffer& b) { (void)decode_npz(b); });
    }

    // Whatever the case, NumPy, zipfile and unzip read the archive, and so
    // do we.
    temp_dir dir;
    std::ofstream(dir / "zip64.npz", std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size()));
    check_python_reads(dir.path(), "zip64.npz", {"a", "b", "c"}, three);
    check_same(decode_npz(buffer::copy(v)), three);
}

TEST_CASE("npz: 65535 members take a ZIP64 end record, which NumPy reads") {
    std::vector<named_tensor> many;
    many.reserve(0xffff);
    for (std::uint32_t i = 0; i < 0xffff; ++i) {
        tensor t = tensor::zeros(dtype::u4, {});
        std::memcpy(t.mutable_bytes().data(), &i, 4);
        many.push_back({"", std::move(t)});
    }
    // One fewer needs no ZIP64.
    const std::vector<std::byte> fewer = encode_npz(std::span(many).first(0xfffe));
    const std::uint64_t fewer_cd = find_sig(fewer, 0x02014b50).at(0);
    check_end(fewer, 0xfffe, fewer_cd, false, {0xfffe, fewer.size() - 22 - fewer_cd, fewer_cd});

    const std::vector<std::byte> v = encode_npz(many);
    const std::uint64_t cd_offset = find_sig(v, 0x02014b50).at(0);
    const std::uint64_t cd_size = v.size() - 22 - 20 - 56 - cd_offset;
    check_end(v, 0xffff, cd_offset, true, {0xffff, cd_size, cd_offset});

    std::vector<std::string> names;
    for (std::size_t i = 0; i < many.size(); ++i) names.push_back(numbered("arr_", i));
    temp_dir dir;
    save_npz(dir / "many.npz", many);
    CHECK(same_bytes(read_file(dir / "many.npz").bytes(), v));
    check_python_reads(dir.path(), "many.npz", names,
                       {{names[0], many[0].value}, {names[0x1234], many[0x1234].value},
                        {names[0xfffe], many[0xfffe].value}});

    const auto back = decode_npz(buffer::copy(v));
    REQUIRE(back.size() == 0xffff);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < back.size(); ++i)
        if (back[i].name != names[i] || !same_bytes(back[i].value.data().bytes(), many[i].value.data().bytes()))
            ++wrong;
    CHECK(wrong == 0);
}

TEST_CASE("npz: a real archive beyond 4 GiB (only with TENBIN_BIG_TESTS=1)") {
    const char* big_tests = std::getenv("TENBIN_BIG_TESTS");
    if (!big_tests || std::string_view(big_tests) != "1") {
        MESSAGE("SKIPPED: set TENBIN_BIG_TESTS=1 to write and read a 4 GiB .npz (needs 9 GiB of memory and of /tmp)");
        return;
    }
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point from) { return std::chrono::duration<double>(clock::now() - from).count(); };
    auto t0 = clock::now();
    const std::int64_t n = (std::int64_t{1} << 32) + 4096;
    const std::vector<named_tensor> list = {{"big", patterned(dtype::u1, {n}, {}, 7)},
                                            {"after", patterned(dtype::i4, {5}, {}, 8)}};
    MESSAGE("made " << n << " bytes in " << seconds(t0) << " s");
    temp_dir dir;
    const fs::path file = dir / "big.npz";
    t0 = clock::now();
    save_npz(file, list);
    MESSAGE("save_npz: " << seconds(t0) << " s");
    {
        const buffer whole = map_file(file);
        const bytes_view v = whole.bytes();
        std::vector<std::uint64_t> sizes;
        for (const auto& t : list) sizes.push_back(detail::npy_header(t.value.view()).size() + t.value.nbytes());
        // big.npy: sizes in ZIP64 extra fields; after.npy lies beyond 4 GiB,
        // and so does the central directory.
        const std::uint64_t after = 30 + 7 + 20 + sizes[0], cd_offset = after + 30 + 9 + sizes[1];
        CHECK(local_at(v, 0) == zip_entry{0, 45, ff, ff, 0, {sizes[0], sizes[0]}});
        CHECK(local_at(v, after) == zip_entry{0, 20, sizes[1], sizes[1], 0, {}});
        CHECK(central_at(v, cd_offset) == zip_entry{0x032d, 45, ff, ff, 0, {sizes[0], sizes[0]}});
        CHECK(central_at(v, cd_offset + 46 + 7 + 20) == zip_entry{0x032d, 45, sizes[1], sizes[1], ff, {after}});
        check_end(v, 2, cd_offset, true, {2, 46 + 7 + 20 + 46 + 9 + 12, ff});
    }
    t0 = clock::now();
    const auto back = load_npz(file);
    REQUIRE(back.size() == 2);
    CHECK(back[0].name == "big");
    CHECK(back[1].name == "after");
    check_same(back[0].value, list[0].value);
    check_same(back[1].value, list[1].value);
    MESSAGE("load_npz and compare: " << seconds(t0) << " s");
    t0 = clock::now();
    check_python_reads(dir.path(), "big.npz", {"big", "after"}, list);
    MESSAGE("NumPy, zipfile and unzip: " << seconds(t0) << " s");
}
