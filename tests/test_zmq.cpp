// Tensors over ZeroMQ: every socket pattern and transport in both wire
// forms, envelopes, zero-copy lifetimes, alignment of received frames,
// draining after malformed messages, would-block and timeouts, and the
// Python multipart vectors.
#include "support.hpp"
#include "zmq_fixture.hpp"

#include "transport/block_pool.hpp"

#include <doctest/doctest.h>
#include <tenbin/zmq.hpp>
#include <zmq_addon.hpp>

#include <sys/mman.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::check_same;
using test_support::counted_tensor;
using test_support::error_class;
using test_support::error_text;
using test_support::eventually;
using test_support::holds_pattern;
using test_support::le64;
using test_support::numbered;
using test_support::patterned;
using test_support::str64;
using namespace test_zmq;

namespace {

// Every dtype, rank 0, zero-size dims, odd sizes, and one tensor large
// enough to go zero-copy.
std::vector<tensor> sample_tensors(int seed = 0) {
    return {
        patterned(dtype::f4, {3, 700}, "input", seed),  // 8400 bytes: zero-copy
        patterned(dtype::i4, {5}, "target", seed + 1),
        patterned(dtype::f8, {}, "scalar", seed + 2),
        patterned(dtype::u4, {2, 3}, "u4", seed + 3),
        patterned(dtype::u1, {0}, "empty", seed + 4),
        patterned(dtype::f2, {2, 0, 3}, "", seed + 5),
        patterned(dtype::i1, {13}, "bytes", seed + 6),
        patterned(dtype::u8, {4}, "u8", seed + 7),
        patterned(dtype::u2, {7}, "u2", seed + 8),
        patterned(dtype::i2, {3, 3}, "i2", seed + 9),
        patterned(dtype::i8, {1, 1, 2}, "i8", seed + 10),
        patterned(dtype::f2, {5}, "half", seed + 11),
    };
}

enum class wire { single, multipart };
constexpr wire both_forms[] = {wire::single, wire::multipart};

bool send_form(zmq::socket_ref s, wire w, tensor_span tensors, const send_options& opt = {}) {
    return w == wire::single ? zsend_single(s, tensors, opt) : zsend_multipart(s, tensors, opt);
}

std::optional<message> recv_form(zmq::socket_ref s, wire w, const recv_options& opt = {}) {
    return w == wire::single ? zrecv_single(s, opt) : zrecv_multipart(s, opt);
}

// Sends frames as one message with plain cppzmq.
void send_raw(zmq::socket_ref s, const std::vector<std::vector<std::byte>>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        REQUIRE(s.send(zmq::const_buffer(frames[i].data(), frames[i].size()), flags));
    }
}

std::vector<std::byte> bytes_of(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return {p, p + s.size()};
}

std::vector<std::byte> bytes_of(const buffer& b) { return {b.bytes().begin(), b.bytes().end()}; }

// The multipart frames of `tensors`, as the library's encoder makes them.
std::vector<std::vector<std::byte>> frames_of(tensor_span tensors) {
    std::vector<std::vector<std::byte>> out;
    for (const buffer& b : encode_list(tensors)) out.push_back(bytes_of(b));
    return out;
}

}  // namespace

// ---- patterns x transports x forms ----------------------------------------

TEST_CASE("PUSH/PULL carries every dtype in both forms over inproc, ipc and tcp") {
    const std::vector<tensor> sent = sample_tensors();
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            pull_and_push linked(t);
            zmq::socket_t &pull = linked.pull, &push = linked.push;
            REQUIRE(send_form(push, w, sent));
            auto got = recv_form(pull, w);
            REQUIRE(got);
            CHECK(got->single == (w == wire::single));
            CHECK(got->envelope.empty());
            check_same(got->tensors, sent);
            // zrecv takes either form.
            REQUIRE(send_form(push, w, sent));
            auto any = zrecv(pull);
            REQUIRE(any);
            CHECK(any->single == (w == wire::single));
            check_same(any->tensors, sent);
        }
    }
}

TEST_CASE("PUB/SUB delivers to a subscriber of the empty topic") {
    const std::vector<tensor> sent = sample_tensors(3);
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            zmq::context_t ctx;
            auto sub = make_socket(ctx, zmq::socket_type::sub);
            auto pub = make_socket(ctx, zmq::socket_type::pub);
            sub.set(zmq::sockopt::subscribe, "");
            sub.set(zmq::sockopt::rcvtimeo, 50);
            link(pub, sub, t);
            // The subscription reaches the publisher asynchronously: publish
            // until one message gets through.
            std::optional<message> got;
            const auto deadline = std::chrono::steady_clock::now() + 5s;
            while (!got && std::chrono::steady_clock::now() < deadline) {
                REQUIRE(send_form(pub, w, sent));
                got = recv_form(sub, w);
            }
            REQUIRE(got);
            CHECK(got->single == (w == wire::single));
            check_same(got->tensors, sent);
        }
    }
}

TEST_CASE("REQ/REP carries a request and a reply") {
    const std::vector<tensor> request = sample_tensors(5);
    const std::vector<tensor> reply{patterned(dtype::f4, {2, 2}, "reply", 9), patterned(dtype::u4, {}, "n")};
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            zmq::context_t ctx;
            auto rep = make_socket(ctx, zmq::socket_type::rep);
            auto req = make_socket(ctx, zmq::socket_type::req);
            link(rep, req, t);
            REQUIRE(send_form(req, w, request));
            auto got = recv_form(rep, w);  // REP strips the envelope itself
            REQUIRE(got);
            check_same(got->tensors, request);
            REQUIRE(send_form(rep, w, reply));
            auto answer = recv_form(req, w);
            REQUIRE(answer);
            check_same(answer->tensors, reply);
        }
    }
}

TEST_CASE("DEALER/ROUTER: the router sees the identity and replies with it") {
    const std::vector<tensor> request = sample_tensors(7);
    const std::vector<tensor> reply{patterned(dtype::i8, {3}, "ack", 1)};
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            zmq::context_t ctx;
            auto router = make_socket(ctx, zmq::socket_type::router);
            auto dealer = make_socket(ctx, zmq::socket_type::dealer);
            dealer.set(zmq::sockopt::routing_id, "dealer-7");
            link(router, dealer, t);
            REQUIRE(send_form(dealer, w, request));
            recv_options ropt;
            ropt.envelope = envelope_spec::router();
            auto got = recv_form(router, w, ropt);
            REQUIRE(got);
            REQUIRE(got->envelope.size() == 1);  // a DEALER sends no delimiter
            CHECK(got->envelope[0].to_string() == "dealer-7");
            check_same(got->tensors, request);

            const auto env = got->envelope_buffers();
            send_options sopt;
            sopt.envelope = env;
            REQUIRE(send_form(router, w, reply, sopt));
            auto answer = recv_form(dealer, w);
            REQUIRE(answer);
            CHECK(answer->envelope.empty());
            check_same(answer->tensors, reply);
        }
    }
}

