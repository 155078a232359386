// Acknowledged delivery: the control messages' bytes and their checks, and
// producers and consumers in one process (the process tests, with kills,
// are in test_delivery_processes.cpp).
#include "support.hpp"

#include "connect/delivery_protocol.hpp"
#include "transport/frames.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

using namespace tenbin;
using namespace std::chrono_literals;
using detail::batch_id;
using detail::control;
using detail::control_type;
using test_support::error_text;

namespace {

tensor batch_of(std::int32_t v) { return tensor::from_vector(std::vector<std::int32_t>{v, v, v}, {3}, "x"); }
std::int32_t value_of(const std::vector<tensor>& b) { return b.at(0).values<std::int32_t>()[0]; }

connection_options acked(std::chrono::milliseconds heartbeat = 100ms) {
    connection_options o;
    o.acked = true;
    o.ack_heartbeat = heartbeat;
    o.recv_timeout = 5s;
    o.send_timeout = 5s;
    o.linger = 2s;
    return o;
}

}  // namespace

TEST_CASE("control messages read back as written; malformed ones are typed errors") {
    control h;
    h.type = control_type::hello;
    h.role = detail::peer_role::consumer;
    h.answer = true;
    h.window = 16;
    h.incarnation = 77;
    h.name = "trainer-3";
    h.taken["shard"] = producer_state{2, 10, {12, 15}, false};
    const std::vector<std::byte> f = detail::encode_control(h);
    CHECK(detail::is_control_frame(f));
    const control back = detail::decode_control(f);
    CHECK(back.name == "trainer-3");
    CHECK(back.window == 16);
    CHECK(back.answer);
    CHECK(back.taken.at("shard") == h.taken.at("shard"));

    control a;
    a.type = control_type::ack;
    a.acks = {{0, 1}, {0, 2}, {3, 4}};
    CHECK(detail::decode_control(detail::encode_control(a)).acks == a.acks);
    // How long the user held them rides in the header's two reserved bytes:
    // an earlier build's ack (zeros there) reads as not said, and other
    // types leave them zero.
    CHECK(detail::decode_control(detail::encode_control(a)).held_us == 0);
    a.held_us = 1234;
    std::vector<std::byte> held = detail::encode_control(a);
    CHECK(std::to_integer<int>(held[10]) == (1234 & 0xff));
    CHECK(std::to_integer<int>(held[11]) == (1234 >> 8));
    CHECK(detail::decode_control(held).held_us == 1234);
    CHECK(std::to_integer<int>(f[10]) == 0);
    CHECK(std::to_integer<int>(f[11]) == 0);
    control beat;
    beat.type = control_type::heartbeat;
    beat.tally = 12;
    CHECK(detail::decode_control(detail::encode_control(beat)).tally == 12);
    // The sender's heartbeat interval rides in the header; 0 when not said.
    CHECK(detail::decode_control(detail::encode_control(beat, 250)).heartbeat_ms == 250);
    CHECK(back.heartbeat_ms == 0);
    h.reports_taken = true;
    CHECK(detail::decode_control(detail::encode_control(h)).reports_taken);
    CHECK(!back.reports_taken);

    // Every prefix of a valid message is refused, never read past.
    for (std::size_t n = 0; n < f.size(); ++n)
        CHECK(error_text([&] { (void)detail::decode_control(std::span(f).first(n)); }) != "no error");
    std::vector<std::byte> longer = f;
    longer.push_back(std::byte{0});
    CHECK(error_text([&] { (void)detail::decode_control(longer); }) ==
          "bad_header: control message: 1 bytes past its end");
    // A count larger than the frame can hold is refused before allocating.
    std::vector<std::byte> many = detail::encode_control(a);
    many[16] = std::byte{0xff};
    many[17] = std::byte{0x0f};
    CHECK(error_text([&] { (void)detail::decode_control(many); }).rfind("bad_header: control message ends inside acks", 0) == 0);
    many[18] = std::byte{0xff};
    CHECK(error_text([&] { (void)detail::decode_control(many); }).rfind("limit_exceeded: control message:", 0) == 0);
    std::vector<std::byte> odd = f;
    odd[9] = std::byte{9};
    CHECK(error_text([&] { (void)detail::decode_control(odd); }) == "bad_header: control message: unknown type 9");
    odd = f;
    odd[8] = std::byte{2};
    CHECK(error_text([&] { (void)detail::decode_control(odd); }).rfind("unsupported: control message version 2", 0) == 0);
}

