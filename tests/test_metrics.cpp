// Metrics: the set and its text format, the instruments, what connections
// and loaders count, and the HTTP exporter.
#include "support.hpp"
#include "zmq_fixture.hpp"

#include "exporter/address.hpp"
#include "metrics/instruments.hpp"

#include <doctest/doctest.h>
#include <tenbin/connect.hpp>
#if TENBIN_HAS_EXPORTER
#include <httplib.h>
#endif

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tenbin;
using namespace std::chrono_literals;
using test_support::error_class;
using test_support::eventually;
using test_zmq::bounded_options;

namespace {

tensor floats(std::int64_t n) {
    return tensor::from_vector(std::vector<float>(static_cast<std::size_t>(n), 1.5f), {n}, "x");
}

double value_of(const metrics_source& s, std::string_view name, const metric_labels& labels = {}) {
    metric_set set;
    s.collect(set);
    const auto v = set.value(name, labels);
    REQUIRE_MESSAGE(v, "no series ", name);
    return *v;
}

// A histogram's observations and sum, as a scrape reads them.
std::pair<std::uint64_t, double> histogram_of(const metrics_source& s, std::string_view name) {
    metric_set set;
    s.collect(set);
    const metric_sample* h = set.histogram(name);
    REQUIRE_MESSAGE(h, "no histogram ", name);
    return {h->buckets.back(), h->sum};
}

// What `promtool check metrics` says of `text`: nothing when it passes,
// nullopt when promtool is not installed.
std::optional<std::string> promtool_problems(const std::string& text) {
    if (std::system("command -v promtool > /dev/null 2>&1") != 0) return std::nullopt;
    test_support::temp_dir dir("tenbin-metrics");
    const std::string in = (dir / "metrics.txt").string(), out = (dir / "out.txt").string();
    std::ofstream(in) << text;
    const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
    std::stringstream said;
    said << std::ifstream(out).rdbuf();
    return rc == 0 ? std::string() : "status " + std::to_string(rc) + ": " + said.str();
}


// The PromQL expressions of the Grafana dashboard docs/grafana/tenbin.json,
// with its `$connection` variable as "all".
std::vector<std::string> dashboard_queries() {
    const char* tests_dir = std::getenv("TENBIN_TESTS_DIR");
    REQUIRE_MESSAGE(tests_dir, "TENBIN_TESTS_DIR is not set; run the tests with meson test");
    const auto path = test_support::fs::path(tests_dir).parent_path() / "docs" / "grafana" / "tenbin.json";
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    const std::string json = text.str();
    REQUIRE_MESSAGE(!json.empty(), "cannot read ", path.string());
    const std::regex expr(R"re("expr": "((?:[^"\\]|\\.)*)")re");
    std::vector<std::string> out;
    for (auto it = std::sregex_iterator(json.begin(), json.end(), expr); it != std::sregex_iterator(); ++it) {
        std::string q = std::regex_replace((*it)[1].str(), std::regex(R"(\\")"), "\"");
        q = std::regex_replace(q, std::regex(R"(\$connection)"), ".*");
        out.push_back(q);
    }
    return out;
}
}  // namespace

TEST_CASE("a metric set refuses what Prometheus would: bad names, a family added twice differently, a series twice") {
    metric_set set;
    CHECK_THROWS_WITH_AS(set.add("9lives", metric_type::gauge, "h", {}, 1),
                         doctest::Contains("not a metric name"), error);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::gauge, "h", {{"le", "1"}}, 1),
                         doctest::Contains("not a label name"), error);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::gauge, "h", {{"__x", "1"}}, 1),
                         doctest::Contains("not a label name"), error);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::gauge, "h", {{"a", "1"}, {"a", "2"}}, 1),
                         doctest::Contains("given twice"), error);
    set.add("tenbin_x", metric_type::gauge, "h", {{"a", "1"}}, 1);
    set.add("tenbin_x", metric_type::gauge, "h", {{"a", "2"}}, 2);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::gauge, "h", {{"a", "1"}}, 3),
                         doctest::Contains("two series of the same labels"), error);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::counter, "h", {}, 1), doctest::Contains("another type"),
                         error);
    CHECK_THROWS_WITH_AS(set.add("tenbin_x", metric_type::gauge, "other", {{"a", "3"}}, 1),
                         doctest::Contains("another help"), error);
    const double bounds[] = {1, 2};
    CHECK_THROWS_WITH_AS(set.add_histogram("tenbin_h", "h", bounds, {}, {1, 2}, 0), doctest::Contains("bucket counts"),
                         error);
    CHECK_THROWS_WITH_AS(set.add_histogram("tenbin_h2", "h", bounds, {}, {2, 1, 3}, 0),
                         doctest::Contains("not cumulative"), error);
    const double unsorted[] = {2, 1};
    CHECK_THROWS_WITH_AS(set.add_histogram("tenbin_h3", "h", unsorted, {}, {0, 0, 0}, 0),
                         doctest::Contains("ascending"), error);
    CHECK(set.value("tenbin_x", {{"a", "2"}}) == 2);
    CHECK(!set.value("tenbin_x", {{"a", "9"}}));
    CHECK(!set.value("tenbin_none"));
}

