// Load and faults on loopback: a million messages checked one by one, a
// slow subscriber, senders and receivers killed with SIGKILL and restarted,
// shutdown under load from both ends. Every wait is bounded; the far ends
// are processes of tenbin-fault-peer (tests/faults/peer.cpp).
//
// TENBIN_LOAD_MESSAGES sets the count of the load test (default 1000000).
#include "faults/message.hpp"
#include "faults/process.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace tenbin;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

std::uint64_t load_count() {
    const char* n = std::getenv("TENBIN_LOAD_MESSAGES");
    return n ? std::stoull(n) : 1000000;
}

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

// "tcp://127.0.0.1:41234" -> "127.0.0.1:41234"
std::string host_port(const std::string& endpoint) { return endpoint.substr(endpoint.find("://") + 3); }

faults::stamp checked(const std::vector<tensor>& m) {
    faults::stamp s{};
    std::string why;
    const bool ok = faults::check_message(m, s, why);
    if (!ok) FAIL_CHECK("corrupted message: " << why);
    return s;
}

}  // namespace

TEST_CASE("a million messages PUSH->PULL over tcp: none lost, corrupted or duplicated") {
    const std::uint64_t total = load_count();
    loader_options lopt;
    lopt.queue_messages = 64;
    loader rx("zpull://127.0.0.1:*", lopt);
    const std::string url = "zpush://" + host_port(rx.endpoints().at(0).address);

    std::atomic<bool> send_failed{false};
    const auto start = clock_type::now();
    std::thread tx_thread([&] {
        connection_options o;
        o.send_timeout = 10000ms;
        o.send_hwm = 1000;  // small messages: let the pipe hold more of them
        connection tx(url, o);
        for (std::uint64_t seq = 0; seq < total; ++seq)
            if (!tx.send(faults::make_message(7, seq))) {
                send_failed = true;
                return;
            }
    });

    std::uint64_t expected = 0, corrupted = 0, out_of_order = 0;
    while (expected < total) {
        std::optional<std::vector<tensor>> m;
        try {
            m = rx.next(10000ms);
        } catch (const error& e) {
            FAIL_CHECK("after " << expected << " messages: " << e.what());
            break;
        }
        REQUIRE(m);
        faults::stamp s{};
        std::string why;
        if (!faults::check_message(*m, s, why)) {
            if (++corrupted < 5) FAIL_CHECK(why);
        } else if (s.tag != 7 || s.seq != expected) {
            if (++out_of_order < 5) FAIL_CHECK("expected seq " << expected << ", got " << s.seq);
        }
        ++expected;
    }
    tx_thread.join();
    const double secs = seconds_since(start);
    CHECK_FALSE(send_failed.load());
    CHECK(expected == total);
    CHECK(corrupted == 0);
    CHECK(out_of_order == 0);
    // Nothing more: no duplicate after the last one.
    CHECK_FALSE(rx.next(300ms));  // a timeout: nothing
    CHECK_FALSE(rx.closed());
    CHECK(rx.peak_queued_messages() <= 64);
    MESSAGE(total << " messages in " << secs << " s (" << static_cast<long>(total / secs) << " msg/s)");
}

TEST_CASE("a slow subscriber: the publisher's memory and the loader's queue stay bounded") {
    loader_options lopt;
    lopt.queue_messages = 4;
    lopt.queue_bytes = 1 << 20;
    loader rx("zrsub://127.0.0.1:*", lopt);
    const std::string url = "zrpub://" + host_port(rx.endpoints().at(0).address);

    // The publisher's baseline: the same program publishing one message.
    faults::process base({faults::peer_path(), "pub", url, "--count", "1", "--bytes", "65536"});
    REQUIRE(base.wait(30s) == 0);
    while (rx.next(300ms)) {  // drain what the baseline managed to deliver, until a timeout
    }

    // 4000 messages of 64 KiB: 256 MiB if a publisher queued them all.
    const auto start = clock_type::now();
    faults::process pub({faults::peer_path(), "pub", url, "--count", "4000", "--bytes", "65536", "--tag", "3"});
    std::uint64_t received = 0, last = 0;
    while (seconds_since(start) < 3) {
        // Nothing within 200 ms is a timeout (next returns nothing), not the end.
        if (auto m = rx.next(200ms)) {
            const auto s = checked(*m);
            if (received > 0) CHECK(s.seq > last);  // drops, never duplicates
            last = s.seq;
            ++received;
        } else {
            CHECK_FALSE(rx.closed());
        }
        std::this_thread::sleep_for(20ms);  // the slow consumer
    }
    REQUIRE(pub.wait(60s) == 0);  // a PUB never blocks: it finished while we were slow
    MESSAGE("publisher peak RSS " << pub.max_rss() / 1024 << " KiB (baseline " << base.max_rss() / 1024
                                  << " KiB); the slow subscriber took " << received << " of 4000");
    CHECK(pub.max_rss() < base.max_rss() + (64 << 20));
    CHECK(received > 0);
    CHECK(received < 4000);
    CHECK(rx.peak_queued_messages() <= 4);
    CHECK(rx.peak_queued_bytes() <= (1 << 20));
}

