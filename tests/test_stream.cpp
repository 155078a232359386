// The consumer's side of numbered streams, driven through made-up time:
// epochs from several producers, gaps, duplicates, the timeout rule, late
// batches, resuming from a state, and sharding for distributed training.
#include "support.hpp"

#include "connect/stream_tracker.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace tenbin;
using namespace std::chrono_literals;
using detail::stream_event;
using detail::stream_tracker;
using detail::tracked;
using test_support::error_text;

namespace {

using clock_type = stream_tracker::clock;

// A tracker and a made-up clock, and what it gave as text: "a0.3" is
// producer a's batch 3 of epoch 0, "|0" the end of the consumer's epoch 0,
// "$" the end of the stream, "-" an unnumbered message.
struct consumer {
    stream_tracker tracker;
    clock_type::time_point now = clock_type::time_point{} + 1000s;
    std::vector<std::string> seen;
    std::vector<stream_position> given;  // positions given, in order

    explicit consumer(stream_options opt = {}, std::size_t hold = 64) : tracker(opt, hold, 1u << 30) {}

    void take(std::vector<stream_event>& out) {
        for (stream_event& e : out) {
            switch (e.what) {
            case stream_event::kind::message:
                if (!e.message.position) {
                    seen.push_back("-");
                    break;
                }
                seen.push_back(e.message.position->producer + std::to_string(e.message.position->epoch) + "." +
                               std::to_string(e.message.position->seq));
                given.push_back(*e.message.position);
                break;
            case stream_event::kind::epoch_end: seen.push_back("|" + std::to_string(e.epoch)); break;
            case stream_event::kind::stream_end: seen.push_back("$"); break;
            }
        }
        out.clear();
    }
    void batch(const std::string& producer, std::uint64_t epoch, std::uint64_t seq) {
        send(producer, epoch, seq, stream_position::mark::batch);
    }
    void end(const std::string& producer, std::uint64_t epoch, std::uint64_t count,
             stream_position::mark m = stream_position::mark::epoch_end) {
        send(producer, epoch, count, m);
    }
    void send(const std::string& producer, std::uint64_t epoch, std::uint64_t seq, stream_position::mark m) {
        tracked t;
        t.position = stream_position{producer, 1, epoch, seq, m, 0};
        t.bytes = 100;
        std::vector<stream_event> out;
        // A connection tries the shortcut first, then the general path.
        if (in_order_first && tracker.take_in_order(*t.position, now))
            out.push_back({stream_event::kind::message, std::move(t), 0});
        else
            tracker.add(std::move(t), now, out);
        take(out);
    }
    bool in_order_first = false;
    void wait(std::chrono::milliseconds d) {
        now += d;
        std::vector<stream_event> out;
        tracker.tick(now, out);
        take(out);
    }
    std::string text() const {
        std::string s;
        for (const auto& x : seen) s += (s.empty() ? "" : " ") + x;
        return s;
    }
};

}  // namespace

TEST_CASE("one producer: its batches in order, an epoch's end, the stream's end") {
    consumer c;
    for (std::uint64_t s = 0; s < 3; ++s) c.batch("a", 0, s);
    c.end("a", 0, 3);
    c.batch("a", 1, 0);
    c.end("a", 1, 1, stream_position::mark::stream_end);
    CHECK(c.text() == "a0.0 a0.1 a0.2 |0 a1.0 |1 $");
    CHECK(c.tracker.finished());
    CHECK(c.tracker.counters().epochs == 2);
    CHECK(c.tracker.counters().gaps == 0);
    // Unnumbered messages are given as they come.
    consumer plain;
    std::vector<stream_event> out;
    plain.tracker.add(tracked{}, plain.now, out);
    plain.take(out);
    CHECK(plain.text() == "-");
}