TEST_CASE("the text format: HELP and TYPE per family, labels escaped, histograms' buckets, sum and count") {
    metric_set set;
    set.add("tenbin_things_total", metric_type::counter, "Things seen\\counted,\nper line.",
            {{"connection", "a \"b\"\\c\nd"}, {"endpoint", "tcp://127.0.0.1:7880"}}, 42);
    set.add("tenbin_level", metric_type::gauge, "A level.", {}, 0.25);
    set.family("tenbin_empty", metric_type::gauge, "Nothing yet.");
    const double bounds[] = {0.001, 1, 2.5};
    set.add_histogram("tenbin_wait_seconds", "Waits.", bounds, {{"connection", "x"}}, {1, 3, 3, 4}, 12.5);
    const std::string want =
        "# HELP tenbin_things_total Things seen\\\\counted,\\nper line.\n"
        "# TYPE tenbin_things_total counter\n"
        "tenbin_things_total{connection=\"a \\\"b\\\"\\\\c\\nd\",endpoint=\"tcp://127.0.0.1:7880\"} 42\n"
        "# HELP tenbin_level A level.\n"
        "# TYPE tenbin_level gauge\n"
        "tenbin_level 0.25\n"
        "# HELP tenbin_empty Nothing yet.\n"
        "# TYPE tenbin_empty gauge\n"
        "# HELP tenbin_wait_seconds Waits.\n"
        "# TYPE tenbin_wait_seconds histogram\n"
        "tenbin_wait_seconds_bucket{connection=\"x\",le=\"0.001\"} 1\n"
        "tenbin_wait_seconds_bucket{connection=\"x\",le=\"1\"} 3\n"
        "tenbin_wait_seconds_bucket{connection=\"x\",le=\"2.5\"} 3\n"
        "tenbin_wait_seconds_bucket{connection=\"x\",le=\"+Inf\"} 4\n"
        "tenbin_wait_seconds_sum{connection=\"x\"} 12.5\n"
        "tenbin_wait_seconds_count{connection=\"x\"} 4\n";
    CHECK(to_prometheus_text(set) == want);
    if (const auto problems = promtool_problems(want)) CHECK_MESSAGE(problems->empty(), *problems);
}

TEST_CASE("a duration histogram counts an observation in the first bucket whose bound it does not exceed") {
    detail::duration_histogram h;
    h.observe(1ms);       // le=0.001 exactly
    h.observe(1ms + 1ns);  // le=0.0025
    h.observe(-5ms);      // a clock that stepped back: no time
    h.observe(2h);        // past every bound: +Inf only
    const std::vector<std::uint64_t> b = h.buckets();
    REQUIRE(b.size() == detail::seconds_bounds.size() + 1);
    const auto at = [&](double bound) {
        const auto i = std::find(detail::seconds_bounds.begin(), detail::seconds_bounds.end(), bound) -
                       detail::seconds_bounds.begin();
        return b[static_cast<std::size_t>(i)];
    };
    CHECK(b.front() == 1);  // the negative one
    CHECK(at(5e-4) == 1);
    CHECK(at(1e-3) == 2);
    CHECK(at(2.5e-3) == 3);
    CHECK(at(60) == 3);
    CHECK(b.back() == 4);
    CHECK(h.sum() == doctest::Approx(7200.002).epsilon(1e-12));
}