TEST_CASE_FIXTURE(router_and_dealer, "a forgotten envelope and the wrong form get errors that say what to do") {
    const std::vector<tensor> request{patterned(dtype::f4, {3}, "a", 1), patterned(dtype::u1, {2}, "b", 2)};
    REQUIRE(zsend_multipart(dealer, request));
    const std::string envelope = error_text([&] { (void)zrecv(router); });
    CHECK(envelope ==
          "odd_chunk_count: multipart message of 5 tenbin frames: an odd frame count: the last frame (4, a header) "
          "has no data after it (a ROUTER identity or PUB topic in front? see recv_options::envelope)");

    // A REQ's identity and delimiter in front of a 2-tensor message: an
    // even count, but the first frame cannot be a header.
    auto req = make_socket(ctx, zmq::socket_type::req);
    link(router, req, transport::inproc);
    REQUIRE(zsend_multipart(req, request));
    const std::string identity = error_text([&] { (void)zrecv(router); });
    CHECK(identity.rfind("bad_header: multipart message of 6 tenbin frames", 0) == 0);
    CHECK(identity.find("see recv_options::envelope") != std::string::npos);

    pull_and_push linked;
    zmq::socket_t &pull = linked.pull, &push = linked.push;

    // A topic expected where the sender puts none.
    recv_options topic;
    topic.envelope = envelope_spec::topic();
    REQUIRE(zsend_multipart(push, request));
    const std::string no_topic = error_text([&] { (void)zrecv(pull, topic); });
    CHECK(no_topic.find("recv_options::envelope took 1 frame off the front: does the sender put them there?") !=
          std::string::npos);

    REQUIRE(zsend_multipart(push, request));
    CHECK(error_text([&] { (void)zrecv_single(pull); }) ==
          "odd_chunk_count: multipart message of 4 tenbin frames: not single-part, which is one tenbin frame "
          "(zrecv accepts either form)");
    REQUIRE(zsend_single(push, request));
    const std::string single = error_text([&] { (void)zrecv_multipart(pull); });
    CHECK(single.rfind("odd_chunk_count: single-part message of ", 0) == 0);
    CHECK(single.find("not multipart") != std::string::npos);
    CHECK(single.find("recv_options::envelope") == std::string::npos);
}

TEST_CASE("PAIR carries messages both ways") {
    const std::vector<tensor> there = sample_tensors(11);
    const std::vector<tensor> back = sample_tensors(12);
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            zmq::context_t ctx;
            auto a = make_socket(ctx, zmq::socket_type::pair);
            auto b = make_socket(ctx, zmq::socket_type::pair);
            link(a, b, t);
            REQUIRE(send_form(b, w, there));
            auto got = recv_form(a, w);
            REQUIRE(got);
            check_same(got->tensors, there);
            REQUIRE(send_form(a, w, back));
            auto got_back = recv_form(b, w);
            REQUIRE(got_back);
            check_same(got_back->tensors, back);
        }
    }
}

TEST_CASE("views, single tensors and empty lists are sent in both forms") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::vector<tensor> owned = sample_tensors(2);
    std::vector<tensor_view> views(owned.begin(), owned.end());
    for (wire w : both_forms) {
        CAPTURE(w == wire::single);
        REQUIRE(send_form(push, w, views));
        auto got = recv_form(pull, w);
        REQUIRE(got);
        check_same(got->tensors, owned);

        REQUIRE(send_form(push, w, owned[0]));
        got = recv_form(pull, w);
        REQUIRE(got);
        check_same(got->tensors, {owned[0]});

        // No tensors: one empty frame, the single-part form of nothing.
        REQUIRE(send_form(push, w, std::vector<tensor>{}));
        zmq::message_t raw;
        REQUIRE(pull.recv(raw));
        CHECK(raw.size() == 0);
        CHECK_FALSE(raw.more());
        REQUIRE(send_form(push, w, std::vector<tensor>{}));
        got = recv_form(pull, w);
        REQUIRE(got);
        CHECK(got->tensors.empty());
        CHECK(got->single);
    }
}

TEST_CASE("the multipart wire is exactly [header, data, ...] and the single-part wire is encode_buffer") {
    pull_and_push linked(transport::tcp);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::vector<tensor> sent = sample_tensors(4);

    REQUIRE(zsend_multipart(push, sent));
    std::vector<zmq::message_t> frames;
    do {
        REQUIRE(pull.recv(frames.emplace_back()));
    } while (frames.back().more());
    const auto want = frames_of(sent);
    REQUIRE(frames.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(bytes_of(frames[i].to_string_view()) == want[i]);
    }

    REQUIRE(zsend_single(push, sent));
    zmq::message_t one;
    REQUIRE(pull.recv(one));
    CHECK_FALSE(one.more());
    CHECK(bytes_of(one.to_string_view()) == bytes_of(encode_buffer(sent)));
}

TEST_CASE("received tensors are read-only views of the frames; writing one copies it") {
    pull_and_push linked(transport::tcp);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    REQUIRE(zsend_multipart(push, patterned(dtype::u1, {5000})));
    auto got = zrecv(pull);
    REQUIRE(got);
    tensor t = got->tensors.at(0);
    const std::byte* frame = t.data().data();
    const auto before = t.values<std::uint8_t>()[0];
    t.mutable_values<std::uint8_t>()[0] = static_cast<std::uint8_t>(before + 1);
    CHECK(t.data().data() != frame);
    CHECK(got->tensors.at(0).values<std::uint8_t>()[0] == before);
    CHECK(t.values<std::uint8_t>()[0] == static_cast<std::uint8_t>(before + 1));
}

// ---- envelopes --------------------------------------------------------------

TEST_CASE("ROUTER receiving from REQ keeps identity and delimiter and replies through them") {
    for (transport t : all_transports) {
        for (wire w : both_forms) {
            CAPTURE(transport_name(t));
            CAPTURE(w == wire::single);
            zmq::context_t ctx;
            auto router = make_socket(ctx, zmq::socket_type::router);
            auto req = make_socket(ctx, zmq::socket_type::req);
            link(router, req, t);
            const std::vector<tensor> q{patterned(dtype::f4, {4, 4}, "q", 1)};
            REQUIRE(send_form(req, w, q));
            recv_options ropt;
            ropt.envelope = envelope_spec::router();
            auto got = recv_form(router, w, ropt);
            REQUIRE(got);
            REQUIRE(got->envelope.size() == 2);
            CHECK(got->envelope[0].size() > 0);   // the identity libzmq made up
            CHECK(got->envelope[1].size() == 0);  // REQ's delimiter
            check_same(got->tensors, q);

            const std::vector<tensor> a{patterned(dtype::i2, {3}, "a", 2)};
            const auto env = got->envelope_buffers();
            send_options sopt;
            sopt.envelope = env;
            REQUIRE(send_form(router, w, a, sopt));
            auto answer = recv_form(req, w);
            REQUIRE(answer);
            check_same(answer->tensors, a);
        }
    }
}