TEST_CASE("gaps are counted at an epoch's end, duplicates dropped and counted") {
    consumer c;
    c.batch("a", 0, 0);
    c.batch("a", 0, 2);
    c.batch("a", 0, 2);
    c.batch("a", 0, 0);
    c.end("a", 0, 5);
    CHECK(c.text() == "a0.0 a0.2 |0");
    CHECK(c.tracker.counters().duplicates == 2);
    CHECK(c.tracker.counters().gaps == 3);
    // A replay of the ended epoch is duplicates; its end mark is ignored.
    c.batch("a", 0, 2);
    c.end("a", 0, 5);
    CHECK(c.tracker.counters().duplicates == 3);
    CHECK(c.tracker.counters().epochs == 1);
    // One counted missing that comes after all (a redelivery) is given, late.
    c.batch("a", 0, 1);
    CHECK(c.tracker.counters().late == 1);
    CHECK(c.tracker.counters().gaps == 2);
    CHECK(c.text() == "a0.0 a0.2 |0 a0.1");
    // A producer that joins mid-epoch missed what came before: a gap.
    c.batch("b", 1, 10);
    c.end("b", 1, 11);
    c.batch("a", 1, 0);
    c.end("a", 1, 1);
    CHECK(c.tracker.counters().gaps == 2 + 10);
}

TEST_CASE("fan-in: the epoch ends when every producer in it ended it; later batches wait for their epoch") {
    consumer c;
    c.batch("a", 0, 0);
    c.batch("b", 0, 0);
    c.end("a", 0, 1);
    c.batch("a", 1, 0);  // a is ahead: kept for epoch 1
    CHECK(c.tracker.held_messages() == 1);
    c.batch("b", 0, 1);
    CHECK(c.text() == "a0.0 b0.0 b0.1");
    c.end("b", 0, 2);
    CHECK(c.text() == "a0.0 b0.0 b0.1 |0 a1.0");
    CHECK(c.tracker.epoch() == 1);
    CHECK(c.tracker.held_messages() == 0);
    // A producer's batch of a later epoch ends its earlier one too.
    c.batch("b", 2, 0);
    c.end("a", 1, 1);
    CHECK(c.text() == "a0.0 b0.0 b0.1 |0 a1.0 |1 b2.0");
}

TEST_CASE("a producer silent past the timeout is waited for no longer; its late batches still come") {
    stream_options o;
    o.epoch_timeout = 5s;
    consumer c(o);
    c.batch("a", 0, 0);
    c.batch("b", 0, 0);
    c.batch("c", 0, 0);
    c.end("a", 0, 1);
    c.end("b", 0, 1);
    c.wait(3s);
    CHECK(c.text() == "a0.0 b0.0 c0.0");  // c may still be coming
    CHECK(c.tracker.deadline() == c.now + 2s);
    c.wait(2s);
    CHECK(c.text() == "a0.0 b0.0 c0.0 |0");
    CHECK(c.tracker.counters().producers_timed_out == 1);
    c.batch("c", 0, 1);  // it was alive after all
    CHECK(c.tracker.counters().late == 1);
    CHECK(c.text() == "a0.0 b0.0 c0.0 |0 c0.1");
    // Its next epoch counts as usual.
    c.batch("a", 1, 0);
    c.end("a", 1, 1);
    c.end("b", 1, 0);
    c.end("c", 0, 2);
    c.batch("c", 1, 0);
    c.end("c", 1, 1);
    CHECK(c.text() == "a0.0 b0.0 c0.0 |0 c0.1 a1.0 c1.0 |1");
    // Too much kept back for a later epoch ends the current one too.
    consumer small(o, 2);
    small.batch("a", 0, 0);
    small.batch("b", 0, 0);
    for (std::uint64_t s = 0; s < 3; ++s) small.batch("a", 1, s);
    CHECK(small.text() == "a0.0 b0.0 |0 a1.0 a1.1 a1.2");
    CHECK(small.tracker.counters().producers_timed_out == 1);
}