TEST_CASE("a wait that gives nothing is added to the next one that gives a batch") {
    detail::wait_histogram w;
    w.waited(100ms, false);
    w.waited(100ms, false);
    CHECK(w.histogram().buckets().back() == 0);
    w.waited(50ms, true);
    w.waited(0ms, true);
    const auto b = w.histogram().buckets();
    CHECK(b.back() == 2);
    CHECK(w.histogram().sum() == doctest::Approx(0.25));
    CHECK(b.front() == 1);  // the batch that was there
}

TEST_CASE("a connection counts the messages and bytes it sends and receives, and times both once asked") {
    const std::string address = test_zmq::bind_address(test_zmq::transport::inproc);
    connection_options ro = bounded_options();
    ro.name = "input";
    connection rx(address, [&] {
        auto o = ro;
        o.kind = socket_kind::pull;
        o.bind = true;
        return o;
    }());
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    so.bind = false;
    so.name = "output";
    connection tx(address, so);
    const auto rxm = rx.metrics();
    const auto txm = tx.metrics();
    for (int i = 0; i < 10; ++i) REQUIRE(tx.send(std::vector{floats(16)}));
    for (int i = 0; i < 10; ++i) REQUIRE(rx.recv());
    CHECK(value_of(*txm, "tenbin_messages_sent_total", {{"connection", "output"}}) == 10);
    CHECK(value_of(*txm, "tenbin_bytes_sent_total") == 640);
    CHECK(value_of(*rxm, "tenbin_messages_received_total", {{"connection", "input"}, {"endpoint", address}}) == 10);
    CHECK(value_of(*rxm, "tenbin_bytes_received_total") == 640);
    CHECK(histogram_of(*txm, "tenbin_send_duration_seconds").first == 10);
    CHECK(histogram_of(*rxm, "tenbin_receive_wait_seconds").first == 10);
    // Each side shows its own families only.
    metric_set set;
    txm->collect(set);
    CHECK(!set.find("tenbin_messages_received_total"));
    CHECK(!set.find("tenbin_peers"));  // not counted unless asked
    // A receive that times out gives nothing to count yet.
    rx.close();
}

TEST_CASE("malformed messages are counted by their error class, and the connection goes on") {
    connection_options o = bounded_options(2s);
    o.kind = socket_kind::pull;
    o.bind = true;
    connection rx("tcp://127.0.0.1:*", o);
    zmq::context_t ctx;
    zmq::socket_t raw(ctx, zmq::socket_type::push);
    raw.set(zmq::sockopt::linger, 0);
    raw.connect(rx.endpoints().at(0).address);
    raw.send(zmq::buffer(std::string_view("not tenbin at all")), zmq::send_flags::none);
    std::string code;
    try {
        (void)rx.recv();
        FAIL("a malformed message was taken");
    } catch (const error& e) {
        code = std::string(name(e.code()));
    }
    const std::vector<tensor> ok{floats(4)};
    REQUIRE(zsend_multipart(raw, ok));
    REQUIRE(rx.recv());
    const auto m = rx.metrics();
    CHECK(value_of(*m, "tenbin_malformed_messages_total", {{"error", code}}) == 1);
    CHECK(value_of(*m, "tenbin_messages_received_total") == 1);
}

TEST_CASE("a numbered stream's gaps, epochs and delivery latency reach the consumer's metrics") {
    const std::string address = test_zmq::bind_address(test_zmq::transport::inproc);
    connection_options ro = bounded_options();
    ro.kind = socket_kind::pull;
    ro.bind = true;
    connection rx(address, ro);
    const auto m = rx.metrics();
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    so.bind = false;
    so.producer = "p";
    connection tx(address, so);
    REQUIRE(tx.send(std::vector{floats(2)}));  // seq 0
    tx.seek(0, 2);                              // seq 1 never sent
    REQUIRE(tx.send(std::vector{floats(2)}));
    REQUIRE(tx.end_epoch());
    int batches = 0;
    for (auto& b : rx) {
        (void)b;
        ++batches;
    }
    CHECK(batches == 2);
    CHECK(rx.epoch_ended());
    CHECK(value_of(*m, "tenbin_stream_gaps_total") == 1);
    CHECK(value_of(*m, "tenbin_stream_epochs_total") == 1);
    CHECK(value_of(*m, "tenbin_stream_epoch") == 1);
    CHECK(value_of(*m, "tenbin_messages_received_total") == 2);  // end marks are not batches
    CHECK(histogram_of(*m, "tenbin_delivery_latency_seconds").first == 2);
}

