// Streams, sinks and sources, and .ten files.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/io.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace tenbin;
using namespace test_support;

namespace {

// A list with every awkward case: rank 0, a zero-size dim, sizes not a
// multiple of 64, several dtypes, named and unnamed tensors.
std::vector<tensor> sample() {
    return {
        patterned(dtype::f4, {3, 5}, "input", 1),
        patterned(dtype::u1, {}, "scalar", 2),
        patterned(dtype::i8, {2, 0, 4}, "", 3),
        patterned(dtype::f2, {7}, "half", 4),
        patterned(dtype::u4, {4, 16}, "u32", 5),
        patterned(dtype::i2, {33, 3}, "target", 6),
    };
}

bytes_view bytes_of(const buffer& b) { return b.bytes(); }

// A source over memory that hides where the input ends (like a pipe or a
// socket) and returns at most `step` bytes per call, or a random 1..step
// bytes when `random` is set.
class trickle_source final : public source {
public:
    explicit trickle_source(bytes_view bytes, std::size_t step = SIZE_MAX, bool random = false,
                            bool report_end = false)
        : bytes_(bytes), step_(step), random_(random), report_end_(report_end) {}
    std::size_t read_some(mutable_bytes out) override {
        ++calls_;
        std::size_t n = std::min({out.size(), bytes_.size() - pos_, step_});
        if (random_ && n > 1) n = std::uniform_int_distribution<std::size_t>(1, n)(rng_);
        if (n > 0) std::memcpy(out.data(), bytes_.data() + pos_, n);
        pos_ += n;
        return n;
    }
    std::optional<std::uint64_t> remaining() const override {
        if (report_end_) return bytes_.size() - pos_;
        return std::nullopt;
    }
    std::size_t calls() const { return calls_; }
    std::size_t position() const { return pos_; }

private:
    bytes_view bytes_;
    std::size_t pos_ = 0;
    std::size_t step_;
    bool random_;
    bool report_end_;
    std::size_t calls_ = 0;
    std::mt19937_64 rng_{12345};
};

struct pipe_fds {
    int r = -1, w = -1;
    pipe_fds() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        r = fds[0];
        w = fds[1];
    }
    ~pipe_fds() {
        close_read();
        close_write();
    }
    void close_read() {
        if (r >= 0) ::close(r);
        r = -1;
    }
    void close_write() {
        if (w >= 0) ::close(w);
        w = -1;
    }
};

// Writes `tensors` into the pipe from another thread (a pipe holds only
// 64 KiB, so writer and reader must run together) and reads them back.
std::vector<tensor> through_pipe(const std::vector<tensor>& tensors, const read_options& opt = {}) {
    pipe_fds p;
    std::exception_ptr failure;
    std::thread writer([&] {
        try {
            fd_sink out(p.w);
            write(out, tensors);
        } catch (...) {
            failure = std::current_exception();
        }
        p.close_write();
    });
    std::vector<tensor> got;
    try {
        fd_source in(p.r);
        CHECK_FALSE(in.remaining().has_value());
        got = read(in, opt);
    } catch (...) {
        p.close_read();  // unblocks the writer
        writer.join();
        throw;
    }
    writer.join();
    if (failure) std::rethrow_exception(failure);
    return got;
}

long max_rss_kib() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

// Chunk bytes: magic, length, payload, zero padding.
void append_chunk(std::vector<std::byte>& out, bytes_view payload, std::int64_t length) {
    const std::size_t at = out.size();
    out.resize(at + 16);
    std::memcpy(out.data() + at, chunk_magic, 8);
    std::memcpy(out.data() + at + 8, &length, 8);
    out.insert(out.end(), payload.begin(), payload.end());
    while ((out.size() - at - 16) % 64 != 0) out.push_back(std::byte{0});
}

void append_chunk(std::vector<std::byte>& out, bytes_view payload) {
    append_chunk(out, payload, static_cast<std::int64_t>(payload.size()));
}

std::vector<std::byte> header_of(dtype t, const shape_t& shape, std::string_view info = {}) {
    // A view with no data cannot encode a non-empty shape; write it by hand.
    std::vector<std::byte> h(header_size(shape.size()));
    std::memcpy(h.data(), code(t).data(), code(t).size());
    // An empty info's data() may be null, which memcpy must not get even
    // for 0 bytes (UBSan reported it in .ci/sanitizers).
    if (!info.empty()) std::memcpy(h.data() + 8, info.data(), info.size());
    const auto ndim = static_cast<std::int64_t>(shape.size());
    std::memcpy(h.data() + 16, &ndim, 8);
    if (!shape.empty()) std::memcpy(h.data() + 24, shape.data(), 8 * shape.size());
    return h;
}

}  // namespace

// ---- write ------------------------------------------------------------------