TEST_CASE("a finished producer and a silent one: the stream ends at the timeout; a hostile epoch costs no loop") {
    stream_options o;
    o.epoch_timeout = 5s;
    consumer c(o);
    c.batch("a", 0, 0);
    c.batch("b", 0, 0);
    c.end("a", 0, 1, stream_position::mark::stream_end);
    c.wait(5s);  // b died: its epoch ends without it, and so does the stream
    CHECK(c.text() == "a0.0 b0.0 |0 $");
    CHECK(c.tracker.counters().producers_timed_out == 1);
    c.batch("b", 1, 0);  // after the end: dropped and counted, never held
    CHECK(c.text() == "a0.0 b0.0 |0 $");
    CHECK(c.tracker.counters().after_end == 1);
    CHECK(c.tracker.held_messages() == 0);
    // An epoch number far ahead, with a silent producer beside it: its
    // epochs are reached at once (a loop per epoch would never end).
    consumer far(o);
    far.batch("a", 0, 0);
    far.batch("b", 0, 0);
    far.end("a", 0, 1);
    far.batch("a", std::uint64_t{1} << 62, 0);
    far.wait(5s);  // then every producer silent: that epoch ends too
    const std::string e = std::to_string(std::uint64_t{1} << 62);
    CHECK(far.text() == "a0.0 b0.0 |0 a" + e + ".0 |" + e);
}

TEST_CASE("producers not known yet: their late batches come in the next epoch, or are waited for when expected") {
    consumer c;
    c.batch("a", 0, 0);
    c.end("a", 0, 1);
    c.batch("b", 0, 0);  // b's first message, after a ended the only epoch known
    CHECK(c.text() == "a0.0 |0 b0.0");
    CHECK(c.tracker.counters().late == 1);

    stream_options o;
    o.expect_producers = 2;
    o.epoch_timeout = 5s;
    consumer waits(o);
    waits.batch("a", 0, 0);
    waits.end("a", 0, 1);
    waits.wait(1s);
    waits.batch("b", 0, 0);
    waits.end("b", 0, 1);
    CHECK(waits.text() == "a0.0 b0.0 |0");
    // One that never comes is waited for epoch_timeout from the first end.
    consumer never(o);
    never.batch("a", 0, 0);
    never.end("a", 0, 1);
    never.wait(4s);
    CHECK(never.text() == "a0.0");
    never.wait(1s);
    CHECK(never.text() == "a0.0 |0");
    CHECK(never.tracker.counters().producers_timed_out == 1);
}

TEST_CASE("lost end marks: every producer silent ends the epoch; the next epoch's batch tells the gaps") {
    stream_options o;
    o.epoch_timeout = 5s;
    consumer c(o);
    c.batch("a", 0, 0);
    c.batch("a", 0, 1);
    c.wait(4s);
    CHECK(c.text() == "a0.0 a0.1");
    c.wait(1s);
    CHECK(c.text() == "a0.0 a0.1 |0");
    CHECK(c.tracker.counters().producers_timed_out == 1);
    // Its epoch 1 ends unseen too; epoch 2's first batch says epoch 1 had 6.
    c.batch("a", 1, 0);
    c.batch("a", 1, 4);
    tracked t;
    t.position = stream_position{"a", 1, 2, 0, stream_position::mark::batch, 0, 6};
    std::vector<stream_event> out;
    c.tracker.add(std::move(t), c.now, out);
    c.take(out);
    CHECK(c.text() == "a0.0 a0.1 |0 a1.0 a1.4 |1 a2.0");
    CHECK(c.tracker.counters().gaps == 4);  // 1, 2, 3 and 5
}

TEST_CASE("a consumer that starts after the producers' first epochs begins where they are") {
    consumer c;
    c.batch("a", 3, 0);
    c.batch("a", 3, 1);
    CHECK(c.text() == "a3.0 a3.1");
    CHECK(c.tracker.epoch() == 3);
    CHECK(c.tracker.counters().epochs == 0);
}