TEST_CASE("a sender killed mid-stream: the loader times out, then resumes with a new sender") {
    loader_options lopt;
    lopt.queue_messages = 8;
    loader rx("zpull://127.0.0.1:*", lopt);
    const std::string url = "zpush://" + host_port(rx.endpoints().at(0).address);

    {
        faults::process tx({faults::peer_path(), "send", url, "--tag", "1", "--interval-us", "100"});
        REQUIRE(tx.expect("ready", 10s));
        std::uint64_t next = 0;
        for (int i = 0; i < 300; ++i) {
            auto m = rx.next(10000ms);
            REQUIRE(m);
            const auto s = checked(*m);
            CHECK(s.tag == 1);
            CHECK(s.seq == next);
            next = s.seq + 1;
        }
        tx.kill();  // SIGKILL: no close, no linger, possibly mid-message
        // What was queued still comes out intact; then a timeout, not a hang.
        const auto start = clock_type::now();
        bool timed_out = false;
        for (int i = 0; i < 10000 && !timed_out; ++i) {
            auto m = rx.next(500ms);
            if (!m) {
                CHECK_FALSE(rx.closed());
                timed_out = true;
                continue;
            }
            const auto s = checked(*m);
            CHECK(s.seq == next);
            next = s.seq + 1;
        }
        CHECK(timed_out);
        CHECK(seconds_since(start) < 10);
    }
    // A new sender connects to the same loader, which carries on.
    faults::process tx2({faults::peer_path(), "send", url, "--tag", "2", "--from", "1000000", "--interval-us", "100"});
    REQUIRE(tx2.expect("ready", 10s));
    std::uint64_t next = 1000000;
    for (int i = 0; i < 200; ++i) {
        auto m = rx.next(10000ms);
        REQUIRE(m);
        const auto s = checked(*m);
        CHECK(s.tag == 2);
        CHECK(s.seq == next);
        next = s.seq + 1;
    }
}

TEST_CASE("a receiver killed and restarted: the PUSH sender resumes, nothing delivered is corrupted") {
    connection_options o;
    o.send_timeout = 100ms;
    o.linger = 0ms;
    connection tx("zrpush://127.0.0.1:*", o);  // binds; receivers connect
    const std::string url = "zrpull://" + host_port(tx.endpoints().at(0).address);

    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> sent{0};
    std::thread sender([&] {
        std::uint64_t seq = 0;
        while (!stop) {
            if (tx.send(faults::make_message(5, seq))) sent = ++seq;
            std::this_thread::sleep_for(50us);
        }
    });

    {
        faults::process rx1({faults::peer_path(), "recv", url, "--report-ms", "50"});
        bool progressed = false;
        for (int i = 0; i < 200 && !progressed; ++i) {
            auto line = rx1.expect("counts 5:", 10s);
            if (!line) break;
            progressed = std::stoull(line->substr(9)) >= 300;
        }
        CHECK(progressed);
        rx1.kill();
    }
    const std::uint64_t sent_before = sent;
    faults::process rx2({faults::peer_path(), "recv", url, "--count", "500", "--idle-ms", "10000"});
    auto done = rx2.expect("ok ", 30s);
    const int status = rx2.wait(10s);
    stop = true;
    sender.join();
    REQUIRE(done);
    CHECK(status == 0);
    CHECK(done->find("received=500") != std::string::npos);
    CHECK(sent > sent_before);
    MESSAGE("restarted receiver: " << *done);
}

