// Acknowledged delivery: the control messages' bytes and their checks, and
// producers and consumers in one process (the process tests, with kills,
// are in test_delivery_processes.cpp).
#include "support.hpp"

#include "connect/delivery_protocol.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
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
