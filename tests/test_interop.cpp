// Interoperability with Python over real ZeroMQ sockets (tcp loopback and
// ipc): tests/peers/tensorcom_peer.py, a NumPy implementation of the format
// written the way tensorcom's is, receives what C++ sends, sends what C++
// receives, echoes, and replays the Python vectors frame by frame.
//
// Both sides build the same tensors from a seed (see tensorcom_peer.py), so
// each side checks the other's data for equality; Python also reports SHA-256 of each
// tensor's bytes, compared here. Every socket operation has a timeout and
// the peer process is killed when it overruns.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace tenbin;
using test_support::check_same;
using test_support::sha256_hex;

namespace {

// Socket operations and the peer's own socket operations give up after this.
constexpr int socket_timeout_ms = 15000;
// The whole peer process is killed after this.
constexpr auto peer_deadline = std::chrono::seconds(40);

// ---- the peer process ---------------------------------------------------------

struct peer_result {
    int exit_code = -1;  // -1: killed or did not exit normally
    bool timed_out = false;
    std::string out;     // its stdout
    std::vector<nlohmann::json> lines() const {
        std::vector<nlohmann::json> v;
        std::size_t at = 0;
        while (at < out.size()) {
            const std::size_t end = out.find('\n', at);
            const std::string line = out.substr(at, end == std::string::npos ? end : end - at);
            if (!line.empty()) v.push_back(nlohmann::json::parse(line));
            if (end == std::string::npos) break;
            at = end + 1;
        }
        return v;
    }
};

// `python tensorcom_peer.py args...` with stdout to a pipe; stderr is inherited so
// that the peer's complaints show in the test log.
class peer_process {
public:
    explicit peer_process(const std::vector<std::string>& args) {
        const char* python = std::getenv("TENBIN_PYTHON");
        const char* tests = std::getenv("TENBIN_TESTS_DIR");
        REQUIRE_MESSAGE((python && tests), "TENBIN_PYTHON and TENBIN_TESTS_DIR must be set (meson test sets them)");
        std::vector<std::string> argv_s = {python, std::string(tests) + "/peers/tensorcom_peer.py"};
        argv_s.insert(argv_s.end(), args.begin(), args.end());
        argv_s.push_back("--timeout");
        argv_s.push_back(std::to_string(socket_timeout_ms / 1000));
        std::vector<char*> argv;
        for (auto& a : argv_s) argv.push_back(a.data());
        argv.push_back(nullptr);

        int fds[2];
        REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
        out_fd_ = fds[0];
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
        const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[1]);
        REQUIRE_MESSAGE(rc == 0, "posix_spawn " << argv_s[0] << ": " << std::strerror(rc));
        started_ = std::chrono::steady_clock::now();
    }
    peer_process(const peer_process&) = delete;
    peer_process& operator=(const peer_process&) = delete;
    ~peer_process() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        if (out_fd_ >= 0) ::close(out_fd_);
    }

    // Reads the peer's output to its end and waits for it to exit, killing
    // it when the deadline passes first.
    peer_result finish() {
        peer_result r;
        const auto deadline = started_ + peer_deadline;
        char chunk[4096];
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                r.timed_out = true;
                break;
            }
            pollfd p{out_fd_, POLLIN, 0};
            const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
            if (ready < 0 && errno == EINTR) continue;
            if (ready <= 0) continue;  // the deadline check above ends it
            const ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;  // end of output
            r.out.append(chunk, static_cast<std::size_t>(n));
        }
        int status = 0;
        for (;;) {
            const pid_t done = ::waitpid(pid_, &status, WNOHANG);
            if (done == pid_) break;
            if (r.timed_out || std::chrono::steady_clock::now() > deadline) {
                r.timed_out = true;
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        pid_ = -1;
        if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
        return r;
    }

private:
    pid_t pid_ = -1;
    int out_fd_ = -1;
    std::chrono::steady_clock::time_point started_;
};

void check_clean_exit(const peer_result& r) {
    CAPTURE(r.out);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 0);
}

// ---- the tensors both sides generate (mirror of tensorcom_peer.py) ----------

struct spec {
    dtype t;
    shape_t shape;
    std::string_view info;
};