namespace {

// The malformed_message a receive throws, if it throws one.
std::optional<malformed_message> malformed_from(zmq::socket_ref socket, const recv_options& opt) {
    try {
        (void)zrecv(socket, opt);
    } catch (const malformed_message& e) {
        return e;
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("ROUTER answers a REQ peer's malformed message through the envelope the error carries") {
    zmq::context_t ctx;
    auto router = make_socket(ctx, zmq::socket_type::router);
    auto req = make_socket(ctx, zmq::socket_type::req);
    link(router, req, transport::inproc);
    req.send(zmq::str_buffer("not a tenbin message"), zmq::send_flags::none);
    recv_options ropt;
    ropt.envelope = envelope_spec::router();
    const auto caught = malformed_from(router, ropt);
    REQUIRE(caught);
    CHECK(caught->code() == errc::bad_magic);
    REQUIRE(caught->envelope().size() == 2);
    CHECK(caught->envelope()[0].size() > 0);   // the identity
    CHECK(caught->envelope()[1].empty());      // REQ's delimiter
    const std::vector<tensor> refusal{patterned(dtype::u1, {1}, "refused", 3)};
    const auto env = caught->envelope_buffers();
    send_options sopt;
    sopt.envelope = env;
    REQUIRE(zsend_multipart(router, refusal, sopt));
    auto answer = zrecv(req);
    REQUIRE(answer);  // the REQ peer is not left waiting
    check_same(answer->tensors, refusal);

    // Without an envelope the error is a plain tenbin::error.
    pull_and_push linked;
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    push.send(zmq::str_buffer("not a tenbin message"), zmq::send_flags::none);
    try {
        (void)zrecv(pull);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(dynamic_cast<const malformed_message*>(&e) == nullptr);
    }
}

TEST_CASE_FIXTURE(router_and_dealer, "a message with nothing after its envelope is refused with the envelope; extra hops are named") {
    recv_options ropt;
    ropt.envelope = envelope_spec::frames(2);

    // [identity, "hb"]: both frames are envelope, no tenbin frame follows.
    dealer.send(zmq::str_buffer("hb"), zmq::send_flags::none);
    const auto alone = malformed_from(router, ropt);
    REQUIRE(alone);
    CHECK(alone->code() == errc::odd_chunk_count);
    REQUIRE(alone->envelope().size() == 2);
    CHECK(alone->envelope()[1] == "hb");

    // A second routing frame in front (a proxy's hop, say) that router()
    // does not take: the error says where to look.
    ropt.envelope = envelope_spec::router();
    const zmq::const_buffer hop[] = {zmq::str_buffer("hop-2")};
    send_options sopt;
    sopt.envelope = hop;
    REQUIRE(zsend_multipart(dealer, {patterned(dtype::f4, {4}, "x", 1)}, sopt));
    const auto hopped = malformed_from(router, ropt);
    REQUIRE(hopped);
    CHECK(std::string(hopped->what()).find("envelope_spec::delimited()") != std::string::npos);
}

TEST_CASE_FIXTURE(router_and_dealer, "ROUTER tells an empty list from a delimiter") {
    recv_options ropt;
    ropt.envelope = envelope_spec::router();

    // [identity, ""]: the empty frame is the body, an empty list.
    REQUIRE(zsend_multipart(dealer, std::vector<tensor>{}));
    auto got = zrecv(router, ropt);
    REQUIRE(got);
    CHECK(got->envelope.size() == 1);
    CHECK(got->tensors.empty());

    // [identity, "", ""]: a delimiter, then the empty list.
    const zmq::const_buffer delimiter[] = {zmq::const_buffer(nullptr, 0)};
    send_options sopt;
    sopt.envelope = delimiter;
    REQUIRE(zsend_single(dealer, std::vector<tensor>{}, sopt));
    got = zrecv(router, ropt);
    REQUIRE(got);
    CHECK(got->envelope.size() == 2);
    CHECK(got->tensors.empty());
}

TEST_CASE("a PUB topic frame reaches only the subscribers of that topic") {
    for (wire w : both_forms) {
        CAPTURE(w == wire::single);
        zmq::context_t ctx;
        auto sub = make_socket(ctx, zmq::socket_type::sub);
        auto pub = make_socket(ctx, zmq::socket_type::pub);
        sub.set(zmq::sockopt::subscribe, "weather");
        sub.set(zmq::sockopt::rcvtimeo, 50);
        link(pub, sub, transport::tcp);
        const std::string other = "sports", topic = "weather";
        const zmq::const_buffer other_env[] = {zmq::buffer(other)};
        const zmq::const_buffer topic_env[] = {zmq::buffer(topic)};
        send_options other_opt, topic_opt;
        other_opt.envelope = other_env;
        topic_opt.envelope = topic_env;
        const std::vector<tensor> noise{patterned(dtype::u1, {3}, "noise")};
        const std::vector<tensor> news = sample_tensors(8);
        recv_options ropt;
        ropt.envelope = envelope_spec::topic();

        std::optional<message> got;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!got && std::chrono::steady_clock::now() < deadline) {
            REQUIRE(send_form(pub, w, noise, other_opt));
            REQUIRE(send_form(pub, w, news, topic_opt));
            got = recv_form(sub, w, ropt);
        }
        REQUIRE(got);
        REQUIRE(got->envelope.size() == 1);
        CHECK(got->envelope[0].to_string() == "weather");
        check_same(got->tensors, news);
    }
}

TEST_CASE("a prefix of any frames is taken with frames(n) or delimited()") {
    pull_and_push linked(transport::ipc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::string a = "alpha", b = "b";
    const zmq::const_buffer prefix[] = {zmq::buffer(a), zmq::buffer(b), zmq::const_buffer(nullptr, 0)};
    send_options sopt;
    sopt.envelope = prefix;
    const std::vector<tensor> sent = sample_tensors(6);

    for (wire w : both_forms) {
        CAPTURE(w == wire::single);
        recv_options by_count;
        by_count.envelope = envelope_spec::frames(3);
        REQUIRE(send_form(push, w, sent, sopt));
        auto got = recv_form(pull, w, by_count);
        REQUIRE(got);
        REQUIRE(got->envelope.size() == 3);
        CHECK(got->envelope[0].to_string() == "alpha");
        CHECK(got->envelope[1].to_string() == "b");
        CHECK(got->envelope[2].size() == 0);
        check_same(got->tensors, sent);

        recv_options by_delimiter;
        by_delimiter.envelope = envelope_spec::delimited();
        REQUIRE(send_form(push, w, sent, sopt));
        got = recv_form(pull, w, by_delimiter);
        REQUIRE(got);
        CHECK(got->envelope.size() == 3);
        check_same(got->tensors, sent);
    }
}

TEST_CASE("an envelope the message cannot hold is refused and the next message is intact") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::vector<tensor> good = sample_tensors(1);

    recv_options five;
    five.envelope = envelope_spec::frames(5);
    REQUIRE(zsend_multipart(push, patterned(dtype::u1, {2})));  // 2 frames
    CHECK(error_class([&] { (void)zrecv(pull, five); }) == "odd_chunk_count");

    recv_options delimited;
    delimited.envelope = envelope_spec::delimited();
    // No empty frame anywhere (a zero-size tensor's data frame would be one).
    REQUIRE(zsend_multipart(push, std::vector<tensor>{patterned(dtype::f4, {3}), patterned(dtype::i1, {1})}));
    CHECK(error_class([&] { (void)zrecv(pull, delimited); }) == "odd_chunk_count");

    recv_options router;
    router.envelope = envelope_spec::router();
    REQUIRE(zsend_single(push, good));  // 1 frame: nothing after an identity
    CHECK(error_class([&] { (void)zrecv(pull, router); }) == "odd_chunk_count");

    REQUIRE(zsend_multipart(push, good));
    auto got = zrecv(pull);
    REQUIRE(got);
    check_same(got->tensors, good);
}

// ---- zero-copy lifetimes ----------------------------------------------------


TEST_CASE("zero-copy over inproc: the receiver sees the sender's memory, released once after both let go") {
    constexpr std::size_t n = 1 << 16;
    std::atomic<int> released{0};
    void* original = nullptr;
    std::optional<message> got;
    {
        pull_and_push linked(transport::inproc);
        zmq::socket_t &pull = linked.pull, &push = linked.push;
        zmq::context_t& ctx = linked.ctx;
        {
            tensor t = counted_tensor(n, released, &original);
            REQUIRE(zsend_multipart(push, t));
        }
        CHECK(released.load() == 0);  // ZeroMQ holds the frame
        got = zrecv(pull);
        REQUIRE(got);
        REQUIRE(got->tensors.size() == 1);
        CHECK(got->tensors[0].data().data() == static_cast<const std::byte*>(original));
        CHECK(released.load() == 0);  // the received tensor holds it now
        push.close();
        pull.close();
        ctx.close();
    }
    // The tensor outlives its socket and context.
    CHECK(released.load() == 0);
    CHECK(holds_pattern(got->tensors[0]));
    CHECK(got->tensors[0].values<float>().size() == n / 4);
    got.reset();
    CHECK(released.load() == 1);
    std::this_thread::sleep_for(20ms);  // no second release comes later
    CHECK(released.load() == 1);
}

TEST_CASE("zero-copy over tcp: released exactly once, after the frame went out") {
    constexpr std::size_t n = 1 << 20;
    std::atomic<int> released{0};
    void* original = nullptr;
    std::optional<message> got;
    {
        pull_and_push linked(transport::tcp);
        zmq::socket_t &pull = linked.pull, &push = linked.push;
        tensor t = counted_tensor(n, released, &original);
        REQUIRE(zsend_multipart(push, t));
        got = zrecv(pull);
        REQUIRE(got);
        CHECK(got->tensors.at(0).data().data() != static_cast<const std::byte*>(original));
        CHECK(released.load() == 0);  // `t` still holds it
        t = tensor();
        // ZeroMQ's I/O thread drops its reference once the frame is written.
        CHECK(eventually([&] { return released.load() == 1; }));
        push.close();
        pull.close();
    }
    CHECK(released.load() == 1);
    CHECK(holds_pattern(got->tensors.at(0)));
}

TEST_CASE("each received tensor keeps only its own frame: a kept small tensor does not pin a large one") {
    // One message: a large zero-copy frame, a 16-byte frame (stored inside
    // the zmq_msg_t), a copied 256-byte frame and a zero-copy 4 KiB frame.
    std::atomic<int> large_released{0}, medium_released{0};
    void* large_at = nullptr;
    void* medium_at = nullptr;
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const tensor tiny = tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f}, {4}, "tiny");
    std::vector<float> v(64);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
    const tensor small = tensor::from_vector(std::vector<float>(v), {64}, "small");
    {
        const std::vector<tensor> sent = {counted_tensor(1 << 20, large_released, &large_at), tiny, small,
                                          counted_tensor(1 << 12, medium_released, &medium_at)};
        REQUIRE(zsend_multipart(push, sent));
    }
    tensor kept_tiny, kept_small;
    {
        auto got = zrecv(pull);
        REQUIRE(got);
        REQUIRE(got->tensors.size() == 4);
        // Over inproc the zero-copy frames are the sender's memory.
        CHECK(got->tensors[0].data().data() == static_cast<const std::byte*>(large_at));
        CHECK(got->tensors[3].data().data() == static_cast<const std::byte*>(medium_at));
        kept_tiny = got->tensors[1];
        kept_small = got->tensors[2];
        CHECK(large_released.load() == 0);
        CHECK(medium_released.load() == 0);
    }
    // The message and its other tensors are gone: their frames are released
    // on this thread (inproc), although two small tensors of the same
    // message are still alive.
    CHECK(large_released.load() == 1);
    CHECK(medium_released.load() == 1);
    CHECK(kept_tiny.view() == tiny.view());
    CHECK(kept_small.view() == small.view());
    CHECK(kept_small.values<float>()[63] == 31.5f);
    kept_tiny = tensor();
    CHECK(kept_small.info() == "small");
    CHECK(kept_small.view() == small.view());
}