TEST_CASE("packs read back as written, without a copy; malformed ones are typed errors") {
    control h;
    h.type = control_type::hello;
    h.name = "c";
    h.packs = true;
    CHECK(detail::decode_control(detail::encode_control(h)).packs);
    h.packs = false;
    CHECK(!detail::decode_control(detail::encode_control(h)).packs);

    detail::pack_writer w;
    for (std::int32_t k = 0; k < 3; ++k) {
        stream_position p;
        p.producer = "shard-7";
        p.epoch = 2;
        p.seq = static_cast<std::uint64_t>(k);
        w.append(std::vector<tensor>(static_cast<std::size_t>(k), batch_of(k)), p);  // 0, 1 and 2 tensors
    }
    CHECK(w.count() == 3);
    const buffer pack = buffer::copy(w.frame());
    CHECK(detail::is_pack_frame(pack.bytes()));
    CHECK(!detail::is_control_frame(pack.bytes()));
    std::vector<detail::pack_entry> got;
    detail::read_pack(pack, {}, [&](detail::pack_entry&& e) { got.push_back(std::move(e)); });
    REQUIRE(got.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
        CHECK(!got[k].fault);
        REQUIRE(got[k].position);
        CHECK(got[k].position->producer == "shard-7");
        CHECK(got[k].position->seq == k);
        REQUIRE(got[k].tensors.size() == k);
        for (const tensor& t : got[k].tensors) {
            CHECK(value_of({t}) == static_cast<std::int32_t>(k));
            CHECK(t.data().data() >= pack.data());  // a view of the frame
            CHECK(t.data().data() < pack.data() + pack.size());
        }
    }
    const auto read = [](const std::vector<std::byte>& f) {
        return error_text([&] { detail::read_pack(buffer::copy(f), {}, [](detail::pack_entry&&) {}); });
    };
    const std::vector<std::byte> f(pack.data(), pack.data() + pack.size());
    // Every prefix is refused or reads fewer batches, never past its end.
    for (std::size_t n = 0; n < f.size(); ++n) CHECK(read(std::vector(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n))) != "no error");
    std::vector<std::byte> bad = f;
    bad.push_back(std::byte{0});
    CHECK(read(bad) == "bad_header: pack: 1 bytes past its batches");
    bad = f;
    bad[12] = bad[13] = bad[14] = std::byte{0xff};  // a count beyond the bound
    CHECK(read(bad).rfind("limit_exceeded: a pack of", 0) == 0);
    bad = f;
    bad[16 + 7] = std::byte{0x7f};  // the first batch's size, hostile
    CHECK(read(bad).rfind("truncated: pack batch 0 claims", 0) == 0);
    bad = f;
    bad[8] = std::byte{2};
    CHECK(read(bad).rfind("unsupported: pack version 2", 0) == 0);
    // A batch that does not decode is reported and the next ones are read.
    bad = f;
    bad[16 + 16] = std::byte{'X'};  // the first batch's first chunk's magic
    int faults = 0, fine = 0;
    detail::read_pack(buffer::copy(bad), {}, [&](detail::pack_entry&& e) { ++(e.fault ? faults : fine); });
    CHECK(faults == 1);
    CHECK(fine == 2);
}

// A consumer speaking the protocol on a DEALER: what the producer sends it.
struct raw_consumer {
    zmq::socket_t s;
    std::vector<std::int32_t> values;  // of the batches, in the order they came
    int packs = 0, singles = 0;

    // `unconfirmed`: it says it acknowledges as batches are taken (on_take).
    raw_consumer(zmq::context_t& ctx, const std::string& at, bool takes_packs, std::uint32_t window,
                 bool unconfirmed = false) {
        s = zmq::socket_t(ctx, zmq::socket_type::dealer);
        s.set(zmq::sockopt::linger, 0);
        s.connect(at);
        control hello;
        hello.type = control_type::hello;
        hello.window = window;
        hello.name = "raw";
        hello.incarnation = 1;
        hello.packs = takes_packs;
        hello.unconfirmed = unconfirmed;
        say(hello);
    }
    void say(const control& c) {
        const std::vector<std::byte> frame = detail::encode_control(c);
        REQUIRE(s.send(zmq::const_buffer(frame.data(), frame.size())));
    }
    void heartbeat() {
        control c;
        c.type = control_type::heartbeat;
        c.incarnation = 1;
        say(c);
    }
    // Reads until `n` batches came, or nothing for `wait`, with a heartbeat
    // every 50 ms meanwhile (it lives while it reads).
    void read(std::size_t n, std::chrono::milliseconds wait) {
        s.set(zmq::sockopt::rcvtimeo, 50);
        for (auto quiet_since = std::chrono::steady_clock::now(); values.size() < n;) {
            heartbeat();
            std::vector<zmq::message_t> frames;
            zmq::message_t f;
            if (!s.recv(f)) {
                if (std::chrono::steady_clock::now() - quiet_since > wait) return;
                continue;
            }
            quiet_since = std::chrono::steady_clock::now();
            frames.push_back(std::move(f));
            while (frames.back().more()) {
                REQUIRE(s.recv(f));  // the rest of a message is there with its first frame
                frames.push_back(std::move(f));
            }
            const bytes_view first(frames[0].data<std::byte>(), frames[0].size());
            if (frames.size() == 1 && detail::is_control_frame(first)) continue;
            if (frames.size() == 1 && detail::is_pack_frame(first)) {
                ++packs;
                detail::read_pack(buffer::copy(first), {}, [&](detail::pack_entry&& e) {
                    REQUIRE(!e.fault);
                    values.push_back(value_of(e.tensors));
                });
                continue;
            }
            ++singles;
            std::vector<buffer> list;
            for (std::size_t i = 0; i + 1 < frames.size(); ++i)
                list.push_back(buffer::copy({frames[i].data<std::byte>(), frames[i].size()}));
            values.push_back(value_of(decode_list(list)));
        }
    }
};