const std::vector<spec>& full_set() {
    static const std::vector<spec> s = {
        {dtype::f2, {7}, "half"}, {dtype::f4, {3, 5}, "input"}, {dtype::f8, {2, 3, 4}, "cube"},
        {dtype::i1, {13}, "bytes"}, {dtype::i2, {5, 3}, "x"}, {dtype::i4, {4}, "target"},
        {dtype::i8, {3}, "big"}, {dtype::u1, {2, 8, 8, 3}, "image"}, {dtype::u2, {5}, "y"},
        {dtype::u4, {2, 3}, "u32"}, {dtype::u8, {6}, "u64"}, {dtype::f8, {}, "scalar"},
        {dtype::f4, {0, 4}, "none"}, {dtype::u1, {0}, ""}, {dtype::i2, {1, 2, 1, 1, 2, 1, 1, 1, 2}, "ninedims"},
        {dtype::u1, {5000}, "large"}, {dtype::f4, {1000}, "abcdefgh"}, {dtype::u1, {3}, std::string_view("a\0b", 3)},
    };
    return s;
}

enum class tensor_set { full, compat };

const char* set_name(tensor_set s) { return s == tensor_set::full ? "full" : "compat"; }

std::vector<tensor> generate(tensor_set which, std::uint64_t seed) {
    std::vector<tensor> out;
    const auto& specs = full_set();
    for (std::size_t k = 0; k < specs.size(); ++k) {
        const spec& s = specs[k];
        // Real tensorcom decodes neither uint32 nor rank 0.
        if (which == tensor_set::compat && (s.t == dtype::u4 || s.shape.empty())) continue;
        std::uint64_t n = itemsize(s.t);
        for (auto d : s.shape) n *= static_cast<std::uint64_t>(d);
        std::vector<std::uint8_t> bytes(n);
        // k counts the tensors of this message, as tensorcom_peer.py's does.
        const std::uint64_t base = seed * 1000003u + out.size() * 7919u;
        for (std::uint64_t i = 0; i < n; ++i) {
            const std::uint64_t x = i * 2654435761u + base;
            bytes[i] = static_cast<std::uint8_t>((x ^ (x >> 13)) & 0xff);
        }
        out.emplace_back(s.t, s.shape, buffer::adopt(std::move(bytes)), std::string(s.info));
    }
    return out;
}

// What Python reported about a message, against the tensors sent.
void check_report(const nlohmann::json& line, const std::vector<tensor>& sent, const char* form) {
    CAPTURE(line.dump());
    REQUIRE_FALSE(line.contains("error"));
    CHECK(line["form"] == form);
    CHECK(line["matches"] == true);
    const auto& ts = line["tensors"];
    REQUIRE(ts.size() == sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) {
        CAPTURE(i);
        CHECK(ts[i]["info"] == sent[i].info());
        CHECK(ts[i]["dtype"] == std::string(code(sent[i].dtype())));
        CHECK(ts[i]["shape"].get<shape_t>() == sent[i].shape());
        CHECK(ts[i]["nbytes"].get<std::size_t>() == sent[i].nbytes());
        CHECK(ts[i]["sha256"] == sha256_hex(sent[i].data().bytes()));
    }
}

// ---- sockets --------------------------------------------------------------------

enum class transport { tcp, ipc };
const char* bind_address(transport t) { return t == transport::tcp ? "tcp://127.0.0.1:*" : "ipc://*"; }
const char* transport_name(transport t) { return t == transport::tcp ? "tcp" : "ipc"; }

zmq::socket_t bound_socket(zmq::context_t& ctx, zmq::socket_type type, transport t, std::string& endpoint) {
    zmq::socket_t s(ctx, type);
    s.set(zmq::sockopt::rcvtimeo, socket_timeout_ms);
    s.set(zmq::sockopt::sndtimeo, socket_timeout_ms);
    s.set(zmq::sockopt::linger, 0);  // closed only after the peer reported
    s.bind(bind_address(t));
    endpoint = s.get(zmq::sockopt::last_endpoint);
    return s;
}

}  // namespace

// ---- C++ -> Python ----------------------------------------------------------------

