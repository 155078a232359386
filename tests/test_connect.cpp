// Connections and loaders: tensorcom URLs on real sockets, fan-in, the
// bounded prefetching queue, shutdown and error delivery.
#include "support.hpp"
#include "zmq_fixture.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::error_class;
using test_support::error_text;
using test_zmq::bounded_options;
using strings = std::vector<std::string>;

namespace {

tensor batch_of(int n, std::int32_t seed) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = seed * 1000 + i;
    return tensor::from_vector(std::move(v), {n}, "batch");
}

std::int32_t seed_of(const std::vector<tensor>& b) { return b.at(0).values<std::int32_t>()[0] / 1000; }

// Sends until the receiver gets one (PUB/SUB joins late), then `extra` more.
std::vector<tensor> send_until_received(connection& tx, connection& rx) {
    rx.socket().set(zmq::sockopt::rcvtimeo, 100);
    for (int attempt = 0; attempt < 100; ++attempt) {
        REQUIRE(tx.send(batch_of(10, 7)));
        if (auto got = rx.recv()) return *got;
    }
    FAIL("nothing arrived");
    return {};
}

}  // namespace

TEST_CASE("every tensorcom scheme over every transport carries a batch") {
    struct pair_spec { const char* tx; const char* rx; bool tx_binds; };
    const pair_spec pairs[] = {
        {"zpush", "zpull", false}, {"zrpush", "zrpull", true},
        {"zpub", "zsub", true},    {"zrpub", "zrsub", false},
    };
    auto ctx = std::make_shared<zmq::context_t>(1);
    int n = 0;
    for (const pair_spec& p : pairs)
        for (const char* transport : {"tcp", "ipc", "inproc"}) {
            CAPTURE(p.tx);
            CAPTURE(transport);
            const std::string tag = std::to_string(n++);
            std::string bind_addr, connect_addr;
            if (std::string(transport) == "tcp") bind_addr = "127.0.0.1:*";
            else if (std::string(transport) == "ipc") bind_addr = connect_addr = test_zmq::fresh_ipc_path();
            else bind_addr = connect_addr = "conn-" + tag;
            auto url = [&](const char* scheme, const std::string& addr) {
                std::string u = std::string(scheme) + "+" + transport + "://";
                return u + addr;
            };
            // The binding side goes first so the connecting one knows the port.
            std::optional<connection> tx, rx;
            if (p.tx_binds) {
                tx.emplace(ctx, strings{url(p.tx, bind_addr)}, bounded_options());
                if (connect_addr.empty()) connect_addr = tx->endpoints()[0].address.substr(6);
                rx.emplace(ctx, strings{url(p.rx, connect_addr)}, bounded_options());
            } else {
                rx.emplace(ctx, strings{url(p.rx, bind_addr)}, bounded_options());
                if (connect_addr.empty()) connect_addr = rx->endpoints()[0].address.substr(6);
                tx.emplace(ctx, strings{url(p.tx, connect_addr)}, bounded_options());
            }
            CHECK(tx->endpoints()[0].bind == p.tx_binds);
            CHECK(rx->endpoints()[0].bind == !p.tx_binds);
            const auto got = send_until_received(*tx, *rx);
            REQUIRE(got.size() == 1);
            CHECK(got[0].view() == batch_of(10, 7).view());
            CHECK(rx->stats().messages() >= 1);
        }
}

TEST_CASE("single-part connections, plain endpoints and infos") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options rxo = bounded_options();
    rxo.kind = socket_kind::pull;
    rxo.decode.expect_infos = strings{"input"};
    connection rx(ctx, strings{"tcp://127.0.0.1:*"}, rxo);
    connection_options txo = bounded_options();
    txo.kind = socket_kind::push;
    txo.multipart = false;
    txo.infos = {"input"};
    connection tx(ctx, strings{rx.endpoints()[0].address}, txo);
    REQUIRE(tx.send(batch_of(5, 3)));
    const auto got = rx.recv();
    REQUIRE(got);
    CHECK((*got)[0].info() == "input");
    CHECK(seed_of(*got) == 3);
    // A message without the expected infos is refused, and the next one is fine.
    connection_options plain = bounded_options();
    plain.kind = socket_kind::push;
    connection tx2(ctx, strings{rx.endpoints()[0].address}, plain);
    REQUIRE(tx2.send(batch_of(5, 4)));
    CHECK(error_class([&] { (void)rx.recv(); }) == "info_mismatch");
    REQUIRE(tx.send(batch_of(5, 5)));
    CHECK(seed_of(*rx.recv()) == 5);
}

TEST_CASE("connections and loaders made without a context meet over inproc") {
    // Each made its own context before, so these never met.
    for (int round = 0; round < 2; ++round) {  // the shared context ends with its last user, then comes anew
        CAPTURE(round);
        connection rx("zpull+inproc://meet", bounded_options());
        connection tx("zpush+inproc://meet", bounded_options());
        REQUIRE(tx.send(batch_of(4, 11 + round)));
        const auto got = rx.recv();
        REQUIRE(got);
        CHECK(seed_of(*got) == 11 + round);
    }
    loader_options lo;
    lo.connection = bounded_options();
    loader l("zpull+inproc://meet-loader", lo);
    connection tx("zpush+inproc://meet-loader", bounded_options());
    REQUIRE(tx.send(batch_of(4, 13)));
    const auto got = l.next(5000ms);
    REQUIRE(got);
    CHECK(seed_of(*got) == 13);
}

TEST_CASE("sending on a receiving socket, or the reverse, is refused with a clear error") {
    connection rx("zpull://127.0.0.1:*", bounded_options());
    connection tx(strings{"zpush://" + rx.endpoints()[0].address.substr(6)}, bounded_options());
    CHECK(error_class([&] { (void)rx.send(batch_of(2, 1)); }) == "bad_argument");
    CHECK(error_class([&] { (void)tx.recv(); }) == "bad_argument");
    CHECK(error_class([&] { (void)tx.try_recv(); }) == "bad_argument");
    CHECK(error_text([&] { (void)rx.send(batch_of(2, 1)); }).find("is a pull socket, which cannot send") != std::string::npos);
    // The refused calls left both usable.
    REQUIRE(tx.send(batch_of(2, 5)));
    CHECK(seed_of(*rx.recv()) == 5);
    CHECK(error_class([] { loader l("zpush://127.0.0.1:*"); }) == "bad_url");
    CHECK(error_class([] { loader l("zpub://127.0.0.1:*"); }) == "bad_url");
    // The message is a whole sentence that says what to use instead.
    CHECK(error_text([] { loader l("zpush://127.0.0.1:*"); }).ends_with("which cannot receive; use pull, sub, dealer or pair"));
    // A loader only receives: kinds that must also send are refused at once.
    for (socket_kind k : {socket_kind::req, socket_kind::rep, socket_kind::router}) {
        CAPTURE(name(k));
        loader_options lo;
        lo.connection.kind = k;
        CHECK(error_class([&] { loader l("tcp://127.0.0.1:*", lo); }) == "bad_url");
        CHECK(error_text([&] { loader l("tcp://127.0.0.1:*", lo); }).find("use pull, sub, dealer or pair") !=
              std::string::npos);
    }
}