TEST_CASE_FIXTURE(pull_and_push, "receiving into a kept message reuses its list and drops what it held first") {
    std::atomic<int> first_released{0}, second_released{0};
    void* first_at = nullptr;
    void* second_at = nullptr;
    REQUIRE(zsend_multipart(push, counted_tensor(1 << 16, first_released, &first_at)));
    REQUIRE(zsend_multipart(push, counted_tensor(1 << 16, second_released, &second_at)));
    const std::vector<tensor> sample = sample_tensors(40);
    REQUIRE(zsend_single(push, sample));
    REQUIRE(zsend_multipart(push, sample));

    message into;
    REQUIRE(zrecv_multipart(pull, into));
    REQUIRE(into.tensors.size() == 1);
    CHECK(into.tensors[0].data().data() == static_cast<const std::byte*>(first_at));
    CHECK(holds_pattern(into.tensors[0]));
    const tensor* list = into.tensors.data();

    // The next receive drops the first message's tensor, so its frame goes
    // back to the sender, and reuses the list's storage.
    REQUIRE(zrecv(pull, into));
    CHECK(first_released.load() == 1);
    REQUIRE(into.tensors.size() == 1);
    CHECK(into.tensors.data() == list);
    CHECK(into.tensors[0].data().data() == static_cast<const std::byte*>(second_at));
    CHECK_FALSE(into.single);

    // A copy taken out keeps its frame past the next receive.
    const tensor kept = into.tensors[0];
    REQUIRE(zrecv_single(pull, into));
    CHECK(second_released.load() == 0);
    CHECK(into.single);
    check_same(into.tensors, sample);
    CHECK(holds_pattern(kept));

    REQUIRE(zrecv(pull, into));
    CHECK_FALSE(into.single);
    check_same(into.tensors, sample);

    // Nothing waiting: false, and the message is empty.
    recv_options now;
    now.flags = zmq::recv_flags::dontwait;
    CHECK_FALSE(zrecv(pull, into, now));
    CHECK(into.tensors.empty());
    CHECK_FALSE(zrecv_multipart(pull, into, now));
    CHECK_FALSE(zrecv_single(pull, into, now));
    CHECK(second_released.load() == 0);  // `kept` still holds it
}

TEST_CASE_FIXTURE(pull_and_push, "receiving into a kept message: errors leave it empty, envelopes arrive in it, the next message is intact") {
    const std::vector<tensor> good = sample_tensors(41);
    message into;
    REQUIRE(zsend_multipart(push, good));
    REQUIRE(zrecv(pull, into));
    REQUIRE_FALSE(into.tensors.empty());

    // A data frame shorter than its header says, after one good tensor:
    // the decoder fails part-way through the list.
    auto frames = frames_of(good);
    frames[3].pop_back();
    send_raw(push, frames);
    REQUIRE(zsend_multipart(push, good));
    CHECK(error_class([&] { (void)zrecv(pull, into); }) == "data_size_mismatch");
    CHECK(into.tensors.empty());
    REQUIRE(zrecv(pull, into));
    check_same(into.tensors, good);

    // The wrong form, refused.
    REQUIRE(zsend_multipart(push, good));
    CHECK(error_class([&] { (void)zrecv_single(pull, into); }) == "odd_chunk_count");
    CHECK(into.tensors.empty());

    // A malformed message behind an envelope: the error carries the
    // envelope, the message holds none of it.
    recv_options topic;
    topic.envelope = envelope_spec::topic();
    send_raw(push, {bytes_of("news"), bytes_of("garbage!"), bytes_of("x")});
    try {
        (void)zrecv(pull, into, topic);
        FAIL("no error");
    } catch (const malformed_message& e) {
        CHECK(e.envelope() == std::vector<std::string>{"news"});
    }
    CHECK(into.envelope.empty());
    CHECK(into.tensors.empty());

    // A good one behind the same envelope.
    const std::vector<zmq::const_buffer> news{zmq::const_buffer("news", 4)};
    send_options with_topic;
    with_topic.envelope = news;
    REQUIRE(zsend_multipart(push, good, with_topic));
    REQUIRE(zrecv(pull, into, topic));
    REQUIRE(into.envelope.size() == 1);
    CHECK(into.envelope[0].to_string() == "news");
    check_same(into.tensors, good);
    // The next message without one clears it.
    REQUIRE(zsend_multipart(push, good));
    REQUIRE(zrecv(pull, into));
    CHECK(into.envelope.empty());
}

