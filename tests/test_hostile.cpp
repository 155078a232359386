// Hostile input: lengths of 2^62 and negative lengths in every position,
// overflowing shapes, huge ranks, short and ragged headers, non-ASCII infos,
// empty frames, messages of too many frames or bytes. Each case asserts the
// typed error, that memory stays bounded (no allocation the input does not
// justify), and, on sockets, that the next good message still arrives.
// The inputs the fuzz targets (fuzz/) found are kept here, bytes inline.
#include "piecewise_source.hpp"
#include "support.hpp"
#include "zmq_fixture.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>
#include <tenbin/io.hpp>
#include <tenbin/zmq.hpp>

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::error_class;
using test_support::piecewise_source;
using test_support::le64;
using test_support::str64;
using bytes = std::vector<std::byte>;

namespace {

constexpr std::int64_t two62 = std::int64_t{1} << 62;
constexpr std::int64_t i64_min = INT64_MIN;
constexpr std::int64_t MiB = 1 << 20;

// Runs the expression and checks the class of the tenbin::error it throws.
#define CHECK_ERRC(code, ...)                                                     \
    CHECK(error_class([&] { (void)(__VA_ARGS__); }) == std::string(name(errc::code)))

// ---- building bytes ---------------------------------------------------------

// A header with any ndim field and any dims (which need not agree).
bytes header(std::string_view code, std::string_view info, std::int64_t ndim, std::vector<std::int64_t> dims) {
    std::vector<std::int64_t> words{str64(code), str64(info), ndim};
    words.insert(words.end(), dims.begin(), dims.end());
    return le64(words);
}
bytes header(std::string_view code, std::vector<std::int64_t> dims) {
    const auto n = static_cast<std::int64_t>(dims.size());
    return header(code, "", n, std::move(dims));
}

// A chunk whose length field says `length`, followed by `payload` and
// `pad` zero bytes.
bytes raw_chunk(std::int64_t length, const bytes& payload, std::size_t pad = 0) {
    bytes c = le64({str64(std::string_view(chunk_magic, 8)), length});
    c.insert(c.end(), payload.begin(), payload.end());
    c.resize(c.size() + pad);
    return c;
}
// "~TenBin~" and nothing after it.
bytes magic_only() { return le64({str64(std::string_view(chunk_magic, 8))}); }
// A well-formed chunk.
bytes chunk(const bytes& payload) {
    const std::size_t padded = (payload.size() + 63) / 64 * 64;
    return raw_chunk(static_cast<std::int64_t>(payload.size()), payload, padded - payload.size());
}

bytes cat(std::initializer_list<bytes> parts) {
    bytes out;
    for (const bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

bytes filled(std::size_t n, unsigned char v = 0x5a) { return bytes(n, std::byte{v}); }

// A good tensor in the chunked form, to follow the bad parts.
bytes good_chunks() { return cat({chunk(header("u1", {3})), chunk(filled(3))}); }

// ---- memory ----------------------------------------------------------------

// Peak virtual size (VmPeak) and peak resident size of this process. The
// virtual peak sees allocations never touched (a reader trusting a length
// field would reserve it); the resident peak sees memory that was filled.
// Both are high-water marks, so growth is what a test adds on top of the
// earlier ones; no test in this file comes near the margins by design.
struct memory_probe {
    static std::int64_t vm_peak() {
        std::ifstream in("/proc/self/status");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("VmPeak:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
        return 0;
    }
    static std::int64_t rss_peak() {
        rusage ru{};
        ::getrusage(RUSAGE_SELF, &ru);
        return static_cast<std::int64_t>(ru.ru_maxrss) * 1024;
    }
    std::int64_t vm0 = vm_peak(), rss0 = rss_peak();
    std::int64_t vm_growth() const { return vm_peak() - vm0; }
    std::int64_t rss_growth() const { return rss_peak() - rss0; }
};

// Generous: thread stacks and malloc arenas of ZeroMQ's threads count in
// the virtual size; a hostile length honoured would cost gigabytes.
#define CHECK_MEMORY_BOUNDED(probe)              \
    do {                                         \
        CHECK((probe).vm_growth() < 1024 * MiB); \
        CHECK((probe).rss_growth() < 96 * MiB);  \
    } while (0)

// ---- sources ---------------------------------------------------------------

// The first block a reader of an unknown-size source allocates for a
// payload (lib/io/chunked.cpp); storage grows only as bytes arrive.
constexpr std::size_t reader_first_block = std::size_t{64} << 20;

struct stream_case {
    const char* what;
    bytes input;
    errc buffer_error;   // decode_buffer
    errc known_error;    // read() from a source that knows its size
    errc unknown_error;  // read() from a pipe-like source
};

// Every decoder of the chunked form over the same bytes, each checked for
// its error class and for memory.
// `bounded_memory`: false where memory legitimately follows the input (tens
// of thousands of tensors), which ASan's quarantine then inflates.
void check_chunked(const stream_case& c, const limits& lim = {}, bool bounded_memory = true) {
    const std::string what = c.what;
    CAPTURE(what);
    memory_probe probe;
    decode_options dopt;
    dopt.limits = lim;
    read_options ropt;
    ropt.decode.limits = lim;
    const std::string buffer_error(name(c.buffer_error)), known_error(name(c.known_error)),
        unknown_error(name(c.unknown_error));
    CHECK(error_class([&] { (void)decode_buffer(bytes_view(c.input), dopt); }) == buffer_error);
    // decode_buffer over an owned, aligned copy too (the .ten / single-part path)
    CHECK(error_class([&] { (void)decode_buffer(buffer::copy(c.input), dopt); }) == buffer_error);

    memory_source mem(c.input);
    CHECK(error_class([&] { (void)read(mem, ropt); }) == known_error);
    for (std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
        CAPTURE(step);
        piecewise_source known(bytes_view(c.input), true, {step});
        CHECK(error_class([&] { (void)read(known, ropt); }) == known_error);
        // A source that knows its size never gets a request beyond it.
        CHECK(known.largest_request <= std::max<std::size_t>(c.input.size(), 64 * 1024));
        piecewise_source unknown(bytes_view(c.input), false, {step});
        CHECK(error_class([&] { (void)read(unknown, ropt); }) == unknown_error);
        CHECK(unknown.largest_request <= reader_first_block);
    }
    if (bounded_memory) CHECK_MEMORY_BOUNDED(probe);
}

}  // namespace

// ---- lengths in chunk preambles ------------------------------------------------

TEST_CASE("chunk lengths of 2^62 and negative ones are refused in every position") {
    const bytes hdr = header("u1", {3});
    const std::vector<stream_case> cases = {
        {"header chunk of 2^62 bytes", raw_chunk(two62, hdr, 32), errc::length_beyond_end,
         errc::length_beyond_end, errc::bad_header},
        {"header chunk of 2^62 bytes after a good tensor", cat({good_chunks(), raw_chunk(two62, hdr, 32)}),
         errc::length_beyond_end, errc::length_beyond_end, errc::bad_header},
        {"header chunk of 2^63-1 bytes", raw_chunk(INT64_MAX, hdr, 32), errc::length_beyond_end,
         errc::length_beyond_end, errc::bad_header},
        {"header chunk of -1 bytes", raw_chunk(-1, hdr, 32), errc::negative_length, errc::negative_length,
         errc::negative_length},
        {"header chunk of -2^63 bytes", raw_chunk(i64_min, hdr, 32), errc::negative_length,
         errc::negative_length, errc::negative_length},
        // Where the end is unknown, the header's 3 bytes are compared at once.
        {"data chunk of 2^62 bytes", cat({chunk(hdr), raw_chunk(two62, filled(64))}), errc::length_beyond_end,
         errc::length_beyond_end, errc::data_size_mismatch},
        {"data chunk of -1 bytes", cat({chunk(hdr), raw_chunk(-1, filled(64))}), errc::negative_length,
         errc::negative_length, errc::negative_length},
        {"data chunk of -2^63 bytes", cat({chunk(hdr), raw_chunk(i64_min, filled(64))}),
         errc::negative_length, errc::negative_length, errc::negative_length},
        {"second tensor's data chunk of -2^62 bytes", cat({good_chunks(), chunk(hdr), raw_chunk(-two62, {})}),
         errc::negative_length, errc::negative_length, errc::negative_length},
        // The header vouches for 8 GiB (under the default 16 GiB limit) and
        // so does the chunk, but only 1000 bytes follow.
        {"data chunk of 8 GiB that the header agrees with",
         cat({chunk(header("u1", {std::int64_t{1} << 33})), raw_chunk(std::int64_t{1} << 33, filled(1000))}),
         errc::length_beyond_end, errc::length_beyond_end, errc::truncated},
        {"data chunk of 2^62 bytes that the header agrees with (f8)",
         cat({chunk(header("f8", {two62 / 8})), raw_chunk(two62, filled(1000))}), errc::length_beyond_end,
         errc::limit_exceeded, errc::limit_exceeded},
    };
    for (const stream_case& c : cases) check_chunked(c);
}

TEST_CASE("a data claim within max_bytes costs at most the reader's first block on a pipe") {
    // 8 GiB claimed, 1 MiB present: the reader of an unknown-size source
    // fills 64 MiB blocks as bytes arrive, never the claim.
    const bytes input =
        cat({chunk(header("u1", {std::int64_t{1} << 33})), raw_chunk(std::int64_t{1} << 33, filled(MiB))});
    memory_probe probe;
    piecewise_source pipe(bytes_view(input), false, {65536});
    CHECK_ERRC(truncated, read(pipe));
    CHECK(pipe.largest_request <= reader_first_block);
    CHECK_MEMORY_BOUNDED(probe);

    // With max_bytes below the claim, the header alone is refused.
    read_options opt;
    opt.decode.limits.max_bytes = MiB;
    piecewise_source pipe2(bytes_view(input), false, {65536});
    CHECK_ERRC(limit_exceeded, read(pipe2, opt));
    CHECK(pipe2.largest_request <= 4096);
}

// ---- headers -------------------------------------------------------------

TEST_CASE("ndim fields of 2^62, negative or disagreeing with the header size are bad headers") {
    for (std::int64_t ndim : {two62, INT64_MAX, std::int64_t{-1}, i64_min, std::int64_t{0}, std::int64_t{2}}) {
        CAPTURE(ndim);
        const bytes h = header("f4", "x", ndim, {5});  // 32 bytes: room for one dim
        CHECK_ERRC(bad_header, decode_header(h));
        check_chunked({"ndim", cat({chunk(h), chunk(filled(20))}), errc::bad_header, errc::bad_header,
                       errc::bad_header});
    }
}

TEST_CASE("dims of 2^62, negative dims and overflowing products are refused") {
    struct dims_case {
        const char* code;
        std::vector<std::int64_t> dims;
        errc error;
    };
    const dims_case cases[] = {
        {"u1", {two62}, errc::limit_exceeded},          // 4 EiB, over max_bytes
        {"u1", {1, two62}, errc::limit_exceeded},
        {"f8", {two62}, errc::bad_header},              // bytes overflow 64 bits
        {"u1", {-1}, errc::bad_header},
        {"u1", {3, i64_min}, errc::bad_header},
        {"u1", {two62, -1}, errc::bad_header},
        {"u1", {std::int64_t{1} << 32, std::int64_t{1} << 32}, errc::bad_header},  // count = 2^64
        {"i2", {std::int64_t{1} << 31, std::int64_t{1} << 32}, errc::bad_header},  // bytes = 2^64
        {"u1", {INT64_MAX, INT64_MAX, INT64_MAX}, errc::bad_header},
    };
    for (const dims_case& c : cases) {
        CAPTURE(c.code);
        CAPTURE(c.dims.size());
        const bytes h = header(c.code, c.dims);
        CHECK(error_class([&] { (void)decode_header(h); }) == std::string(name(c.error)));
        check_chunked({"dims", cat({chunk(h), chunk(filled(8))}), c.error, c.error, c.error});
        const std::vector<buffer> frames{buffer::copy(h), buffer::copy(filled(8))};
        CHECK(error_class([&] { (void)decode_list(frames); }) == std::string(name(c.error)));
    }
}

TEST_CASE("a zero dimension makes a tensor empty whatever the other dims say") {
    // Found by fuzz_decode_header / fuzz_decode_buffer / fuzz_decode_list:
    // decode_header accepted these, then the tensor constructor's element
    // count overflowed and threw bad_argument from inside the decoders.
    for (const std::vector<std::int64_t>& dims :
         {std::vector<std::int64_t>{two62, two62, 0}, {INT64_MAX, 0, INT64_MAX}, {0, two62, two62}}) {
        const bytes input = cat({chunk(header("f8", dims)), chunk({})});
        const auto t = decode_buffer(bytes_view(input));
        REQUIRE(t.size() == 1);
        CHECK(t[0].shape() == dims);
        CHECK(t[0].nbytes() == 0);
        CHECK(test_support::same_bytes(encode_buffer(t).bytes(), input));
        memory_source src(input);
        CHECK(read(src).at(0).shape() == dims);
    }
}

TEST_CASE("a huge rank is refused from its first 24 bytes") {
    for (std::int64_t rank : {17, 64, 65, 1000, 100000}) {
        CAPTURE(rank);
        const bytes h = header("u1", "", rank, std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1));
        CHECK_ERRC(limit_exceeded, decode_header(h));
        // Past the supported maximum the stream reader names the format's
        // bound rather than the configurable limit.
        check_chunked({"rank", cat({chunk(h), chunk(filled(1))}), errc::limit_exceeded, errc::limit_exceeded,
                       errc::limit_exceeded});
    }
    limits raised;
    raised.max_rank = 1000;
    CHECK_ERRC(limit_exceeded, decode_header(header("u1", "", 65, std::vector<std::int64_t>(65, 1)), raised));
}

TEST_CASE("headers shorter than 24 bytes or not a multiple of 8 are bad headers") {
    const bytes full = header("u1", {3, 1});  // 40 bytes
    for (std::size_t size : {0, 1, 8, 16, 23, 25, 31, 33, 39, 41, 47}) {
        CAPTURE(size);
        bytes h(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(std::min(size, full.size())));
        h.resize(size);
        CHECK_ERRC(bad_header, decode_header(h));
        check_chunked({"short header", cat({chunk(h), chunk(filled(3))}), errc::bad_header, errc::bad_header,
                       errc::bad_header});
        const std::vector<buffer> frames{buffer::copy(h), buffer::copy(filled(3))};
        CHECK_ERRC(bad_header, decode_list(frames));
    }
}

TEST_CASE("non-ASCII infos and dtype codes are refused") {
    for (std::string_view info : {std::string_view("\x80"), std::string_view("caf\xc3\xa9"),
                                  std::string_view("\xff\xff\xff\xff\xff\xff\xff\xff"),
                                  std::string_view("a\0\xe9", 3), std::string_view("\0\x80", 2)}) {
        CAPTURE(info.size());
        const bytes h = header("u1", info, 1, {3});
        CHECK_ERRC(bad_header, decode_header(h));
        check_chunked({"info", cat({chunk(h), chunk(filled(3))}), errc::bad_header, errc::bad_header,
                       errc::bad_header});
    }
    for (std::string_view code : {std::string_view("f\xb4"), std::string_view("\xe2\x82\xac"),
                                  std::string_view("u1\0x", 4), std::string_view("")}) {
        const bytes h = header(code, "", 1, {3});
        CHECK_ERRC(unknown_dtype, decode_header(h));
    }
}

TEST_CASE("zero-length frames and chunks") {
    // An empty header frame, an empty data frame for a non-empty shape, an
    // empty list: each refused or accepted as the format says.
    const auto frames = [](std::initializer_list<bytes> parts) {
        std::vector<buffer> out;
        for (const bytes& p : parts) out.push_back(buffer::copy(p));
        return out;
    };
    CHECK_ERRC(odd_chunk_count, decode_list(frames({{}})));
    CHECK_ERRC(bad_header, decode_list(frames({{}, {}})));
    CHECK_ERRC(data_size_mismatch, decode_list(frames({header("u1", {3}), {}})));
    CHECK_ERRC(odd_chunk_count, decode_list(frames({header("u1", {0}), {}, {}})));
    CHECK(decode_list(frames({})).empty());
    CHECK(decode_list(frames({header("u1", {0}), {}})).at(0).nbytes() == 0);

    check_chunked({"empty header chunk", cat({chunk({}), chunk({})}), errc::bad_header, errc::bad_header,
                   errc::bad_header});
    check_chunked({"empty data chunk", cat({chunk(header("u1", {3})), chunk({})}), errc::data_size_mismatch,
                   errc::data_size_mismatch, errc::data_size_mismatch});
    CHECK(decode_buffer(bytes_view{}).empty());
}

TEST_CASE("too many tensors and too many bytes are refused with the limit's name") {
    bytes many;
    for (int i = 0; i < 65537; ++i) {
        const bytes h = chunk(header("u1", {0}));
        many.insert(many.end(), h.begin(), h.end());
        const bytes d = chunk({});
        many.insert(many.end(), d.begin(), d.end());
    }
    // The stream reader decodes 65536 tensors before it meets the 65537th:
    // memory in proportion to the input, not checked here.
    check_chunked({"65537 tensors", many, errc::limit_exceeded, errc::limit_exceeded, errc::limit_exceeded}, {},
                  false);

    // Two tensors of 600 KiB each under max_bytes = 1 MiB.
    const bytes two = cat({chunk(header("u1", {600 * 1024})), chunk(filled(600 * 1024)),
                           chunk(header("u1", {600 * 1024})), chunk(filled(600 * 1024))});
    limits lim;
    lim.max_bytes = MiB;
    check_chunked({"1.2 MiB over 1 MiB", two, errc::limit_exceeded, errc::limit_exceeded,
                   errc::limit_exceeded}, lim);
    try {
        (void)decode_buffer(bytes_view(two), {.limits = lim});
        FAIL("accepted");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("limits::max_bytes") != std::string::npos);
    }
}

// ---- the inputs the fuzzers found ----------------------------------------------

TEST_CASE("fuzz finding: decode_header accepted [.., 2^56, .., 0] that the encoder refused") {
    // fuzz-decode_header crash-2ce2dd3090e8cb1c5b03e30cada5f89fa675b5d6
    const unsigned char input[] = {
        0x75, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6e, 0x69, 0x6e, 0x65, 0x00, 0x00, 0x00, 0x00,
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    const tensor_header h = decode_header(std::as_bytes(std::span(input)));
    CHECK(h.nbytes == 0);
    CHECK(h.info == "nine");
    REQUIRE(h.shape.size() == 9);
    const tensor_view v{h.dtype, h.shape, h.info, {}};
    CHECK(test_support::same_bytes(encode_header(v), std::as_bytes(std::span(input))));
}

TEST_CASE("fuzz finding: decode_buffer threw bad_argument for a zero-size tensor with a huge dim") {
    // fuzz-decode_buffer crash-fc7ce75a45859fde334a67ed21edf024a08c77f5
    const unsigned char input[] = {
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x66, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6e, 0x6f, 0x6e, 0x65, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x69, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x65, 0x6d, 0x70, 0x74, 0x79, 0x00, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x66, 0x32, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x75, 0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x7e, 0x54, 0x65, 0x6e, 0x42, 0x69, 0x6e, 0x7e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    const auto input_bytes = std::as_bytes(std::span(input));
    const auto t = decode_buffer(input_bytes);
    REQUIRE(t.size() == 3);
    CHECK(t[1].dtype() == dtype::i8);
    CHECK(t[1].nbytes() == 0);
    CHECK(t[2].shape() == shape_t{0});
    CHECK(encode_buffer(t).size() == input_bytes.size());
    memory_source src(input_bytes);
    CHECK(read(src) == t);
}

TEST_CASE("fuzz finding: decode_list threw bad_argument for a zero-size tensor with huge dims") {
    // fuzz-decode_list crash-77899eee913ac368d88efff61b7f7f33d828ea77, in
    // the target's framing (2-byte length, then the frame).
    const unsigned char input[] = {
        0x18, 0x00, 0x69, 0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x73, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0xfb, 0x60, 0x00, 0x75,
        0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6e, 0x69, 0x6e, 0x65, 0x00, 0x00, 0x00, 0x00, 0x09,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x65, 0x6e,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x23, 0x00, 0x00, 0x24, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x60, 0x00, 0x39, 0xcc, 0xff, 0xff, 0x55, 0x40,
        0x18, 0x7b, 0x58, 0x60, 0x38, 0x40, 0x4b, 0xcd, 0xb9, 0x40, 0x09, 0x6e, 0x4b, 0x40, 0xcc, 0x46,
        0xdb, 0x40, 0xd5, 0xe4, 0x0c, 0x41, 0xc1, 0x6e, 0x89, 0xc0, 0xd6, 0xc6, 0x75, 0x32, 0x00, 0x00,
        0x00,
    };
    std::vector<buffer> frames;
    for (std::size_t at = 0; at < sizeof input;) {
        std::size_t n = input[at] | (at + 1 < sizeof input ? std::size_t{input[at + 1]} << 8 : 0);
        at = std::min(at + 2, sizeof input);
        n = std::min(n, sizeof input - at);
        frames.push_back(buffer::copy(std::as_bytes(std::span(input + at, n))));
        at += n;
    }
    // Frames: [i1 rank-0 header], [1 byte], [u8 header of 9 dims, huge ones
    // and a 0], [0 bytes], then a 1-byte "header" and four more frames.
    REQUIRE(frames.size() == 8);
    CHECK_ERRC(bad_header, decode_list(frames));
    frames.resize(4);
    const auto t = decode_list(frames);
    REQUIRE(t.size() == 2);
    CHECK(t[1].nbytes() == 0);
    CHECK(t[1].ndim() == 9);
}

// ---- URLs ------------------------------------------------------------------

TEST_CASE("brace ranges at the ends of int64 and huge steps expand boundedly") {
    // Each of these overflowed (undefined behaviour) or looped without end
    // while filling memory before expand_range counted in unsigned.
    CHECK(brace_expand("h:{0..9223372036854775807..9223372036854775807}") ==
          std::vector<std::string>{"h:0", "h:9223372036854775807"});
    CHECK(brace_expand("{9223372036854775806..9223372036854775807}") ==
          std::vector<std::string>{"9223372036854775806", "9223372036854775807"});
    CHECK(brace_expand("{-9223372036854775808..-9223372036854775807}") ==
          std::vector<std::string>{"-9223372036854775808", "-9223372036854775807"});
    CHECK(brace_expand("{a..z..4294967296}") == std::vector<std::string>{"a"});
    CHECK(brace_expand("{a..e..-2}") == std::vector<std::string>{"a", "c", "e"});
    CHECK(brace_expand("{1..2..-9223372036854775808}") == std::vector<std::string>{"1"});
    CHECK(brace_expand("{5..1..2}") == std::vector<std::string>{"5", "3", "1"});
    CHECK(brace_expand("{-1..1}") == std::vector<std::string>{"-1", "0", "1"});
    CHECK(brace_expand("{-1..1}") == std::vector<std::string>{"-1", "0", "1"});
    CHECK(brace_expand("{08..11}") == std::vector<std::string>{"08", "09", "10", "11"});
    CHECK_ERRC(bad_url, brace_expand("{-9223372036854775808..9223372036854775807}"));
    CHECK_ERRC(bad_url, brace_expand("{0..65536}"));
    CHECK(brace_expand("{0..65535}").size() == 65536);
    CHECK_ERRC(bad_url, brace_expand("{0..255}{0..255}{0..1}"));
    CHECK_ERRC(bad_url, parse_urls(std::vector<std::string>{"zpush://h:{1..99999}"}));
    CHECK_ERRC(bad_url, brace_expand(std::string(300, '{')));
    CHECK_ERRC(bad_url, brace_expand(std::string(20, '{') + std::string(20, '}')));
    CHECK_ERRC(bad_url, parse_url("zpush://h\x01:5"));
    CHECK_ERRC(bad_url, parse_url("zpush://:"));
}

// ---- ZeroMQ ---------------------------------------------------------------

namespace {

using test_zmq::make_socket;

// A PULL bound to a kernel-chosen loopback port and a PUSH connected to it.
struct push_pull {
    zmq::context_t ctx{1};
    zmq::socket_t pull = make_socket(ctx, zmq::socket_type::pull);
    zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
    push_pull() {
        pull.set(zmq::sockopt::rcvhwm, 100000);
        push.set(zmq::sockopt::sndhwm, 100000);
        pull.bind("tcp://127.0.0.1:*");
        push.connect(pull.get(zmq::sockopt::last_endpoint));
    }
};

void send_frames(zmq::socket_t& s, const std::vector<bytes>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        REQUIRE(s.send(zmq::const_buffer(frames[i].data(), frames[i].size()), flags));
    }
}

// The good message every bad one is followed by.
std::vector<tensor> good_batch(int seq) {
    return {tensor::from_vector(std::vector<std::int32_t>{seq, seq + 1, seq + 2}, {3}, "good")};
}
void expect_good(zmq::socket_t& pull, int seq, const recv_options& opt = {}) {
    auto m = zrecv(pull, opt);
    REQUIRE(m);
    REQUIRE(m->tensors.size() == 1);
    CHECK(m->tensors[0].info() == "good");
    CHECK(m->tensors[0].values<std::int32_t>()[0] == seq);
}

// The frames of a message of `tensors` empty u1 tensors.
std::vector<bytes> many_frames(std::size_t tensors) {
    std::vector<bytes> f;
    f.reserve(2 * tensors);
    const bytes h = header("u1", {1});
    for (std::size_t i = 0; i < tensors; ++i) {
        f.push_back(h);
        f.push_back(filled(1, static_cast<unsigned char>(i)));
    }
    return f;
}

}  // namespace

TEST_CASE("thousands of frames in one message: over max_frames refused and drained, under accepted") {
    push_pull p;
    memory_probe probe;
    int seq = 0;

    SUBCASE("over a configured max_frames") {
        recv_options opt;
        opt.max_frames = 1000;
        send_frames(p.push, many_frames(2501));  // 5002 frames
        REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
        try {
            (void)zrecv(p.pull, opt);
            FAIL("accepted");
        } catch (const error& e) {
            CHECK(e.code() == errc::limit_exceeded);
            CHECK(std::string(e.what()).find("5002 frames") != std::string::npos);
            CHECK(std::string(e.what()).find("max_frames") != std::string::npos);
        }
        expect_good(p.pull, seq, opt);
    }
    SUBCASE("under a configured max_frames") {
        recv_options opt;
        opt.max_frames = 5002;
        send_frames(p.push, many_frames(2501));
        auto m = zrecv(p.pull, opt);
        REQUIRE(m);
        CHECK(m->tensors.size() == 2501);
        CHECK(m->tensors[2500].values<std::uint8_t>()[0] == 2500 % 256);
    }
    SUBCASE("over the default max_frames") {
        const std::size_t tensors = recv_options{}.max_frames / 2 + 1;
        send_frames(p.push, many_frames(tensors));
        REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
        CHECK_ERRC(limit_exceeded, zrecv(p.pull));
        expect_good(p.pull, seq);
    }
    SUBCASE("within the default max_frames but over limits::max_tensors") {
        send_frames(p.push, many_frames(limits{}.max_tensors + 1));
        REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
        CHECK_ERRC(limit_exceeded, zrecv(p.pull));
        expect_good(p.pull, seq);
    }
    SUBCASE("exactly limits::max_tensors") {
        send_frames(p.push, many_frames(limits{}.max_tensors));
        auto m = zrecv(p.pull);
        REQUIRE(m);
        CHECK(m->tensors.size() == limits{}.max_tensors);
    }
    CHECK_MEMORY_BOUNDED(probe);
}

TEST_CASE("hostile frames on a socket each raise their error, and the next good message arrives") {
    push_pull p;
    memory_probe probe;
    struct frame_case {
        const char* what;
        std::vector<bytes> frames;
        errc error;
    };
    const bytes u1_3 = header("u1", {3});
    const std::vector<frame_case> cases = {
        {"two empty frames", {{}, {}}, errc::bad_header},
        {"empty data for a non-empty shape", {u1_3, {}}, errc::data_size_mismatch},
        {"header without data", {u1_3, filled(3), u1_3}, errc::odd_chunk_count},
        {"header of 16 bytes", {filled(16), filled(3)}, errc::bad_header},
        {"header of 33 bytes", {cat({u1_3, filled(1)}), filled(3)}, errc::bad_header},
        {"ndim 2^62", {header("u1", "", two62, {3}), filled(3)}, errc::bad_header},
        {"ndim -1", {header("u1", "", -1, {3}), filled(3)}, errc::bad_header},
        {"dim 2^62", {header("u1", {two62}), filled(3)}, errc::limit_exceeded},
        {"dim -2^63", {header("u1", {i64_min}), filled(3)}, errc::bad_header},
        {"dims overflowing", {header("u2", {two62, 4}), filled(3)}, errc::bad_header},
        {"rank 1000", {header("u1", "", 1000, std::vector<std::int64_t>(1000, 1)), filled(1)},
         errc::limit_exceeded},
        {"non-ASCII info", {header("u1", "\xc3\xa9", 1, {3}), filled(3)}, errc::bad_header},
        {"single-part with a 2^62 chunk", {raw_chunk(two62, u1_3, 32)}, errc::length_beyond_end},
        {"single-part with a negative chunk", {raw_chunk(-1, u1_3, 32)}, errc::negative_length},
        {"single-part, bad magic", {filled(64)}, errc::bad_magic},
        {"single-part of the magic alone", {magic_only()}, errc::truncated},
    };
    int seq = 0;
    for (const frame_case& c : cases) {
        const std::string what = c.what;
    CAPTURE(what);
        send_frames(p.push, c.frames);
        REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
        CHECK(error_class([&] { (void)zrecv(p.pull); }) == std::string(name(c.error)));
        expect_good(p.pull, seq);
    }
    // An empty frame alone is the empty list; a zero-size tensor is fine.
    send_frames(p.push, {{}});
    auto empty = zrecv(p.pull);
    REQUIRE(empty);
    CHECK(empty->tensors.empty());
    send_frames(p.push, {header("f4", {0, 5}), {}});
    auto zero = zrecv(p.pull);
    REQUIRE(zero);
    CHECK(zero->tensors.at(0).shape() == shape_t{0, 5});
    CHECK_MEMORY_BOUNDED(probe);
}

TEST_CASE("a message over limits::max_bytes is refused in both forms and the next one arrives") {
    push_pull p;
    recv_options opt;
    opt.decode.limits.max_bytes = 1000;
    const tensor big = tensor::zeros(dtype::u1, {2000});
    int seq = 0;
    REQUIRE(zsend_multipart(p.push, big));
    REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
    CHECK_ERRC(limit_exceeded, zrecv(p.pull, opt));
    expect_good(p.pull, seq, opt);
    REQUIRE(zsend_single(p.push, big));
    REQUIRE(zsend_single(p.push, good_batch(++seq)));
    CHECK_ERRC(limit_exceeded, zrecv(p.pull, opt));
    expect_good(p.pull, seq, opt);
    // Split over two tensors of 600 bytes each.
    const std::vector<tensor> two{tensor::zeros(dtype::u1, {600}), tensor::zeros(dtype::u1, {600})};
    REQUIRE(zsend_multipart(p.push, two));
    REQUIRE(zsend_multipart(p.push, good_batch(++seq)));
    CHECK_ERRC(limit_exceeded, zrecv(p.pull, opt));
    expect_good(p.pull, seq, opt);
}

TEST_CASE("limit_message_size bounds a socket of the user's as a connection bounds its own") {
    zmq::context_t ctx(1);
    zmq::socket_t pull(ctx, zmq::socket_type::pull);
    REQUIRE(pull.get(zmq::sockopt::maxmsgsize) == -1);
    limits l;
    l.max_bytes = MiB;
    limit_message_size(pull, l);
    CHECK(pull.get(zmq::sockopt::maxmsgsize) == MiB + (std::int64_t{1} << 26));
    limit_message_size(pull);
    CHECK(pull.get(zmq::sockopt::maxmsgsize) == static_cast<std::int64_t>(limits{}.max_bytes) + (std::int64_t{1} << 26));
    l.max_bytes = UINT64_MAX;  // too large to bound: unbounded
    limit_message_size(pull, l);
    CHECK(pull.get(zmq::sockopt::maxmsgsize) == -1);
}

TEST_CASE("bounded_socket and bound_receive set the receive high-water mark and the message size") {
    zmq::context_t ctx(1);
    zmq::socket_t plain(ctx, zmq::socket_type::pull);
    REQUIRE(plain.get(zmq::sockopt::rcvhwm) == 1000);  // libzmq's: a flood queues 1000 messages
    limits l;
    l.max_bytes = MiB;
    zmq::socket_t bounded = bounded_socket(ctx, zmq::socket_type::pull, l);
    CHECK(bounded.get(zmq::sockopt::rcvhwm) == default_recv_hwm);
    CHECK(bounded.get(zmq::sockopt::maxmsgsize) == MiB + (std::int64_t{1} << 26));
    bound_receive(plain, {}, 4);
    CHECK(plain.get(zmq::sockopt::rcvhwm) == 4);
    CHECK(plain.get(zmq::sockopt::maxmsgsize) == static_cast<std::int64_t>(limits{}.max_bytes) + (std::int64_t{1} << 26));
    // A connection is bounded the same way.
    connection rx("zpull://127.0.0.1:*", {});
    CHECK(rx.socket().get(zmq::sockopt::rcvhwm) == default_recv_hwm);
}

TEST_CASE("a frame over ZMQ_MAXMSGSIZE never reaches memory; the sender reconnects and goes on") {
    // A connection sets ZMQ_MAXMSGSIZE to limits::max_bytes plus 64 MiB for
    // chunk overhead: libzmq reads the frame's length, refuses it and drops
    // the peer before allocating. The 160 MiB frame comes from untouched
    // anonymous memory, so the sender's side costs no resident memory either.
    connection_options copt;
    copt.decode.limits.max_bytes = MiB;
    copt.recv_timeout = 1000ms;
    connection rx("zpull://127.0.0.1:*", copt);
    CHECK(rx.socket().get(zmq::sockopt::maxmsgsize) == MiB + (std::int64_t{1} << 26));

    zmq::context_t ctx(1);
    zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 0);
    push.connect(rx.endpoints().at(0).address);

    const std::size_t huge = 160 * MiB;
    void* mem = ::mmap(nullptr, huge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(mem != MAP_FAILED);
    memory_probe probe;
    {
        zmq::message_t frame(mem, huge, nullptr, nullptr);  // libzmq only reads it
        REQUIRE(push.send(frame, zmq::send_flags::none));
    }
    // Nothing arrives for the oversized frame: the receive times out.
    CHECK_FALSE(rx.recv().has_value());
    // The next good message arrives over the PUSH's new connection.
    int seq = 0;
    std::optional<std::vector<tensor>> got;
    for (int attempt = 0; attempt < 10 && !got; ++attempt) {
        REQUIRE(zsend_multipart(push, good_batch(++seq)));
        got = rx.recv();
    }
    REQUIRE(got);
    CHECK(got->at(0).info() == "good");
    CHECK(probe.rss_growth() < 64 * MiB);
    push.close();
    ::munmap(mem, huge);
}

TEST_CASE("a loader raises each hostile message from next() and then delivers the next good one") {
    loader_options lopt;
    lopt.connection.decode.limits.max_bytes = 4096;
    lopt.queue_messages = 4;
    loader rx("zpull://127.0.0.1:*", lopt);
    zmq::context_t ctx(1);
    zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
    push.connect(rx.endpoints().at(0).address);
    memory_probe probe;

    const std::vector<std::vector<bytes>> bad = {
        {header("u1", {two62}), filled(3)},
        {raw_chunk(-1, filled(8))},
        many_frames(1),  // fine: one u1 tensor
        {header("u1", {8192}), filled(8192)},  // over max_bytes
        {header("u1", "\xff", 1, {1}), filled(1)},
    };
    const errc expected[] = {errc::limit_exceeded, errc::negative_length, errc{}, errc::limit_exceeded,
                             errc::bad_header};
    int seq = 0;
    for (std::size_t i = 0; i < bad.size(); ++i) {
        CAPTURE(i);
        send_frames(push, bad[i]);
        REQUIRE(zsend_multipart(push, good_batch(++seq)));
        if (expected[i] == errc{}) {
            CHECK(rx.next(5000ms)->at(0).nbytes() == 1);
        } else {
            CHECK(error_class([&] { (void)rx.next(5000ms); }) == std::string(name(expected[i])));
        }
        auto good = rx.next(5000ms);
        REQUIRE(good);
        CHECK(good->at(0).values<std::int32_t>()[0] == seq);
    }
    CHECK(rx.malformed() == 4);
    CHECK(rx.peak_queued_messages() <= 4);
    CHECK_MEMORY_BOUNDED(probe);
}
