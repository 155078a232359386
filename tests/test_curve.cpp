// CURVE security: certificate files, connections and loaders with keys,
// refused handshakes (no keys, a wrong server key, a key not allowed), the
// ZAP handler per context, enable_curve on a caller's own sockets.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>
#include <tenbin/security.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::error_class;
using test_support::error_text;
using test_support::eventually;
namespace fs = std::filesystem;

namespace {

// A message whose bytes depend on `seed` everywhere (so a corrupt one shows).
std::vector<tensor> batch(std::int32_t seed, std::size_t n = 10000) {
    std::vector<std::int32_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(seed * 7919 + static_cast<std::int32_t>(i) * 31);
    std::vector<std::uint8_t> tail(777);
    for (std::size_t i = 0; i < tail.size(); ++i) tail[i] = static_cast<std::uint8_t>(seed + i * 13);
    std::vector<tensor> out;
    out.push_back(tensor::from_vector(std::move(v), {static_cast<std::int64_t>(n)}, "values"));
    out.push_back(tensor::from_vector(std::move(tail), {7, 111}, "tail"));
    return out;
}

void check_batch(const std::vector<tensor>& got, std::int32_t seed) {
    const std::vector<tensor> want = batch(seed);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].info() == want[i].info());
        CHECK(got[i].shape() == want[i].shape());
        CHECK(test_support::same_bytes(got[i].data().bytes(), want[i].data().bytes()));
    }
}

std::string bound_tcp(const connection& c) { return c.endpoints().front().address; }

// "zpush://127.0.0.1:PORT" for a tcp endpoint "tcp://127.0.0.1:PORT".
std::string url_of(const std::string& scheme, const std::string& tcp) { return scheme + "://" + tcp.substr(6); }

// The refusals a callback saw (it runs on a monitor thread).
struct refusal_log {
    std::mutex mutex;
    std::vector<handshake_refusal> seen;
    std::function<void(const handshake_refusal&)> callback() {
        return [this](const handshake_refusal& r) {
            const std::lock_guard lock(mutex);
            seen.push_back(r);
        };
    }
    std::vector<handshake_refusal> snapshot() {
        const std::lock_guard lock(mutex);
        return seen;
    }
};

curve_options server_side(const curve_keys& server, std::vector<std::string> allowed = {}) {
    curve_options o;
    o.keys = server;
    o.allowed_clients = std::move(allowed);
    return o;
}

curve_options client_side(const curve_keys& client, const std::string& server_key) {
    curve_options o;
    o.keys = client;
    o.server_key = server_key;
    return o;
}

void write_text(const fs::path& file, const std::string& text, mode_t mode = 0600) {
    {
        std::ofstream out(file, std::ios::binary | std::ios::trunc);
        out << text;
    }
    fs::permissions(file, static_cast<fs::perms>(mode), fs::perm_options::replace);
}

}  // namespace

TEST_CASE("this libzmq has CURVE") {
    // Debian's libzmq3-dev is built with libsodium; the rest needs it.
    REQUIRE(curve_available());
    const curve_keys k = generate_curve_keys();
    CHECK(k.public_key.size() == 40);
    CHECK(k.secret_key.size() == 40);
    CHECK(k.public_key != generate_curve_keys().public_key);
}