TEST_CASE("the in-order shortcut gives and counts exactly what the general path does") {
    // Random fan-ins of three producers (mostly in order; skips, repeats,
    // late fills,
    // end marks, silences past the timeout, epochs ahead, restarts from the
    // state): a tracker that
    // takes each batch through take_in_order() when it can and one that
    // never does agree on everything, event by event.
    for (const std::size_t world : {std::size_t{1}, std::size_t{2}})
        for (std::uint64_t seed = 1; seed <= 40; ++seed) {
            CAPTURE(seed);
            CAPTURE(world);
            stream_options opt;
            opt.epoch_timeout = 50ms;
            opt.world_size = world;
            consumer general(opt, 8), shortcut(opt, 8);
            shortcut.in_order_first = true;
            std::mt19937_64 rng(seed);
            const std::string names[] = {"a", "b", "c"};
            std::uint64_t epoch[3] = {0, 0, 0}, seq[3] = {0, 0, 0};
            for (int step = 0; step < 400; ++step) {
                const std::size_t i = rng() % 3;
                const unsigned r = static_cast<unsigned>(rng() % 100);
                std::uint64_t e = epoch[i], s = seq[i];
                auto m = stream_position::mark::batch;
                if (r < 62) {
                    ++seq[i];  // in order
                } else if (r < 70) {
                    // Anywhere near: an epoch before, this one or the next.
                    e = epoch[i] + rng() % 3;
                    e = e > 0 ? e - 1 : 0;
                    s = rng() % (seq[i] + 3);
                } else if (r < 76) {
                    s = seq[i] + 1;  // one skipped (for now)
                    seq[i] += 2;
                } else if (r < 82) {
                    s = rng() % (seq[i] + 1);  // a repeat, or one skipped before
                } else if (r < 88) {
                    m = stream_position::mark::epoch_end;
                    ++epoch[i];
                    seq[i] = 0;
                } else if (r < 94) {
                    e = ++epoch[i];  // its end mark lost
                    s = 0;
                    seq[i] = 1;
                } else if (r < 94) {
                    // A restart from the state (as a resumed consumer's).
                    const stream_state st = general.tracker.state(general.tracker.epoch(), {});
                    for (consumer* c : {&general, &shortcut}) {
                        std::vector<stream_event> out;
                        c->tracker.load(st, c->now, out);
                        c->take(out);
                    }
                    continue;
                } else {
                    for (consumer* c : {&general, &shortcut}) c->wait(r < 97 ? 10ms : 60ms);
                    continue;
                }
                for (consumer* c : {&general, &shortcut}) {
                    c->now += 1ms;
                    c->send(names[i], e, s, m);
                }
                REQUIRE(shortcut.text() == general.text());
                const stream_counters& x = shortcut.tracker.counters();
                const stream_counters& y = general.tracker.counters();
                REQUIRE(std::tie(x.gaps, x.duplicates, x.late, x.epochs, x.producers_timed_out, x.dropped_remainder,
                                 x.padded, x.after_end) == std::tie(y.gaps, y.duplicates, y.late, y.epochs,
                                                                    y.producers_timed_out, y.dropped_remainder,
                                                                    y.padded, y.after_end));
                REQUIRE(shortcut.tracker.deadline() == general.tracker.deadline());
                REQUIRE(shortcut.tracker.state(0, {}) == general.tracker.state(0, {}));
            }
        }
}

TEST_CASE("the tracker's cheap clock is the steady clock, at most a few ticks behind") {
    // A producer's last-heard time is read from it and compared with the
    // steady clock's deadlines: another clock (realtime, say) would end
    // epochs at once or never.
    const auto before = clock_type::now();
    const auto coarse = stream_tracker::coarse_now();
    const auto after = clock_type::now();
    CHECK(coarse <= after);
    CHECK(before - coarse < std::chrono::milliseconds(50));
}