TEST_CASE("Python decodes exactly what zsend_multipart and zsend_single send") {
    for (transport tr : {transport::tcp, transport::ipc}) {
        for (const char* form : {"multipart", "single"}) {
            const std::string where = std::string(transport_name(tr)) + " " + form;
            CAPTURE(where);
            const bool single = std::string(form) == "single";
            zmq::context_t ctx;
            std::string endpoint;
            auto push = bound_socket(ctx, zmq::socket_type::push, tr, endpoint);
            peer_process peer({"recv", "--endpoint", endpoint, "--count", "3", "--seed", "100", "--set", "full"});

            std::vector<std::vector<tensor>> sent;
            for (int n = 0; n < 3; ++n) {
                sent.push_back(generate(tensor_set::full, 100 + n));
                send_options opt;
                if (n == 1) opt.copy_threshold = 0;  // every data frame zero-copy
                if (n == 2) opt.copy_threshold = SIZE_MAX;  // every data frame copied
                const bool ok = single ? zsend_single(push, sent.back(), opt)
                                       : zsend_multipart(push, sent.back(), opt);
                CHECK(ok);
            }
            const peer_result r = peer.finish();
            check_clean_exit(r);
            const auto lines = r.lines();
            REQUIRE(lines.size() == 3);
            for (int n = 0; n < 3; ++n) check_report(lines[n], sent[n], form);
        }
    }
}

TEST_CASE("views (caller-owned arrays) reach Python intact") {
    zmq::context_t ctx;
    std::string endpoint;
    auto push = bound_socket(ctx, zmq::socket_type::push, transport::tcp, endpoint);
    peer_process peer({"recv", "--endpoint", endpoint, "--count", "1", "--seed", "7"});
    const auto owned = generate(tensor_set::full, 7);
    std::vector<tensor_view> views;
    for (const auto& t : owned) views.push_back(t.view());
    CHECK(zsend_multipart(push, views));
    const peer_result r = peer.finish();
    check_clean_exit(r);
    const auto lines = r.lines();
    REQUIRE(lines.size() == 1);
    check_report(lines[0], owned, "multipart");
}

TEST_CASE("only what real tensorcom decodes (no u4, no rank 0): both forms reach Python") {
    zmq::context_t ctx;
    std::string endpoint;
    auto push = bound_socket(ctx, zmq::socket_type::push, transport::tcp, endpoint);
    peer_process peer({"recv", "--endpoint", endpoint, "--count", "2", "--seed", "55", "--set", "compat"});
    const auto first = generate(tensor_set::compat, 55);
    const auto second = generate(tensor_set::compat, 56);
    for (const auto& t : first) {
        CHECK(t.dtype() != dtype::u4);
        CHECK(t.ndim() > 0);
    }
    CHECK(zsend_multipart(push, first));
    CHECK(zsend_single(push, second));
    const peer_result r = peer.finish();
    check_clean_exit(r);
    const auto lines = r.lines();
    REQUIRE(lines.size() == 2);
    check_report(lines[0], first, "multipart");
    check_report(lines[1], second, "single");
}

// ---- Python -> C++ ----------------------------------------------------------------

TEST_CASE("zrecv decodes what Python sends, in both forms") {
    for (transport tr : {transport::tcp, transport::ipc}) {
        for (const char* form : {"multipart", "single"}) {
            for (tensor_set set : {tensor_set::full, tensor_set::compat}) {
                const std::string where = std::string(transport_name(tr)) + " " + form + " " + set_name(set);
                CAPTURE(where);
                const bool single = std::string(form) == "single";
                zmq::context_t ctx;
                std::string endpoint;
                auto pull = bound_socket(ctx, zmq::socket_type::pull, tr, endpoint);
                peer_process peer({"send", "--endpoint", endpoint, "--count", "3", "--seed", "300",
                                   "--set", set_name(set), "--form", form});
                for (int n = 0; n < 3; ++n) {
                    CAPTURE(n);
                    // The first with zrecv, the others with the form's own receiver.
                    const auto msg = n == 0 ? zrecv(pull) : single ? zrecv_single(pull) : zrecv_multipart(pull);
                    REQUIRE_MESSAGE(msg.has_value(), "nothing from the Python peer within the timeout");
                    CHECK(msg->single == single);
                    CHECK(msg->envelope.empty());
                    check_same(msg->tensors, generate(set, 300 + n));
                    for (const auto& t : msg->tensors) {
                        if (!t.data().empty()) CHECK(t.data().aligned_to(itemsize(t.dtype())));
                    }
                }
                check_clean_exit(peer.finish());
            }
        }
    }
}