TEST_CASE("write sends exactly the bytes of encode_buffer to every sink") {
    const auto tensors = sample();
    const buffer want = encode_buffer(tensors);

    SUBCASE("memory") {
        memory_sink out;
        write(out, tensors);
        CHECK(same_bytes(out.bytes(), bytes_of(want)));
    }
    SUBCASE("ostream") {
        std::stringstream ss;
        ostream_sink out(ss);
        write(out, tensors);
        out.flush();
        const std::string s = ss.str();
        CHECK(same_bytes(std::as_bytes(std::span(s)), bytes_of(want)));
    }
    SUBCASE("file descriptor") {
        temp_dir dir;
        const fs::path path = dir / "out.ten";
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        fd_sink out(fd);
        write(out, tensors);
        ::close(fd);
        CHECK(same_bytes(file_bytes(path), bytes_of(want)));
    }
    SUBCASE("views as well as tensors") {
        std::vector<tensor_view> views(tensors.begin(), tensors.end());
        memory_sink out;
        write(out, views);
        CHECK(same_bytes(out.bytes(), bytes_of(want)));
    }
    SUBCASE("an empty list writes nothing") {
        memory_sink out;
        write(out, std::vector<tensor>{});
        CHECK(out.bytes().empty());
    }
}

TEST_CASE("write refuses an unencodable tensor before writing anything") {
    const std::vector<float> values(4, 1.0f);
    std::vector<tensor_view> views{tensor_view{dtype::f4, {}, "", std::as_bytes(std::span(values))}};
    memory_sink out;
    CHECK(error_class([&] { write(out, views); }) == "bad_argument");
    CHECK(out.bytes().empty());

    // Bytes that claim more than a chunk's signed length field holds (a
    // buffer lying about its size; never read).
    const std::int64_t dims[] = {INT64_MAX, 2};
    const bytes_view lie(reinterpret_cast<const std::byte*>(values.data()), std::uint64_t{INT64_MAX} * 2);
    const tensor_view huge{dtype::u1, dims, "", lie};
    CHECK(error_class([&] { write(out, {huge}); }) == "bad_argument");
    CHECK(out.bytes().empty());
}

TEST_CASE("sinks report failures as io_error") {
    const auto tensors = sample();
    SUBCASE("a failed ostream") {
        std::ostream broken(nullptr);
        ostream_sink out(broken);
        CHECK(error_class([&] { write(out, tensors); }) == "io_error");
    }
    SUBCASE("a bad file descriptor, with strerror's text") {
        fd_sink out(-1);
        try {
            write(out, tensors);
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::io_error);
            CHECK(std::string(e.what()).find("Bad file descriptor") != std::string::npos);
        }
    }
    SUBCASE("a pipe whose reader is gone") {
        pipe_fds p;
        p.close_read();
        // Without this the process would die of SIGPIPE.
        struct sigaction ignore {}, old {};
        ignore.sa_handler = SIG_IGN;
        ::sigaction(SIGPIPE, &ignore, &old);
        fd_sink out(p.w);
        CHECK(error_class([&] { write(out, tensors); }) == "io_error");
        ::sigaction(SIGPIPE, &old, nullptr);
    }
}

TEST_CASE("fd_sink gathers more pieces than IOV_MAX through partial writes") {
    // 1500 tensors of odd sizes are about 4000 pieces; a pipe takes 64 KiB
    // at a time, so writev returns short counts in the middle of pieces.
    std::vector<tensor> tensors;
    for (unsigned i = 0; i < 1500; ++i)
        tensors.push_back(patterned(dtype::u1, {static_cast<std::int64_t>(i % 97 + 1)}, "", i));
    const buffer want = encode_buffer(tensors);

    SUBCASE("blocking pipe") {
        check_same(through_pipe(tensors), tensors);
    }
    SUBCASE("non-blocking pipe with a slow reader") {
        pipe_fds p;
        REQUIRE(::fcntl(p.w, F_SETFL, O_NONBLOCK) == 0);
        std::exception_ptr failure;
        std::thread writer([&] {
            try {
                fd_sink out(p.w);
                write(out, tensors);
            } catch (...) {
                failure = std::current_exception();
            }
            p.close_write();
        });
        std::vector<std::byte> got;
        std::byte block[1000];
        for (;;) {
            const ssize_t n = ::read(p.r, block, sizeof block);
            if (n <= 0) break;
            got.insert(got.end(), block, block + n);
            if (got.size() % 7 == 0) std::this_thread::yield();
        }
        writer.join();
        CHECK_FALSE(failure);
        CHECK(same_bytes(got, bytes_of(want)));
    }
}

// ---- read -------------------------------------------------------------------