TEST_CASE("receiving sockets close at once; sending ones linger as told") {
    // A sub that never met its publisher holds its subscription, which a
    // linger would wait for at close (10 s by default).
    const std::string nobody = "127.0.0.1:1";  // nothing listens there
    connection_options o = bounded_options();
    o.recv_timeout = 100ms;
    const auto t0 = std::chrono::steady_clock::now();
    {
        connection sub("zsub://" + nobody, o);
        CHECK(sub.socket().get(zmq::sockopt::linger) == 0);
        CHECK_FALSE(sub.recv());
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // a hang bound, not a timing
    connection pull("zpull://127.0.0.1:*", o);
    CHECK(pull.socket().get(zmq::sockopt::linger) == 0);
    o.linger = 1234ms;
    connection push("zpush://" + nobody, o);
    CHECK(push.socket().get(zmq::sockopt::linger) == 1234);
}

TEST_CASE("an ipc sender that closes lingers until its slow receiver read everything") {
    // libzmq alone drops the unread tail here (see transport/ipc_readers.hpp).
    for (const bool sender_binds : {false, true}) {
        CAPTURE(sender_binds);
        const test_support::temp_dir dir;
        const std::string path = (dir / "slow.sock").string();
        zmq::context_t ctx;
        zmq::socket_t pull(ctx, zmq::socket_type::pull);
        pull.set(zmq::sockopt::rcvhwm, 1);
        pull.set(zmq::sockopt::rcvtimeo, 15000);
        pull.set(zmq::sockopt::linger, 0);
        if (!sender_binds) pull.bind("ipc://" + path);
        constexpr int count = 40;
        int got = 0;  // whole messages
        std::thread reader([&] {
            if (sender_binds) pull.connect("ipc://" + path);
            for (zmq::message_t m; got < count && pull.recv(m);)
                if (!m.more()) {
                    ++got;
                    std::this_thread::sleep_for(5ms);
                }
        });
        {
            connection_options o = bounded_options(5s, 10s);  // the linger is a hang bound
            o.send_hwm = 1;
            connection push((sender_binds ? "zrpush+ipc://" : "zpush+ipc://") + path, o);
            for (int k = 0; k < count; ++k) REQUIRE(push.send(batch_of(1024, k)));
        }  // closed here, with most of the messages unread
        reader.join();
        CHECK(got == count);
    }
}

TEST_CASE("a closed or moved-from connection says so") {

    connection rx("zpull://127.0.0.1:*", bounded_options());
    connection moved = std::move(rx);
    CHECK(error_text([&] { (void)rx.recv(); }) ==
          "bad_argument: cannot receive: the connection is closed (or moved from)");
    moved.close();
    CHECK(error_class([&] { (void)moved.try_recv(); }) == "bad_argument");
    // Assigning over a connection that is the only owner of its context
    // closes its socket before the context ends (which waits for it).
    connection reassigned("zpull://127.0.0.1:*", bounded_options());
    reassigned = connection("zpull://127.0.0.1:*", bounded_options());
    CHECK(reassigned.endpoints().size() == 1);
    CHECK_FALSE(reassigned.try_recv());
    connection tx("zpush://127.0.0.1:9", bounded_options());
    tx.close();
    CHECK(error_text([&] { (void)tx.send(batch_of(1, 1)); }) ==
          "bad_argument: cannot send: the connection is closed (or moved from)");
}

TEST_CASE("heartbeats are set on the socket, and must be positive") {
    connection_options o = bounded_options();
    o.heartbeat = 250ms;
    connection c(strings{"zpull://127.0.0.1:*"}, o);
    CHECK(c.socket().get(zmq::sockopt::heartbeat_ivl) == 250);
    CHECK(c.socket().get(zmq::sockopt::heartbeat_timeout) == 750);
    CHECK(c.socket().get(zmq::sockopt::heartbeat_ttl) == 700);  // deciseconds on the wire
    o.heartbeat = 0ms;
    CHECK(error_class([&] { connection bad(strings{"zpull://127.0.0.1:*"}, o); }) == "bad_argument");
}

TEST_CASE("64-bit dtypes need allow64, as in tensorcom") {
    connection_options o = bounded_options();
    o.kind = socket_kind::push;
    connection tx(strings{"inproc://no64"}, o);
    const tensor f8 = tensor::zeros(dtype::f8, {2});
    CHECK(error_class([&] { (void)tx.send(f8); }) == "bad_argument");
    CHECK(error_class([&] { check_no64({tensor::zeros(dtype::u8, {1})}); }) == "bad_argument");
    CHECK_NOTHROW(check_no64({tensor::zeros(dtype::f4, {1}), tensor::zeros(dtype::u4, {1})}));
}

TEST_CASE("tensorcom_compatible refuses what a tensorcom receiver cannot decode") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options o = bounded_options();
    o.tensorcom_compatible = true;
    connection tx(ctx, strings{"zpush+inproc://tensorcom-compatible"}, o);
    connection rx(ctx, strings{"zpull+inproc://tensorcom-compatible"}, bounded_options());
    const std::string u4 = error_text([&] { (void)tx.send({tensor::zeros(dtype::f4, {2}), tensor::zeros(dtype::u4, {3})}); });
    CHECK(u4.find("tensor 1 is u4, which a Python tensorcom receiver cannot decode") != std::string::npos);
    const std::string scalar = error_text([&] { (void)tx.send({tensor::zeros(dtype::i4, {})}); });
    CHECK(scalar.find("tensor 0 has rank 0") != std::string::npos);
    // 64-bit stays allow64's: refused without it, sent with it.
    CHECK(error_class([&] { (void)tx.send({tensor::zeros(dtype::i8, {1})}); }) == "bad_argument");
    CHECK_NOTHROW(check_tensorcom({tensor::zeros(dtype::i8, {1}), tensor::zeros(dtype::u2, {0})}));
    // What passes arrives; nothing refused went out before it.
    REQUIRE(tx.send({tensor::zeros(dtype::u1, {4}, "ok")}));
    rx.socket().set(zmq::sockopt::rcvtimeo, 5000);
    const auto got = rx.recv();
    REQUIRE(got);
    CHECK((*got)[0].info() == "ok");
    // Without the option, both go out (a tenbin receiver reads them).
    connection plain(ctx, strings{"zpush+inproc://tensorcom-compatible"}, bounded_options());
    CHECK(plain.send({tensor::zeros(dtype::u4, {3}), tensor::zeros(dtype::i4, {})}));
}