TEST_CASE("a loader's metrics: its queue, the consumer's wait that grows while the producer pauses, its connection's counts") {
    loader_options lo;
    lo.connection.name = "trainer";
    loader l("zpull://127.0.0.1:*", lo);
    const auto m = l.metrics();
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    connection tx(l.endpoints().at(0).address, so);
    for (int i = 0; i < 5; ++i) REQUIRE(tx.send(std::vector{floats(8)}));
    REQUIRE(eventually([&] { return l.queued_messages() == 5; }));
    CHECK(value_of(*m, "tenbin_queue_messages", {{"connection", "trainer"}}) == 5);
    CHECK(value_of(*m, "tenbin_queue_bytes") == 160);
    for (int i = 0; i < 5; ++i) REQUIRE(l.next(5s));
    const auto before = histogram_of(*m, "tenbin_receive_wait_seconds");
    CHECK(before.first == 5);
    std::thread later([&] {
        std::this_thread::sleep_for(300ms);
        CHECK(tx.send(std::vector{floats(8)}));
    });
    REQUIRE(l.next(5s));
    later.join();
    const auto after = histogram_of(*m, "tenbin_receive_wait_seconds");
    CHECK(after.first == 6);
    CHECK(after.second - before.second >= 0.29);
    CHECK(value_of(*m, "tenbin_messages_received_total") == 6);
    CHECK(value_of(*m, "tenbin_bytes_received_total") == 192);
    CHECK(value_of(*m, "tenbin_queue_messages") == 0);
    // The loader's own waits and streams, not a second copy from its connection.
    metric_set set;
    m->collect(set);
    CHECK(set.find("tenbin_receive_wait_seconds")->samples.size() == 1);
    CHECK(set.find("tenbin_stream_gaps_total")->samples.size() == 1);
    if (const auto problems = promtool_problems(to_prometheus_text(set))) CHECK_MESSAGE(problems->empty(), *problems);
}

TEST_CASE("peers are counted as they connect and leave, when asked for") {
    connection_options ro = bounded_options();
    ro.kind = socket_kind::pull;
    ro.bind = true;
    ro.count_peers = true;
    connection rx("tcp://127.0.0.1:*", ro);
    const auto m = rx.metrics();
    const auto peers = [&] { return value_of(*m, "tenbin_peers"); };
    CHECK(peers() == 0);
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    std::optional<connection> a(std::in_place, rx.endpoints().at(0).address, so);
    std::optional<connection> b(std::in_place, rx.endpoints().at(0).address, so);
    CHECK(eventually([&] { return peers() == 2; }));
    a.reset();
    CHECK(eventually([&] { return peers() == 1; }));
    b.reset();
    CHECK(eventually([&] { return peers() == 0; }));
}

#if TENBIN_HAS_EXPORTER
TEST_CASE("a connection's metrics outlive it with the counts it had; an exporter forgets a source that is gone") {
    std::shared_ptr<const metrics_source> m;
    {
        connection_options so = bounded_options();
        so.kind = socket_kind::push;
        so.bind = true;
        so.name = "gone";
        connection tx(test_zmq::bind_address(test_zmq::transport::inproc), so);
        m = tx.metrics();
    }
    CHECK(value_of(*m, "tenbin_messages_sent_total") == 0);
    metrics_exporter ex("127.0.0.1:0");
    ex.add(m);
    CHECK(ex.text().find("connection=\"gone\"") != std::string::npos);
    m.reset();
    CHECK(ex.text().empty());
}