TEST_CASE("read returns what write wrote, through every adapter") {
    const auto tensors = sample();

    SUBCASE("memory") {
        memory_sink out;
        write(out, tensors);
        memory_source in(out.bytes());
        CHECK(in.remaining() == out.bytes().size());
        check_same(read(in), tensors);
        CHECK(in.remaining() == 0);
        CHECK(read(in).empty());
    }
    SUBCASE("iostreams") {
        std::stringstream ss;
        ostream_sink out(ss);
        write(out, tensors);
        istream_source in(ss);
        check_same(read(in), tensors);
        CHECK(read(in).empty());
    }
    SUBCASE("pipe") {
        check_same(through_pipe(tensors), tensors);
    }
    SUBCASE("regular file") {
        temp_dir dir;
        const fs::path path = dir / "s.ten";
        save(path, tensors);
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        fd_source in(fd);
        CHECK(in.remaining() == encoded_size(tensors));
        check_same(read(in), tensors);
        CHECK(in.remaining() == 0);
        ::close(fd);
    }
    SUBCASE("several lists back to back") {
        memory_sink out;
        write(out, tensors);
        write(out, std::vector<tensor>{tensors[0]});
        memory_source in(out.bytes());
        auto all = read(in);
        REQUIRE(all.size() == tensors.size() + 1);
        CHECK(all.back().view() == tensors[0].view());
    }
    SUBCASE("each tensor gets its own aligned, writable storage") {
        memory_sink out;
        write(out, tensors);
        memory_source in(out.bytes());
        auto got = read(in);
        for (std::size_t i = 0; i < got.size(); ++i) {
            CAPTURE(i);
            CHECK(got[i].data().aligned_to(buffer_alignment));
            CHECK(got[i].data().writable());
            CHECK(got[i].data().use_count() == 1);
        }
    }
}

TEST_CASE("read copes with sources that return few bytes per call") {
    const auto tensors = sample();
    const buffer enc = encode_buffer(tensors);

    SUBCASE("one byte per call") {
        trickle_source in(bytes_of(enc), 1);
        check_same(read(in), tensors);
        CHECK(in.position() == enc.size());
        CHECK(in.calls() >= enc.size());
    }
    SUBCASE("random short reads") {
        for (std::size_t step : {2u, 7u, 100u, 5000u}) {
            CAPTURE(step);
            trickle_source in(bytes_of(enc), step, true);
            check_same(read(in), tensors);
        }
    }
    SUBCASE("one byte per call with the end reported") {
        trickle_source in(bytes_of(enc), 1, false, true);
        check_same(read(in), tensors);
    }
}

TEST_CASE("read ends cleanly at a tensor boundary and rejects input cut anywhere else") {
    const auto tensors = sample();
    const buffer enc = encode_buffer(tensors);
    // Where each tensor ends, and where each header chunk ends.
    std::vector<std::size_t> tensor_ends{0}, header_ends;
    for (const tensor& t : tensors) {
        header_ends.push_back(tensor_ends.back() + chunk_size(header_size(t.ndim())));
        tensor_ends.push_back(header_ends.back() + chunk_size(t.nbytes()));
    }
    REQUIRE(tensor_ends.back() == enc.size());

    for (std::size_t cut = 0; cut <= enc.size(); ++cut) {
        CAPTURE(cut);
        const bytes_view part = bytes_of(enc).first(cut);
        const auto boundary = std::find(tensor_ends.begin(), tensor_ends.end(), cut);
        const bool after_header = std::find(header_ends.begin(), header_ends.end(), cut) != header_ends.end();

        // Hidden end: only the bytes tell where the input stops.
        trickle_source hidden(part);
        std::vector<tensor> got;
        const std::string hidden_class = error_class([&] { got = read(hidden); });
        // Known end: the same classes as decode_buffer on the same bytes.
        memory_source known(part);
        const std::string known_class = error_class([&] { (void)read(known); });
        const std::string buffer_class = error_class([&] { (void)decode_buffer(part); });

        if (boundary != tensor_ends.end()) {
            CHECK(hidden_class == "no error");
            const auto n = static_cast<std::size_t>(boundary - tensor_ends.begin());
            check_same(got, std::vector<tensor>(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(n)));
        } else if (after_header) {
            CHECK(hidden_class == "odd_chunk_count");
        } else {
            CHECK(hidden_class == "truncated");
        }
        CHECK(known_class == buffer_class);
    }
}

TEST_CASE("read reports numbers in its errors") {
    const auto tensors = sample();
    const buffer enc = encode_buffer(tensors);
    // Cut right after the preamble of tensor 1's data chunk (the scalar).
    const std::size_t data_at = chunk_size(header_size(2)) + chunk_size(60) + chunk_size(header_size(0));
    trickle_source in(bytes_of(enc).first(data_at + 16));
    try {
        (void)read(in);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::truncated);
        const std::string msg = e.what();
        CHECK(msg.find("tensor 1") != std::string::npos);
        CHECK(msg.find(std::to_string(data_at)) != std::string::npos);
    }
}