TEST_CASE("the zero-copy frames of one message are released one by one") {
    std::atomic<int> a_released{0}, b_released{0};
    void* a_at = nullptr;
    void* b_at = nullptr;
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    {
        const std::vector<tensor> sent = {counted_tensor(1 << 14, a_released, &a_at),
                                          counted_tensor(1 << 16, b_released, &b_at)};
        REQUIRE(zsend_multipart(push, sent));
    }
    auto got = zrecv(pull);
    REQUIRE(got);
    REQUIRE(got->tensors.size() == 2);
    tensor b = got->tensors[1];
    got.reset();
    CHECK(a_released.load() == 1);  // its frame went with the message
    CHECK(b_released.load() == 0);
    CHECK(b.data().data() == static_cast<const std::byte*>(b_at));
    CHECK(holds_pattern(b));
    b = tensor();
    CHECK(b_released.load() == 1);
}

TEST_CASE("messages with more frames than fit inline: tensors, envelope and lifetimes") {
    for (transport tr : all_transports) {
        CAPTURE(transport_name(tr));
        pull_and_push linked(tr);
        zmq::socket_t &pull = linked.pull, &push = linked.push;
        std::atomic<int> released{0};
        void* at = nullptr;
        std::vector<tensor> sent;
        for (int i = 0; i < 37; ++i) {
            if (i == 20) {
                sent.push_back(counted_tensor(1 << 13, released, &at));
                continue;
            }
            std::vector<std::int32_t> v(static_cast<std::size_t>(i * 7 % 300));
            for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<std::int32_t>(j * 3 + static_cast<std::size_t>(i));
            const auto len = static_cast<std::int64_t>(v.size());
            sent.push_back(tensor::from_vector(std::move(v), {len}, numbered("t", i)));
        }
        const std::string topic = "topic";
        const zmq::const_buffer env[] = {zmq::const_buffer(topic.data(), topic.size())};
        send_options so;
        so.envelope = env;
        REQUIRE(zsend_multipart(push, sent, so));
        recv_options ro;
        ro.envelope = envelope_spec::topic();
        auto got = zrecv_multipart(pull, ro);
        REQUIRE(got);
        REQUIRE(got->envelope.size() == 1);
        CHECK(got->envelope[0].to_string() == topic);
        check_same(got->tensors, sent);
        const tensor last = got->tensors.back();
        got.reset();
        sent.clear();
        CHECK(eventually([&] { return released.load() == 1; }));
        CHECK(last.info() == "t36");
        CHECK(last.values<std::int32_t>()[5] == 5 * 3 + 36);
    }
}

TEST_CASE("copied sends hold no reference; unsent and undelivered zero-copy frames are released") {
    constexpr std::size_t n = 1 << 14;
    std::atomic<int> released{0};
    void* original = nullptr;
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    zmq::context_t& ctx = linked.ctx;

    SUBCASE("copy_threshold = SIZE_MAX copies") {
        send_options copy;
        copy.copy_threshold = SIZE_MAX;
        {
            tensor t = counted_tensor(n, released, &original);
            REQUIRE(zsend_multipart(push, t, copy));
        }
        CHECK(released.load() == 1);  // nothing else held it
        auto got = zrecv(pull);
        REQUIRE(got);
        CHECK(got->tensors.at(0).data().data() != static_cast<const std::byte*>(original));
        CHECK(holds_pattern(got->tensors.at(0)));
    }
    SUBCASE("by default, data under default_copy_threshold is copied and from it on handed over") {
        std::atomic<int> small_released{0};
        void* small_at = nullptr;
        {
            const std::vector<tensor> sent{counted_tensor(default_copy_threshold - 4, small_released, &small_at),
                                           counted_tensor(default_copy_threshold, released, &original)};
            REQUIRE(zsend_multipart(push, sent));
        }
        CHECK(small_released.load() == 1);  // copied: nothing else held it
        CHECK(released.load() == 0);        // ZeroMQ holds the frame
        auto got = zrecv(pull);
        REQUIRE(got);
        REQUIRE(got->tensors.size() == 2);
        CHECK(got->tensors[0].data().data() != static_cast<const std::byte*>(small_at));
        CHECK(got->tensors[1].data().data() == static_cast<const std::byte*>(original));
        CHECK(holds_pattern(got->tensors[0]));
        CHECK(holds_pattern(got->tensors[1]));
        got.reset();
        CHECK(released.load() == 1);
    }
    SUBCASE("single-part always copies") {
        {
            tensor t = counted_tensor(n, released, &original);
            REQUIRE(zsend_single(push, t));
        }
        CHECK(released.load() == 1);
        auto got = zrecv(pull);
        REQUIRE(got);
        CHECK(holds_pattern(got->tensors.at(0)));
    }
    SUBCASE("a message left in the queue is released when the sockets close") {
        {
            tensor t = counted_tensor(n, released, &original);
            REQUIRE(zsend_multipart(push, t));
        }
        CHECK(released.load() == 0);
        push.close();
        pull.close();
        ctx.close();
        CHECK(eventually([&] { return released.load() == 1; }));
    }
    SUBCASE("a message that could not be sent is released at once") {
        auto lonely = make_socket(ctx, zmq::socket_type::push);  // no peer
        {
            tensor t = counted_tensor(n, released, &original);
            send_options opt;
            opt.flags = zmq::send_flags::dontwait;
            CHECK_FALSE(zsend_multipart(lonely, t, opt));
        }
        CHECK(released.load() == 1);
    }
    CHECK(released.load() <= 1);
}

TEST_CASE("zero-copy sends from a thread that exits before ZeroMQ lets go of their frames") {
    // The sender's bookkeeping comes from a pool of its thread (11 tensors
    // fit one pooled block, 12 do not): it must outlive the thread until
    // the last frame is released, and then go.
    const std::size_t pools_before = detail::block_pool::live();
    std::atomic<int> released{0};
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    constexpr int messages = 40;
    std::size_t tensors_sent = 0;
    std::thread sender([&] {
        for (int m = 0; m < messages; ++m) {
            std::vector<tensor> list;
            const int count = m % 2 ? 3 : 12;
            void* where = nullptr;
            for (int k = 0; k < count; ++k) list.push_back(counted_tensor(4096, released, &where));
            REQUIRE(zsend_multipart(push, list));
            tensors_sent += list.size();
        }
    });
    sender.join();
    CHECK(released.load() == 0);  // every frame still queued
    std::vector<message> got;
    for (int m = 0; m < messages; ++m) {
        auto msg = zrecv(pull);
        REQUIRE(msg);
        REQUIRE(msg->tensors.size() == (m % 2 ? 3u : 12u));
        for (const tensor& t : msg->tensors) CHECK(holds_pattern(t));
        got.push_back(std::move(*msg));
    }
    CHECK(released.load() == 0);  // the received tensors hold them now
    CHECK(detail::block_pool::live() == pools_before + 1);  // the exited thread's
    got.clear();
    CHECK(released.load() == static_cast<int>(tensors_sent));
    CHECK(detail::block_pool::live() == pools_before);
}