TEST_CASE("a metrics exporter serves GET /metrics on loopback, refuses the rest, and waits for a scrape") {
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    so.bind = true;
    so.name = "served";
    connection tx(test_zmq::bind_address(test_zmq::transport::inproc), so);
    metrics_exporter ex("0", {tx.metrics()});
    CHECK(ex.address() == "127.0.0.1:" + std::to_string(ex.port()));
    CHECK(ex.port() > 0);
    std::atomic<bool> scraped{false};
    std::thread waiter([&] { scraped = ex.wait_for_scrape(10s); });
    std::this_thread::sleep_for(50ms);
    httplib::Client client("127.0.0.1", ex.port());
    auto res = client.Get("/metrics");
    waiter.join();
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->get_header_value("Content-Type") == prometheus_content_type);
    CHECK(res->body == ex.text());
    CHECK(res->body.find("tenbin_messages_sent_total{connection=\"served\"") != std::string::npos);
    CHECK(scraped);
    CHECK(ex.scrapes() == 1);
    CHECK(ex.scrapes_begun() == 1);
    CHECK(!ex.wait_for_scrape(10ms));
    // A scrape counts for a wait that began before the scrape did, even
    // when the wait is resumed in slices after it.
    CHECK(ex.wait_for_scrape(10ms, 0));
    CHECK(!ex.wait_for_scrape(10ms, 1));
    if (const auto problems = promtool_problems(res->body)) CHECK_MESSAGE(problems->empty(), *problems);
    auto other = client.Get("/");
    REQUIRE(other);
    CHECK(other->status == 404);
    auto post = client.Post("/metrics", "x", "text/plain");
    REQUIRE(post);
    CHECK(post->status >= 400);
    // The same series twice would be an invalid scrape: refused at add.
    CHECK_THROWS_WITH_AS(ex.add(tx.metrics()), doctest::Contains("same labels"), error);
    ex.close();
    CHECK(!httplib::Client("127.0.0.1", ex.port()).Get("/metrics"));
}

TEST_CASE("a metrics exporter's address: HOST:PORT, [IPv6]:PORT, :PORT or PORT (loopback), and clear refusals") {
    using detail::parse_listen_address;
    CHECK(parse_listen_address("9464").host == "127.0.0.1");
    CHECK(parse_listen_address(":9464").port == 9464);
    CHECK(parse_listen_address("0.0.0.0:80").host == "0.0.0.0");
    CHECK(parse_listen_address("[::1]:0").host == "::1");
    CHECK(detail::format_address("::1", 5) == "[::1]:5");
    for (const char* bad : {"", "host:", "::1:80", "x:99999", "x:-1", "x:80a", "[]:80"}) {
        CAPTURE(bad);
        CHECK_THROWS_WITH_AS(parse_listen_address(bad), doctest::Contains("metrics address"), error);
    }
    CHECK_THROWS_WITH_AS(metrics_exporter("nonexistent.invalid:0"), doctest::Contains("cannot serve metrics"), error);
    metrics_exporter first("127.0.0.1:0");
    const std::string in_use = "cannot serve metrics on " + first.address() + ": Address already in use";
    CHECK_THROWS_WITH_AS(metrics_exporter(first.address()), in_use.c_str(), error);
}

#else
TEST_CASE("a library without cpp-httplib says it has no exporter") {
    CHECK_THROWS_WITH_AS(metrics_exporter("0"), doctest::Contains("without cpp-httplib"), error);
}
#endif

TEST_CASE("a scrape on another thread reads a connection while it sends and receives") {
    connection_options ro = bounded_options(), so = bounded_options();
    ro.name = "rx";
    so.name = "tx";
    so.producer = "p";
    std::optional<connection> rx, tx;
    SUBCASE("plain") {
        const std::string address = test_zmq::bind_address(test_zmq::transport::inproc);
        ro.kind = socket_kind::pull;
        ro.bind = true;
        so.kind = socket_kind::push;
        rx.emplace(address, ro);
        tx.emplace(address, so);
    }
    SUBCASE("+shm") {
        const std::string path = test_zmq::fresh_ipc_path();
        rx.emplace("zpull+shm://" + path, ro);
        tx.emplace("zpush+shm://" + path, so);
    }
    SUBCASE("acked") {
        so.acked = ro.acked = true;
        tx.emplace("zrpush://127.0.0.1:*", so);
        rx.emplace("zrpull://" + tx->endpoints().at(0).address.substr(6), ro);
    }
    const std::vector<std::shared_ptr<const metrics_source>> sources{rx->metrics(), tx->metrics()};
    std::atomic<bool> done{false};
    std::atomic<std::size_t> scrapes{0};
    std::thread scraper([&] {
        while (!done) {
            (void)to_prometheus_text(collect(sources));
            ++scrapes;
        }
    });
    std::thread sender([&] {
        // Once the scraper runs: on a busy machine it may start only after 2000 sends.
        while (scrapes == 0) std::this_thread::yield();
        for (int i = 0; i < 2000; ++i) CHECK(tx->send(std::vector{floats(4)}));
    });
    for (int i = 0; i < 2000; ++i) REQUIRE(rx->recv());
    sender.join();
    done = true;
    scraper.join();
    const metric_set set = collect(sources);
    CHECK(set.value("tenbin_messages_sent_total", {{"connection", "tx"}}) == 2000);
    CHECK(set.value("tenbin_messages_received_total", {{"connection", "rx"}}) == 2000);
}