TEST_CASE("a chunk claiming 2^62 bytes costs no more memory than the input") {
    constexpr std::int64_t huge = std::int64_t{1} << 62;
    read_options opt;
    opt.decode.limits.max_bytes = UINT64_MAX;  // let the header through to the data chunk
    std::vector<std::byte> bytes;
    const std::vector<std::byte> filler(1000, std::byte{7});

    SUBCASE("a valid header and a data chunk to match") {
        append_chunk(bytes, header_of(dtype::u1, {huge}));
        append_chunk(bytes, filler, huge);
        const long rss_before = max_rss_kib();
        trickle_source hidden(bytes);
        counting_source counted(hidden);
        CHECK(error_class([&] { (void)read(counted, opt); }) == "truncated");
        CHECK(counted.count() == bytes.size());
        // 2^62 bytes could not be allocated at all; the bounded first block
        // is never touched beyond the 1000 bytes that arrived.
        CHECK(max_rss_kib() - rss_before < 256 * 1024);

        memory_source known(bytes);
        CHECK(error_class([&] { (void)read(known, opt); }) == "length_beyond_end");
    }
    SUBCASE("a data chunk longer than its header says") {
        append_chunk(bytes, header_of(dtype::u1, {10}));
        append_chunk(bytes, filler, huge);
        // Refused as soon as the data chunk's preamble is read: a peer
        // streaming the 2^62 bytes it claims would stall a reader that
        // went on to find the end.
        trickle_source hidden(bytes);
        counting_source counted(hidden);
        CHECK(error_class([&] { (void)read(counted); }) == "data_size_mismatch");
        CHECK(counted.count() < bytes.size() - filler.size());
        memory_source known(bytes);
        CHECK(error_class([&] { (void)read(known); }) == "length_beyond_end");
    }
    SUBCASE("a header chunk") {
        append_chunk(bytes, header_of(dtype::u1, {10}), huge);
        trickle_source hidden(bytes);
        CHECK(error_class([&] { (void)read(hidden); }) == "bad_header");
        memory_source known(bytes);
        CHECK(error_class([&] { (void)read(known); }) == "length_beyond_end");
    }
    SUBCASE("the shape alone, over limits::max_bytes") {
        append_chunk(bytes, header_of(dtype::u1, {huge}));
        append_chunk(bytes, filler, huge);
        trickle_source hidden(bytes);
        CHECK(error_class([&] { (void)read(hidden); }) == "limit_exceeded");
    }
}

TEST_CASE("read grows storage past the first block as bytes arrive") {
    // Over 64 MiB through a source that hides its end: the storage starts
    // bounded and must grow to the full size.
    const std::int64_t n = (std::int64_t{64} << 20) + 4099;
    const std::vector<tensor> tensors{patterned(dtype::u1, {n}, "big"), patterned(dtype::i4, {3}, "tail")};
    const buffer enc = encode_buffer(tensors);
    trickle_source in(bytes_of(enc), std::size_t{3} << 20, true);
    const auto got = read(in);
    check_same(got, tensors);
    CHECK(got[0].data().size() == static_cast<std::size_t>(n));
}

TEST_CASE("read rejects malformed chunks with their class") {
    const tensor t = patterned(dtype::i4, {4}, "x");
    const auto h = encode_header(t);
    std::vector<std::byte> bytes;

    SUBCASE("bad magic") {
        append_chunk(bytes, h);
        bytes[7] = std::byte{'m'};
        memory_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "bad_magic");
    }
    SUBCASE("a few bytes that are not tenbin") {
        const std::string_view text = "HELLO";
        memory_source in(std::as_bytes(std::span(text)));
        CHECK(error_class([&] { (void)read(in); }) == "bad_magic");
        const std::string_view cut = "~TenB";
        memory_source short_magic(std::as_bytes(std::span(cut)));
        CHECK(error_class([&] { (void)read(short_magic); }) == "truncated");
    }
    SUBCASE("bad magic in the data chunk") {
        append_chunk(bytes, h);
        append_chunk(bytes, t.data().bytes());
        bytes[chunk_size(h.size())] = std::byte{'#'};
        trickle_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "bad_magic");
    }
    SUBCASE("negative length") {
        append_chunk(bytes, h, -16);
        trickle_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "negative_length");
    }
    SUBCASE("data shorter than the shape") {
        append_chunk(bytes, h);
        append_chunk(bytes, t.data().bytes().first(12));
        trickle_source hidden(bytes);
        CHECK(error_class([&] { (void)read(hidden); }) == "data_size_mismatch");
        memory_source known(bytes);
        CHECK(error_class([&] { (void)read(known); }) == "data_size_mismatch");
    }
    SUBCASE("data longer than the shape") {
        append_chunk(bytes, h);
        const std::vector<std::byte> more(20, std::byte{1});
        append_chunk(bytes, more);
        trickle_source hidden(bytes);
        CHECK(error_class([&] { (void)read(hidden); }) == "data_size_mismatch");
    }
    SUBCASE("unknown dtype") {
        auto bad = h;
        bad[0] = std::byte{'c'};
        bad[1] = std::byte{'8'};
        append_chunk(bytes, bad);
        append_chunk(bytes, t.data().bytes());
        memory_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "unknown_dtype");
    }
    SUBCASE("a header whose ndim disagrees with its size") {
        auto bad = h;
        bad[16] = std::byte{3};
        append_chunk(bytes, bad);
        append_chunk(bytes, t.data().bytes());
        memory_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "bad_header");
    }
    SUBCASE("a header chunk too short to be a header") {
        append_chunk(bytes, bytes_view(h).first(20));
        trickle_source in(bytes);
        CHECK(error_class([&] { (void)read(in); }) == "bad_header");
    }
    SUBCASE("non-zero padding is read past, not required to be zero") {
        append_chunk(bytes, h);
        append_chunk(bytes, t.data().bytes());
        bytes[16 + h.size()] = std::byte{0xff};
        bytes.back() = std::byte{0xee};
        memory_source in(bytes);
        check_same(read(in), {t});
    }
}

