// The Python implementation's vectors: valid ones decode to exactly the
// manifest and re-encode to identical bytes; malformed ones are rejected
// with their class.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/core.hpp>

#include <cmath>
#include <cstring>

using namespace tenbin;
using namespace test_support;
using nlohmann::json;

namespace {

template <class T>
T element(const tensor& t, std::size_t i) {
    T v;
    std::memcpy(&v, t.data().data() + i * sizeof(T), sizeof(T));
    return v;
}

// Checks element i of `t` against a manifest value (a number, or "nan",
// "inf", "-inf" for non-finite floats).
void check_value(const tensor& t, std::size_t i, const json& expected) {
    CAPTURE(i);
    if (is_float(t.dtype())) {
        double v = 0;
        switch (t.dtype()) {
        case dtype::f2: v = element<float16>(t, i).to_float(); break;
        case dtype::f4: v = element<float>(t, i); break;
        default: v = element<double>(t, i); break;
        }
        if (expected.is_string()) {
            const auto s = expected.get<std::string>();
            if (s == "nan") CHECK(std::isnan(v));
            else CHECK(v == (s == "inf" ? INFINITY : -INFINITY));
        } else {
            CHECK(v == expected.get<double>());
        }
        return;
    }
    switch (t.dtype()) {
    case dtype::i1: CHECK(element<std::int8_t>(t, i) == expected.get<std::int64_t>()); break;
    case dtype::i2: CHECK(element<std::int16_t>(t, i) == expected.get<std::int64_t>()); break;
    case dtype::i4: CHECK(element<std::int32_t>(t, i) == expected.get<std::int64_t>()); break;
    case dtype::i8: CHECK(element<std::int64_t>(t, i) == expected.get<std::int64_t>()); break;
    case dtype::u1: CHECK(element<std::uint8_t>(t, i) == expected.get<std::uint64_t>()); break;
    case dtype::u2: CHECK(element<std::uint16_t>(t, i) == expected.get<std::uint64_t>()); break;
    case dtype::u4: CHECK(element<std::uint32_t>(t, i) == expected.get<std::uint64_t>()); break;
    default: CHECK(element<std::uint64_t>(t, i) == expected.get<std::uint64_t>()); break;
    }
}

void check_against_manifest(const std::vector<tensor>& got, const json& entry) {
    const json& want = entry["tensors"];
    REQUIRE(got.size() == want.size());
    REQUIRE(got.size() == entry["ntensors"].get<std::size_t>());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        const tensor& t = got[i];
        const json& w = want[i];
        CHECK(t.info() == w["info"].get<std::string>());
        CHECK(code(t.dtype()) == w["dtype"].get<std::string>());
        CHECK(t.shape() == w["shape"].get<shape_t>());
        CHECK(t.nbytes() == w["nbytes"].get<std::size_t>());
        CHECK(sha256_hex(t.data().bytes()) == w["sha256"].get<std::string>());
        const json& first = w["first_values"];
        for (std::size_t k = 0; k < first.size(); ++k) check_value(t, k, first[k]);
    }
}

}  // namespace

TEST_CASE("every valid vector decodes to the manifest and re-encodes to the same bytes") {
    const json m = manifest();
    REQUIRE(m["files"].size() >= 20);
    for (const json& entry : m["files"]) {
        const std::string path = entry["path"];
        CAPTURE(path);
        const std::string kind = entry["kind"];
        if (kind == "multipart") {
            const std::vector<buffer> frames = read_frames(entry);
            const auto tensors = decode_list(frames);
            check_against_manifest(tensors, entry);
            const std::vector<buffer> again = encode_list(tensors);
            REQUIRE(again.size() == frames.size());
            for (std::size_t f = 0; f < frames.size(); ++f) {
                CAPTURE(f);
                CHECK(same_bytes(again[f].bytes(), frames[f].bytes()));
            }
        } else {
            const buffer file = read_file(vectors_dir() / path);
            CHECK(file.size() == entry["size"].get<std::size_t>());
            CHECK(sha256_hex(file.bytes()) == entry["sha256"].get<std::string>());
            const auto tensors = decode_buffer(file);
            check_against_manifest(tensors, entry);
            CHECK(encoded_size(tensors) == file.size());
            CHECK(same_bytes(encode_buffer(tensors).bytes(), file.bytes()));
            // Decoding views the input: every tensor's bytes lie inside it.
            for (const tensor& t : tensors)
                if (t.nbytes() > 0) {
                    CHECK(t.data().data() >= file.data());
                    CHECK(t.data().data() + t.nbytes() <= file.data() + file.size());
                }
        }
    }
}

TEST_CASE("every malformed vector is rejected with its class") {
    const json m = manifest();
    REQUIRE(m["malformed"].size() >= 9);
    for (const json& entry : m["malformed"]) {
        const std::string path = entry["path"];
        CAPTURE(path);
        std::string got;
        if (entry["kind"] == "multipart") {
            const auto frames = read_frames(entry);
            got = error_class([&] { (void)decode_list(frames); });
        } else {
            const buffer file = read_file(vectors_dir() / path);
            got = error_class([&] { (void)decode_buffer(file); });
        }
        const auto allowed = allowed_errors(entry);
        CAPTURE(got);
        CHECK(std::find(allowed.begin(), allowed.end(), got) != allowed.end());
    }
}

TEST_CASE("infos given with the vectors can be checked on decode") {
    const json m = manifest();
    for (const json& entry : m["files"]) {
        if (entry["kind"] == "multipart") continue;
        const std::string path = entry["path"];
        CAPTURE(path);
        std::vector<std::string> infos;
        for (const json& t : entry["tensors"]) infos.push_back(t["info"]);
        const buffer file = read_file(vectors_dir() / path);
        CHECK(infos_of(decode_buffer(file, {.expect_infos = infos})) == infos);
        if (!infos.empty()) {
            infos.back() += "x";
            CHECK(error_class([&] { (void)decode_buffer(file, {.expect_infos = infos}); }) == "info_mismatch");
        }
    }
}