TEST_CASE("borrowed bytes and views are copied, never handed to ZeroMQ") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    std::vector<float> values(4096, 1.5f);
    send_options zero;
    zero.copy_threshold = 0;

    {
        const tensor borrowed = tensor::borrow<float>(values, {4096}, "b");
        REQUIRE(zsend_multipart(push, borrowed, zero));
    }
    values.assign(values.size(), -1.0f);  // the sender may reuse its memory at once
    auto got = zrecv(pull);
    REQUIRE(got);
    CHECK(got->tensors.at(0).data().data() != reinterpret_cast<const std::byte*>(values.data()));
    CHECK(got->tensors.at(0).values<float>()[10] == 1.5f);

    const shape_t shape{4096};
    const tensor_view view{dtype::f4, shape, "v", std::as_bytes(std::span(values))};
    REQUIRE(zsend_multipart(push, std::vector<tensor_view>{view}, zero));
    values.assign(values.size(), 2.0f);
    got = zrecv(pull);
    REQUIRE(got);
    CHECK(got->tensors.at(0).values<float>()[0] == -1.0f);
}

// ---- alignment ----------------------------------------------------------------

TEST_CASE("frames at odd addresses are received as aligned copies") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::vector<tensor> sent{patterned(dtype::f8, {6}, "d", 3), patterned(dtype::i4, {9}, "i", 4),
                                   patterned(dtype::f2, {5}, "h", 5)};

    // Over inproc a message made with zmq_msg_init_data arrives at the very
    // address it was made with: put every frame at an odd one.
    SUBCASE("multipart") {
        const auto frames = frames_of(sent);
        std::vector<std::vector<std::byte>> storage;
        for (const auto& f : frames) {
            auto& s = storage.emplace_back(f.size() + 1);
            std::memcpy(s.data() + 1, f.data(), f.size());
        }
        for (std::size_t i = 0; i < storage.size(); ++i) {
            zmq::message_t m(storage[i].data() + 1, storage[i].size() - 1, nullptr);
            const auto flags = i + 1 < storage.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
            REQUIRE(push.send(m, flags));
        }
        auto got = zrecv(pull);
        REQUIRE(got);
        check_same(got->tensors, sent);
        // The frames were at odd addresses, so these are copies.
        for (std::size_t i = 0; i < got->tensors.size(); ++i)
            CHECK(got->tensors[i].data().data() != storage[2 * i + 1].data() + 1);
        CHECK(got->tensors[0].values<double>().size() == 6);
        CHECK(got->tensors[1].values<std::int32_t>().size() == 9);
        CHECK(got->tensors[2].values<float16>().size() == 5);
        // Copies or not, received tensors are read-only.
        for (const tensor& t : got->tensors) CHECK_FALSE(t.data().writable());
    }
    SUBCASE("single-part") {
        const buffer encoded = encode_buffer(sent);
        std::vector<std::byte> storage(encoded.size() + 1);
        std::memcpy(storage.data() + 1, encoded.data(), encoded.size());
        zmq::message_t m(storage.data() + 1, encoded.size(), nullptr);
        REQUIRE(push.send(m, zmq::send_flags::none));
        auto got = zrecv(pull);
        REQUIRE(got);
        CHECK(got->single);
        check_same(got->tensors, sent);
        CHECK(got->tensors[0].values<double>().size() == 6);
        CHECK(got->tensors[1].values<std::int32_t>().size() == 9);
    }
}

TEST_CASE("received tensors are read-only whatever their size, form and transport") {
    // Over tcp, frames under 8 KiB come inside libzmq's shared receive
    // batch, often unaligned, and are received as copies: those must not
    // be the only writable ones.
    for (const transport tr : {transport::inproc, transport::tcp}) {
        pull_and_push linked(tr);
        zmq::socket_t &pull = linked.pull, &push = linked.push;
        for (const std::int64_t n : {1, 100, 1000, 100000}) {
            for (const bool single : {false, true}) {
                CAPTURE(static_cast<int>(tr));
                CAPTURE(n);
                CAPTURE(single);
                const std::vector<tensor> sent{patterned(dtype::u1, {3}, "pad", 1), patterned(dtype::f4, {n}, "x", 2)};
                REQUIRE((single ? zsend_single(push, sent) : zsend_multipart(push, sent)));
                auto got = zrecv(pull);
                REQUIRE(got);
                check_same(got->tensors, sent);
                for (tensor& t : got->tensors) {
                    CHECK_FALSE(t.data().writable());
                    CHECK_FALSE(t.data().exclusive());
                }
            }
        }
    }
}

TEST_CASE("small frames at any offset of a tcp batch decode aligned and correct") {
    pull_and_push linked(transport::tcp);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    const std::vector<tensor> sent{patterned(dtype::f8, {5}, "d", 1), patterned(dtype::i8, {7}, "l", 2)};
    // Prefix frames of 1..16 bytes shift every later frame's offset in the
    // receive batch; send them all before receiving so they share batches.
    for (std::size_t k = 1; k <= 16; ++k) {
        std::vector<std::vector<std::byte>> frames{std::vector<std::byte>(k, std::byte{'x'})};
        for (auto& f : frames_of(sent)) frames.push_back(std::move(f));
        send_raw(push, frames);
    }
    recv_options ropt;
    ropt.envelope = envelope_spec::frames(1);
    for (std::size_t k = 1; k <= 16; ++k) {
        CAPTURE(k);
        auto got = zrecv_multipart(pull, ropt);
        REQUIRE(got);
        CHECK(got->envelope.at(0).size() == k);
        check_same(got->tensors, sent);
        CHECK(got->tensors[0].values<double>().size() == 5);
    }
}

// ---- malformed messages are drained ----------------------------------------

namespace {

struct bad_message {
    const char* what;
    std::vector<std::vector<std::byte>> frames;
    std::vector<std::string> errors;  // acceptable classes
    std::function<std::optional<message>(zmq::socket_ref)> receive;
};

}  // namespace

TEST_CASE("a malformed message is drained before its error is thrown; the next one arrives intact") {
    const std::vector<tensor> good = sample_tensors(21);
    const auto good_frames = frames_of(good);
    auto odd = good_frames;
    odd.pop_back();
    auto garbage_tail = good_frames;
    garbage_tail[2] = bytes_of("garbage!");
    const buffer encoded = encode_buffer(good);
    const auto plain = [](zmq::socket_ref s) { return zrecv(s); };
    recv_options few_frames;
    few_frames.max_frames = 4;
    recv_options one_tensor;
    one_tensor.decode.limits.max_tensors = 1;
    recv_options infos;
    infos.decode.expect_infos = std::vector<std::string>{"x", "y"};
    const std::vector<tensor> pair{patterned(dtype::u1, {1}, "x"), patterned(dtype::u1, {1}, "z")};

    const std::vector<bad_message> cases{
        {"odd frame count", odd, {"odd_chunk_count"}, plain},
        {"short data", {le64({str64("i4"), 0, 1, 10}), std::vector<std::byte>(36)}, {"data_size_mismatch"}, plain},
        {"long data", {le64({str64("i4"), 0, 1, 10}), std::vector<std::byte>(44)}, {"data_size_mismatch"}, plain},
        {"garbage header", garbage_tail, {"bad_header"}, plain},
        {"unknown dtype", {le64({str64("c8"), 0, 1, 2}), std::vector<std::byte>(16)}, {"unknown_dtype"}, plain},
        {"single-part garbage", {bytes_of("this is not a tenbin buffer at all....")}, {"bad_magic"}, plain},
        {"truncated single-part",
         {std::vector<std::byte>(encoded.bytes().begin(), encoded.bytes().end() - 20)},
         {"truncated", "length_beyond_end"},
         plain},
        {"multipart to zrecv_single", good_frames, {"odd_chunk_count"},
         [](zmq::socket_ref s) { return zrecv_single(s); }},
        {"single-part to zrecv_multipart", {bytes_of(encoded)}, {"odd_chunk_count"},
         [](zmq::socket_ref s) { return zrecv_multipart(s); }},
        {"more frames than max_frames", good_frames, {"limit_exceeded"},
         [&](zmq::socket_ref s) { return zrecv(s, few_frames); }},
        {"more tensors than max_tensors", good_frames, {"limit_exceeded"},
         [&](zmq::socket_ref s) { return zrecv(s, one_tensor); }},
        {"unexpected infos", frames_of(pair), {"info_mismatch"}, [&](zmq::socket_ref s) { return zrecv(s, infos); }},
    };

    for (transport t : {transport::inproc, transport::tcp}) {
        pull_and_push linked(t);
        zmq::socket_t &pull = linked.pull, &push = linked.push;
        for (const bad_message& c : cases) {
            CAPTURE(transport_name(t));
            CAPTURE(c.what);
            send_raw(push, c.frames);
            REQUIRE(zsend_multipart(push, good));
            REQUIRE(zsend_single(push, good));
            std::string message_text;
            std::string cls = "no error";
            try {
                (void)c.receive(pull);
            } catch (const error& e) {
                cls = std::string(name(e.code()));
                message_text = e.what();
            }
            CHECK(std::find(c.errors.begin(), c.errors.end(), cls) != c.errors.end());
            CHECK_FALSE(message_text.empty());
            auto next = zrecv(pull);
            REQUIRE(next);
            CHECK_FALSE(next->single);
            check_same(next->tensors, good);
            next = zrecv(pull);
            REQUIRE(next);
            CHECK(next->single);
            check_same(next->tensors, good);
        }
    }
}