TEST_CASE("a Python echo returns both forms unchanged (Python decodes and re-encodes)") {
    for (transport tr : {transport::tcp, transport::ipc}) {
        const std::string where = transport_name(tr);
        CAPTURE(where);
        zmq::context_t ctx;
        std::string endpoint;
        auto pair = bound_socket(ctx, zmq::socket_type::pair, tr, endpoint);
        peer_process peer({"echo", "--endpoint", endpoint, "--count", "3"});
        const auto a = generate(tensor_set::full, 900);
        const auto b = generate(tensor_set::full, 901);
        const std::vector<tensor> one = {generate(tensor_set::full, 902)[15]};  // "large" alone
        CHECK(zsend_multipart(pair, a));
        CHECK(zsend_single(pair, b));
        CHECK(zsend_multipart(pair, one));
        for (const auto* want : {&a, &b, &one}) {
            const auto msg = zrecv(pair);
            REQUIRE(msg.has_value());
            CHECK(msg->single == (want == &b));
            check_same(msg->tensors, *want);
        }
        check_clean_exit(peer.finish());
    }
}

// ---- the Python vectors, frame by frame --------------------------------------------

TEST_CASE("the Python vectors sent frame by frame by Python decode as the manifest says") {
    const auto manifest = test_support::manifest();
    const auto dir = test_support::vectors_dir();
    struct expected {
        const nlohmann::json* entry;
        bool malformed;
    };
    std::vector<expected> order;
    std::vector<std::string> paths;
    for (const char* section : {"files", "malformed"}) {
        for (const auto& e : manifest[section]) {
            const std::string kind = e["kind"];
            if (kind != "multipart" && kind != "buffer") continue;
            order.push_back({&e, std::string(section) == "malformed"});
            paths.push_back((dir / e["path"].get<std::string>()).string());
        }
    }
    REQUIRE(order.size() >= 10);

    for (transport tr : {transport::tcp, transport::ipc}) {
        const std::string where = transport_name(tr);
        CAPTURE(where);
        zmq::context_t ctx;
        std::string endpoint;
        auto pull = bound_socket(ctx, zmq::socket_type::pull, tr, endpoint);
        std::vector<std::string> args = {"frames", "--endpoint", endpoint};
        args.insert(args.end(), paths.begin(), paths.end());
        peer_process peer(args);

        int valid = 0, rejected = 0;
        for (const auto& [entry, malformed] : order) {
            const std::string path = (*entry)["path"];
            const bool multipart = (*entry)["kind"] == "multipart";
            CAPTURE(path);
            if (malformed) {
                const auto allowed = test_support::allowed_errors(*entry);
                const std::string got = test_support::error_class([&] { (void)zrecv(pull); });
                CAPTURE(got);
                CHECK(std::find(allowed.begin(), allowed.end(), got) != allowed.end());
                ++rejected;
                continue;
            }
            const auto msg = zrecv(pull);
            REQUIRE(msg.has_value());
            // One frame is the single-part form, except an empty list.
            if (!(*entry)["tensors"].empty()) CHECK(msg->single == !multipart);
            const auto& want = (*entry)["tensors"];
            REQUIRE(msg->tensors.size() == want.size());
            for (std::size_t i = 0; i < want.size(); ++i) {
                const tensor& t = msg->tensors[i];
                CAPTURE(i);
                CHECK(t.info() == want[i]["info"].get<std::string>());
                CHECK(code(t.dtype()) == want[i]["dtype"].get<std::string>());
                CHECK(t.shape() == want[i]["shape"].get<shape_t>());
                CHECK(sha256_hex(t.data().bytes()) == want[i]["sha256"].get<std::string>());
            }
            // Encoding again gives the very frames / bytes Python sent.
            if (multipart) {
                const auto frames = test_support::read_frames(*entry);
                const auto again = encode_list(msg->tensors);
                REQUIRE(again.size() == frames.size());
                for (std::size_t f = 0; f < frames.size(); ++f)
                    CHECK(test_support::same_bytes(again[f].bytes(), frames[f].bytes()));
            } else {
                const auto bytes = test_support::read_file(dir / path);
                CHECK(test_support::same_bytes(encode_buffer(msg->tensors).bytes(), bytes.bytes()));
            }
            ++valid;
        }
        CHECK(valid == 6);
        CHECK(rejected == 7);
        check_clean_exit(peer.finish());
    }
}

