// sctp_send / sctp_recv: on AF_UNIX SOCK_SEQPACKET everywhere, on real SCTP
// where the kernel has it, and the SCTP part reader with scripted parts.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/sctp.hpp>

#include "transport/sctp_parts.hpp"
#include "base/fd.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

using namespace tenbin;
using test_support::check_same;
using test_support::numbered;
using test_support::patterned;
namespace fs = std::filesystem;

namespace {

// Every receive in these tests gives up after this long.
constexpr int receive_timeout_ms = 2000;

void set_timeout(int fd, int option, int ms) {
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    REQUIRE(setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv) == 0);
}

using tenbin::detail::unique_fd;

// A connected pair of message sockets, both with receive timeouts.
struct socket_pair {
    unique_fd a, b;
    explicit socket_pair(int type = SOCK_SEQPACKET) {
        int fds[2];
        REQUIRE(socketpair(AF_UNIX, type, 0, fds) == 0);
        a.reset(fds[0]);
        b.reset(fds[1]);
        set_timeout(a.get(), SO_RCVTIMEO, receive_timeout_ms);
        set_timeout(b.get(), SO_RCVTIMEO, receive_timeout_ms);
    }
};

// Bytes from a fixed generator, so failures reproduce.
std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
    std::vector<std::byte> out(n);
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& b : out) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b = static_cast<std::byte>(x >> 24);
    }
    return out;
}


// Runs `f`, which must throw tenbin::error with one of `codes`.
template <class F>
std::string expect_error(F&& f, std::initializer_list<errc> codes) {
    try {
        f();
    } catch (const error& e) {
        const std::string what = e.what();
        CAPTURE(what);
        CHECK_MESSAGE(std::find(codes.begin(), codes.end(), e.code()) != codes.end(),
                      "got errc " << name(e.code()));
        return e.what();
    }
    FAIL("no tenbin::error was thrown");
    return {};
}

void send_raw(int fd, std::span<const std::byte> bytes) {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

}  // namespace

TEST_CASE("a tensor list of each dtype and shape survives a SOCK_SEQPACKET round trip") {
    socket_pair sp;
    for (dtype t : all_dtypes) {
        CAPTURE(code(t));
        const std::vector<tensor> sent = {
            patterned(t, {3, 5}, "matrix", 1),
            patterned(t, {}, "scalar", 2),
            patterned(t, {0, 4}, "", 3),
            patterned(t, {7}, "odd", 4),
            patterned(t, {2, 1, 3, 1, 2, 1, 1, 2, 1}, "ninedims", 5),
        };
        sctp_send(sp.a.get(), sent);
        const auto got = sctp_recv(sp.b.get());
        check_same(got, sent);
        // Tensors view the one received buffer, aligned for their dtype.
        for (const auto& g : got) {
            CHECK(g.data().keeper() == got[0].data().keeper());
            if (!g.data().empty()) CHECK(g.data().aligned_to(itemsize(t)));
        }
    }
}

TEST_CASE("shapes: rank 0, zero-size dimensions and sizes not a multiple of 64") {
    socket_pair sp;
    shape_t shape;
    SUBCASE("rank 0") { shape = {}; }
    SUBCASE("zero-size middle dimension") { shape = {3, 0, 2}; }
    SUBCASE("zero-size only dimension") { shape = {0}; }
    SUBCASE("13 elements") { shape = {13}; }
    SUBCASE("exactly 64 bytes of f8") { shape = {8}; }
    const std::vector<tensor> sent = {patterned(dtype::f8, shape, "x", 9), patterned(dtype::i1, shape, "y", 10)};
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
}

TEST_CASE("messages keep their boundaries, in both directions, and decode_options apply") {
    socket_pair sp;
    const std::vector<tensor> first = {patterned(dtype::f4, {4, 3, 2}, "input", 1), patterned(dtype::i4, {4}, "target", 2)};
    const std::vector<tensor> second = {patterned(dtype::u2, {5}, "", 3)};
    sctp_send(sp.a.get(), first);
    sctp_send(sp.a.get(), second);
    sctp_send(sp.b.get(), nullptr, 0, second);
    check_same(sctp_recv(sp.b.get()), first);
    check_same(sctp_recv(sp.b.get()), second);
    check_same(sctp_recv(sp.a.get()), second);

    sctp_send(sp.a.get(), first);
    decode_options opt;
    opt.expect_infos = std::vector<std::string>{"input", "other"};
    const auto msg = expect_error([&] { sctp_recv(sp.b.get(), default_sctp_max_size, opt); },
                                  {errc::info_mismatch});
    CHECK(msg.find("1") != std::string::npos);  // names the differing index

    sctp_send(sp.a.get(), first);
    decode_options few;
    few.limits.max_tensors = 1;
    const auto lim = expect_error([&] { sctp_recv(sp.b.get(), default_sctp_max_size, few); },
                                  {errc::limit_exceeded});
    CHECK(lim.find("max_tensors") != std::string::npos);

    // Nothing left over from the refused messages.
    sctp_send(sp.a.get(), second);
    check_same(sctp_recv(sp.b.get()), second);
}