TEST_CASE("a frozen receiver: with heartbeats the sender stops queueing to it, and resumes when it wakes") {
    // Without heartbeats the dead pipe takes messages (they are stranded
    // there); with them the connection is dropped within three intervals,
    // a send finds no peer and times out, and the receiver is served again
    // once it wakes and dials back.
    for (const bool heartbeat : {false, true}) {
        CAPTURE(heartbeat);
        connection_options o;
        o.send_timeout = 200ms;
        o.linger = 0ms;
        if (heartbeat) o.heartbeat = 100ms;
        connection tx("zrpush://127.0.0.1:*", o);  // binds; the receiver connects
        const std::string url = "zrpull://" + host_port(tx.endpoints().at(0).address);
        faults::process rx({faults::peer_path(), "recv", url, "--report-ms", "50", "--idle-ms", "30000"});
        std::uint64_t seq = 0;
        auto count_reaches = [&](std::uint64_t n) {
            const auto deadline = clock_type::now() + 20s;
            while (clock_type::now() < deadline) {
                if (tx.send(faults::make_message(7, seq))) ++seq;
                auto line = rx.read_line(5ms);
                if (line && line->rfind("counts 7:", 0) == 0 && std::stoull(line->substr(9)) >= n) return true;
            }
            return false;
        };
        REQUIRE(count_reaches(20));

        rx.signal(SIGSTOP);
        std::this_thread::sleep_for(1s);  // over three intervals of 100 ms
        const bool queued = tx.send(faults::make_message(7, seq));
        CHECK(queued == !heartbeat);
        if (queued) ++seq;

        rx.signal(SIGCONT);
        if (heartbeat) {
            CHECK(count_reaches(40));
            rx.kill();
        }
    }
}

TEST_CASE("shutdown under load from either end: no hang, every zero-copy frame released") {
    std::atomic<long> created{0}, released{0};
    // 64 KiB tensors in memory the test allocated, released through the
    // buffer's callback on whichever thread drops the last reference.
    auto big_message = [&](std::uint64_t seq) {
        auto* p = static_cast<std::uint8_t*>(std::malloc(65536));
        for (std::size_t i = 0; i < 65536; i += 4096) p[i] = static_cast<std::uint8_t>(seq);
        ++created;
        buffer b = buffer::adopt(p, 65536, [p, &released] {
            std::free(p);
            ++released;
        });
        return std::vector<tensor>{tensor(dtype::u1, {65536}, std::move(b), "big")};
    };

    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        const bool receiver_first = round % 2 == 0;
        auto rx = std::make_unique<loader>("zpull://127.0.0.1:*", loader_options{});
        connection_options o;
        o.send_timeout = 200ms;
        o.linger = 500ms;
        auto tx = std::make_unique<connection>("zpush://" + host_port(rx->endpoints().at(0).address), o);
        std::atomic<bool> stop{false};
        std::atomic<long> sends{0};
        std::thread sender([&] {
            for (std::uint64_t seq = 0; !stop; ++seq) {
                try {
                    if (tx->send(big_message(seq))) ++sends;
                } catch (const std::exception& e) {
                    // A socket closed under the sender ends it.
                    break;
                }
            }
        });
        // Let the flood start, and take some of it.
        for (int i = 0; i < 20; ++i) REQUIRE(rx->next(10000ms));
        const auto start = clock_type::now();
        if (receiver_first) {
            rx.reset();  // consumer goes away while the sender floods
            stop = true;
            sender.join();
            tx.reset();  // linger bounds the close
        } else {
            stop = true;
            sender.join();
            tx.reset();  // producer goes away while the loader receives
            for (int i = 0; i < 1000; ++i)
                if (!rx->next(300ms)) break;  // a timeout
            rx.reset();
        }
        CHECK(seconds_since(start) < 10);
        // Every send the receiver took had returned by the join; more is up
        // to the scheduler (a loaded machine may stop the flood at 20).
        CHECK(sends >= 20);
    }
    // Both contexts are gone: ZeroMQ let go of every frame it was handed.
    CHECK(released.load() == created.load());
}