TEST_CASE("the state leaves out what was given but not taken; resuming from it drops what was taken") {
    consumer c;
    for (std::uint64_t s = 0; s < 6; ++s) c.batch("a", 0, s);
    c.batch("b", 0, 0);
    c.batch("b", 0, 2);
    // The user took a0.0-a0.3 and b0.0; a0.4, a0.5 and b0.2 wait in its queue.
    const std::vector<stream_position> pending = {c.given[4], c.given[5], c.given[7]};
    const stream_state s = c.tracker.state(0, pending);
    CHECK(s.producers.at("a").next == 4);
    CHECK(s.producers.at("a").taken.empty());
    CHECK(s.producers.at("b").next == 1);
    CHECK(s.producers.at("b").taken.empty());
    CHECK(stream_state_from_json(to_json(s)) == s);
    CHECK(to_json(s) ==
          R"({"epoch":0,"producers":{"a":{"epoch":0,"next":4,"taken":[],"finished":false},)"
          R"("b":{"epoch":0,"next":1,"taken":[],"finished":false}}})");

    // A restarted consumer, fed by producers replaying from their start.
    consumer resumed;
    std::vector<stream_event> none;
    resumed.tracker.load(s, resumed.now, none);
    CHECK(none.empty());
    for (std::uint64_t k = 0; k < 8; ++k) resumed.batch("a", 0, k);
    for (std::uint64_t k = 0; k < 3; ++k) resumed.batch("b", 0, k);
    resumed.end("a", 0, 8);
    resumed.end("b", 0, 3);
    CHECK(resumed.text() == "a0.4 a0.5 a0.6 a0.7 b0.1 b0.2 |0");
    CHECK(resumed.tracker.counters().duplicates == 5);
    CHECK(resumed.tracker.counters().gaps == 0);
    CHECK(stream_tracker::taken_in(s, stream_position{"a", 0, 0, 3}));
    CHECK_FALSE(stream_tracker::taken_in(s, stream_position{"a", 0, 0, 4}));
    CHECK_FALSE(stream_tracker::taken_in(s, stream_position{"c", 0, 0, 0}));

    CHECK(error_text([] { (void)stream_state_from_json("{\"epoch\": -1}"); }) ==
          "bad_argument: a stream state: \"epoch\" is not a non-negative integer");
    CHECK(error_text([] { (void)stream_state_from_json("[1"); }).rfind("bad_argument: a stream state: not JSON", 0) ==
          0);
}

TEST_CASE("the state of a consumer whose queue holds several short epochs stands at its oldest untaken batch") {
    consumer c;
    for (std::uint64_t e = 0; e < 3; ++e) {
        for (std::uint64_t k = 0; k < 4; ++k) c.batch("a", e, k);
        c.end("a", e, 4);
    }
    c.end("a", 3, 0, stream_position::mark::stream_end);
    // The user took a0.0 and a0.1; the rest of the three epochs waits in its queue.
    const std::vector<stream_position> pending(c.given.begin() + 2, c.given.end());
    const stream_state s = c.tracker.state(0, pending);
    CHECK(to_json(s) == R"({"epoch":0,"producers":{"a":{"epoch":0,"next":2,"taken":[],"finished":false}}})");
    CHECK_FALSE(stream_tracker::taken_in(s, stream_position{"a", 0, 1, 3}));
    CHECK(stream_tracker::taken_in(s, stream_position{"a", 0, 0, 1}));
}