TEST_CASE("the docs' table lists every family tenbin exports, in order, with its type") {
    const char* tests_dir = std::getenv("TENBIN_TESTS_DIR");
    REQUIRE_MESSAGE(tests_dir, "TENBIN_TESTS_DIR is not set; run the tests with meson test");
    const auto page = test_support::fs::path(tests_dir).parent_path() / "docs" / "metrics.md";
    std::ifstream in(page);
    REQUIRE_MESSAGE(in, "cannot read ", page.string());
    // | `tenbin_..._total` | counter | ...
    const std::regex row(R"(^\| `(tenbin_[a-z_]+)` \| (counter|gauge|histogram) \|)");
    std::vector<std::string> listed;
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, row)) listed.push_back(m[1].str() + " " + m[2].str());
    }
    std::vector<std::string> exported;
    for (const detail::family_spec& f : detail::all_families())
        exported.push_back(std::string(f.name) + " " +
                           (f.type == metric_type::counter ? "counter" : f.type == metric_type::gauge ? "gauge" : "histogram"));
    CHECK(listed == exported);
}

TEST_CASE("an acked producer's metrics: its consumers' credits, batches in flight and acknowledged, by name") {
    connection_options po = bounded_options(5s);
    po.acked = true;
    po.ack_heartbeat = 100ms;
    po.name = "feeder";
    connection producer("zrpush://127.0.0.1:*", po);
    const auto m = producer.metrics();
    connection_options co = po;
    co.name = "trainer";
    co.credit = 4;
    connection consumer("zrpull://" + producer.endpoints().at(0).address.substr(6), co);
    std::thread sending([&] {
        for (int i = 0; i < 10; ++i) CHECK(producer.send(std::vector{floats(4)}));
    });
    const metric_labels trainer{{"connection", "feeder"}, {"consumer", "trainer"}};
    auto series = [&](std::string_view name) {
        metric_set set;
        m->collect(set);
        return set.value(name, trainer).value_or(-1);
    };
    // Four taken and held: the consumer's credits are spent, nothing acknowledged.
    std::vector<std::vector<tensor>> held;
    for (int i = 0; i < 4; ++i) held.push_back(consumer.recv().value());
    CHECK(eventually([&] { return series("tenbin_delivery_consumer_in_flight") == 4; }));
    CHECK(series("tenbin_delivery_consumer_credits") == 0);
    CHECK(series("tenbin_delivery_consumer_acknowledged_total") == 0);
    CHECK(value_of(*m, "tenbin_delivery_consumers") == 1);
    held.clear();
    for (int i = 0; i < 6; ++i) REQUIRE(consumer.recv());
    sending.join();
    CHECK(eventually([&] { return series("tenbin_delivery_consumer_acknowledged_total") == 10; }));
    CHECK(series("tenbin_delivery_consumer_in_flight") == 0);
    CHECK(series("tenbin_delivery_consumer_credits") == 4);
    CHECK(series("tenbin_delivery_consumer_redelivered_total") == 0);
    CHECK(value_of(*m, "tenbin_delivery_sent_total") == 10);
    CHECK(value_of(*m, "tenbin_delivery_acknowledged_total") == 10);
    CHECK(value_of(*m, "tenbin_messages_sent_total") == 10);
    metric_set set;
    m->collect(set);
    if (const auto problems = promtool_problems(to_prometheus_text(set))) CHECK_MESSAGE(problems->empty(), *problems);
}