TEST_CASE("views and borrowed tensors are sent like owned ones") {
    socket_pair sp;
    const std::vector<double> values = {1.5, -2.25, 3.0};
    const shape_t shape = {3};
    const std::vector<tensor_view> views = {{dtype::f8, shape, "view", std::as_bytes(std::span(values))}};
    sctp_send(sp.a.get(), views);
    const auto got = sctp_recv(sp.b.get());
    REQUIRE(got.size() == 1);
    const auto v = got[0].values<double>();
    CHECK(std::vector<double>(v.begin(), v.end()) == values);
    CHECK(got[0].info() == "view");
}

TEST_CASE("a list with more pieces than IOV_MAX takes the copying path and arrives intact") {
    socket_pair sp;
    std::vector<tensor> sent;
    for (int i = 0; i < 700; ++i)  // up to 3 pieces each: over Linux's 1024
        sent.push_back(patterned(i % 2 ? dtype::u1 : dtype::f4, {i % 5 + 1}, numbered("t", i), 100 + i));
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
}

TEST_CASE("a message over max_size is refused with limit_exceeded and discarded whole") {
    socket_pair sp;
    const std::vector<tensor> big = {patterned(dtype::u1, {150000}, "big", 7)};
    const std::vector<tensor> small = {patterned(dtype::i2, {3}, "small", 8)};
    const std::size_t big_size = encoded_size(big);
    sctp_send(sp.a.get(), big);
    sctp_send(sp.a.get(), small);
    const auto msg = expect_error([&] { sctp_recv(sp.b.get(), 100000); }, {errc::limit_exceeded});
    CHECK(msg.find(std::to_string(big_size)) != std::string::npos);
    CHECK(msg.find("max_size = 100000") != std::string::npos);
    check_same(sctp_recv(sp.b.get(), 100000), small);

    // A limit of exactly the message's size is enough.
    sctp_send(sp.a.get(), big);
    check_same(sctp_recv(sp.b.get(), big_size), big);
}

TEST_CASE("the received buffer is as large as the message, not max_size") {
    socket_pair sp;
    const std::vector<tensor> sent = {patterned(dtype::u1, {10}, "", 1)};
    sctp_send(sp.a.get(), sent);
    // A 1 TB max_size would fail to allocate if it were allocated.
    const auto got = sctp_recv(sp.b.get(), std::size_t{1} << 40);
    check_same(got, sent);
}

TEST_CASE("malformed messages are rejected with the manifest's error class") {
    const fs::path dir = test_support::vectors_dir();
    const auto manifest = test_support::manifest();
    socket_pair sp;
    int checked = 0;
    for (const auto& entry : manifest["malformed"]) {
        if (entry["kind"] == "multipart") continue;
        const std::string path = entry["path"];
        CAPTURE(path);
        const auto bytes = test_support::read_file(dir / path);
        send_raw(sp.a.get(), bytes.bytes());
        std::vector<errc> ok;
        for (const auto& n : entry["acceptable_errors"]) {
            for (int c = 1; c <= static_cast<int>(errc::unsupported); ++c)
                if (name(static_cast<errc>(c)) == n.get<std::string>()) ok.push_back(static_cast<errc>(c));
        }
        REQUIRE_FALSE(ok.empty());
        try {
            sctp_recv(sp.b.get());
            FAIL("accepted a malformed message");
        } catch (const error& e) {
            const std::string what = e.what();
            CAPTURE(what);
            // The manifest's class or one it names as also correct.
            CHECK(std::find(ok.begin(), ok.end(), e.code()) != ok.end());
        }
        ++checked;
    }
    CHECK(checked == 7);

    SUBCASE("bytes that are not tenbin at all") {
        const std::string junk = "hello, this is not a tensor";
        send_raw(sp.a.get(), std::as_bytes(std::span(junk)));
        expect_error([&] { sctp_recv(sp.b.get()); }, {errc::bad_magic});
    }
    SUBCASE("a message cut inside a chunk preamble") {
        const auto whole = encode_buffer(std::vector<tensor>{patterned(dtype::f4, {2}, "", 1)});
        send_raw(sp.a.get(), whole.bytes().first(12));
        expect_error([&] { sctp_recv(sp.b.get()); }, {errc::truncated});
    }
    // A valid message after the broken ones is still received.
    const std::vector<tensor> sent = {patterned(dtype::u8, {2}, "after", 1)};
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
}