TEST_CASE("acked: small batches to a consumer with a backlog go in packs, each once and in order; only to one that takes them") {
    bool takes = true;
    SUBCASE("a consumer that takes packs") {}
    SUBCASE("one that does not say so (an earlier version)") { takes = false; }
    connection producer("zrpush://127.0.0.1:*", acked(1s));
    zmq::context_t ctx;
    raw_consumer c(ctx, producer.endpoints().at(0).address, takes, 64);
    REQUIRE(test_support::eventually([&] { return producer.consumers().size() == 1; }));
    // It acknowledges nothing: the first two go one by one, the rest (it has
    // batches in hand) in packs as large as what it had when each began,
    // the last sent as the window fills. (The producer hands out nothing in
    // its first two heartbeats: the consumer reads, and so lives, meanwhile.)
    std::thread sender([&] {
        for (std::int32_t k = 0; k < 64; ++k) CHECK(producer.send(batch_of(k)));
    });
    c.read(64, 3s);
    sender.join();
    std::vector<std::int32_t> all(64);
    std::iota(all.begin(), all.end(), 0);
    CHECK(c.values == all);
    CHECK(producer.consumers().at(0).in_flight == 64);
    if (takes) {
        CHECK(c.singles == 2);
        CHECK(c.packs >= 5);  // 2, 4, 8, 16 and 32 batches (more when a pack waited past pack_wait)
    } else {
        CHECK(c.singles == 64);
        CHECK(c.packs == 0);
    }
}

TEST_CASE("acked: a producer shares its batches among consumers with credit, each batch once, and ends their streams") {
    connection producer("zrpush://127.0.0.1:*", acked());
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    std::mutex m;
    std::multiset<std::int32_t> got;
    std::vector<std::thread> consumers;
    std::atomic<int> ended{0};
    for (int c = 0; c < 3; ++c)
        consumers.emplace_back([&, c] {
            connection_options o = acked();
            o.name = "consumer-" + std::to_string(c);
            o.credit = 4;
            connection rx(at, o);
            while (!rx.stream_ended()) {
                for (auto& b : rx) {
                    std::lock_guard lock(m);
                    got.insert(value_of(b));
                }
                if (!rx.epoch_ended() && !rx.stream_ended()) break;  // timed out
            }
            ended += rx.stream_ended() ? 1 : 0;

        });
    for (std::int32_t k = 0; k < 60; ++k) REQUIRE(producer.send(batch_of(k)));
    REQUIRE(producer.end_epoch());
    for (std::int32_t k = 60; k < 90; ++k) REQUIRE(producer.send(batch_of(k)));
    REQUIRE(producer.end_stream());
    for (auto& t : consumers) t.join();
    CHECK(ended == 3);
    CHECK(got.size() == 90);
    CHECK(std::set<std::int32_t>(got.begin(), got.end()).size() == 90);
    const delivery_counters d = producer.delivery_stats();
    CHECK(d.sent == 90);
    CHECK(d.acknowledged == 90);
    CHECK(d.redelivered == 0);
}