TEST_CASE("read enforces limits and expected infos") {
    const auto tensors = sample();
    const buffer enc = encode_buffer(tensors);
    read_options opt;

    SUBCASE("max_tensors") {
        opt.decode.limits.max_tensors = tensors.size() - 1;
        memory_source in(bytes_of(enc));
        CHECK(error_class([&] { (void)read(in, opt); }) == "limit_exceeded");
        opt.decode.limits.max_tensors = tensors.size();
        memory_source again(bytes_of(enc));
        CHECK(read(again, opt).size() == tensors.size());
    }
    SUBCASE("max_bytes over all tensors") {
        std::uint64_t total = 0;
        for (const tensor& t : tensors) total += t.nbytes();
        opt.decode.limits.max_bytes = total - 1;
        memory_source in(bytes_of(enc));
        CHECK(error_class([&] { (void)read(in, opt); }) == "limit_exceeded");
        opt.decode.limits.max_bytes = total;
        memory_source again(bytes_of(enc));
        CHECK(read(again, opt).size() == tensors.size());
    }
    SUBCASE("max_rank") {
        opt.decode.limits.max_rank = 2;
        memory_source in(bytes_of(enc));
        CHECK(error_class([&] { (void)read(in, opt); }) == "limit_exceeded");
    }
    SUBCASE("expected infos") {
        opt.decode.expect_infos = infos_of(tensors);
        memory_source in(bytes_of(enc));
        check_same(read(in, opt), tensors);
        CHECK(read(in, opt).empty());  // the end, not a mismatch
        (*opt.decode.expect_infos)[2] = "other";
        memory_source again(bytes_of(enc));
        CHECK(error_class([&] { (void)read(again, opt); }) == "info_mismatch");
    }
}

TEST_CASE("max_tensors stops a read so that the next one continues") {
    const auto tensors = sample();  // 6 tensors
    const buffer enc = encode_buffer(tensors);
    read_options two;
    two.count = 2;

    SUBCASE("memory") {
        memory_source in(bytes_of(enc));
        std::vector<tensor> all;
        for (std::size_t want : {2u, 2u, 2u, 0u}) {
            auto got = read(in, two);
            CHECK(got.size() == want);
            all.insert(all.end(), got.begin(), got.end());
        }
        check_same(all, tensors);
    }
    SUBCASE("iostream, then the rest without a bound") {
        std::stringstream ss;
        ostream_sink out(ss);
        write(out, tensors);
        istream_source in(ss);
        auto first = read(in, two);
        auto rest = read(in);
        first.insert(first.end(), rest.begin(), rest.end());
        check_same(first, tensors);
    }
    SUBCASE("nothing is read beyond the tensors asked for") {
        memory_source mem(bytes_of(enc));
        counting_source in(mem);
        read_options none;
        none.count = 0;
        // Refused: its empty list would look like end of input.
        CHECK(error_class([&] { (void)read(in, none); }) == "bad_argument");
        CHECK(in.count() == 0);
        (void)read(in, two);
        CHECK(in.count() == encoded_size(std::vector<tensor>(tensors.begin(), tensors.begin() + 2)));
    }
}

TEST_CASE("counting layers count exactly the bytes that pass") {
    const auto tensors = sample();
    memory_sink mem;
    counting_sink out(mem);
    write(out, tensors);
    CHECK(out.count() == encoded_size(tensors));
    write(out, std::vector<tensor>{tensors[1]});
    CHECK(out.count() == encoded_size(tensors) + encoded_size(std::vector<tensor>{tensors[1]}));
    CHECK(out.count() == mem.bytes().size());

    memory_source src(mem.bytes());
    counting_source in(src);
    CHECK(in.remaining() == mem.bytes().size());
    CHECK(read(in).size() == tensors.size() + 1);
    CHECK(in.count() == mem.bytes().size());
    CHECK(in.remaining() == 0);
}

TEST_CASE("fd_source reports what is left of a regular file from its position") {
    temp_dir dir;
    const fs::path path = dir / "raw.bin";
    {
        std::ofstream f(path, std::ios::binary);
        f << std::string(1000, 'x');
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::lseek(fd, 100, SEEK_SET) == 100);
    fd_source in(fd);
    CHECK(in.remaining() == 900);
    std::byte block[50];
    CHECK(in.read_some(block) == 50);
    CHECK(in.remaining() == 850);
    ::close(fd);

    pipe_fds p;
    CHECK_FALSE(fd_source(p.r).remaining().has_value());
}