TEST_CASE("ranks of a distributed job get equal shares: drop_last drops the remainder, otherwise ranks are padded") {
    for (const bool drop_last : {true, false}) {
        CAPTURE(drop_last);
        std::vector<std::size_t> counts;
        for (std::size_t rank = 0; rank < 3; ++rank) {
            stream_options o;
            o.world_size = 3;
            o.rank = rank;
            o.drop_last = drop_last;
            consumer c(o);
            // Two producers, 7 and 5 batches in epoch 0, 3 in epoch 1.
            for (std::uint64_t s = 0; s < 7; ++s) c.batch("a", 0, s);
            for (std::uint64_t s = 0; s < 5; ++s) c.batch("b", 0, s);
            c.end("a", 0, 7);
            c.end("b", 0, 5);
            for (std::uint64_t s = 0; s < 3; ++s) c.batch("a", 1, s);
            c.end("a", 1, 3);
            c.end("b", 1, 0);
            const std::string t = c.text();
            const auto first_end = std::find(c.seen.begin(), c.seen.end(), "|0");
            REQUIRE(first_end != c.seen.end());
            counts.push_back(static_cast<std::size_t>(first_end - c.seen.begin()));
            for (const std::string& x : c.seen)
                if (x[0] == 'a' || x[0] == 'b') CHECK(std::stoul(x.substr(x.find('.') + 1)) % 3 == rank);
            if (rank == 0 && drop_last) {
                CHECK(t == "a0.0 a0.3 b0.0 |0 a1.0 |1");
                CHECK(c.tracker.counters().dropped_remainder == 2);  // a0.6 and b0.3
            }
            if (rank == 2 && !drop_last) {
                CHECK(t == "a0.2 a0.5 b0.2 a0.5 b0.2 |0 a1.2 |1");
                CHECK(c.tracker.counters().padded == 2);
            }
        }
        CHECK(counts[0] == counts[1]);
        CHECK(counts[1] == counts[2]);
        CHECK(counts[0] == (drop_last ? 3 : 5));
    }
    CHECK(error_text([] { stream_tracker t(stream_options{.rank = 2, .world_size = 2}, 1, 1); }) ==
          "bad_argument: rank 2 of a world of 2: a rank is 0 to world_size - 1");
}

// ---- streams over real sockets --------------------------------------------------

namespace {

tensor numbered_batch(std::int32_t v) { return tensor::from_vector(std::vector<std::int32_t>{v, v}, {2}, "x"); }

std::int32_t value_of(const std::vector<tensor>& b) { return b.at(0).values<std::int32_t>()[0]; }

connection_options quick() {
    connection_options o;
    o.recv_timeout = 5s;
    o.send_timeout = 5s;
    o.linger = 1s;
    return o;
}

}  // namespace

TEST_CASE("a producer's epochs end a consumer's iterations; the stream's end ends them all") {
    const std::string url = "inproc://epochs";
    auto ctx = std::make_shared<zmq::context_t>(1);
    connection_options rx_opt = quick();
    rx_opt.kind = socket_kind::pull;
    connection rx(ctx, std::vector<std::string>{url}, rx_opt);
    connection_options tx_opt = quick();
    tx_opt.kind = socket_kind::push;
    tx_opt.producer = "loader-test";
    tx_opt.bind = false;
    connection tx(ctx, std::vector<std::string>{url}, tx_opt);
    for (std::int32_t e = 0; e < 3; ++e) {
        for (std::int32_t k = 0; k < 4 + e; ++k) REQUIRE(tx.send(numbered_batch(10 * e + k)));
        const bool ended = e == 2 ? tx.end_stream() : tx.end_epoch();
        REQUIRE(ended);
    }
    CHECK(tx.position()->epoch == 3);
    for (std::int32_t e = 0; e < 3; ++e) {
        CHECK(rx.epoch() == static_cast<std::uint64_t>(e));
        std::vector<std::int32_t> got;
        for (auto& b : rx) got.push_back(value_of(b));
        CHECK(got.size() == static_cast<std::size_t>(4 + e));
        CHECK(got.front() == 10 * e);
        CHECK(rx.epoch_ended());
        CHECK(rx.stream_ended() == (e == 2));
    }
    CHECK(rx.stream_ended());
    CHECK_FALSE(rx.recv());
    CHECK(rx.stream_stats().epochs == 3);
    CHECK(rx.stream_stats().gaps == 0);

    // Unnumbered producers and tensorcom_compatible ones cannot end epochs.
    connection plain(ctx, std::vector<std::string>{"inproc://nobody"}, tx_opt);
    connection_options unnumbered = tx_opt;
    unnumbered.producer.clear();
    connection silent(ctx, std::vector<std::string>{"inproc://nobody"}, unnumbered);
    CHECK(error_text([&] { (void)silent.end_epoch(); }).find("only a connection that numbers its messages") !=
          std::string::npos);
    connection_options tc = tx_opt;
    tc.tensorcom_compatible = true;
    connection compat(ctx, std::vector<std::string>{"inproc://nobody"}, tc);
    CHECK(error_text([&] { (void)compat.end_epoch(); }).find("tensorcom receiver cannot take") != std::string::npos);
    tx_opt.producer = "two words";
    CHECK(error_text([&] { connection bad(ctx, std::vector<std::string>{"inproc://x"}, tx_opt); })
              .rfind("bad_argument: a producer name", 0) == 0);
}