TEST_CASE("a topic goes out as a frame in front and is filtered on") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options po = bounded_options();
    po.topic = "train";
    connection pub(ctx, strings{"zpub+inproc://topics"}, po);
    connection_options so = bounded_options();
    so.topic = "train";
    connection sub(ctx, strings{"zsub+inproc://topics"}, so);
    connection_options other = bounded_options();
    other.topic = "eval";
    connection sub_eval(ctx, strings{"zsub+inproc://topics"}, other);
    const auto got = send_until_received(pub, sub);
    CHECK(seed_of(got) == 7);
    sub_eval.socket().set(zmq::sockopt::rcvtimeo, 200);
    CHECK_FALSE(sub_eval.recv());

    // ZeroMQ lets "training" through a "train" subscription (prefixes
    // match); the connection drops it, well-formed or not.
    zmq::socket_ref raw = pub.socket();
    const zmq::const_buffer longer = zmq::buffer(std::string_view("training"));
    send_options with_topic;
    with_topic.envelope = {&longer, 1};
    REQUIRE(zsend_multipart(raw, {batch_of(10, 8)}, with_topic));
    raw.send(longer, zmq::send_flags::sndmore);
    raw.send(zmq::buffer(std::string_view("not a header")), zmq::send_flags::none);
    raw.send(zmq::buffer(std::string_view("training-heartbeat")), zmq::send_flags::none);  // a topic alone
    REQUIRE(pub.send(batch_of(10, 9)));
    sub.socket().set(zmq::sockopt::rcvtimeo, 2000);
    const auto next = sub.recv();
    REQUIRE(next);
    CHECK(seed_of(*next) == 9);
}

TEST_CASE("messages of longer topics are passed over, counted and said once") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection pub(ctx, strings{"zpub+inproc://other-topics#train"}, bounded_options());
    std::vector<std::string> notices;
    connection_options so = bounded_options();
    so.on_notice = [&](const std::string& text) { notices.push_back(text); };
    connection sub(ctx, strings{"zsub+inproc://other-topics#train"}, so);
    (void)send_until_received(pub, sub);
    const zmq::const_buffer longer = zmq::buffer(std::string_view("training"));
    send_options with_topic;
    with_topic.envelope = {&longer, 1};
    for (int i = 0; i < 2; ++i) REQUIRE(zsend_multipart(pub.socket(), {batch_of(10, 8)}, with_topic));
    REQUIRE(pub.send(batch_of(10, 9)));
    sub.socket().set(zmq::sockopt::rcvtimeo, 2000);
    const auto next = sub.recv();
    REQUIRE(next);
    CHECK(seed_of(*next) == 9);
    CHECK(sub.other_topics() == 2);
    REQUIRE(notices.size() == 1);
    CHECK(notices[0].find("topic 'train' passes over messages of topic 'training'") != std::string::npos);
}

TEST_CASE("endpoints added after construction join the same socket; a mismatched one is refused") {
    connection pull("zpull://127.0.0.1:*", bounded_options());
    pull.add("zpull://127.0.0.1:*");
    pull.add(strings{"zpull+ipc://" + test_zmq::fresh_ipc_path()});
    REQUIRE(pull.endpoints().size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
        const std::string at = pull.endpoints()[i].address;
        connection push(at.starts_with("ipc") ? "zpush+ipc://" + at.substr(6) : "zpush://" + at.substr(6),
                        bounded_options());
        REQUIRE(push.send(batch_of(2, static_cast<std::int32_t>(i))));
        const auto got = pull.recv();
        REQUIRE(got);
        CHECK(seed_of(*got) == static_cast<std::int32_t>(i));
    }
    CHECK(error_text([&] { pull.add("zpush://127.0.0.1:9"); }).rfind("bad_url: 'tcp://127.0.0.1:9' is a push endpoint", 0) == 0);
    CHECK(error_text([&] { pull.add("zpull+shm://" + test_zmq::fresh_ipc_path()); }).find("+shm endpoint") !=
          std::string::npos);
    connection sub("zsub://127.0.0.1:9#train", bounded_options());
    CHECK(error_text([&] { sub.add("zsub://127.0.0.1:10#eval"); }) ==
          "bad_url: '#eval': this connection's topic is 'train' (one socket has one topic)");
    sub.add("zsub://127.0.0.1:10#train");
    CHECK(sub.endpoints().size() == 2);
    pull.close();
    CHECK(error_class([&] { pull.add("zpull://127.0.0.1:*"); }) == "bad_argument");
}

TEST_CASE("a router receives each message with its envelope and answers through reply(); a rep answers its req") {
    connection_options ro = bounded_options();
    ro.kind = socket_kind::router;
    ro.bind = true;
    connection router("tcp://127.0.0.1:*", ro);
    connection_options dealer_opt = bounded_options();
    dealer_opt.kind = socket_kind::dealer;
    std::vector<connection> dealers;
    for (int i = 0; i < 2; ++i) dealers.emplace_back(router.endpoints()[0].address, dealer_opt);
    for (int i = 0; i < 2; ++i) REQUIRE(dealers[static_cast<std::size_t>(i)].send(batch_of(3, i)));
    for (int i = 0; i < 2; ++i) {
        auto m = router.recv_message();
        REQUIRE(m);
        CHECK(m->envelope.size() == 1);
        REQUIRE(router.reply(*m, {batch_of(3, 100 + seed_of(m->tensors))}));
    }
    for (int i = 0; i < 2; ++i) {
        const auto answer = dealers[static_cast<std::size_t>(i)].recv();
        REQUIRE(answer);
        CHECK(seed_of(*answer) == 100 + i);
    }
    CHECK(error_text([&] { (void)router.send(batch_of(1, 1)); }).find("answer a received message with reply()") !=
          std::string::npos);

    connection_options rep_opt = bounded_options();
    rep_opt.kind = socket_kind::rep;
    rep_opt.bind = true;
    connection rep("tcp://127.0.0.1:*", rep_opt);
    connection_options req_opt = bounded_options();
    req_opt.kind = socket_kind::req;
    connection req(rep.endpoints()[0].address, req_opt);
    for (int round = 0; round < 2; ++round) {
        REQUIRE(req.send(batch_of(2, round)));
        auto m = rep.recv_message();
        REQUIRE(m);
        CHECK(m->envelope.empty());
        REQUIRE(rep.reply(*m, {batch_of(2, 50 + round)}));
        const auto answer = req.recv();
        REQUIRE(answer);
        CHECK(seed_of(*answer) == 50 + round);
    }
}