TEST_CASE("error messages name the limit and the frames") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    recv_options few;
    few.max_frames = 3;
    REQUIRE(zsend_multipart(push, sample_tensors()));
    try {
        (void)zrecv(pull, few);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::limit_exceeded);
        CHECK(std::string(e.what()).find("max_frames = 3") != std::string::npos);
        CHECK(std::string(e.what()).find("24 frames") != std::string::npos);
    }
    send_raw(push, {le64({str64("i4"), 0, 1, 10}), std::vector<std::byte>(36)});
    try {
        (void)zrecv(pull);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::data_size_mismatch);
        CHECK(std::string(e.what()).find("multipart message of 2 tenbin frames") != std::string::npos);
        CHECK(std::string(e.what()).find("36") != std::string::npos);
    }
}

// ---- would-block, timeouts, refusals -------------------------------------------

TEST_CASE("an empty socket returns nothing with dontwait and after its receive timeout") {
    zmq::context_t ctx;
    auto pull = make_socket(ctx, zmq::socket_type::pull);
    pull.bind(bind_address(transport::inproc));
    recv_options now;
    now.flags = zmq::recv_flags::dontwait;
    CHECK_FALSE(zrecv(pull, now));
    CHECK_FALSE(zrecv_single(pull, now));
    CHECK_FALSE(zrecv_multipart(pull, now));

    pull.set(zmq::sockopt::rcvtimeo, 30);
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(zrecv(pull));
    CHECK(std::chrono::steady_clock::now() - start >= 25ms);
}

TEST_CASE("a PUSH with no peer or a full queue returns false and sends nothing") {
    zmq::context_t ctx;
    const std::vector<tensor> sent = sample_tensors(30);
    send_options now;
    now.flags = zmq::send_flags::dontwait;

    SUBCASE("no peer, dontwait") {
        auto push = make_socket(ctx, zmq::socket_type::push);
        CHECK_FALSE(zsend_multipart(push, sent, now));
        CHECK_FALSE(zsend_single(push, sent, now));
    }
    SUBCASE("no peer, send timeout") {
        auto push = make_socket(ctx, zmq::socket_type::push);
        push.set(zmq::sockopt::sndtimeo, 20);
        CHECK_FALSE(zsend_multipart(push, sent));
        CHECK_FALSE(zsend_single(push, sent));
    }
    SUBCASE("a peer that does not read: whole messages queue up to the mark") {
        auto pull = make_socket(ctx, zmq::socket_type::pull);
        auto push = make_socket(ctx, zmq::socket_type::push);
        pull.set(zmq::sockopt::rcvhwm, 2);
        push.set(zmq::sockopt::sndhwm, 2);
        link(pull, push, transport::inproc);
        int queued = 0;
        while (queued < 1000 && zsend_multipart(push, sent, now)) ++queued;
        CHECK(queued < 1000);
        CHECK(queued >= 2);
        CHECK_FALSE(zsend_single(push, sent, now));
        for (int i = 0; i < queued; ++i) {
            CAPTURE(i);
            auto got = zrecv(pull);
            REQUIRE(got);
            check_same(got->tensors, sent);
        }
        recv_options nothing;
        nothing.flags = zmq::recv_flags::dontwait;
        CHECK_FALSE(zrecv(pull, nothing));
    }
}

TEST_CASE("tensors the format or libzmq cannot carry are refused before anything is sent") {
    pull_and_push linked(transport::inproc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;
    recv_options now;
    now.flags = zmq::recv_flags::dontwait;
    std::atomic<int> released{0};
    void* original = nullptr;

    SUBCASE("an info of more than 8 characters") {
        const shape_t shape{2};
        const std::uint8_t bytes[2] = {1, 2};
        const tensor_view bad{dtype::u1, shape, "much-too-long", std::as_bytes(std::span(bytes))};
        {
            // A zero-copy frame built before the bad tensor is released too.
            const tensor first = counted_tensor(1 << 14, released, &original);
            const std::vector<tensor_view> list{first.view(), bad};
            CHECK(error_class([&] { (void)zsend_multipart(push, list); }) == "bad_argument");
            CHECK(error_class([&] { (void)zsend_single(push, list); }) == "bad_argument");
            const std::vector<tensor> owned_first{first};
            CHECK(error_class([&] {
                      (void)zsend_multipart(push, with_infos(owned_first, std::vector<std::string>{"123456789"}));
                  }) == "bad_argument");
        }
        CHECK(released.load() == 1);
    }
    SUBCASE("data that does not match the shape") {
        const shape_t shape{3};
        const std::uint8_t bytes[2] = {1, 2};
        const tensor_view bad{dtype::u2, shape, "", std::as_bytes(std::span(bytes))};
        CHECK(error_class([&] { (void)zsend_multipart(push, std::vector<tensor_view>{bad}); }) == "bad_argument");
        CHECK(error_class([&] { (void)zsend_single(push, std::vector<tensor_view>{bad}); }) == "bad_argument");
    }
    SUBCASE("a frame of 2^31 bytes") {
        // Address space only: the pages are never touched.
        constexpr std::size_t big = std::size_t{1} << 31;
        void* p = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        REQUIRE(p != MAP_FAILED);
        const shape_t shape{static_cast<std::int64_t>(big)};
        const tensor_view view{dtype::u1, shape, "big", {static_cast<const std::byte*>(p), big}};
        const tensor small = patterned(dtype::u1, {3});
        const std::vector<tensor_view> list{small.view(), view};
        CHECK(error_class([&] { (void)zsend_multipart(push, list); }) == "unsupported");
        CHECK(error_class([&] { (void)zsend_single(push, list); }) == "unsupported");
        {
            const tensor owned(dtype::u1, shape, buffer::adopt(p, big, [p] { ::munmap(p, big); }), "big");
            CHECK(error_class([&] { (void)zsend_multipart(push, owned); }) == "unsupported");
        }
        // Just under the limit is still too much for one single-part frame.
        const shape_t under{static_cast<std::int64_t>(max_frame_size - 100)};
        void* q = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        REQUIRE(q != MAP_FAILED);
        const tensor_view near{dtype::u1, under, "", {static_cast<const std::byte*>(q), max_frame_size - 100}};
        CHECK(error_class([&] { (void)zsend_single(push, std::vector<tensor_view>{near}); }) == "unsupported");
        ::munmap(q, big);
    }
    CHECK_FALSE(zrecv(pull, now));  // nothing went out
}

// ---- the Python vectors ---------------------------------------------------------

namespace {

void check_manifest_tensors(const std::vector<tensor>& got, const nlohmann::json& entry) {
    REQUIRE(got.size() == entry["ntensors"].get<std::size_t>());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        const auto& m = entry["tensors"][i];
        CHECK(got[i].info() == m["info"].get<std::string>());
        CHECK(code(got[i].dtype()) == m["dtype"].get<std::string>());
        CHECK(got[i].shape() == m["shape"].get<shape_t>());
        CHECK(got[i].nbytes() == m["nbytes"].get<std::size_t>());
    }
}

}  // namespace