TEST_CASE("istream_source reports what is left of a seekable stream from its position") {
    std::istringstream ss(std::string(1000, 'x'));
    ss.seekg(100);
    istream_source in(ss);
    CHECK(in.remaining() == 900);
    std::byte block[50];
    CHECK(in.read_some(block) == 50);
    CHECK(in.remaining() == 850);
    CHECK(ss.tellg() == 150);  // measuring the stream left its position alone

    // A stream that cannot seek reports nothing, and still reads.
    struct one_way : std::streambuf {
        char c = 'y';
        int left = 3;
        int_type underflow() override {
            if (left == 0) return traits_type::eof();
            --left;
            setg(&c, &c, &c + 1);
            return traits_type::to_int_type(c);
        }
    } buf;
    std::istream piped(&buf);
    istream_source unknown(piped);
    CHECK_FALSE(unknown.remaining().has_value());
    CHECK(unknown.read_some(block) == 3);
}

TEST_CASE("an istream that did not open is an error, one read to its end is empty") {
    std::ifstream missing("/nonexistent-directory/in.ten", std::ios::binary);
    CHECK(error_class([&] { istream_source in(missing); }) == "io_error");

    std::istringstream done(std::string(10, 'x'));
    std::string all((std::istreambuf_iterator<char>(done)), std::istreambuf_iterator<char>());
    done.get();  // at the end: eofbit and failbit
    istream_source at_end(done);
    CHECK(read(at_end).empty());

    // A stream that fails after the source was made (a caller's failed
    // extraction) is an error at the next read, not an end.
    std::istringstream numbers("abc");
    istream_source later(numbers);
    int n = 0;
    numbers >> n;
    std::byte block[4];
    CHECK(error_class([&] { (void)later.read_some(block); }) == "io_error");
}

// ---- files ------------------------------------------------------------------