// ---- loaders and connections (tensorcom's Connection on the other side) -----------

TEST_CASE("a C++ loader fans in from two Python publishers sending as tensorcom does") {
    // The loader binds (zrsub); the Python publishers connect to it, wait for
    // their subscription to arrive, then publish five messages each.
    loader_options lo;
    lo.connection.recv_timeout = std::chrono::milliseconds(socket_timeout_ms);
    loader l("zrsub://127.0.0.1:*", lo);
    const std::string endpoint = l.endpoints().at(0).address;
    peer_process a({"send", "--kind", "pub", "--endpoint", endpoint, "--count", "5", "--seed", "100",
                    "--set", "compat", "--delay", "0.5"});
    peer_process b({"send", "--kind", "pub", "--endpoint", endpoint, "--count", "5", "--seed", "200",
                    "--set", "compat", "--form", "single", "--delay", "0.5"});
    std::map<std::uint64_t, std::vector<tensor>> expected;
    for (std::uint64_t seed = 100; seed < 105; ++seed) expected[seed] = generate(tensor_set::compat, seed);
    for (std::uint64_t seed = 200; seed < 205; ++seed) expected[seed] = generate(tensor_set::compat, seed);
    std::set<std::uint64_t> seen;
    for (int n = 0; n < 10; ++n) {
        const auto batch = l.next();
        REQUIRE(batch);
        // Which message is it? The first tensor's bytes tell.
        std::uint64_t which = 0;
        for (const auto& [seed, want] : expected)
            if ((*batch)[0].view() == want[0].view()) which = seed;
        REQUIRE_MESSAGE(which != 0, "a message that neither publisher sent");
        check_same(*batch, expected[which]);
        seen.insert(which);
    }
    CHECK(seen.size() == 10);
    check_clean_exit(a.finish());
    check_clean_exit(b.finish());
    CHECK(l.stats().messages() == 10);
}

TEST_CASE("connection::serve feeds a Python receiver decoding as tensorcom does") {
    for (bool multipart : {true, false}) {
        CAPTURE(multipart);
        connection_options co;
        co.multipart = multipart;
        co.allow64 = true;  // the compat set has f8 and i8 tensors
        co.send_timeout = std::chrono::milliseconds(socket_timeout_ms);
        connection push("zrpush://127.0.0.1:*", co);
        peer_process peer({"recv", "--endpoint", push.endpoints().at(0).address, "--count", "4", "--seed", "40",
                           "--set", "compat"});
        std::vector<std::vector<tensor>> batches;
        for (std::uint64_t seed = 40; seed < 44; ++seed) batches.push_back(generate(tensor_set::compat, seed));
        CHECK(push.serve(batches) == 4);
        const peer_result r = peer.finish();
        check_clean_exit(r);
        const auto lines = r.lines();
        REQUIRE(lines.size() == 4);
        for (std::size_t n = 0; n < 4; ++n) check_report(lines[n], batches[n], multipart ? "multipart" : "single");
    }
}

// ---- CURVE ------------------------------------------------------------------------