TEST_CASE("single-part vectors from Python decode to the manifest and re-encode identically") {
    const fs::path dir = test_support::vectors_dir();
    const auto manifest = test_support::manifest();
    socket_pair sp;
    int checked = 0;
    for (const auto& entry : manifest["files"]) {
        if (entry["kind"] == "multipart" || entry["tensors"].empty()) continue;  // empty: see below
        const std::string path = entry["path"];
        CAPTURE(path);
        const auto bytes = test_support::read_file(dir / path);
        send_raw(sp.a.get(), bytes.bytes());
        const auto got = sctp_recv(sp.b.get());
        REQUIRE(got.size() == entry["tensors"].size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            const auto& want = entry["tensors"][i];
            CHECK(got[i].info() == want["info"].get<std::string>());
            CHECK(code(got[i].dtype()) == want["dtype"].get<std::string>());
            CHECK(got[i].shape() == want["shape"].get<shape_t>());
            CHECK(got[i].nbytes() == want["nbytes"].get<std::size_t>());
        }
        // Sending them again puts the very same bytes on the wire.
        sctp_send(sp.a.get(), got);
        std::vector<std::byte> echoed(bytes.size() + 64);
        const ssize_t n = ::recv(sp.b.get(), echoed.data(), echoed.size(), 0);
        REQUIRE(n == static_cast<ssize_t>(bytes.size()));
        echoed.resize(static_cast<std::size_t>(n));
        CHECK(test_support::same_bytes(echoed, bytes.bytes()));
        ++checked;
    }
    CHECK(checked == 16);
}

TEST_CASE("an empty list cannot be sent; an empty message reads as end of stream") {
    socket_pair sp;
    const std::vector<tensor> none;
    const auto msg = expect_error([&] { sctp_send(sp.a.get(), none); }, {errc::bad_argument});
    CHECK(msg.find("empty") != std::string::npos);
    // A zero-length message from elsewhere is consumed, not found forever.
    REQUIRE(::send(sp.a.get(), "", 0, 0) == 0);
    expect_error([&] { sctp_recv(sp.b.get()); }, {errc::io_error});
    const std::vector<tensor> sent = {patterned(dtype::i8, {1}, "", 1)};
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
}

TEST_CASE("a receive times out after SO_RCVTIMEO, or at once on a non-blocking socket") {
    socket_pair sp;
    set_timeout(sp.b.get(), SO_RCVTIMEO, 150);
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { sctp_recv(sp.b.get()); }, {errc::timeout});
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited >= std::chrono::milliseconds(100));
    CHECK(waited < std::chrono::milliseconds(1500));

    REQUIRE(fcntl(sp.b.get(), F_SETFL, fcntl(sp.b.get(), F_GETFL) | O_NONBLOCK) == 0);
    expect_error([&] { sctp_recv(sp.b.get()); }, {errc::timeout});
    // The socket still works afterwards.
    const std::vector<tensor> sent = {patterned(dtype::f2, {3}, "late", 1)};
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
}

TEST_CASE("a full send buffer on a non-blocking socket is a timeout, not a partial send") {
    socket_pair sp;
    REQUIRE(fcntl(sp.a.get(), F_SETFL, fcntl(sp.a.get(), F_GETFL) | O_NONBLOCK) == 0);
    const std::vector<tensor> sent = {patterned(dtype::u1, {60000}, "", 1)};
    bool timed_out = false;
    int queued = 0;
    while (queued < 1000 && !timed_out) {
        try {
            sctp_send(sp.a.get(), sent);
            ++queued;
        } catch (const error& e) {
            CHECK(e.code() == errc::timeout);
            timed_out = true;
        }
    }
    CHECK(timed_out);
    CHECK(queued > 0);
    // Every message that was queued arrives whole.
    for (int i = 0; i < queued; ++i) check_same(sctp_recv(sp.b.get()), sent);
    set_timeout(sp.b.get(), SO_RCVTIMEO, 50);
    expect_error([&] { sctp_recv(sp.b.get()); }, {errc::timeout});
}