TEST_CASE("a loader fans in three producers epoch by epoch, keeping an early epoch's batches for its iteration") {
    loader_options lo;
    lo.connection.recv_timeout = 10s;
    lo.connection.streams.expect_producers = 3;  // they start one after the other
    loader l("zpull://127.0.0.1:*", lo);
    const std::string at = "zpush://" + l.endpoints().at(0).address.substr(6);
    std::vector<connection> producers;
    for (int p = 0; p < 3; ++p) {
        connection_options o = quick();
        o.producer = "p" + std::to_string(p);
        producers.emplace_back(at, o);
    }
    // Producer 0 races ahead through both epochs before the others begin.
    for (std::int32_t k = 0; k < 3; ++k) REQUIRE(producers[0].send(numbered_batch(k)));
    REQUIRE(producers[0].end_epoch());
    for (std::int32_t k = 0; k < 3; ++k) REQUIRE(producers[0].send(numbered_batch(100 + k)));
    REQUIRE(producers[0].end_stream());
    for (int p = 1; p < 3; ++p) {
        for (std::int32_t k = 0; k < 2; ++k) REQUIRE(producers[p].send(numbered_batch(k)));
        REQUIRE(producers[p].end_epoch());
        for (std::int32_t k = 0; k < 2; ++k) REQUIRE(producers[p].send(numbered_batch(100 + k)));
        REQUIRE(producers[p].end_stream());
    }
    for (int e = 0; e < 2; ++e) {
        std::size_t n = 0;
        for (auto& b : l) {
            CHECK((value_of(b) >= 100) == (e == 1));
            ++n;
        }
        CHECK(n == 7);
        CHECK(l.epoch() == static_cast<std::uint64_t>(e + 1));
    }
    CHECK(l.stream_ended());
    CHECK_FALSE(l.next(100ms));
    CHECK(l.stream_stats().epochs == 2);
}