TEST_CASE("a URL's #topic is the connection's topic") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection pub(ctx, strings{"zpub+inproc://url-topics#train"}, bounded_options());
    CHECK(pub.options().topic == "train");
    connection_options same = bounded_options();
    same.topic = "train";  // the same topic twice is no conflict
    connection sub(ctx, strings{"zsub+inproc://url-topics#train"}, same);
    connection sub_eval(ctx, strings{"zsub+inproc://url-topics#eval"}, bounded_options());
    const auto got = send_until_received(pub, sub);
    CHECK(seed_of(got) == 7);
    sub_eval.socket().set(zmq::sockopt::rcvtimeo, 200);
    CHECK_FALSE(sub_eval.recv());

    connection_options other = bounded_options();
    other.topic = "eval";
    const std::string conflict = error_text([&] { connection(ctx, strings{"zsub+inproc://url-topics#train"}, other); });
    CHECK(conflict.find("the URL's #train and connection_options::topic 'eval' differ") != std::string::npos);
}

namespace {

// Publishes a message on topic "training" every 2 ms until stopped (or
// for 20 s at most): traffic a "train" subscriber receives and drops, with
// no pause long enough for a receive's timeout.
struct other_topic_flood {
    std::atomic<bool> stop{false};
    std::string url;  // zsub+tcp://127.0.0.1:port
    std::thread thread;
    explicit other_topic_flood(zmq::context_t& ctx) {
        zmq::socket_t pub(ctx, zmq::socket_type::pub);
        pub.bind("tcp://127.0.0.1:*");
        url = "zsub+" + pub.get(zmq::sockopt::last_endpoint);
        thread = std::thread([this, pub = std::move(pub)]() mutable {
            const zmq::const_buffer topic = zmq::buffer(std::string_view("training"));
            send_options o;
            o.envelope = {&topic, 1};
            for (int i = 0; i < 10000 && !stop; ++i) {
                (void)zsend_multipart(pub, {batch_of(10, i)}, o);  // PUB: no peer yet is no loss
                std::this_thread::sleep_for(2ms);
            }
            pub.set(zmq::sockopt::linger, 0);
        });
    }
    ~other_topic_flood() {
        stop = true;
        thread.join();
    }
};

}  // namespace

TEST_CASE("messages of longer topics, dropped, do not stretch a receive's timeout") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    other_topic_flood flood(*ctx);
    SUBCASE("connection::recv") {
        connection_options so = bounded_options();
        so.topic = "train";
        so.recv_timeout = 300ms;
        connection sub(ctx, strings{flood.url}, so);
        const auto start = std::chrono::steady_clock::now();
        CHECK_FALSE(sub.recv());
        // Without a deadline each dropped message began the 300 ms again,
        // and the receive lasted as long as the flood (20 s).
        CHECK(std::chrono::steady_clock::now() - start < 5s);
        CHECK(sub.stats().messages() == 0);
    }
    SUBCASE("a loader closes promptly") {
        loader_options lo;
        lo.connection.topic = "train";
        std::optional<loader> l;
        l.emplace(ctx, strings{flood.url}, lo);
        std::this_thread::sleep_for(200ms);  // some "training" messages arrive and are dropped
        const auto start = std::chrono::steady_clock::now();
        l.reset();
        CHECK(std::chrono::steady_clock::now() - start < 5s);
    }
}

TEST_CASE("a sub connection is subscribed once connected, before it is first used") {
    // Over tcp the connection completes after the constructor returns; the
    // XPUB sees the subscription only if the socket sends it on its own.
    auto ctx = std::make_shared<zmq::context_t>(1);
    zmq::socket_t xpub(*ctx, zmq::socket_type::xpub);
    xpub.set(zmq::sockopt::rcvtimeo, 5000);
    xpub.bind("tcp://127.0.0.1:*");
    const std::string address = xpub.get(zmq::sockopt::last_endpoint);
    connection sub(ctx, strings{"zsub" + address.substr(3)}, bounded_options());
    zmq::message_t subscription;
    REQUIRE(xpub.recv(subscription));
    CHECK(subscription.size() == 1);  // "\x01" + the empty topic
    REQUIRE(zsend_multipart(xpub, {batch_of(3, 4)}));
    const auto got = sub.recv();
    REQUIRE(got);
    CHECK(seed_of(*got) == 4);
}

TEST_CASE("a connection's frame bound follows limits::max_tensors") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options many = bounded_options();
    many.decode.limits.max_tensors = 70000;
    connection tx(ctx, strings{"zpush+inproc://many"}, bounded_options());
    connection rx(ctx, strings{"zpull+inproc://many"}, many);
    const tensor one = tensor::zeros(dtype::u1, {1});
    const std::vector<tensor> list(66000, one);  // 132,000 frames: over recv_options' default
    REQUIRE(tx.send(list));
    const auto got = rx.recv();
    REQUIRE(got);
    CHECK(got->size() == list.size());
}

TEST_CASE("braces make one socket that fans in from three publishers") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    std::vector<connection> pubs;
    std::string ports;
    for (int i = 0; i < 3; ++i) {
        pubs.emplace_back(ctx, strings{"zpub://127.0.0.1:*"}, bounded_options());
        const std::string addr = pubs.back().endpoints()[0].address;
        if (i) ports += ',';
        ports += addr.substr(addr.rfind(':') + 1);
    }
    connection sub(ctx, strings{"zsub://127.0.0.1:{" + ports + "}"}, bounded_options());
    REQUIRE(sub.endpoints().size() == 3);
    sub.socket().set(zmq::sockopt::rcvtimeo, 50);
    std::set<std::int32_t> seen;
    for (int round = 0; round < 200 && seen.size() < 3; ++round) {
        for (int i = 0; i < 3; ++i) REQUIRE(pubs[static_cast<std::size_t>(i)].send(batch_of(4, i + 1)));
        while (auto got = sub.recv()) seen.insert(seed_of(*got));
    }
    CHECK(seen == std::set<std::int32_t>{1, 2, 3});
}