TEST_CASE("certificates are written as pyzmq writes them and read back") {
    const test_support::temp_dir dir("tenbin-curve");
    const certificate_files files = create_certificates(dir.path(), "server");
    CHECK(files.public_file == dir / "server.key");
    CHECK(files.secret_file == dir / "server.key_secret");
    struct stat st {};
    REQUIRE(::stat(files.secret_file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    REQUIRE(::stat(files.public_file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);

    const curve_keys keys = load_secret_certificate(files.secret_file);
    CHECK(load_public_certificate(files.public_file) == keys.public_key);
    CHECK(load_public_certificate(files.secret_file) == keys.public_key);

    // The public file holds no secret.
    std::ifstream in(files.public_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("public-key = \"" + keys.public_key + "\"") != std::string::npos);
    CHECK(text.find(keys.secret_key) == std::string::npos);
    CHECK(text.find("secret-key") == std::string::npos);

    // Given keys are written as they are; a second write replaces the pair.
    const curve_keys other = generate_curve_keys();
    write_certificates(dir.path(), "server", other);
    CHECK(load_secret_certificate(files.secret_file).secret_key == other.secret_key);
    CHECK(load_public_certificate(files.public_file) == other.public_key);
    // No temporary file left behind.
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) n += e.is_regular_file() ? 1 : 0;
    CHECK(n == 2);

    SUBCASE("a folder of public certificates, in name order") {
        const test_support::temp_dir allowed("tenbin-curve-allowed");
        const std::string b = load_public_certificate(create_certificates(allowed.path(), "b").public_file);
        const std::string a = load_public_certificate(create_certificates(allowed.path(), "a").public_file);
        // Secret files beside them are not taken for public ones.
        CHECK(load_public_certificates(allowed.path()) == std::vector<std::string>{a, b});
    }
    SUBCASE("bad names and keys are refused") {
        CHECK(error_class([&] { write_certificates(dir.path(), "a/b", other); }) == "bad_argument");
        CHECK(error_class([&] { write_certificates(dir.path(), "", other); }) == "bad_argument");
        CHECK(error_class([&] { write_certificates(dir / "missing", "x", other); }) == "io_error");
        curve_keys mismatched{other.public_key, keys.secret_key};
        CHECK(error_text([&] { write_certificates(dir.path(), "x", mismatched); }).find("does not belong") !=
              std::string::npos);
    }
}

TEST_CASE("a secret certificate readable or writable by others is refused") {
    const test_support::temp_dir dir("tenbin-curve");
    const certificate_files files = create_certificates(dir.path(), "me");
    // Written by others is as bad as read: they could put their own key in it.
    for (mode_t mode : {0640, 0604, 0644, 0602, 0620, 0660, 0610}) {
        CAPTURE(mode);
        fs::permissions(files.secret_file, static_cast<fs::perms>(mode), fs::perm_options::replace);
        const std::string text = error_text([&] { (void)load_secret_certificate(files.secret_file); });
        CHECK(text.starts_with("bad_certificate: " + files.secret_file.string()));
        char shown[16];
        std::snprintf(shown, sizeof shown, "mode is %04o", static_cast<unsigned>(mode));
        CHECK_MESSAGE(text.find(shown) != std::string::npos, text);
        CHECK(text.find("chmod 600") != std::string::npos);
        // Its public key is no secret.
        CHECK(load_public_certificate(files.secret_file).size() == 40);
    }
    fs::permissions(files.secret_file, static_cast<fs::perms>(0400), fs::perm_options::replace);
    CHECK(load_secret_certificate(files.secret_file).public_key.size() == 40);
}

TEST_CASE("malformed certificates give the file and line") {
    const test_support::temp_dir dir("tenbin-curve");
    const curve_keys k = generate_curve_keys();
    const curve_keys other = generate_curve_keys();
    const fs::path file = dir / "bad.key_secret";
    struct bad_case {
        const char* what;
        std::string text;
        std::string says;
    };
    const std::vector<bad_case> cases = {
        {"a short key", "metadata\ncurve\n    public-key = \"abc\"\n", ":3: public-key is not a CURVE key"},
        {"a key outside Z85", "curve\n    public-key = \"" + std::string(40, ',') + "\"\n", ":2: public-key"},
        // Z85's alphabet, but "#####" stands for 85^5 - 1, over 2^32 - 1: libzmq
        // refused it only when the socket was set up, as "Invalid argument".
        {"a key out of Z85's range", "curve\n    public-key = \"" + k.public_key.substr(0, 35) + "#####\"\n",
         ":2: public-key is not a CURVE key: characters 36 to 40 encode a value over 2^32 - 1"},
        {"an open quote", "# c\ncurve\n    public-key = \"" + k.public_key + "\n", ":3: a quoted value has no closing"},
        {"a stray line", "curve\n    public-key = \"" + k.public_key + "\"\n!!! not zpl\n", ":3: expected a section"},
        {"a key twice", "curve\n    public-key = \"" + k.public_key + "\"\n    public-key = \"" + k.public_key + "\"\n",
         ":3: public-key given twice (first on line 2)"},
        {"no curve section", "metadata\n    public-key = \"" + k.public_key + "\"\n", "no public-key in a 'curve'"},
        {"an empty file", "", "no public-key"},
        {"no secret key", "curve\n    public-key = \"" + k.public_key + "\"\n", "holds no secret-key"},
        {"keys of two pairs",
         "curve\n    public-key = \"" + k.public_key + "\"\n    secret-key = \"" + other.secret_key + "\"\n",
         "does not belong"},
        {"binary junk", std::string("\x01\x02\x00\xff", 4), ":1: expected a section"},
    };
    for (const bad_case& c : cases) {
        CAPTURE(c.what);
        write_text(file, c.text);
        const std::string text = error_text([&] { (void)load_secret_certificate(file); });
        CHECK(text.starts_with("bad_certificate: " + file.string()));
        CHECK_MESSAGE(text.find(c.says) != std::string::npos, text);
    }
    SUBCASE("a large file is not read") {
        write_text(file, "# " + std::string(100000, 'x') + "\n");
        CHECK(error_text([&] { (void)load_public_certificate(file); }).find("too large") != std::string::npos);
    }
    SUBCASE("missing files and folders") {
        CHECK(error_class([&] { (void)load_secret_certificate(dir / "none.key_secret"); }) == "io_error");
        CHECK(error_class([&] { (void)load_public_certificates(dir / "none"); }) == "io_error");
        // An empty allow-list would let anyone in.
        const test_support::temp_dir empty("tenbin-curve-empty");
        CHECK(error_text([&] { (void)load_public_certificates(empty.path()); }).find("no public certificates") !=
              std::string::npos);
    }
    SUBCASE("czmq's spelling: tabs, single quotes, comments after values, CRLF") {
        write_text(file, "#  czmq\r\nmetadata\r\n\tname = 'x'\r\ncurve\r\n\tpublic-key = '" + k.public_key +
                             "'  # mine\r\n\tsecret-key = \"" + k.secret_key + "\"\r\n");
        const curve_keys got = load_secret_certificate(file);
        CHECK(got.public_key == k.public_key);
        CHECK(got.secret_key == k.secret_key);
    }
}

TEST_CASE("a FIFO as a certificate, or in the allow-list folder, is refused without waiting for a writer") {
    const test_support::temp_dir dir("tenbin-curve");
    const fs::path fifo = dir / "peer.key";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // Opening it to read would wait for a writer: one comes after two
    // seconds, so that a reader stuck there ends (and the check fails).
    std::atomic<bool> done{false};
    std::thread watchdog([&] {
        for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(10ms);
        if (done) return;
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
    });
    const auto start = std::chrono::steady_clock::now();
    const std::string one = error_text([&] { (void)load_public_certificate(fifo); });
    const std::string folder = error_text([&] { (void)load_public_certificates(dir.path()); });
    const std::string secret = error_text([&] { (void)load_secret_certificate(fifo); });
    const auto took = std::chrono::steady_clock::now() - start;
    done = true;
    watchdog.join();
    CHECK(took < 1s);
    for (const std::string& text : {one, folder, secret}) {
        CHECK_MESSAGE(text.starts_with("bad_certificate: " + fifo.string() + ": is a FIFO, not a regular file"), text);
    }
}

TEST_CASE("CURVE on inproc is refused: libzmq would ignore the keys") {
    CHECK_NOTHROW(check_curve_address("tcp://127.0.0.1:5555"));
    CHECK_NOTHROW(check_curve_address("ipc:///tmp/x"));
    const std::string text = error_text([] { check_curve_address("inproc://feed"); });
    CHECK(text.starts_with("bad_argument: CURVE cannot secure inproc://feed"));
}

TEST_CASE("bad CURVE settings are refused before anything binds") {
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys();
    connection_options co;
    SUBCASE("a connecting side without the server's key") {
        co.curve = client_side(client, "");
        CHECK(error_text([&] { connection c("zpush://127.0.0.1:1", co); }).find("server_key") != std::string::npos);
    }
    SUBCASE("a key that is not Z85") {
        co.curve = server_side(server, {"not a key"});
        CHECK(error_class([&] { connection c("zpull://127.0.0.1:*", co); }) == "bad_argument");
        co.curve = client_side(client, std::string(40, ' '));
        CHECK(error_class([&] { connection c("zpush://127.0.0.1:1", co); }) == "bad_argument");
        // Z85's alphabet, a value out of its range: once an io_error from libzmq.
        co.curve = client_side(client, std::string(40, '#'));
        CHECK(error_text([&] { connection c("zpush://127.0.0.1:1", co); })
                  .starts_with("bad_argument: curve_options::server_key is not a CURVE key: characters 1 to 5"));
    }
    SUBCASE("a secret key of another pair") {
        co.curve = server_side({server.public_key, client.secret_key});
        CHECK(error_text([&] { connection c("zpull://127.0.0.1:*", co); }).find("does not belong") !=
              std::string::npos);
    }
}

TEST_CASE("with the right keys every message arrives intact over PUSH/PULL") {
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys();
    for (bool allow_list : {false, true}) {
        CAPTURE(allow_list);
        refusal_log log;
        connection_options so;
        so.curve = server_side(server, allow_list ? std::vector<std::string>{generate_curve_keys().public_key,
                                                                             client.public_key}
                                                  : std::vector<std::string>{});
        so.curve->on_refused = log.callback();
        so.recv_timeout = 15s;
        connection pull("zpull://127.0.0.1:*", so);
        connection_options co;
        co.curve = client_side(client, server.public_key);
        connection push(url_of("zpush", bound_tcp(pull)), co);
        constexpr int n = 20;
        for (int i = 0; i < n; ++i) REQUIRE(push.send(batch(i)));
        for (int i = 0; i < n; ++i) {
            auto got = pull.recv();
            REQUIRE(got);
            check_batch(*got, i);
        }
        CHECK(pull.refused_handshakes() == 0);
        CHECK(push.refused_handshakes() == 0);
        CHECK(log.snapshot().empty());
    }
}

TEST_CASE("a client without keys, with a wrong server key, or not allowed delivers nothing") {
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys(),
                     stranger = generate_curve_keys();
    refusal_log log;
    connection_options so;
    so.curve = server_side(server, {client.public_key});
    so.curve->on_refused = log.callback();
    so.recv_timeout = 200ms;
    connection pull("zpull://127.0.0.1:*", so);
    const std::string where = url_of("zpush", bound_tcp(pull));

    connection_options co;
    co.immediate = false;  // queued for the peer at once: delivered if the handshake let it through
    co.linger = 0ms;
    // A refused client may lose its pipe (and a PUSH without one blocks).
    co.send_timeout = 500ms;
    int want_event = 0, want_value = 0;
    bool broken_will_do = false;
    SUBCASE("no keys") {
        want_event = ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
        want_value = ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
        // The plain client sees the mismatch too and may hang up before
        // the server has read its greeting.
        broken_will_do = true;
    }
    SUBCASE("a wrong server key") {
        co.curve = client_side(client, stranger.public_key);
        want_event = ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
        want_value = ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC;
    }
    SUBCASE("a key not on the allow-list") {
        co.curve = client_side(stranger, server.public_key);
        want_event = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
        want_value = 400;
    }
    connection push(where, co);
    for (int i = 0; i < 3; ++i) (void)push.send(batch(i));
    REQUIRE(eventually([&] { return pull.refused_handshakes() > 0; }, 15s));
    CHECK_FALSE(pull.recv());
    // The telling event among them (a broken connection, NO_DETAIL, may
    // come first).
    handshake_refusal telling;
    CHECK(eventually([&] {
        for (const handshake_refusal& r : log.snapshot())
            if ((r.event == want_event && r.value == want_value) ||
                (broken_will_do && r.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)) {
                telling = r;
                return true;
            }
        return false;
    }, 15s));
    CHECK(telling.endpoint == bound_tcp(pull));
    CHECK(!telling.reason.empty());
    // The refused client hears of it too, when it has CURVE.
    if (want_event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) CHECK(eventually([&] { return push.refused_handshakes() > 0; }, 15s));
}

TEST_CASE("a right client still gets through beside refused ones") {
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys(),
                     stranger = generate_curve_keys();
    connection_options so;
    so.curve = server_side(server, {client.public_key});
    so.recv_timeout = 15s;
    connection pull("zpull://127.0.0.1:*", so);
    const std::string where = url_of("zpush", bound_tcp(pull));
    connection_options bad, good;
    bad.curve = client_side(stranger, server.public_key);
    bad.immediate = false;
    bad.linger = 0ms;
    bad.send_timeout = 500ms;
    good.curve = client_side(client, server.public_key);
    connection intruder(where, bad), friendly(where, good);
    for (int i = 0; i < 5; ++i) {
        (void)intruder.send(batch(1000 + i));
        REQUIRE(friendly.send(batch(i)));
    }
    for (int i = 0; i < 5; ++i) {
        auto got = pull.recv();
        REQUIRE(got);
        check_batch(*got, i);  // never an intruder's
    }
    CHECK(eventually([&] { return pull.refused_handshakes() > 0; }, 15s));
}

TEST_CASE("PUB/SUB with CURVE: allowed subscribers get every message, others none") {
    const curve_keys server = generate_curve_keys(), reader = generate_curve_keys(), stranger = generate_curve_keys();
    connection_options po;
    po.curve = server_side(server, {reader.public_key});
    po.pub_nodrop = true;
    po.send_timeout = 15s;
    connection pub("zpub://127.0.0.1:*", po);
    const std::string where = url_of("zsub", bound_tcp(pub));
    connection_options ro;
    ro.curve = client_side(reader, server.public_key);
    ro.recv_timeout = 50ms;
    connection sub(where, ro);
    connection_options xo = ro;
    xo.curve = client_side(stranger, server.public_key);
    connection outsider(where, xo);

    // Probes until the subscription is in, then the numbered messages.
    bool joined = false;
    for (int i = 0; i < 300 && !joined; ++i) {
        REQUIRE(pub.send(batch(-1, 4)));
        joined = sub.recv().has_value();
    }
    REQUIRE(joined);
    constexpr int n = 20;
    for (int i = 0; i < n; ++i) REQUIRE(pub.send(batch(i)));
    int next = 0;
    for (int tries = 0; next < n && tries < 300; ++tries) {
        auto got = sub.recv();
        if (!got || got->front().shape()[0] == 4) continue;  // a late probe
        check_batch(*got, next++);
    }
    CHECK(next == n);
    CHECK_FALSE(outsider.recv());
    CHECK(eventually([&] { return pub.refused_handshakes() > 0; }, 15s));
    CHECK(eventually([&] { return outsider.refused_handshakes() > 0; }, 15s));
}

TEST_CASE("a loader with CURVE receives from allowed clients and counts refusals") {
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys();
    std::atomic<int> called{0};
    loader_options lo;
    lo.connection.curve = server_side(server, {client.public_key});
    lo.connection.curve->on_refused = [&](const handshake_refusal&) { ++called; };
    loader ld("zpull://127.0.0.1:*", lo);
    const std::string where = url_of("zpush", ld.endpoints().front().address);
    connection_options plain;
    plain.immediate = false;
    plain.linger = 0ms;
    plain.send_timeout = 500ms;
    connection intruder(where, plain);
    (void)intruder.send(batch(99));
    REQUIRE(eventually([&] { return ld.refused_handshakes() > 0; }, 15s));
    CHECK(called.load() > 0);
    connection_options co;
    co.curve = client_side(client, server.public_key);
    connection push(where, co);
    for (int i = 0; i < 5; ++i) REQUIRE(push.send(batch(i)));
    for (int i = 0; i < 5; ++i) {
        auto got = ld.next(15s);
        REQUIRE(got);
        check_batch(*got, i);
    }
}

TEST_CASE("servers on one context keep allow-lists of their own, and the ZAP handler comes back") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    const curve_keys server = generate_curve_keys(), a = generate_curve_keys(), b = generate_curve_keys();
    for (int round = 0; round < 2; ++round) {  // the handler stops with the last server, then starts again
        CAPTURE(round);
        connection_options so;
        so.recv_timeout = 200ms;
        so.curve = server_side(server, {a.public_key});
        connection for_a(ctx, std::vector<std::string>{"zpull://127.0.0.1:*"}, so);
        so.curve = server_side(server, {b.public_key});
        connection for_b(ctx, std::vector<std::string>{"zpull://127.0.0.1:*"}, so);
        // A server without a list on the same context admits any key.
        so.curve = server_side(server);
        so.recv_timeout = 15s;
        connection for_all(ctx, std::vector<std::string>{"zpull://127.0.0.1:*"}, so);

        connection_options co;
        co.curve = client_side(b, server.public_key);
        connection b_to_all(ctx, std::vector<std::string>{url_of("zpush", bound_tcp(for_all))}, co);
        co.immediate = false;
        co.linger = 0ms;
        co.send_timeout = 500ms;
        connection b_to_a(ctx, std::vector<std::string>{url_of("zpush", bound_tcp(for_a))}, co);
        co.curve = client_side(a, server.public_key);
        connection a_to_b(ctx, std::vector<std::string>{url_of("zpush", bound_tcp(for_b))}, co);
        (void)b_to_a.send(batch(1));
        (void)a_to_b.send(batch(2));
        REQUIRE(b_to_all.send(batch(3)));
        auto got = for_all.recv();
        REQUIRE(got);
        check_batch(*got, 3);
        REQUIRE(eventually([&] { return for_a.refused_handshakes() > 0 && for_b.refused_handshakes() > 0; }, 15s));
        CHECK_FALSE(for_a.recv());
        CHECK_FALSE(for_b.recv());
        CHECK(for_all.refused_handshakes() == 0);
    }
    // Every connection is gone: the context terminates (no socket of the
    // handler's left to wait for).
    ctx.reset();
}

TEST_CASE("enable_curve secures a caller's own sockets for zsend/zrecv") {
    zmq::context_t ctx(1);
    const curve_keys server = generate_curve_keys(), client = generate_curve_keys(), stranger = generate_curve_keys();
    zmq::socket_t pull(ctx, zmq::socket_type::pull);
    pull.set(zmq::sockopt::rcvtimeo, 15000);
    pull.set(zmq::sockopt::linger, 0);
    curve_guard pull_guard = enable_curve(ctx, pull, server_side(server, {client.public_key}), curve_role::server);
    pull.bind("tcp://127.0.0.1:*");
    const std::string where = pull.get(zmq::sockopt::last_endpoint);

    zmq::socket_t intruder(ctx, zmq::socket_type::push);
    intruder.set(zmq::sockopt::linger, 0);
    intruder.set(zmq::sockopt::sndtimeo, 500);
    curve_guard intruder_guard =
        enable_curve(ctx, intruder, client_side(stranger, server.public_key), curve_role::client);
    intruder.connect(where);
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 0);
    curve_guard push_guard = enable_curve(ctx, push, client_side(client, server.public_key), curve_role::client);
    push.connect(where);

    const auto sent = batch(5);
    (void)zsend_multipart(intruder, batch(6));
    REQUIRE(zsend_multipart(push, sent));
    auto got = zrecv(pull);
    REQUIRE(got);
    check_batch(got->tensors, 5);
    CHECK(eventually([&] { return pull_guard.refused_handshakes() > 0; }, 15s));
    CHECK(eventually([&] { return intruder_guard.refused_handshakes() > 0; }, 15s));
    CHECK(push_guard.refused_handshakes() == 0);
    CHECK(error_class([&] {
              zmq::socket_t s(ctx, zmq::socket_type::push);
              (void)enable_curve(ctx, s, client_side(client, ""), curve_role::client);
          }) == "bad_argument");
}

TEST_CASE("another ZAP handler on the context is reported, not fought over") {
    zmq::context_t ctx(1);
    zmq::socket_t theirs(ctx, zmq::socket_type::rep);
    theirs.set(zmq::sockopt::linger, 0);
    theirs.bind("inproc://zeromq.zap.01");
    zmq::socket_t s(ctx, zmq::socket_type::pull);
    const curve_keys k = generate_curve_keys();
    const std::string text =
        error_text([&] { (void)enable_curve(ctx, s, server_side(k, {k.public_key}), curve_role::server); });
    CHECK(text.find("another one is bound") != std::string::npos);
    // Without an allow-list no handler of ours is needed.
    curve_guard g = enable_curve(ctx, s, server_side(k), curve_role::server);
    CHECK(g);
}