TEST_CASE("save, load and load_mmap round-trip every dtype and shape") {
    temp_dir dir;
    const std::vector<shape_t> shapes{{}, {0}, {7}, {3, 0, 2}, {2, 3, 5}, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
    for (dtype t : all_dtypes) {
        SUBCASE(std::string(code(t)).c_str()) {
            std::vector<tensor> tensors;
            for (unsigned i = 0; i < shapes.size(); ++i)
                tensors.push_back(patterned(t, shapes[i], numbered("s", i), i));
            const fs::path path = dir / (std::string(code(t)) + ".ten");
            save(path, tensors);
            CHECK(same_bytes(file_bytes(path), bytes_of(encode_buffer(tensors))));

            const auto loaded = load(path);
            check_same(loaded, tensors);
            // One read into one buffer: every tensor is a slice of it.
            for (const tensor& x : loaded) CHECK(x.data().keeper() == loaded[0].data().keeper());
            CHECK(loaded[0].data().writable());

            const auto mapped = load_mmap(path);
            check_same(mapped, tensors);
            for (const tensor& x : mapped) CHECK_FALSE(x.data().writable());

            const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            REQUIRE(fd >= 0);
            fd_source in(fd);
            check_same(read(in), tensors);
            ::close(fd);
        }
    }
}

TEST_CASE("save replaces an existing file") {
    temp_dir dir;
    const fs::path path = dir / "r.ten";
    const auto tensors = sample();
    save(path, tensors);
    save(path, std::vector<tensor>{tensors[3]});
    check_same(load(path), {tensors[3]});
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

TEST_CASE("save over an existing file renames a new one over it") {
    temp_dir dir;
    const fs::path path = dir / "r.ten";
    const auto tensors = sample();
    save(path, tensors);

    SUBCASE("tensors mapped from the file save back to it, and their mapping stays whole") {
        const auto mapped = load_mmap(path);
        save(path, mapped);
        check_same(load(path), tensors);
        save(path, std::vector<tensor>{mapped[1], mapped[0]});
        check_same(load(path), {tensors[1], tensors[0]});
        check_same(mapped, tensors);  // still the old file's bytes
    }
    SUBCASE("a file with other hard links is written in place, unless this process maps it") {
        const fs::path other = dir / "other.ten";
        fs::create_hard_link(path, other);
        save(path, std::vector<tensor>{tensors[0]});
        check_same(load(other), {tensors[0]});  // one file, two names

        // Written in place, the mapping the tensors are read from would be
        // truncated under them; replaced, the other name keeps the old bytes.
        const auto mapped = load_mmap(path);
        save(path, std::vector<tensor>{tensors[2], mapped[0]});
        check_same(load(path), {tensors[2], tensors[0]});
        check_same(mapped, {tensors[0]});
        check_same(load(other), {tensors[0]});
        CHECK(fs::hard_link_count(path) == 1);
    }
    SUBCASE("the file keeps its permissions; a symlink stays a symlink") {
        fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
        const fs::path link = dir / "link.ten";
        fs::create_symlink("r.ten", link);
        save(link, std::vector<tensor>{tensors[2]});
        CHECK(fs::is_symlink(link));
        check_same(load(path), {tensors[2]});
        CHECK(fs::status(path).permissions() ==
              (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
        CHECK(names_in(dir.path()) == std::vector<std::string>{"link.ten", "r.ten"});
    }
    SUBCASE("a save that fails leaves the old file as it was, or no new one, and nothing else") {
        const std::vector<tensor> big{tensor::zeros(dtype::u1, {4 << 20})};
        auto fails = [&](const fs::path& p) {
            return test_support::with_file_size_limit(1 << 20, [&] { return error_class([&] { save(p, big); }); });
        };
        CHECK(fails(path) == "io_error");
        check_same(load(path), tensors);
        CHECK(fails(dir / "new.ten") == "io_error");
        CHECK(names_in(dir.path()) == std::vector<std::string>{"r.ten"});
    }
}

TEST_CASE("save and load insist on .ten unless nocheck") {
    temp_dir dir;
    const auto tensors = sample();
    const fs::path path = dir / "data.bin";
    CHECK(error_class([&] { save(path, tensors); }) == "bad_extension");
    CHECK_FALSE(fs::exists(path));

    file_options nocheck;
    nocheck.nocheck = true;
    save(path, tensors, nocheck);
    CHECK(error_class([&] { (void)load(path); }) == "bad_extension");
    CHECK(error_class([&] { (void)load_mmap(path); }) == "bad_extension");
    check_same(load(path, nocheck), tensors);
    check_same(load_mmap(path, nocheck), tensors);
    // The name must end in ".ten", not merely contain it.
    CHECK(error_class([&] { save(dir / "x.ten.gz", tensors); }) == "bad_extension");
}

TEST_CASE("file errors are io_error naming the path") {
    temp_dir dir;
    const fs::path missing = dir / "missing.ten";
    for (int which = 0; which < 3; ++which) {
        CAPTURE(which);
        try {
            if (which == 0) (void)load(missing);
            if (which == 1) (void)load_mmap(missing);
            if (which == 2) save(dir / "no" / "such" / "dir.ten", sample());
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::io_error);
            const std::string msg = e.what();
            CHECK(msg.find(which == 2 ? "dir.ten" : "missing.ten") != std::string::npos);
            CHECK(msg.find("No such file or directory") != std::string::npos);
        }
    }
    CHECK(error_class([&] { (void)map_file(dir / "missing.ten"); }) == "io_error");
}

TEST_CASE("load and load_mmap read a FIFO as a stream; map_file refuses it") {
    temp_dir dir;
    const fs::path path = dir / "fifo.ten";
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    CHECK(error_class([&] { (void)map_file(path); }) == "io_error");

    const auto tensors = sample();
    for (const bool mapped : {false, true}) {
        CAPTURE(mapped);
        std::exception_ptr failure;
        std::thread writer([&] {
            try {
                save(path, tensors);  // opening blocks until the reader opens the other end
            } catch (...) {
                failure = std::current_exception();
            }
        });
        const auto got = mapped ? load_mmap(path) : load(path);
        writer.join();
        CHECK_FALSE(failure);
        check_same(got, tensors);
    }
    file_options nocheck;
    nocheck.nocheck = true;
    CHECK(load_mmap("/dev/null", nocheck).empty());
}

TEST_CASE("load refuses what is no .ten before reading it whole; /proc files are read as streams") {
    temp_dir dir;
    const fs::path path = dir / "sparse.ten";
    {
        std::ofstream make(path);
    }
    fs::resize_file(path, std::uintmax_t{1} << 30);  // 1 GiB of zeros, no disk
    const long rss_before = max_rss_kib();
    CHECK(error_class([&] { (void)load(path); }) == "bad_magic");
    CHECK(max_rss_kib() - rss_before < 64 * 1024);

    // Sizes of 0 there, yet text to read.
    file_options nocheck;
    nocheck.nocheck = true;
    if (fs::exists("/proc/self/status"))
        for (const bool mapped : {false, true})
            CHECK(error_class([&] { (void)(mapped ? load_mmap : load)("/proc/self/status", nocheck); }) ==
                  "bad_magic");
}

TEST_CASE("save reports a failed write with the path and the reason") {
    if (!fs::exists("/dev/full")) return;
    file_options nocheck;
    nocheck.nocheck = true;
    try {
        save("/dev/full", sample(), nocheck);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::io_error);
        const std::string msg = e.what();
        CHECK(msg.find("/dev/full") != std::string::npos);
        CHECK(msg.find("No space left on device") != std::string::npos);
    }
}

TEST_CASE("an empty file holds zero tensors and maps to an empty buffer") {
    temp_dir dir;
    const fs::path path = dir / "empty.ten";
    save(path, std::vector<tensor>{});
    CHECK(fs::file_size(path) == 0);
    CHECK(load(path).empty());
    CHECK(load_mmap(path).empty());
    const buffer b = map_file(path);
    CHECK(b.empty());
}

TEST_CASE("load checks limits and expected infos") {
    temp_dir dir;
    const fs::path path = dir / "l.ten";
    const auto tensors = sample();
    save(path, tensors);
    file_options opt;
    opt.decode.limits.max_tensors = 2;
    CHECK(error_class([&] { (void)load(path, opt); }) == "limit_exceeded");
    CHECK(error_class([&] { (void)load_mmap(path, opt); }) == "limit_exceeded");
    // Small limits refuse a big file before reading it.
    opt.decode.limits.max_bytes = 0;
    opt.decode.limits.max_tensors = 1;
    try {
        (void)load(path, opt);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::limit_exceeded);
        CHECK(std::string(e.what()).find(std::to_string(fs::file_size(path))) != std::string::npos);
    }
    file_options infos;
    infos.decode.expect_infos = infos_of(tensors);
    check_same(load(path, infos), tensors);
    infos.decode.expect_infos->pop_back();
    CHECK(error_class([&] { (void)load(path, infos); }) == "info_mismatch");
}

TEST_CASE("decode errors from files name the file") {
    temp_dir dir;
    const fs::path path = dir / "bad.ten";
    const auto tensors = sample();
    save(path, tensors);
    fs::resize_file(path, fs::file_size(path) - 1);
    for (bool mapped : {false, true}) {
        CAPTURE(mapped);
        try {
            (void)(mapped ? load_mmap(path) : load(path));
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::truncated);
            CHECK(std::string(e.what()).find("bad.ten") != std::string::npos);
        }
    }
}