TEST_CASE("a producer that goes silent mid-epoch is waited for epoch_timeout, then counted; duplicates of a replay are dropped") {
    loader_options lo;
    lo.connection.recv_timeout = 10s;
    lo.connection.streams.epoch_timeout = 300ms;
    loader l("zpull://127.0.0.1:*", lo);
    const std::string at = "zpush://" + l.endpoints().at(0).address.substr(6);
    connection_options o = quick();
    o.producer = "alive";
    connection alive(at, o);
    o.producer = "dies";
    std::optional<connection> dies(std::in_place, at, o);
    for (std::int32_t k = 0; k < 3; ++k) {
        REQUIRE(alive.send(numbered_batch(k)));
        REQUIRE(dies->send(numbered_batch(50 + k)));
    }
    // All six came before the end mark: on another connection it could
    // overtake them, and the epoch would end before "dies" was known.
    REQUIRE(test_support::eventually([&] { return l.queued_messages() == 6; }));
    dies.reset();  // gone without ending its epoch
    REQUIRE(alive.end_epoch());
    std::size_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& b : l) {
        (void)b;
        ++n;
    }
    CHECK(n == 6);
    CHECK(l.epoch_ended());
    CHECK(std::chrono::steady_clock::now() - t0 < 8s);  // a hang bound, not a timing
    CHECK(l.stream_stats().producers_timed_out == 1);
    // A wait that times out ends no epoch: the flag speaks of the last next() only.
    CHECK_FALSE(l.next(50ms));
    CHECK_FALSE(l.epoch_ended());

    // A replaying producer sends epoch 1's batches 0..3, then 2..5 again.
    for (std::int32_t k = 0; k < 4; ++k) REQUIRE(alive.send(numbered_batch(10 + k)));
    alive.seek(1, 2);
    for (std::int32_t k = 2; k < 6; ++k) REQUIRE(alive.send(numbered_batch(10 + k)));
    REQUIRE(alive.end_epoch());
    std::vector<std::int32_t> got;
    for (auto& b : l) got.push_back(value_of(b));
    CHECK(got == std::vector<std::int32_t>{10, 11, 12, 13, 14, 15});
    CHECK(l.stream_stats().duplicates == 2);
}

TEST_CASE("a consumer that resumes from its saved state gets the rest of a replayed epoch, each batch once") {
    const auto serve_epoch = [](const std::string& at) {
        connection_options o = quick();
        o.producer = "shard";
        connection tx(at, o);
        for (std::int32_t k = 0; k < 20; ++k) REQUIRE(tx.send(numbered_batch(k)));
        REQUIRE(tx.end_stream());
    };
    stream_state saved;
    std::vector<std::int32_t> taken;
    {
        loader_options lo;
        lo.connection.recv_timeout = 10s;
        lo.queue_messages = 8;
        loader first("zpull://127.0.0.1:*", lo);
        serve_epoch("zpush://" + first.endpoints().at(0).address.substr(6));
        for (int k = 0; k < 7; ++k) taken.push_back(value_of(*first.next()));
        // Prefetched batches are queued, not taken: the state leaves them out.
        while (first.queued_messages() < 5) std::this_thread::sleep_for(1ms);
        saved = first.state();
        CHECK(saved.producers.at("shard").next == 7);
    }  // the trainer dies with batches in its queue
    loader_options lo;
    lo.connection.recv_timeout = 10s;
    loader second("zpull://127.0.0.1:*", lo);
    second.load_state(stream_state_from_json(to_json(saved)));
    serve_epoch("zpush://" + second.endpoints().at(0).address.substr(6));  // replays from its start
    for (auto& b : second) taken.push_back(value_of(b));
    std::vector<std::int32_t> all(20);
    std::iota(all.begin(), all.end(), 0);
    CHECK(taken == all);
    CHECK(second.stream_stats().duplicates == 7);

    // The same state given in the options is in place before the first batch.
    lo.connection.resume_from = saved;
    loader third("zpull://127.0.0.1:*", lo);
    CHECK(third.state().producers.at("shard").next == 7);
    serve_epoch("zpush://" + third.endpoints().at(0).address.substr(6));
    std::vector<std::int32_t> rest;
    for (auto& b : third) rest.push_back(value_of(b));
    CHECK(rest == std::vector<std::int32_t>(all.begin() + 7, all.end()));
    CHECK(third.stream_stats().duplicates == 7);
    CHECK(third.stream_ended());
    // A connection takes it too; a producer has none to take.
    connection_options rx_opt = quick();
    rx_opt.resume_from = saved;
    connection rx("zpull://127.0.0.1:*", rx_opt);
    CHECK(rx.state().producers.at("shard").next == 7);
    connection_options tx_opt = quick();
    tx_opt.resume_from = saved;
    CHECK(error_text([&] { connection tx("zpush://127.0.0.1:1", tx_opt); }).find("seek()") != std::string::npos);
}