TEST_CASE("statistics count messages and bytes over all time and a recent window") {
    statistics s(4);
    CHECK(s.rate() == 0);
    CHECK(s.recent_rate() == 0);
    for (int i = 0; i < 10; ++i) {
        s.add(100);
        std::this_thread::sleep_for(2ms);
    }
    CHECK(s.messages() == 10);
    CHECK(s.bytes() == 1000);
    CHECK(s.rate() > 0);
    // Every message has the same size, so bytes/s is exactly 100 x msg/s.
    CHECK(s.throughput() == doctest::Approx(100 * s.rate()));
    CHECK(s.recent_throughput() == doctest::Approx(100 * s.recent_rate()));
    // The recent window spans 3 intervals of at least 2 ms: at most 1500 msg/s.
    CHECK(s.recent_rate() <= 1500);
    CHECK(s.summary().find("10 msgs") != std::string::npos);
    s.reset();
    CHECK(s.messages() == 0);
}

// A source that says, at each call, whether the batch it gave before is
// still held (by a range-for over it).
struct watching_source {
    std::weak_ptr<const void> last;
    std::vector<bool> held_at_next;
    int left = 3;
    std::optional<std::vector<tensor>> next() {
        held_at_next.push_back(!last.expired());
        if (left-- == 0) return std::nullopt;
        std::vector<tensor> b{tensor::from_vector(std::vector<std::int32_t>{left}, {1})};
        last = b[0].data().keeper();
        return b;
    }
};

TEST_CASE("a range-for lets its batch go before it asks for the next") {
    // So that an acked on_release acknowledgement is confirmed before the
    // next batch comes: a trainer killed while it waits has nothing of its
    // own processed again elsewhere.
    watching_source source;
    detail::batch_iterator<watching_source, &watching_source::next> it(&source);
    int bodies = 0;
    for (; !(it == std::default_sentinel); ++it) {
        CHECK(!source.last.expired());  // the body's batch
        ++bodies;
    }
    CHECK(bodies == 3);
    CHECK(source.held_at_next == std::vector<bool>{false, false, false, false});
    CHECK(source.last.expired());  // the end lets the last go
}

TEST_CASE("a connection serves a generator and iterates until a timeout") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options o = bounded_options();
    o.recv_timeout = 300ms;
    connection rx(ctx, strings{"zpull+inproc://serve"}, o);
    connection tx(ctx, strings{"zpush+inproc://serve"}, bounded_options());
    std::vector<std::vector<tensor>> source;
    for (int i = 0; i < 5; ++i) source.push_back({batch_of(3, i)});
    CHECK(tx.serve(source) == 5);
    std::vector<std::int32_t> seeds;
    for (auto& batch : rx) seeds.push_back(seed_of(batch));
    CHECK(seeds == std::vector<std::int32_t>{0, 1, 2, 3, 4});
    CHECK(tx.stats().messages() == 5);
    CHECK(tx.stats().bytes() == 5 * 12);
}

TEST_CASE("a loader prefetches in order and keeps its queue within bounds") {
    loader_options lo;
    lo.queue_messages = 3;
    lo.queue_bytes = 1 << 20;
    lo.connection.recv_timeout = 10000ms;
    loader l(strings{"zpull://127.0.0.1:*"}, lo);
    const std::string addr = l.endpoints().at(0).address;
    connection tx(strings{addr}, [] {
        connection_options o = bounded_options();
        o.kind = socket_kind::push;
        o.send_hwm = 2;
        return o;
    }());
    std::thread producer([&] {
        for (int i = 0; i < 40; ++i) CHECK(tx.send(batch_of(1000, i)));
    });
    std::vector<std::int32_t> seeds;
    for (int i = 0; i < 40; ++i) {
        if (i % 10 == 0) std::this_thread::sleep_for(50ms);  // a slow consumer
        CHECK(l.queued_messages() <= 3);
        seeds.push_back(seed_of(*l.next()));
    }
    producer.join();
    for (int i = 0; i < 40; ++i) CHECK(seeds[static_cast<std::size_t>(i)] == i);
    CHECK(l.peak_queued_messages() <= 3);
    CHECK(l.peak_queued_messages() >= 2);  // it did prefetch
    CHECK(l.stats().messages() == 40);
}

TEST_CASE("messages already waiting are queued together, in order, errors in place") {
    // The loader takes what is waiting on its socket in one go (one lock,
    // one wake-up): order and errors must survive that. Everything is sent
    // before the loader binds (inproc queues for a late bind), so its
    // first receive finds all of it waiting.
    auto ctx = std::make_shared<zmq::context_t>(1);
    // One sending socket: a PULL socket keeps order only within one pipe.
    zmq::socket_t tx(*ctx, zmq::socket_type::push);
    tx.connect("inproc://burst");
    const std::set<int> bad = {2, 3, 13};
    for (int i = 0; i < 20; ++i) {
        if (bad.count(i))
            tx.send(zmq::str_buffer("garbage"), zmq::send_flags::none);
        else
            REQUIRE(zsend_multipart(tx, batch_of(3, i)));
    }
    loader_options lo;
    lo.queue_messages = 32;
    loader l(ctx, strings{"zpull+inproc://burst"}, lo);
    // Taken by the loader's thread while nobody asks (a consumer that asks
    // first reads them itself, one at a time).
    for (const auto t0 = std::chrono::steady_clock::now();
         l.queued_messages() < 2 && std::chrono::steady_clock::now() - t0 < 5s;)
        std::this_thread::sleep_for(1ms);
    for (int i = 0; i < 20; ++i) {
        CAPTURE(i);
        if (bad.count(i))
            CHECK(error_class([&] { (void)l.next(5000ms); }) != "no error");
        else
            CHECK(seed_of(*l.next(5000ms)) == i);
    }
    CHECK(l.malformed() == 3);
    CHECK(l.stats().messages() == 17);
    CHECK(l.peak_queued_messages() > 1);  // they were queued together
}