TEST_CASE("+shm metrics: the sender's pool, segments and copy-ins, the receiver's mappings") {
    const std::string name = test_zmq::fresh_ipc_path();
    connection_options ro = bounded_options(5s);
    ro.name = "rx";
    connection pull("zpull+shm://" + name, ro);
    connection_options so = bounded_options(5s);
    so.name = "tx";
    so.shm_pool_bytes = 8 << 20;
    connection push("zpush+shm://" + name, so);
    const auto txm = push.metrics();
    const auto rxm = pull.metrics();
    // Two heap tensors copied in; one pool tensor sent as it is.
    REQUIRE(push.send(std::vector{floats(1000)}));
    REQUIRE(push.send(std::vector{floats(1000)}));
    tensor own = push.pool().acquire(dtype::f4, {1000});
    REQUIRE(push.send(std::vector{own}));
    own = tensor();
    std::vector<std::vector<tensor>> kept;
    for (int i = 0; i < 3; ++i) kept.push_back(pull.recv().value());
    CHECK(value_of(*txm, "tenbin_shm_copy_ins_total", {{"connection", "tx"}}) == 2);
    CHECK(value_of(*txm, "tenbin_shm_copy_in_bytes_total") == 8000);
    CHECK(value_of(*txm, "tenbin_shm_segments") >= 2);
    CHECK(value_of(*txm, "tenbin_shm_pool_in_use_bytes") >= 12000);
    CHECK(value_of(*txm, "tenbin_shm_pool_free_bytes") ==
          value_of(*txm, "tenbin_shm_pool_limit_bytes") - value_of(*txm, "tenbin_shm_pool_in_use_bytes"));
    CHECK(value_of(*txm, "tenbin_shm_peers") == 1);
    CHECK(value_of(*rxm, "tenbin_shm_senders", {{"connection", "rx"}}) == 1);
    CHECK(value_of(*rxm, "tenbin_shm_mappings") >= 2);
    CHECK(value_of(*rxm, "tenbin_shm_mapped_bytes") >= 12000);
    CHECK(value_of(*rxm, "tenbin_messages_received_total") == 3);
    // Given back: the pool's memory is free again.
    kept.clear();
    CHECK(eventually([&] { return value_of(*txm, "tenbin_shm_pool_in_use_bytes") == 0; }));
    CHECK(value_of(*txm, "tenbin_shm_pool_free_bytes") == 8 << 20);
    for (const auto& m : {txm, rxm}) {
        metric_set set;
        m->collect(set);
        if (const auto problems = promtool_problems(to_prometheus_text(set))) CHECK_MESSAGE(problems->empty(), *problems);
    }
}

#if TENBIN_HAS_EXPORTER
namespace {

// A loopback TCP port nobody listened on a moment ago.
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    ::close(fd);
    return ntohs(a.sin_port);
}