TEST_CASE("the Python multipart vectors, sent frame by frame, decode as the manifest says") {
    const auto manifest = test_support::manifest();
    pull_and_push linked(transport::tcp);
    zmq::socket_t &pull = linked.pull, &push = linked.push;

    int valid = 0;
    for (const auto& entry : manifest["files"]) {
        if (entry["kind"] != "multipart") continue;
        CAPTURE(entry["path"].get<std::string>());
        const std::vector<buffer> frames = test_support::read_frames(entry);
        std::vector<std::vector<std::byte>> raw;
        for (const buffer& f : frames) raw.push_back(bytes_of(f));
        const std::vector<tensor> expected = decode_list(frames);

        send_raw(push, raw);
        auto got = zrecv(pull);
        REQUIRE(got);
        CHECK_FALSE(got->single);
        check_same(got->tensors, expected);
        check_manifest_tensors(got->tensors, entry);

        send_raw(push, raw);
        got = zrecv_multipart(pull);
        REQUIRE(got);
        check_same(got->tensors, expected);

        // And back: our multipart frames are the vector's frames.
        CHECK(frames_of(got->tensors) == raw);
        ++valid;
    }
    CHECK(valid >= 3);

    int malformed = 0;
    for (const auto& entry : manifest["malformed"]) {
        if (entry["kind"] != "multipart") continue;
        CAPTURE(entry["path"].get<std::string>());
        std::vector<std::vector<std::byte>> raw;
        for (const buffer& f : test_support::read_frames(entry)) raw.push_back(bytes_of(f));
        send_raw(push, raw);
        const auto allowed = test_support::allowed_errors(entry);
        const std::string cls = error_class([&] { (void)zrecv(pull); });
        CHECK(std::find(allowed.begin(), allowed.end(), cls) != allowed.end());
        ++malformed;
    }
    CHECK(malformed >= 2);
    recv_options now;
    now.flags = zmq::recv_flags::dontwait;
    CHECK_FALSE(zrecv(pull, now));  // every frame was consumed
}

TEST_CASE("the Python buffers and .ten files, sent as one frame, decode single-part") {
    const auto manifest = test_support::manifest();
    pull_and_push linked(transport::ipc);
    zmq::socket_t &pull = linked.pull, &push = linked.push;

    int valid = 0;
    for (const auto& entry : manifest["files"]) {
        if (entry["kind"] != "buffer" && entry["kind"] != "ten") continue;
        CAPTURE(entry["path"].get<std::string>());
        const buffer file = test_support::read_file(test_support::vectors_dir() / entry["path"].get<std::string>());
        send_raw(push, {bytes_of(file)});
        auto got = zrecv(pull);
        REQUIRE(got);
        CHECK(got->single);
        check_same(got->tensors, decode_buffer(file));
        check_manifest_tensors(got->tensors, entry);
        ++valid;
    }
    CHECK(valid >= 4);

    int malformed = 0;
    for (const auto& entry : manifest["malformed"]) {
        if (entry["kind"] != "buffer" && entry["kind"] != "ten") continue;
        CAPTURE(entry["path"].get<std::string>());
        const buffer file = test_support::read_file(test_support::vectors_dir() / entry["path"].get<std::string>());
        send_raw(push, {bytes_of(file)});
        const auto allowed = test_support::allowed_errors(entry);
        const std::string cls = error_class([&] { (void)zrecv_single(pull); });
        CHECK(std::find(allowed.begin(), allowed.end(), cls) != allowed.end());
        ++malformed;
    }
    CHECK(malformed >= 5);
}

// ---- stream positions --------------------------------------------------------

TEST_CASE("a position frame travels after the tenbin frames in both forms, behind an envelope too") {
    router_and_dealer linked;
    pull_and_push plain(transport::inproc);
    stream_position p;
    p.producer = "p1";
    p.epoch = 2;
    p.seq = 5;
    const std::vector<tensor> batch = sample_tensors(3);
    for (wire w : both_forms) {
        CAPTURE(w == wire::single);
        send_options so;
        so.position = &p;
        REQUIRE(send_form(plain.push, w, batch, so));
        auto got = recv_form(plain.pull, w);
        REQUIRE(got);
        check_same(got->tensors, batch);
        REQUIRE(got->position);
        CHECK(*got->position == p);

        // The frames on the wire: the tensors', then the position's.
        REQUIRE(send_form(plain.push, w, batch, so));
        std::vector<zmq::message_t> raw;
        REQUIRE(zmq::recv_multipart(plain.pull, std::back_inserter(raw)));
        if (w == wire::multipart) {
            REQUIRE(raw.size() == 2 * batch.size() + 1);
            CHECK(decode_position({raw.back().data<std::byte>(), raw.back().size()}) == p);
        } else {
            REQUIRE(raw.size() == 1);
        }

        // An end mark has no tensors.
        stream_position end = p;
        end.kind = stream_position::mark::epoch_end;
        so.position = &end;
        REQUIRE(send_form(plain.push, w, std::vector<tensor>{}, so));
        got = zrecv(plain.pull);
        REQUIRE(got);
        CHECK(got->tensors.empty());
        REQUIRE(got->position);
        CHECK(got->position->kind == stream_position::mark::epoch_end);

        // Unnumbered messages carry none.
        REQUIRE(send_form(plain.push, w, batch));
        got = zrecv(plain.pull);
        REQUIRE(got);
        CHECK_FALSE(got->position);

        // An end mark behind a ROUTER's identity: its empty frame is the
        // empty list, not a REQ's delimiter.
        so.position = &end;
        REQUIRE(send_form(linked.dealer, w, std::vector<tensor>{}, so));
        recv_options routed;
        routed.envelope = envelope_spec::router();
        got = zrecv(linked.router, routed);
        REQUIRE(got);
        CHECK(got->envelope.size() == 1);
        CHECK(got->tensors.empty());
        REQUIRE(got->position);
        CHECK(got->position->kind == stream_position::mark::epoch_end);

        // Behind a ROUTER's identity.
        so.position = &p;
        REQUIRE(send_form(linked.dealer, w, batch, so));
        recv_options ro;
        ro.envelope = envelope_spec::router();
        got = zrecv(linked.router, ro);
        REQUIRE(got);
        CHECK(got->envelope.size() == 1);
        check_same(got->tensors, batch);
        REQUIRE(got->position);
        CHECK(got->position->seq == 5);
    }
}