TEST_CASE("a consumer reading the socket itself and the thread prefetching while it works keep the order") {
    // The consumer finds the queue empty and reads the socket itself; when
    // it pauses, the thread takes the socket back and queues what comes.
    // Either way every batch comes once, in order, whoever took it.
    auto ctx = std::make_shared<zmq::context_t>(1);
    loader_options lo;
    lo.queue_messages = 8;
    loader l(ctx, strings{"zpull+inproc://hand-over"}, lo);
    connection tx(ctx, strings{"zpush+inproc://hand-over"}, bounded_options());
    constexpr int count = 2000;
    std::thread producer([&] {
        for (int i = 0; i < count; ++i) {
            if (!tx.send(batch_of(1, i))) return;
            if (i % 97 == 0) std::this_thread::sleep_for(2ms);  // the consumer waits on the socket
        }
    });
    std::size_t peak = 0;
    for (int i = 0; i < count; ++i) {
        const auto b = l.next(5000ms);
        REQUIRE(b);
        REQUIRE(seed_of(*b) == i);
        if (i % 89 == 0) {
            std::this_thread::sleep_for(5ms);  // working: the thread prefetches
            peak = std::max(peak, l.queued_messages());
        }
    }
    producer.join();
    CHECK(peak >= 2);  // the thread did prefetch while the consumer worked
    CHECK_FALSE(l.next(10ms));
    CHECK(l.stats().messages() == count);
}

TEST_CASE("a deep queue hands a long burst to the consumer in parts, not at its end") {
    // 200 messages wait before the loader binds; its queue has room for
    // all. The transform blocks on the 100th message until the consumer
    // has had the first: a loader that queued only at the end of its burst
    // would keep the consumer waiting for ever.
    auto ctx = std::make_shared<zmq::context_t>(1);
    zmq::socket_t tx(*ctx, zmq::socket_type::push);
    tx.connect("inproc://deep");
    for (int i = 0; i < 200; ++i) REQUIRE(zsend_multipart(tx, batch_of(3, i)));
    std::mutex m;
    std::condition_variable cv;
    bool first_taken = false;
    int transformed = 0;
    loader_options lo;
    lo.queue_messages = 100000;
    lo.transform = [&](std::vector<tensor> b) {
        std::unique_lock lock(m);
        if (++transformed == 100) cv.wait_for(lock, 20s, [&] { return first_taken; });
        return b;
    };
    loader l(ctx, strings{"zpull+inproc://deep"}, lo);
    CHECK(seed_of(*l.next(10000ms)) == 0);
    {
        std::lock_guard lock(m);
        first_taken = true;
    }
    cv.notify_all();
    for (int i = 1; i < 200; ++i) REQUIRE(seed_of(*l.next(10000ms)) == i);
}

TEST_CASE("a loader's next(milliseconds::max()) waits for ever, not for nothing") {
    loader l("zpull://127.0.0.1:*", {});
    connection tx(strings{"zpush://" + l.endpoints().at(0).address.substr(6)}, bounded_options());
    std::thread producer([&] {
        std::this_thread::sleep_for(200ms);
        CHECK(tx.send(batch_of(3, 4)));
    });
    std::optional<std::vector<tensor>> got;
    CHECK_NOTHROW(got = l.next(std::chrono::milliseconds::max()));
    producer.join();
    REQUIRE(got);
    CHECK(seed_of(*got) == 4);
}

TEST_CASE("a loader takes off its socket no more than its queue has room for, in bytes too") {
    // Messages the loader has taken off its socket but not queued are
    // memory outside both bounds, the queue's and the socket's high-water
    // mark. 40 kB batches wait on the socket before the loader binds
    // (inproc queues for a late bind); with room for two of them, the
    // loader may queue two and hold one more. How many it took off shows
    // in what the sender can add afterwards: binding adds the receiver's
    // high-water mark to the pipe, and libzmq lets a writer refill what
    // its reader has taken only in steps of half the mark.
    auto ctx = std::make_shared<zmq::context_t>(1);
    zmq::socket_t tx(*ctx, zmq::socket_type::push);
    tx.set(zmq::sockopt::sndhwm, 50);
    tx.connect("inproc://hand");
    auto fill = [&](int from) {
        int n = 0;
        for (int idle = 0; idle < 20;) {
            if (zsend_multipart(tx, batch_of(10000, from + n), {.flags = zmq::send_flags::dontwait})) {
                ++n;
                idle = 0;
            } else {
                ++idle;
                std::this_thread::sleep_for(10ms);
            }
        }
        return n;
    };
    const int before = fill(0);
    loader_options lo;
    lo.queue_messages = 64;
    lo.queue_bytes = 100000;
    lo.connection.recv_hwm = 50;
    loader l(ctx, strings{"zpull+inproc://hand"}, lo);
    std::this_thread::sleep_for(300ms);
    CHECK(l.queued_messages() == 2);
    const int after = fill(before);
    MESSAGE("sent " << before << " before the loader, " << after << " after");
    CHECK(after < 50 + 10);  // it took off a few, not the 50 waiting
    for (int i = 0; i < before + after; ++i) CHECK(seed_of(*l.next(5000ms)) == i);
}

TEST_CASE("try_recv takes a waiting message and never blocks") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options ro = bounded_options();
    ro.recv_timeout = 60000ms;  // try_recv must not wait for it
    connection rx(ctx, strings{"zpull+inproc://try"}, ro);
    connection tx(ctx, strings{"zpush+inproc://try"}, bounded_options());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(!rx.try_recv());
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
    REQUIRE(tx.send(batch_of(3, 4)));
    std::optional<std::vector<tensor>> got;
    for (int i = 0; i < 1000 && !got; ++i) {
        got = rx.try_recv();
        if (!got) std::this_thread::sleep_for(1ms);
    }
    REQUIRE(got);
    CHECK(seed_of(*got) == 4);
    CHECK(rx.stats().messages() == 1);
}

TEST_CASE("the byte bound holds with messages larger than it, one at a time") {
    loader_options lo;
    lo.queue_messages = 100;
    lo.queue_bytes = 10000;  // each batch is 40000 bytes
    lo.connection.recv_timeout = 10000ms;
    auto ctx = std::make_shared<zmq::context_t>(1);
    loader l(ctx, strings{"zpull+inproc://bytes"}, lo);
    connection tx(ctx, strings{"zpush+inproc://bytes"}, bounded_options());
    for (int i = 0; i < 6; ++i) REQUIRE(tx.send(batch_of(10000, i)));
    std::this_thread::sleep_for(200ms);
    CHECK(l.queued_messages() == 1);
    for (int i = 0; i < 6; ++i) CHECK(seed_of(*l.next()) == i);
    CHECK(l.peak_queued_bytes() == 40000);
}