TEST_CASE("CURVE with pyzmq: certificates of zmq.auth.create_certificates, both directions") {
    const test_support::temp_dir dir("tenbin-interop-curve");
    const std::filesystem::path allowed = dir / "allowed";
    std::filesystem::create_directory(allowed);
    // The client's pair by pyzmq; the server's by tenbin, read by pyzmq.
    check_clean_exit(peer_process({"certs", allowed.string(), "client"}).finish());
    const std::filesystem::path client_secret = allowed / "client.key_secret";
    std::filesystem::rename(client_secret, dir / "client.key_secret");
    // pyzmq leaves the secret file to the umask: readable by others here.
    std::filesystem::permissions(dir / "client.key_secret", std::filesystem::perms(0644),
                                 std::filesystem::perm_options::replace);
    CHECK(test_support::error_class([&] { (void)load_secret_certificate(dir / "client.key_secret"); }) ==
          "bad_certificate");
    std::filesystem::permissions(dir / "client.key_secret", std::filesystem::perms(0600),
                                 std::filesystem::perm_options::replace);
    const curve_keys client = load_secret_certificate(dir / "client.key_secret");
    CHECK(load_public_certificates(allowed) == std::vector<std::string>{client.public_key});
    const certificate_files server = create_certificates(dir.path(), "server");
    const curve_keys server_keys = load_secret_certificate(server.secret_file);

    curve_options sc;
    sc.keys = server_keys;
    sc.allowed_clients = load_public_certificates(allowed);
    const std::vector<std::string> python_client = {"--curve-cert", (dir / "client.key_secret").string(),
                                                    "--curve-server", server.public_file.string()};
    SUBCASE("Python pushes to a C++ loader") {
        loader_options lo;
        lo.connection.recv_timeout = std::chrono::milliseconds(socket_timeout_ms);
        lo.connection.curve = sc;
        loader l("zpull://127.0.0.1:*", lo);
        std::vector<std::string> args = {"send", "--endpoint", l.endpoints().at(0).address, "--count", "3",
                                         "--seed", "300"};
        args.insert(args.end(), python_client.begin(), python_client.end());
        peer_process peer(args);
        for (std::uint64_t seed = 300; seed < 303; ++seed) {
            const auto batch = l.next();
            REQUIRE(batch);
            check_same(*batch, generate(tensor_set::full, seed));
        }
        check_clean_exit(peer.finish());
        CHECK(l.refused_handshakes() == 0);
    }
    SUBCASE("a C++ publisher feeds a Python subscriber") {
        connection_options co;
        co.curve = sc;
        co.allow64 = true;
        co.send_timeout = std::chrono::milliseconds(socket_timeout_ms);
        connection push("zrpush://127.0.0.1:*", co);
        std::vector<std::string> args = {"recv", "--endpoint", push.endpoints().at(0).address, "--count", "2",
                                         "--seed", "400"};
        args.insert(args.end(), python_client.begin(), python_client.end());
        peer_process peer(args);
        for (std::uint64_t seed = 400; seed < 402; ++seed) CHECK(push.send(generate(tensor_set::full, seed)));
        const peer_result r = peer.finish();
        check_clean_exit(r);
        const auto lines = r.lines();
        REQUIRE(lines.size() == 2);
        for (std::size_t n = 0; n < 2; ++n) check_report(lines[n], generate(tensor_set::full, 400 + n), "multipart");
    }
    SUBCASE("a Python client that is not allowed delivers nothing") {
        check_clean_exit(peer_process({"certs", dir.path().string(), "stranger"}).finish());
        connection_options co;
        co.curve = sc;
        co.recv_timeout = std::chrono::milliseconds(1000);
        connection pull("zpull://127.0.0.1:*", co);
        peer_process peer({"send", "--endpoint", pull.endpoints().at(0).address, "--count", "1", "--timeout", "2",
                           "--curve-cert", (dir / "stranger.key_secret").string(), "--curve-server",
                           server.public_file.string()});
        CHECK_FALSE(pull.recv());
        peer.finish();  // it gives up on delivering
        CHECK(pull.refused_handshakes() > 0);
    }
}

TEST_CASE("a #topic subscriber takes a tensorcom publisher's messages as tensorcom's #topic does (a prefix of the first frame)") {
    // tensorcom sends no topic frame: `zsub://...#f2` is a ZeroMQ prefix
    // subscription, matched here by the first header frame's dtype code.
    connection_options co;
    co.recv_timeout = std::chrono::milliseconds(socket_timeout_ms);
    connection sub("zrsub://127.0.0.1:*#f2", co);
    connection other("zrsub://127.0.0.1:*#f4", co);
    const std::string endpoint = sub.endpoints().at(0).address;
    peer_process a({"send", "--kind", "pub", "--endpoint", endpoint, "--count", "3", "--seed", "300",
                    "--set", "compat", "--delay", "0.5"});
    peer_process b({"send", "--kind", "pub", "--endpoint", other.endpoints().at(0).address, "--count", "1",
                    "--seed", "400", "--set", "compat", "--delay", "0.5"});
    for (std::uint64_t seed = 300; seed < 303; ++seed) {
        const auto got = sub.recv();
        REQUIRE(got);
        check_same(*got, generate(tensor_set::compat, seed));
    }
    CHECK(sub.other_topics() == 0);
    check_clean_exit(a.finish());
    // A message whose first frame does not start with the topic never comes.
    other.socket().set(zmq::sockopt::rcvtimeo, 1500);
    CHECK_FALSE(other.recv());
    check_clean_exit(b.finish());
}