// A Prometheus server (Debian's `prometheus`) on loopback scraping
// `targets` every second, its data in a directory of its own; stopped
// when this goes.
class prometheus_server {
public:
    explicit prometheus_server(const std::vector<std::string>& targets) : dir_("tenbin-prometheus") {
        std::ofstream config(dir_ / "prometheus.yml");
        config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                  "scrape_configs:\n  - job_name: tenbin\n    static_configs:\n      - targets: [";
        for (std::size_t i = 0; i < targets.size(); ++i) config << (i ? ", '" : "'") << targets[i] << "'";
        config << "]\n";
        config.close();
        port_ = free_port();
        const std::vector<std::string> args = {
            "prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
            "--storage.tsdb.path=" + (dir_ / "data").string(),
            "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"};
        std::vector<char*> argv;
        for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        const std::string log = (dir_ / "log.txt").string();
        posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&actions, 1, 2);
        const int rc = posix_spawnp(&pid_, "prometheus", &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        REQUIRE_MESSAGE(rc == 0, "cannot start prometheus: ", std::strerror(rc));
    }
    ~prometheus_server() {
        ::kill(pid_, SIGTERM);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    prometheus_server(const prometheus_server&) = delete;
    prometheus_server& operator=(const prometheus_server&) = delete;

    // The value of the instant query `query` once it has one (Prometheus
    // started, scraped, and the series is there), waiting at most
    // `limit`; nothing past it.
    std::optional<double> query(const std::string& q, std::chrono::seconds limit = 60s) const {
        httplib::Client client("127.0.0.1", port_);
        client.set_connection_timeout(1s);
        const std::regex value(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            if (auto res = client.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{})) {
                std::smatch m;
                if (res->status == 200 && std::regex_search(res->body, m, value)) return std::stod(m[1].str());
            }
            std::this_thread::sleep_for(200ms);
        }
        return std::nullopt;
    }
    // Whether Prometheus runs `q` without an error (whatever its result).
    bool accepts(const std::string& q) const {
        httplib::Client client("127.0.0.1", port_);
        auto res = client.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
        return res && res->status == 200 && res->body.find(R"("status":"success")") != std::string::npos;
    }
    std::string log() const {
        std::stringstream s;
        s << std::ifstream(dir_ / "log.txt").rdbuf();
        return s.str();
    }

private:
    test_support::temp_dir dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("a real Prometheus server scrapes the exporter: the counts sent and received, the wait while the producer paused") {
    if (std::system("command -v prometheus > /dev/null 2>&1") != 0) {
        MESSAGE("prometheus is not installed (.ci/install-deps installs it): not checked");
        return;
    }
    loader_options lo;
    lo.connection.name = "trainer";
    loader l("zpull://127.0.0.1:*", lo);
    connection_options so = bounded_options();
    so.kind = socket_kind::push;
    so.name = "feeder";
    so.producer = "feeder";
    connection tx(l.endpoints().at(0).address, so);
    metrics_exporter ex("127.0.0.1:0", {l.metrics(), tx.metrics()});
    // 7 batches of 16 floats; the last after a pause of 300 ms, which the
    // trainer spends waiting.
    for (int i = 0; i < 6; ++i) REQUIRE(tx.send(std::vector{floats(16)}));
    for (int i = 0; i < 6; ++i) REQUIRE(l.next(5s));
    std::thread later([&] {
        std::this_thread::sleep_for(300ms);
        CHECK(tx.send(std::vector{floats(16)}));
    });
    REQUIRE(l.next(5s));
    later.join();
    if (const auto problems = promtool_problems(ex.text())) CHECK_MESSAGE(problems->empty(), *problems);

    prometheus_server prometheus({ex.address()});
    const auto sent = prometheus.query(R"(tenbin_messages_sent_total{connection="feeder"})");
    REQUIRE_MESSAGE(sent, "Prometheus gave no value within a minute; its log:\n", prometheus.log());
    CHECK(*sent == 7);
    CHECK(prometheus.query(R"(tenbin_bytes_sent_total{connection="feeder"})") == 448);
    CHECK(prometheus.query(R"(tenbin_messages_received_total{connection="trainer"})") == 7);
    CHECK(prometheus.query(R"(tenbin_bytes_received_total{connection="trainer"})") == 448);
    CHECK(prometheus.query(R"(tenbin_receive_wait_seconds_count{connection="trainer"})") == 7);
    const auto waited = prometheus.query(R"(tenbin_receive_wait_seconds_sum{connection="trainer"})");
    REQUIRE(waited);
    CHECK(*waited >= 0.29);
    // The histogram's buckets as Prometheus reads them: the pause is above 0.25 s.
    CHECK(prometheus.query(R"(tenbin_receive_wait_seconds_bucket{connection="trainer",le="0.25"})") <= 6);
    CHECK(prometheus.query(R"(up{job="tenbin"})") == 1);
    CHECK(ex.scrapes() >= 1);
    // Every query of the Grafana dashboard is one Prometheus takes.
    for (const std::string& q : dashboard_queries()) CHECK_MESSAGE(prometheus.accepts(q), q);
}
#endif

TEST_CASE("the Grafana dashboard queries only families tenbin exports") {
    const std::vector<std::string> queries = dashboard_queries();
    REQUIRE(queries.size() >= 10);
    std::set<std::string> exported;
    for (const detail::family_spec& f : detail::all_families()) exported.insert(std::string(f.name));
    const std::regex name(R"(tenbin_[a-z_]+)");
    for (const std::string& q : queries)
        for (auto it = std::sregex_iterator(q.begin(), q.end(), name); it != std::sregex_iterator(); ++it) {
            std::string n = it->str();
            for (const std::string suffix : {"_bucket", "_sum", "_count"})
                if (n.size() > suffix.size() && n.ends_with(suffix) && !exported.count(n))
                    n.resize(n.size() - suffix.size());
            CHECK_MESSAGE(exported.count(n), n, " in the dashboard's query ", q);
        }
}