TEST_CASE("a loader shuts down cleanly from either side, even while blocked") {
    SUBCASE("close() wakes a consumer blocked in next()") {
        loader l(strings{"zpull+inproc://idle"}, {});
        std::atomic<bool> returned{false};
        std::thread consumer([&] {
            CHECK_FALSE(l.next());
            returned = true;
        });
        std::this_thread::sleep_for(100ms);
        CHECK_FALSE(returned);
        l.close();
        consumer.join();
        CHECK(returned);
    }
    SUBCASE("destroying a loader whose queue is full and producer still sending") {
        auto ctx = std::make_shared<zmq::context_t>(1);
        connection tx(ctx, strings{"zpush+inproc://full"}, bounded_options());
        {
            loader_options lo;
            lo.queue_messages = 1;
            loader l(ctx, strings{"zpull+inproc://full"}, lo);
            for (int i = 0; i < 5; ++i) REQUIRE(tx.send(batch_of(100, i)));
            std::this_thread::sleep_for(100ms);
            CHECK(l.queued_messages() == 1);
        }  // must not hang
        CHECK(true);
    }
    SUBCASE("closing takes and transforms no more of what waits on the socket") {
        auto ctx = std::make_shared<zmq::context_t>(1);
        connection tx(ctx, strings{"zpush+inproc://slow-transform"}, bounded_options());
        std::atomic<int> transforms{0};
        {
            loader_options lo;
            lo.transform = [&](std::vector<tensor> b) {
                ++transforms;
                std::this_thread::sleep_for(100ms);
                return b;
            };
            loader l(ctx, strings{"zpull+inproc://slow-transform"}, lo);
            for (int i = 0; i < 20; ++i) REQUIRE(tx.send(batch_of(10, i)));
            while (transforms == 0) std::this_thread::sleep_for(1ms);
        }  // closes while the first transform runs, 19 messages waiting
        CHECK(transforms <= 2);
    }
    SUBCASE("a timeout returns nothing, as connection::recv's does, and ends a range-for") {
        loader l(strings{"zpull+inproc://quiet"}, {});
        CHECK_FALSE(l.next(100ms));
        CHECK_FALSE(l.closed());  // a timeout, not the end
        loader_options lo;
        lo.connection.recv_timeout = 100ms;
        loader timed(strings{"zpull+inproc://quiet-timed"}, lo);
        CHECK_FALSE(timed.next());
        int n = 0;
        for (auto& batch : timed) n += static_cast<int>(batch.size()) + 1;
        CHECK(n == 0);
        CHECK_FALSE(timed.closed());
        timed.close();
        CHECK(timed.closed());
    }
    SUBCASE("iteration ends when the loader is closed") {
        auto ctx = std::make_shared<zmq::context_t>(1);
        loader l(ctx, strings{"zpull+inproc://iter"}, {});
        connection tx(ctx, strings{"zpush+inproc://iter"}, bounded_options());
        for (int i = 0; i < 3; ++i) REQUIRE(tx.send(batch_of(2, i)));
        int n = 0;
        for (auto& batch : l) {
            CHECK(seed_of(batch) == n);
            if (++n == 3) l.close();
        }
        CHECK(n == 3);
    }
}

namespace {

std::atomic<int> signals_caught{0};
void count_signal(int) { ++signals_caught; }

// SIGUSR1 handled without SA_RESTART, as a program's own handler or a
// profiler's may be: a blocking call it interrupts fails with EINTR.
struct interrupting_handler {
    struct sigaction old {};
    interrupting_handler() {
        struct sigaction sa {};
        sa.sa_handler = count_signal;
        ::sigaction(SIGUSR1, &sa, &old);
    }
    ~interrupting_handler() { ::sigaction(SIGUSR1, &old, nullptr); }
};

}  // namespace

TEST_CASE("a signal handler interrupting a blocked receive costs nothing: the receive goes on") {
    const interrupting_handler handler;
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection tx(ctx, strings{"zpush+inproc://signals"}, bounded_options());

    SUBCASE("connection::recv (zrecv underneath)") {
        connection rx(ctx, strings{"zpull+inproc://signals"}, bounded_options());
        std::optional<std::vector<tensor>> got;
        std::thread receiver([&] { got = rx.recv(); });
        const int before = signals_caught;
        for (int i = 0; i < 5; ++i) {
            std::this_thread::sleep_for(20ms);
            ::pthread_kill(receiver.native_handle(), SIGUSR1);
        }
        REQUIRE(tx.send(batch_of(4, 3)));
        receiver.join();
        CHECK(signals_caught > before);
        REQUIRE(got);
        CHECK(seed_of(*got) == 3);
    }
    SUBCASE("a loader's thread") {
        loader l(ctx, strings{"zpull+inproc://signals"}, {});
        // Only the loader's thread (and libzmq's, which block every signal)
        // may take a signal sent to the process.
        sigset_t usr1, old;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        ::pthread_sigmask(SIG_BLOCK, &usr1, &old);
        const int before = signals_caught;
        for (int i = 0; i < 5; ++i) {
            ::kill(::getpid(), SIGUSR1);
            std::this_thread::sleep_for(20ms);
        }
        REQUIRE(tx.send(batch_of(4, 5)));
        const auto got = l.next(5000ms);
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        CHECK(signals_caught > before);
        REQUIRE(got);
        CHECK(seed_of(*got) == 5);
    }
}

TEST_CASE("several consumers share a loader: each batch goes to one of them, none waits in vain") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    loader_options lo;
    lo.queue_messages = 2;  // consumers often find the queue empty and wait
    loader l(ctx, strings{"zpull+inproc://many-consumers"}, lo);
    constexpr int count = 300;
    std::mutex m;
    std::vector<int> seen;
    std::atomic<int> errors{0};
    auto consume = [&] {
        try {
            while (auto b = l.next()) {
                std::lock_guard lock(m);
                seen.push_back(seed_of(*b));
                if (seen.size() == count) l.close();
            }
        } catch (const std::exception&) {
            ++errors;
        }
    };
    std::vector<std::thread> consumers;
    for (int i = 0; i < 3; ++i) consumers.emplace_back(consume);
    connection tx(ctx, strings{"zpush+inproc://many-consumers"}, bounded_options());
    for (int i = 0; i < count; ++i) {
        REQUIRE(tx.send(batch_of(1, i)));
        std::this_thread::sleep_for(200us);  // one at a time: every consumer wakes for each
    }
    for (auto& c : consumers) c.join();
    CHECK(errors == 0);
    std::sort(seen.begin(), seen.end());
    std::vector<int> want(count);
    std::iota(want.begin(), want.end(), 0);
    CHECK(seen == want);
}