TEST_CASE("mapped tensors keep the mapping after everything else is gone") {
    temp_dir dir;
    const fs::path path = dir / "m.ten";
    const auto tensors = sample();
    save(path, tensors);

    tensor kept;
    {
        const buffer whole = map_file(path);
        CHECK(whole.size() == encoded_size(tensors));
        CHECK_FALSE(whole.writable());
        CHECK(whole.use_count() == 1);
        auto mapped = load_mmap(path);
        kept = mapped[4];
        CHECK(kept.data().use_count() == static_cast<long>(tensors.size()) + 1);
    }
    CHECK(kept.data().use_count() == 1);
    // The name can go too: the mapping holds the file's pages.
    fs::remove(path);
    CHECK(kept.view() == tensors[4].view());
    CHECK(kept.values<std::uint32_t>().size() == 64);
    // Writing a mapped tensor copies it first: the mapping is never written.
    tensor copy = kept;
    copy.mutable_values<std::uint32_t>()[0] = 7;
    CHECK(copy.values<std::uint32_t>()[0] == 7);
    CHECK(copy.data().data() != kept.data().data());
    CHECK(kept.view() == tensors[4].view());
}

// ---- the Python vectors -----------------------------------------------------

TEST_CASE("the Python vectors load, map and stream to what decode_buffer gives") {
    const auto m = manifest();
    file_options nocheck;
    nocheck.nocheck = true;
    std::size_t checked = 0;
    for (const auto& entry : m["files"]) {
        const std::string kind = entry["kind"];
        if (kind == "multipart") continue;
        const std::string name = entry["path"];
        CAPTURE(name);
        const fs::path path = vectors_dir() / name;
        const buffer bytes = read_file(path);
        const auto want = decode_buffer(bytes);
        REQUIRE(want.size() == entry["ntensors"].get<std::size_t>());

        check_same(load(path, nocheck), want);
        check_same(load_mmap(path, nocheck), want);
        if (kind == "ten") check_same(load(path), want);

        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        fd_source in(fd);
        check_same(read(in), want);
        ::close(fd);

        trickle_source hidden(bytes.bytes(), 13, true);
        check_same(read(hidden), want);

        // And write gives the file's bytes back.
        memory_sink out;
        write(out, want);
        CHECK(same_bytes(out.bytes(), bytes.bytes()));
        ++checked;
    }
    CHECK(checked >= 18);
}

TEST_CASE("the malformed Python vectors are rejected with their class by every reader") {
    const auto m = manifest();
    file_options nocheck;
    nocheck.nocheck = true;
    std::size_t checked = 0;
    for (const auto& entry : m["malformed"]) {
        if (entry["kind"] == "multipart") continue;
        const std::string name = entry["path"];
        CAPTURE(name);
        const auto allowed = allowed_errors(entry);
        const auto ok = [&](const std::string& got) {
            return std::find(allowed.begin(), allowed.end(), got) != allowed.end();
        };
        const fs::path path = vectors_dir() / name;
        const buffer bytes = read_file(path);

        const std::string by_load = error_class([&] { (void)load(path, nocheck); });
        CHECK_MESSAGE(ok(by_load), "load: " << by_load);
        // Readers that know where the file ends say what load says.
        std::string got = error_class([&] { (void)load_mmap(path, nocheck); });
        CHECK_MESSAGE(got == by_load, "load_mmap: " << got);

        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        fd_source in(fd);
        got = error_class([&] { (void)read(in); });
        CHECK_MESSAGE(got == by_load, "read(fd_source): " << got);
        ::close(fd);

        std::ifstream file(path, std::ios::binary);
        istream_source from_file(file);
        got = error_class([&] { (void)read(from_file); });
        CHECK_MESSAGE(got == by_load, "read(istream_source of an ifstream): " << got);

        // One hiding its end may find first that a data chunk's length
        // differs from its header's.
        trickle_source hidden(bytes.bytes(), 1);
        got = error_class([&] { (void)read(hidden); });
        CHECK_MESSAGE((ok(got) || got == "data_size_mismatch"), "read(source hiding its end): " << got);
        ++checked;
    }
    CHECK(checked >= 7);
}