TEST_CASE("a closed peer is an io_error on both ends, without SIGPIPE") {
    socket_pair sp;
    sp.a.reset();
    const auto r = expect_error([&] { sctp_recv(sp.b.get()); }, {errc::io_error});
    CHECK(r.find("closed") != std::string::npos);
    const std::vector<tensor> sent = {patterned(dtype::u1, {4}, "", 1)};
    const auto s = expect_error([&] { sctp_send(sp.b.get(), sent); }, {errc::io_error});
    CHECK(s.find("closed") != std::string::npos);
}

TEST_CASE("arguments: byte streams, non-sockets and mismatched destinations are refused") {
    const std::vector<tensor> sent = {patterned(dtype::u1, {4}, "", 1)};
    SUBCASE("a stream socket") {
        socket_pair stream(SOCK_STREAM);
        const auto m = expect_error([&] { sctp_send(stream.a.get(), sent); }, {errc::bad_argument});
        CHECK(m.find("byte stream") != std::string::npos);
        expect_error([&] { sctp_recv(stream.b.get()); }, {errc::bad_argument});
    }
    SUBCASE("not a socket") {
        int p[2];
        REQUIRE(pipe(p) == 0);
        unique_fd r(p[0]), w(p[1]);
        expect_error([&] { sctp_send(w.get(), sent); }, {errc::bad_argument});
        expect_error([&] { sctp_recv(r.get()); }, {errc::bad_argument});
    }
    SUBCASE("dest without a length, and a length without dest") {
        socket_pair sp;
        sockaddr_in a{};
        expect_error([&] { sctp_send(sp.a.get(), reinterpret_cast<sockaddr*>(&a), 0, sent); },
                     {errc::bad_argument});
        expect_error([&] { sctp_send(sp.a.get(), nullptr, sizeof a, sent); }, {errc::bad_argument});
    }
    SUBCASE("a tensor the format cannot carry") {
        socket_pair sp;
        const std::vector<double> values = {1.0};
        const shape_t shape = {2};  // data holds one element only
        const std::vector<tensor_view> bad = {{dtype::f8, shape, "", std::as_bytes(std::span(values))}};
        expect_error([&] { sctp_send(sp.a.get(), bad); }, {errc::bad_argument});
        set_timeout(sp.b.get(), SO_RCVTIMEO, 50);
        expect_error([&] { sctp_recv(sp.b.get()); }, {errc::timeout});  // nothing was sent
    }
    SUBCASE("a message too long for the socket") {
        socket_pair sp;
        int small = 4096;
        REQUIRE(setsockopt(sp.a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
        const std::vector<tensor> big = {patterned(dtype::u1, {100000}, "", 1)};
        const auto m = expect_error([&] { sctp_send(sp.a.get(), big); }, {errc::io_error});
        CHECK(m.find("too long") != std::string::npos);
    }
}

TEST_CASE("AF_UNIX SOCK_DGRAM works the same way") {
    socket_pair sp(SOCK_DGRAM);
    const std::vector<tensor> sent = {patterned(dtype::f4, {10, 10}, "dgram", 3)};
    sctp_send(sp.a.get(), sent);
    check_same(sctp_recv(sp.b.get()), sent);
    set_timeout(sp.b.get(), SO_RCVTIMEO, 50);
    expect_error([&] { sctp_recv(sp.b.get()); }, {errc::timeout});  // nothing queued
}

// ---- the SCTP part reader, driven by scripted parts ------------------------

namespace {

struct scripted_part {
    std::vector<std::byte> bytes;
    bool eor = true;
    bool notification = false;
};

// Hands out the script as the kernel would: at most the space given, the
// rest of a part staying queued; MSG_EOR only with a part's last byte.
struct script {
    std::deque<scripted_part> parts;
    std::size_t reads = 0;
    std::vector<std::size_t> spaces;

    detail::part_reader reader() {
        return [this](mutable_bytes space) {
            ++reads;
            spaces.push_back(space.size());
            REQUIRE_FALSE(space.empty());
            if (parts.empty()) return detail::message_part{};  // closed
            auto& p = parts.front();
            const std::size_t n = std::min(space.size(), p.bytes.size());
            std::memcpy(space.data(), p.bytes.data(), n);
            detail::message_part out{n, false, p.notification};
            p.bytes.erase(p.bytes.begin(), p.bytes.begin() + static_cast<std::ptrdiff_t>(n));
            if (p.bytes.empty()) {
                out.end_of_record = p.eor;
                parts.pop_front();
            }
            return out;
        };
    }
};

std::vector<std::byte> joined(std::initializer_list<std::vector<std::byte>> pieces) {
    std::vector<std::byte> out;
    for (const auto& p : pieces) out.insert(out.end(), p.begin(), p.end());
    return out;
}

}  // namespace

TEST_CASE("SCTP parts: a message in one part is returned exactly") {
    script s;
    const auto m = pattern(1000, 1);
    s.parts.push_back({m});
    const buffer b = detail::read_message_parts(s.reader(), 1000, 1 << 20);
    CHECK(std::vector<std::byte>(b.bytes().begin(), b.bytes().end()) == m);
    CHECK(s.reads == 1);
}

TEST_CASE("SCTP parts: a message delivered in parts grows the buffer to at most twice its size") {
    script s;
    const auto a = pattern(5000, 1), b = pattern(70000, 2), c = pattern(123, 3);
    s.parts.push_back({a, false});
    s.parts.push_back({b, false});
    s.parts.push_back({c, true});
    const auto next = pattern(10, 4);
    s.parts.push_back({next});
    const buffer got = detail::read_message_parts(s.reader(), 5000, 1 << 20);
    CHECK(std::vector<std::byte>(got.bytes().begin(), got.bytes().end()) == joined({a, b, c}));
    // The next message is untouched.
    REQUIRE(s.parts.size() == 1);
    CHECK(s.parts.front().bytes == next);
    CHECK(s.spaces.front() == 5000);
}

TEST_CASE("SCTP parts: a hint smaller than the message, or none, still reads it whole") {
    for (std::size_t hint : {std::size_t{0}, std::size_t{1}, std::size_t{100}}) {
        CAPTURE(hint);
        script s;
        const auto m = pattern(200000, 5);
        s.parts.push_back({m});
        const buffer got = detail::read_message_parts(s.reader(), hint, 1 << 20);
        CHECK(got.size() == m.size());
        CHECK(std::vector<std::byte>(got.bytes().begin(), got.bytes().end()) == m);
        // No more than twice the message is kept alive.
        CHECK(got.aligned_to(64));
    }
}

TEST_CASE("SCTP parts: notifications are skipped") {
    script s;
    s.parts.push_back({pattern(40, 1), true, true});
    s.parts.push_back({pattern(100, 2), false, true});  // a long one, in two parts
    s.parts.push_back({pattern(100, 3), true, true});
    const auto m = pattern(300, 4);
    s.parts.push_back({m});
    const buffer got = detail::read_message_parts(s.reader(), 64, 1 << 20);
    CHECK(std::vector<std::byte>(got.bytes().begin(), got.bytes().end()) == m);
    CHECK(s.parts.empty());
}

TEST_CASE("SCTP parts: over max_size is limit_exceeded, after reading the message to its end") {
    script s;
    s.parts.push_back({pattern(3000, 1), false});
    s.parts.push_back({pattern(200000, 2), true});
    const auto next = pattern(50, 3);
    s.parts.push_back({next});
    const auto msg = expect_error([&] { detail::read_message_parts(s.reader(), 3000, 10000); },
                                  {errc::limit_exceeded});
    CHECK(msg.find("203000") != std::string::npos);
    CHECK(msg.find("max_size = 10000") != std::string::npos);
    for (std::size_t sp : s.spaces) CHECK(sp <= 64 * 1024);
    REQUIRE(s.parts.size() == 1);
    const buffer got = detail::read_message_parts(s.reader(), 0, 10000);
    CHECK(std::vector<std::byte>(got.bytes().begin(), got.bytes().end()) == next);

    SUBCASE("max_size 0 refuses everything") {
        script z;
        z.parts.push_back({pattern(10, 1)});
        expect_error([&] { detail::read_message_parts(z.reader(), 10, 0); }, {errc::limit_exceeded});
        CHECK(z.parts.empty());
    }
    SUBCASE("a message of exactly max_size is accepted") {
        script e;
        const auto m = pattern(10000, 9);
        e.parts.push_back({std::vector<std::byte>(m.begin(), m.begin() + 4000), false});
        e.parts.push_back({std::vector<std::byte>(m.begin() + 4000, m.end()), true});
        const buffer b = detail::read_message_parts(e.reader(), 4000, 10000);
        CHECK(std::vector<std::byte>(b.bytes().begin(), b.bytes().end()) == m);
    }
}

TEST_CASE("SCTP parts: a peer closing before or inside a message is an io_error") {
    script s;
    expect_error([&] { detail::read_message_parts(s.reader(), 0, 1000); }, {errc::io_error});
    s.parts.push_back({pattern(10, 1), false});
    const auto m = expect_error([&] { detail::read_message_parts(s.reader(), 0, 1000); }, {errc::io_error});
    CHECK(m.find("inside a message") != std::string::npos);
}

// ---- real SCTP -------------------------------------------------------------

namespace {

// An SCTP socket, or -1 with the reason when the kernel has no SCTP.
int sctp_socket(int type, std::string& why) {
    const int fd = ::socket(AF_INET, type, IPPROTO_SCTP);
    if (fd < 0)
        why = std::string("socket(AF_INET, ") + (type == SOCK_STREAM ? "SOCK_STREAM" : "SOCK_SEQPACKET") +
              ", IPPROTO_SCTP): " + std::strerror(errno);
    return fd;
}

bool skip_without_sctp(int fd, const std::string& why) {
    if (fd >= 0) return false;
    MESSAGE("SKIPPED: this kernel has no SCTP (" << why << "); the real-SCTP test did not run");
    return true;
}

}  // namespace

TEST_CASE("real SCTP on 127.0.0.1: one-to-many sockets carry tensor lists") {
    std::string why;
    unique_fd server(sctp_socket(SOCK_SEQPACKET, why));
    if (skip_without_sctp(server.get(), why)) return;
    unique_fd client(sctp_socket(SOCK_SEQPACKET, why));
    REQUIRE(client.get() >= 0);

    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(server.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(server.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    REQUIRE(::listen(server.get(), 4) == 0);
    set_timeout(server.get(), SO_RCVTIMEO, receive_timeout_ms);
    set_timeout(client.get(), SO_SNDTIMEO, receive_timeout_ms);
    for (int fd : {server.get(), client.get()}) {
        int size = 4 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    const auto* dest = reinterpret_cast<const sockaddr*>(&addr);

    const std::vector<tensor> small = {patterned(dtype::f4, {3, 5}, "input", 1), patterned(dtype::u4, {}, "s", 2),
                                       patterned(dtype::i8, {0, 3}, "", 3)};
    sctp_send(client.get(), dest, sizeof addr, small);
    check_same(sctp_recv(server.get()), small);

    // Large enough that the kernel may deliver it in parts.
    const std::vector<tensor> big = {patterned(dtype::u1, {300000}, "big", 4)};
    sctp_send(client.get(), dest, sizeof addr, big);
    check_same(sctp_recv(server.get()), big);

    sctp_send(client.get(), dest, sizeof addr, big);
    sctp_send(client.get(), dest, sizeof addr, small);
    expect_error([&] { sctp_recv(server.get(), 100000); }, {errc::limit_exceeded});
    check_same(sctp_recv(server.get()), small);

    const std::string junk = "not tenbin";
    REQUIRE(::sendto(client.get(), junk.data(), junk.size(), 0, dest, sizeof addr) ==
            static_cast<ssize_t>(junk.size()));
    expect_error([&] { sctp_recv(server.get()); }, {errc::bad_magic});

    set_timeout(server.get(), SO_RCVTIMEO, 100);
    expect_error([&] { sctp_recv(server.get()); }, {errc::timeout});
}

TEST_CASE("real SCTP on 127.0.0.1: one-to-one (SOCK_STREAM) sockets keep message boundaries") {
    std::string why;
    unique_fd listener(sctp_socket(SOCK_STREAM, why));
    if (skip_without_sctp(listener.get(), why)) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    unique_fd client(sctp_socket(SOCK_STREAM, why));
    REQUIRE(client.get() >= 0);
    REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    unique_fd conn(::accept(listener.get(), nullptr, nullptr));
    REQUIRE(conn.get() >= 0);
    set_timeout(conn.get(), SO_RCVTIMEO, receive_timeout_ms);

    const std::vector<tensor> a = {patterned(dtype::f8, {4}, "a", 1)};
    const std::vector<tensor> b = {patterned(dtype::i2, {2, 2}, "b", 2)};
    sctp_send(client.get(), a);
    sctp_send(client.get(), b);
    check_same(sctp_recv(conn.get()), a);
    check_same(sctp_recv(conn.get()), b);
    client.reset();
    expect_error([&] { sctp_recv(conn.get()); }, {errc::io_error});
}