TEST_CASE("errors on the loader thread reach the consumer") {
    auto ctx = std::make_shared<zmq::context_t>(1);
    SUBCASE("a malformed message is raised, and the loader goes on") {
        loader l(ctx, strings{"zpull+inproc://bad"}, {});
        zmq::socket_t raw(*ctx, zmq::socket_type::push);
        raw.connect("inproc://bad");
        raw.send(zmq::str_buffer("not a tenbin header"), zmq::send_flags::sndmore);
        raw.send(zmq::str_buffer("x"), zmq::send_flags::sndmore);
        raw.send(zmq::str_buffer("y"), zmq::send_flags::none);
        connection tx(ctx, strings{"zpush+inproc://bad"}, bounded_options());
        REQUIRE(tx.send(batch_of(3, 9)));
        const std::string c = error_class([&] { (void)l.next(5000ms); });
        CHECK((c == "bad_header" || c == "odd_chunk_count"));
        CHECK(seed_of(*l.next(5000ms)) == 9);
        CHECK(l.malformed() == 1);
    }
    SUBCASE("skip_malformed counts and skips") {
        loader_options lo;
        lo.skip_malformed = true;
        loader l(ctx, strings{"zpull+inproc://skip"}, lo);
        zmq::socket_t raw(*ctx, zmq::socket_type::push);
        raw.connect("inproc://skip");
        raw.send(zmq::str_buffer("garbage"), zmq::send_flags::none);
        connection tx(ctx, strings{"zpush+inproc://skip"}, bounded_options());
        REQUIRE(tx.send(batch_of(3, 8)));
        CHECK(seed_of(*l.next(5000ms)) == 8);
        CHECK(l.malformed() == 1);
    }
    SUBCASE("a transform runs on the loader thread; its errors are raised too") {
        loader_options lo;
        const auto consumer_thread = std::this_thread::get_id();
        lo.transform = [consumer_thread](std::vector<tensor> b) {
            if (std::this_thread::get_id() == consumer_thread) throw std::logic_error("wrong thread");
            if (seed_of(b) == 1) throw error(errc::bad_argument, "transform refused batch 1");
            b.push_back(tensor::zeros(dtype::u1, {1}, "added"));
            return b;
        };
        loader l(ctx, strings{"zpull+inproc://transform"}, lo);
        connection tx(ctx, strings{"zpush+inproc://transform"}, bounded_options());
        for (int i = 0; i < 3; ++i) REQUIRE(tx.send(batch_of(3, i)));
        CHECK(l.next(5000ms)->size() == 2);
        CHECK(error_class([&] { (void)l.next(5000ms); }) == "bad_argument");
        CHECK(seed_of(*l.next(5000ms)) == 2);
    }
    SUBCASE("whatever a transform throws comes in its batch's place, never counted as malformed") {
        loader_options lo;
        lo.skip_malformed = true;  // must not hide the caller's own errors
        lo.transform = [](std::vector<tensor> b) {
            // Batches pile up on the socket behind the first.
            if (seed_of(b) == 0) std::this_thread::sleep_for(100ms);
            if (seed_of(b) == 2) throw std::runtime_error("transform failed on 2");
            return b;
        };
        loader l(ctx, strings{"zpull+inproc://transform-any"}, lo);
        connection tx(ctx, strings{"zpush+inproc://transform-any"}, bounded_options());
        for (int i = 0; i < 5; ++i) REQUIRE(tx.send(batch_of(3, i)));
        CHECK(seed_of(*l.next(5000ms)) == 0);
        CHECK(seed_of(*l.next(5000ms)) == 1);
        CHECK_THROWS_WITH_AS((void)l.next(5000ms), "transform failed on 2", std::runtime_error);
        CHECK(seed_of(*l.next(5000ms)) == 3);
        CHECK(seed_of(*l.next(5000ms)) == 4);
        CHECK(l.malformed() == 0);
    }
    SUBCASE("a refused endpoint (address in use) fails the constructor") {
        connection holder(ctx, strings{"zpull://127.0.0.1:*"}, bounded_options());
        const std::string addr = holder.endpoints()[0].address;
        loader_options lo;
        lo.connection.kind = socket_kind::pull;
        // A tenbin error naming the endpoint, not libzmq's bare "Address already in use".
        const std::string text = error_text([&] { loader(strings{addr}, lo); });
        CHECK(text.find("cannot bind to " + addr + ": Address already in use") != std::string::npos);
        CHECK(error_class([&] { loader(strings{addr}, lo); }) == "io_error");
        CHECK(error_class([&] { connection(strings{"zpull://" + addr.substr(6)}, bounded_options()); }) == "io_error");
        // The same for a socket of the caller's, through attach.
        zmq::socket_t own(*ctx, zmq::socket_type::pull);
        const endpoint taken = parse_url("zpull://" + addr.substr(6));
        CHECK(error_text([&] { (void)attach(own, taken); }).find("cannot bind to " + addr) != std::string::npos);
        const endpoint unknown{.kind = socket_kind::pull, .bind = true, .address = "bogus://x"};
        CHECK(error_class([&] { (void)attach(own, unknown); }) == "bad_url");
        const std::string bound = attach(own, parse_url("zpull://127.0.0.1:*"));
        CHECK(bound.starts_with("tcp://127.0.0.1:"));
        CHECK(bound.find('*') == std::string::npos);
    }
    SUBCASE("a fatal error (the context shut down) comes after every batch received before it, once") {
        loader l(ctx, strings{"zpull+inproc://fatal"}, {});
        {
            connection tx(ctx, strings{"zpush+inproc://fatal"}, bounded_options());
            for (int i = 0; i < 3; ++i) REQUIRE(tx.send(batch_of(2, i)));
        }
        while (l.queued_messages() < 3) std::this_thread::sleep_for(1ms);
        ctx->shutdown();
        for (int i = 0; i < 3; ++i) CHECK(seed_of(*l.next(5000ms)) == i);
        CHECK(error_class([&] { (void)l.next(5000ms); }) == "closed");
        CHECK_FALSE(l.next(5000ms));
    }
    SUBCASE("a bad URL fails in the caller's thread") {
        CHECK(error_class([] { loader l(strings{"zfoo://x:1"}, {}); }) == "bad_url");
    }
}