// The stream's end stops a consumer: while another holds batches that may
// still come back (it may die with them), it waits.
TEST_CASE("acked: a consumer's stream ends once no batch another holds can come back to it") {
    connection producer("zrpush://127.0.0.1:*", acked(200ms));
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    zmq::context_t ctx;
    // A raw consumer given batches 0 and 1, which it holds unacknowledged.
    const auto holding_two = [&](bool unconfirmed) {
        auto c = std::make_unique<raw_consumer>(ctx, producer.endpoints().at(0).address, false, 2, unconfirmed);
        REQUIRE(test_support::eventually([&] { return producer.consumers().size() == 1; }));
        for (std::int32_t k = 0; k < 2; ++k) REQUIRE(producer.send(batch_of(k)));
        c->read(2, 2s);
        REQUIRE(c->values.size() == 2);
        return c;
    };
    const auto send_the_rest_and_end = [&] {
        for (std::int32_t k = 2; k < 10; ++k) REQUIRE(producer.send(batch_of(k)));
        REQUIRE(producer.end_stream());
    };
    SUBCASE("an on_take consumer's batches, until it acknowledges them or dies") {
        auto other = holding_two(true);
        connection_options o = acked(200ms);
        o.recv_timeout = 100ms;
        connection rx(at, o);
        send_the_rest_and_end();
        std::multiset<std::int32_t> got;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (got.size() < 8 && std::chrono::steady_clock::now() < deadline && !rx.stream_ended()) {
            other->heartbeat();  // alive
            if (auto b = rx.recv()) got.insert(value_of(*b));
        }
        REQUIRE(got.size() == 8);
        for (int i = 0; i < 5; ++i) {  // a second: still alive, it may yet die with 0 and 1
            other->heartbeat();
            CHECK(!rx.recv());
            CHECK(!rx.stream_ended());
        }
        other.reset();  // dies (its connection drops, no goodbye)
        for (int i = 0; i < 50 && !rx.stream_ended(); ++i)
            for (auto& b : rx) got.insert(value_of(b));
        CHECK(rx.stream_ended());
        CHECK(got == std::multiset<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
        CHECK(test_support::eventually([&] { return producer.delivery_stats().acknowledged == 10; }));
        CHECK(producer.delivery_stats().redelivered == 2);
    }
    SUBCASE("an on_release consumer's, until its user took them: it holds them then, and may wait for the end") {
        connection_options o = acked(200ms);
        o.recv_timeout = 100ms;
        o.credit = 2;
        connection a(at, o);
        REQUIRE(test_support::eventually([&] { return producer.consumers().size() == 1; }));
        for (std::int32_t k = 0; k < 2; ++k) REQUIRE(producer.send(batch_of(k)));
        REQUIRE(test_support::eventually([&] { return producer.consumers().at(0).in_flight == 2; }));
        o.credit = 16;
        connection b(at, o);
        REQUIRE(test_support::eventually([&] { return producer.consumers().size() == 2; }));
        send_the_rest_and_end();
        std::multiset<std::int32_t> got;
        for (int i = 0; i < 50 && got.size() < 8; ++i)
            if (auto x = b.recv()) got.insert(value_of(*x));
        REQUIRE(got == std::multiset<std::int32_t>{2, 3, 4, 5, 6, 7, 8, 9});
        for (int i = 0; i < 5; ++i) {  // a second: `a` has not taken 0 and 1, and may die with them
            CHECK(!b.recv());
            CHECK(!b.stream_ended());
        }
        const auto first = a.recv(), second = a.recv();  // held from here on
        REQUIRE(first);
        REQUIRE(second);
        CHECK(value_of(*first) + value_of(*second) == 1);
        for (int i = 0; i < 50 && !b.stream_ended(); ++i) CHECK(!b.recv());
        CHECK(b.stream_ended());
        for (int i = 0; i < 50 && !a.stream_ended(); ++i) CHECK(!a.recv());
        CHECK(a.stream_ended());
        CHECK(producer.delivery_stats().redelivered == 0);
    }
    SUBCASE("one of an earlier version (it does not say what it took), until it was heard after the end") {
        auto other = holding_two(false);
        std::multiset<std::int32_t> got;
        {
            connection rx(at, acked(200ms));
            send_the_rest_and_end();
            std::atomic<bool> done{false};
            std::thread alive([&] {
                while (!done) {
                    other->heartbeat();
                    std::this_thread::sleep_for(50ms);
                }
            });
            for (int i = 0; i < 3 && !rx.stream_ended(); ++i)
                for (auto& b : rx) got.insert(value_of(b));
            done = true;
            alive.join();
            CHECK(rx.stream_ended());
        }
        CHECK(got == std::multiset<std::int32_t>{2, 3, 4, 5, 6, 7, 8, 9});
        // It dies after all: once it is found dead, what it held goes to the next consumer.
        other.reset();
        REQUIRE(test_support::eventually([&] { return producer.consumers().empty(); }));
        connection late(at, acked(200ms));
        for (int i = 0; i < 3 && !late.stream_ended(); ++i)
            for (auto& b : late) got.insert(value_of(b));
        CHECK(late.stream_ended());
        CHECK(got == std::multiset<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
        CHECK(test_support::eventually([&] { return producer.delivery_stats().acknowledged == 10; }));
    }
}

TEST_CASE("acked: on_take acknowledges a batch as it is taken, on_release once it is let go") {
    connection producer("zrpush://127.0.0.1:*", acked());
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    // Whether the producer heard `n` acknowledgements within a few seconds.
    const auto acknowledged = [&](std::uint64_t n) {
        for (int i = 0; i < 500 && producer.delivery_stats().acknowledged < n; ++i) std::this_thread::sleep_for(10ms);
        return producer.delivery_stats().acknowledged == n;
    };
    for (std::int32_t k = 0; k < 2; ++k) REQUIRE(producer.send(batch_of(k)));
    SUBCASE("on_take") {
        connection_options o = acked();
        o.ack = ack_mode::on_take;
        connection rx(at, o);
        const auto held = rx.recv();  // kept, and no other receive: taking it is what acknowledges it
        REQUIRE(held);
        CHECK(acknowledged(1));
    }
    SUBCASE("on_release") {
        connection rx(at, acked());
        auto held = rx.recv();
        REQUIRE(held);
        std::this_thread::sleep_for(300ms);
        CHECK(producer.delivery_stats().acknowledged == 0);  // still held
        held.reset();
        CHECK(acknowledged(1));
    }
}

TEST_CASE("acked: a producer lets go of a batch's bytes once it is acknowledged, small or large") {
    // The producer recycles the lists that held acknowledged batches: they
    // must not hold the user's bytes (a pool block, a mapped file) meanwhile.
    std::size_t elements = 16;
    SUBCASE("small batches (sent on the user's thread)") {}
    SUBCASE("large ones (sent by the producer's thread)") { elements = 64 * 1024; }
    connection producer("zrpush://127.0.0.1:*", acked());
    connection_options o = acked();
    o.ack = ack_mode::on_take;
    connection rx("zrpull://" + producer.endpoints().at(0).address.substr(6), o);
    std::vector<std::weak_ptr<const void>> keepers;
    std::thread sender([&] {
        for (int k = 0; k < 40; ++k) {
            auto bytes = std::make_shared<std::vector<std::int32_t>>(elements, k);
            keepers.emplace_back(bytes);
            const buffer b = buffer::share(bytes, {reinterpret_cast<std::byte*>(bytes->data()), elements * 4});
            CHECK(producer.send(tensor(dtype::i4, {static_cast<std::int64_t>(elements)}, b, "x")));
        }
    });
    for (int k = 0; k < 40; ++k) {
        const auto got = rx.recv();
        REQUIRE(got);
        CHECK(value_of(*got) == k);
    }
    sender.join();
    REQUIRE(test_support::eventually([&] { return producer.delivery_stats().acknowledged == 40; }));
    CHECK(std::all_of(keepers.begin(), keepers.end(), [](const auto& w) { return w.expired(); }));
}

TEST_CASE("acked: on_release with credit 1: a loop that keeps its batch while it asks for the next gets them all") {
    connection producer("zrpush://127.0.0.1:*", acked());
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    connection_options o = acked();
    o.credit = 1;  // taken as 2: with one, the kept batch would hold the only credit
    connection rx(at, o);
    std::atomic<bool> sent{true};
    std::thread feed([&] {
        for (std::int32_t k = 0; k < 30; ++k) sent = sent && producer.send(batch_of(k));
        sent = sent && producer.end_stream();
    });
    std::vector<std::int32_t> got;
    std::optional<std::vector<tensor>> kept;  // as Python's for loop keeps it
    while (auto b = rx.recv()) {  // before: the first, then a 5 s timeout
        got.push_back(value_of(*b));
        kept = std::move(b);
    }
    kept.reset();
    feed.join();
    CHECK(sent);
    CHECK(rx.stream_ended());
    std::vector<std::int32_t> all(30);
    std::iota(all.begin(), all.end(), 0);
    CHECK(got == all);
    // The last, let go after the loop, on the consumer thread's next turn.
    CHECK(test_support::eventually([&] { return producer.delivery_stats().acknowledged == 30; }));
}

TEST_CASE("acked: a loader's release_last acknowledges the batch its thread still holds, once; the tensors stay valid") {
    connection producer("zrpush://127.0.0.1:*", acked());
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    for (std::int32_t k = 0; k < 3; ++k) REQUIRE(producer.send(batch_of(k)));
    const auto acknowledged = [&] { return producer.delivery_stats().acknowledged; };
    loader_options lo;
    lo.connection = acked();
    loader l(at, lo);
    auto first = l.next();
    REQUIRE(first);
    std::this_thread::sleep_for(300ms);
    CHECK(acknowledged() == 0);  // held
    std::thread([&] { l.release_last(); }).join();  // that thread took nothing
    std::this_thread::sleep_for(300ms);
    CHECK(acknowledged() == 0);
    l.release_last();
    CHECK(test_support::eventually([&] { return acknowledged() == 1; }));
    CHECK(value_of(*first) == 0);  // its bytes are its own
    l.release_last();  // nothing more to acknowledge
    auto second = l.next();
    REQUIRE(second);
    CHECK(value_of(*second) == 1);
    first.reset();  // acknowledged already: sends nothing
    std::this_thread::sleep_for(300ms);
    CHECK(acknowledged() == 1);
    second.reset();
    CHECK(test_support::eventually([&] { return acknowledged() == 2; }));
    CHECK(producer.delivery_stats().bad_acks == 0);
}

TEST_CASE("acked: idle consumers with the same credit take turns") {
    // Each batch went to the consumer with the most credit, a tie to the
    // first by routing id: with batches slower than their acks, one
    // consumer got nearly all, whichever its random routing id made first.
    connection producer("zrpush://127.0.0.1:*", acked());
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    std::array<std::atomic<int>, 2> got{};
    std::vector<std::thread> consumers;
    for (std::size_t c = 0; c < got.size(); ++c)
        consumers.emplace_back([&, c] {
            connection rx(at, acked());
            while (!rx.stream_ended()) {
                if (rx.recv()) ++got[c];
                else if (!rx.stream_ended()) break;  // timed out
            }
        });
    REQUIRE(producer.send(batch_of(0)));  // once both said hello (the producer waits two heartbeats)
    for (std::int32_t k = 1; k < 40; ++k) {
        std::this_thread::sleep_for(10ms);  // each taken and acknowledged before the next
        REQUIRE(producer.send(batch_of(k)));
    }
    REQUIRE(producer.end_stream());
    for (auto& t : consumers) t.join();
    CHECK(got[0].load() + got[1].load() == 40);
    CHECK(got[0].load() >= 10);
    CHECK(got[1].load() >= 10);
}

TEST_CASE("acked: a producer with wait_for hands out its first batch once those consumers came, to each of them") {
    // Without wait_for it hands out nothing for two heartbeats (10 s here),
    // then everything to whoever came first.
    connection_options po = acked(5s);
    po.wait_for = 2;
    po.wait_for_names = {"second"};
    connection producer("zrpush://127.0.0.1:*", po);
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    for (std::int32_t k = 0; k < 4; ++k) REQUIRE(producer.send(batch_of(k)));  // queued: nobody came yet
    connection_options o = acked(5s);
    o.recv_timeout = 3s;
    o.name = "first";
    connection first(at, o);
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(first.try_recv());  // one of two came: nothing yet
    o.name = "second";
    connection second(at, o);
    const auto a = first.recv(), b = second.recv();
    REQUIRE(a);
    REQUIRE(b);
    CHECK(value_of(*a) != value_of(*b));
}

TEST_CASE("acked: each end judges the other by the longer of their heartbeats: a mismatch loses no one") {
    // Judged by its own interval, an end took a peer that beats less often
    // for dead (or gone) between that peer's beats.
    std::chrono::milliseconds producer_beat = 100ms, consumer_beat = 100ms;
    SUBCASE("the consumer beats less often") { consumer_beat = 400ms; }
    SUBCASE("the producer beats less often") { producer_beat = 400ms; }
    connection producer("zrpush://127.0.0.1:*", acked(producer_beat));
    const std::string at = "zrpull://" + producer.endpoints().at(0).address.substr(6);
    connection rx(at, acked(consumer_beat));
    REQUIRE(producer.send(batch_of(1)));
    CHECK(rx.recv());
    std::this_thread::sleep_for(2s);  // only heartbeats meanwhile
    REQUIRE(producer.send(batch_of(2)));
    const auto b = rx.recv();
    REQUIRE(b);
    CHECK(value_of(*b) == 2);
    CHECK(producer.delivery_stats().consumers_lost == 0);
    CHECK(rx.delivery_stats().producers_lost == 0);
}

TEST_CASE("acked: an end mark or a confirmation that finds the consumer's queue full goes later, never lost") {
    // Queues of one message and batches of 4 MiB: the producer's queue
    // towards the consumer is full whenever the consumer lags.
    connection_options po = acked(1s);
    po.send_hwm = 1;
    connection producer("zrpush://127.0.0.1:*", po);
    connection_options co = acked(1s);
    co.recv_hwm = 1;
    co.recv_timeout = 10s;
    connection rx("zrpull://" + producer.endpoints().at(0).address.substr(6), co);
    const std::vector<std::int32_t> big(std::size_t{1} << 20, 7);
    constexpr int count = 6;
    for (int k = 0; k < count; ++k) REQUIRE(producer.send(tensor::from_vector(std::vector(big), {1 << 20})));
    REQUIRE(producer.end_epoch());
    REQUIRE(producer.end_stream());
    std::this_thread::sleep_for(300ms);  // the producer hands out what it can, then finds the queue full
    int got = 0;
    for (auto& b : rx) {
        CHECK(b.at(0).nbytes() == big.size() * 4);
        ++got;
    }
    CHECK(got == count);
    CHECK(rx.epoch_ended());
    CHECK(!rx.recv());  // the stream's end, the next mark
    CHECK(rx.stream_ended());
    CHECK(producer.delivery_stats().redelivered == 0);
}

TEST_CASE("acked: a consumer whose queue is full lives on when another's connection drops") {
    // Consumer A (a DEALER speaking the protocol) asks for 64 batches of
    // 1 MiB and reads none: the producer's queue towards it stays full.
    // Consumer B's connection then drops without a word, and the producer
    // probes every consumer: A's full queue is no refusal. Were A taken
    // for dead, the batches it holds would go to another consumer too.
    connection_options po = acked(200ms);
    po.send_hwm = 1;
    po.send_timeout = 100ms;
    connection producer("zrpush://127.0.0.1:*", po);
    const std::string at = producer.endpoints().at(0).address;
    zmq::context_t ctx;
    auto consumer = [&](const char* name, std::uint32_t window) {
        zmq::socket_t s(ctx, zmq::socket_type::dealer);
        s.set(zmq::sockopt::rcvhwm, 1);
        s.set(zmq::sockopt::linger, 0);
        s.connect(at);
        control hello;
        hello.type = control_type::hello;
        hello.window = window;
        hello.name = name;
        hello.incarnation = 1;
        const std::vector<std::byte> frame = detail::encode_control(hello);
        REQUIRE(s.send(zmq::const_buffer(frame.data(), frame.size())));
        return s;
    };
    zmq::socket_t a = consumer("A", 64);
    // A's heartbeats, from now on and however slow the machine: A lives.
    std::atomic<bool> done{false};
    std::thread beating([&] {
        control h;
        h.type = control_type::heartbeat;
        h.incarnation = 1;
        const std::vector<std::byte> frame = detail::encode_control(h);
        while (!done) {
            (void)a.send(zmq::const_buffer(frame.data(), frame.size()), zmq::send_flags::dontwait);
            std::this_thread::sleep_for(20ms);
        }
    });
    const auto until = [](auto&& ok) { return test_support::eventually(ok, 10s); };
    // The producer gives A what fits, finds its queue full, and keeps the
    // rest until its own inbox is full too: then a send times out.
    const std::vector<std::int32_t> big(std::size_t{1} << 18, 7);
    int sent = 0;
    while (sent < 64 && producer.send(tensor::from_vector(std::vector(big), {1 << 18}))) ++sent;
    CHECK(sent < 64);
    auto in_flight_to_a = [&] {
        const std::vector<consumer_info> c = producer.consumers();
        return c.size() == 1 ? c[0].in_flight : 0;
    };
    CHECK(until([&] { return in_flight_to_a() > 0; }));
    std::this_thread::sleep_for(50ms);  // what fits is on its way, the rest waits
    CHECK(in_flight_to_a() < static_cast<std::size_t>(sent));
    std::optional<zmq::socket_t> b = consumer("B", 1);
    CHECK(until([&] { return producer.consumers().size() == 2; }));
    b.reset();  // linger 0: the connection drops, no goodbye
    // B is lost by the probes, which go on for a heartbeat after the drop.
    CHECK(until([&] { return producer.delivery_stats().consumers_lost >= 1; }));
    std::this_thread::sleep_for(po.ack_heartbeat);
    done = true;
    beating.join();
    const std::vector<consumer_info> left = producer.consumers();
    REQUIRE(left.size() == 1);
    CHECK(left[0].name == "A");
    CHECK(left[0].in_flight > 0);
    const delivery_counters d = producer.delivery_stats();
    CHECK(d.consumers_lost == 1);  // B only
    CHECK(d.redelivered == 0);
}

TEST_CASE("acked: a consumer whose user held its batch a while gets its confirmation first, the next large batch a moment after") {
    // A consumer (a DEALER speaking the protocol, window 4) has its 4
    // batches; its ack of one says its user held it 5 ms (a trainer's
    // step). The producer confirms at once and sends the fifth only its
    // settle (400 us) later: that batch's transfer would take the cores
    // the consumer needs to see the confirmation.
    connection_options po = acked(200ms);
    po.wait_for = 1;
    connection producer("zrpush://127.0.0.1:*", po);
    zmq::context_t ctx;
    zmq::socket_t a(ctx, zmq::socket_type::dealer);
    a.set(zmq::sockopt::linger, 0);
    a.connect(producer.endpoints().at(0).address);
    auto say = [&](const control& c) {
        const std::vector<std::byte> frame = detail::encode_control(c);
        REQUIRE(a.send(zmq::const_buffer(frame.data(), frame.size())));
    };
    control hello;
    hello.type = control_type::hello;
    hello.window = 4;
    hello.name = "trainer";
    hello.incarnation = 1;
    say(hello);
    const std::vector<std::int32_t> big(std::size_t{1} << 16, 7);  // 256 KiB: sent by the producer's thread
    for (int i = 0; i < 5; ++i) REQUIRE(producer.send(tensor::from_vector(std::vector(big), {1 << 16})));
    a.set(zmq::sockopt::rcvtimeo, 5000);
    // The next batch's id, or the next confirmation's count (heartbeats are passed over).
    struct got {
        std::optional<detail::batch_id> batch;
        std::optional<std::uint64_t> confirmed;
    };
    auto next = [&] {
        for (;;) {
            recv_options ro;
            message m;
            std::vector<zmq::message_t> body;
            REQUIRE(detail::zrecv_frames(a, ro, m, body));
            if (body.size() == 1 && detail::is_control_frame({body[0].data<std::byte>(), body[0].size()})) {
                const control c = detail::decode_control({body[0].data<std::byte>(), body[0].size()});
                if (c.type == control_type::confirm) return got{std::nullopt, c.confirmed};
                continue;
            }
            REQUIRE(m.position);
            return got{detail::batch_id{m.position->epoch, m.position->seq}, std::nullopt};
        }
    };
    std::vector<detail::batch_id> held;
    while (held.size() < 4) {
        const got g = next();
        REQUIRE(g.batch);
        held.push_back(*g.batch);
    }
    control ack;
    ack.type = control_type::ack;
    ack.acks = {held[0]};
    ack.held_us = 5000;
    const auto acked_at = std::chrono::steady_clock::now();
    say(ack);
    const got first = next();
    CHECK(first.confirmed == std::optional<std::uint64_t>(1));
    const got fifth = next();
    const auto after = std::chrono::steady_clock::now() - acked_at;
    REQUIRE(fifth.batch);
    CHECK(std::find(held.begin(), held.end(), *fifth.batch) == held.end());
    CHECK(after >= 400us);  // a lower bound: a busy machine only makes it later
    CHECK(producer.delivery_stats().bad_acks == 0);
}

TEST_CASE("acked: a consumer's ack says how long its user held the batch (on_release), nothing with on_take") {
    // The producer is a ROUTER speaking the protocol: it answers the
    // consumer's hello, sends one numbered batch and reads the ack.
    for (const ack_mode mode : {ack_mode::on_release, ack_mode::on_take}) {
        CAPTURE(static_cast<int>(mode));
        zmq::context_t ctx;
        zmq::socket_t p(ctx, zmq::socket_type::router);
        p.set(zmq::sockopt::linger, 0);
        p.set(zmq::sockopt::rcvtimeo, 5000);
        p.bind("tcp://127.0.0.1:*");
        const std::string at = p.get(zmq::sockopt::last_endpoint);
        connection_options co = acked();
        co.ack = mode;
        connection consumer("zrpull://" + at.substr(6), co);
        // Its next control message (the routing id kept for the answer).
        std::string rid;
        auto next = [&] {
            for (;;) {
                zmq::message_t id, body;
                REQUIRE(p.recv(id));
                REQUIRE(p.recv(body));
                rid = id.to_string();
                const control c = detail::decode_control({body.data<std::byte>(), body.size()});
                if (c.type != control_type::heartbeat) return c;
            }
        };
        REQUIRE(next().type == control_type::hello);
        control hello;
        hello.type = control_type::hello;
        hello.role = detail::peer_role::producer;
        hello.incarnation = 1;
        hello.name = "p";
        const std::vector<std::byte> frame = detail::encode_control(hello);
        REQUIRE(p.send(zmq::buffer(rid), zmq::send_flags::sndmore));
        REQUIRE(p.send(zmq::const_buffer(frame.data(), frame.size())));
        stream_position pos;
        pos.producer = "p";
        pos.incarnation = 1;
        send_options so;
        const zmq::const_buffer to(rid.data(), rid.size());
        so.envelope = {&to, 1};
        so.position = &pos;
        REQUIRE(zsend_multipart(p, std::vector{tensor::from_vector(std::vector<std::int32_t>{1, 2, 3})}, so));
        {
            std::optional<std::vector<tensor>> batch = consumer.recv();
            REQUIRE(batch);
            std::this_thread::sleep_for(5ms);
        }
        const control ack = next();
        REQUIRE(ack.type == control_type::ack);
        CHECK(ack.acks == std::vector<detail::batch_id>{{0, 0}});
        if (mode == ack_mode::on_release) {
            CHECK(ack.held_us >= 5000);
        } else {
            CHECK(ack.held_us == 0);  // acknowledged as taken: nothing held
        }
    }
}

TEST_CASE("acked: a producer that connects to consumers that bind says hello first") {
    std::vector<std::unique_ptr<connection>> rx;
    std::string ports;
    for (int c = 0; c < 2; ++c) {
        connection_options o = acked();
        o.name = "bound-" + std::to_string(c);
        rx.push_back(std::make_unique<connection>("zpull://127.0.0.1:*", o));
        const std::string& a = rx.back()->endpoints().at(0).address;
        ports += (c ? "," : "") + a.substr(a.rfind(':') + 1);
    }
    std::mutex m;
    std::multiset<std::int32_t> got;
    std::vector<std::thread> consumers;
    for (auto& r : rx)
        consumers.emplace_back([&, c = r.get()] {
            while (!c->stream_ended()) {
                for (auto& b : *c) {
                    std::lock_guard lock(m);
                    got.insert(value_of(b));
                }
                if (!c->epoch_ended() && !c->stream_ended()) break;  // timed out
            }
        });
    connection producer("zpush://127.0.0.1:{" + ports + "}", acked());
    for (std::int32_t k = 0; k < 20; ++k) REQUIRE(producer.send(batch_of(k)));
    REQUIRE(producer.end_stream());
    for (auto& t : consumers) t.join();
    CHECK(got.size() == 20);
    CHECK(std::set<std::int32_t>(got.begin(), got.end()).size() == 20);
    CHECK(producer.consumers().size() == 2);
}

// ---- publishing to a known audience -------------------------------------------

namespace {

connection_options pub_options() {
    connection_options o;
    o.producer = "pub";
    o.send_timeout = 10s;
    o.linger = 1s;
    return o;
}

connection_options sub_options(const std::string& name = {}) {
    connection_options o;
    o.recv_timeout = 5s;
    o.name = name;
    return o;
}

}  // namespace

TEST_CASE("a publisher with wait_for waits for its subscribers: each late one gets the first batch") {
    connection_options po = pub_options();
    po.wait_for = 3;
    po.wait_for_names = {"alice"};
    connection pub("zpub://127.0.0.1:*", po);
    const std::string at = "zsub://" + pub.endpoints().at(0).address.substr(6);
    std::thread publisher([&] {
        for (std::int32_t k = 0; k < 3; ++k) CHECK(pub.send(batch_of(k)));
    });
    std::vector<connection> subs;
    for (const char* name : {"bob", "", "alice"}) {
        std::this_thread::sleep_for(200ms);  // late, one after the other
        subs.emplace_back(at, sub_options(name));
    }
    for (connection& s : subs) {
        const auto first = s.recv();
        REQUIRE(first);
        CHECK(value_of(*first) == 0);
    }
    publisher.join();
    CHECK(pub.subscribers() == 3);
    const std::vector<std::string> names = pub.subscriber_names();
    CHECK(names == std::vector<std::string>{"alice", "bob"});
    subs.pop_back();  // alice leaves
    for (int i = 0; i < 100 && pub.subscriber_names() != std::vector<std::string>{"bob"}; ++i)
        std::this_thread::sleep_for(20ms);
    CHECK(pub.subscriber_names() == std::vector<std::string>{"bob"});
    CHECK(pub.subscribers() == 2);

    connection_options never = pub_options();
    never.wait_for = 1;
    never.send_timeout = 200ms;
    connection alone("zpub://127.0.0.1:*", never);
    CHECK_FALSE(alone.send(batch_of(1)));  // nobody came within the send timeout
}

TEST_CASE("a late subscriber gets the current epoch's start (replay_window); those that had it drop it") {
    connection_options po = pub_options();
    po.replay_window = 16;
    connection pub("zpub://127.0.0.1:*", po);
    const std::string at = "zsub://" + pub.endpoints().at(0).address.substr(6);
    connection early(at, sub_options());
    std::this_thread::sleep_for(300ms);  // its subscription arrives
    for (std::int32_t k = 0; k < 5; ++k) REQUIRE(pub.send(batch_of(k)));
    connection late(at, sub_options());
    std::this_thread::sleep_for(300ms);
    REQUIRE(pub.send(batch_of(5)));
    REQUIRE(pub.end_epoch());
    for (connection* s : {&early, &late}) {
        std::vector<std::int32_t> got;
        for (auto& b : *s) got.push_back(value_of(b));
        CHECK(got == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
        CHECK(s->epoch_ended());
    }
    CHECK(early.stream_stats().duplicates == 5);
    CHECK(late.stream_stats().duplicates == 0);
}

TEST_CASE("a slow subscriber: dropped batches are counted as gaps on its side; with pub_nodrop none is dropped") {
    for (const bool nodrop : {false, true}) {
        CAPTURE(nodrop);
        connection_options po = pub_options();
        po.send_hwm = 2;
        po.pub_nodrop = nodrop;
        connection pub("zpub://127.0.0.1:*", po);
        connection_options so = sub_options();
        so.recv_hwm = 2;
        so.recv_timeout = 2s;
        connection sub("zsub://" + pub.endpoints().at(0).address.substr(6), so);
        std::this_thread::sleep_for(300ms);
        std::atomic<int> sent{0};
        std::atomic<bool> ended{false};
        std::thread publisher([&] {
            for (std::int32_t k = 0; k < 300; ++k) {
                CHECK(pub.send(batch_of(k)));
                ++sent;
            }
            CHECK(pub.end_epoch());
            // The end mark may be dropped as the batches were; the next
            // epoch's batches tell how many this one had.
            while (!ended) {
                std::this_thread::sleep_for(50ms);
                CHECK(pub.send(batch_of(1000)));
            }
        });
        if (!nodrop) {
            while (sent < 300) std::this_thread::sleep_for(10ms);  // it reads nothing meanwhile
        }
        std::size_t got = 0;
        for (auto& b : sub) {
            (void)b;
            ++got;
            if (nodrop) std::this_thread::sleep_for(1ms);  // slow, and the publisher waits for it
        }
        ended = true;
        publisher.join();
        CHECK(sub.epoch_ended());
        if (nodrop) {
            CHECK(got == 300);
            CHECK(sub.stream_stats().gaps == 0);
        } else {
            CHECK(got < 300);
            CHECK(got + sub.stream_stats().gaps == 300);
        }
    }
}
