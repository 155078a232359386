// The consumer's side of numbered streams, driven through made-up time:
// epochs from several producers, gaps, duplicates, the timeout rule, late
// batches, resuming from a state, and sharding for distributed training.
#include "support.hpp"

#include "connect/stream_tracker.hpp"

#include <doctest/doctest.h>
#include <tenbin/stream.hpp>

#include <string>
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
        tracker.add(std::move(t), now, out);
        take(out);
    }
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

TEST_CASE("a consumer that starts after the producers' first epochs begins where they are") {
    consumer c;
    c.batch("a", 3, 0);
    c.batch("a", 3, 1);
    CHECK(c.text() == "a3.0 a3.1");
    CHECK(c.tracker.epoch() == 3);
    CHECK(c.tracker.counters().epochs == 0);
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
    resumed.tracker.load(s);
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
