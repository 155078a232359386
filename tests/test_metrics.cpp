// Metrics: the set and its text format, the instruments.
#include "support.hpp"

#include "metrics/instruments.hpp"

#include <doctest/doctest.h>
#include <tenbin/metrics.hpp>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

using namespace tenbin;
using namespace std::chrono_literals;

namespace {

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
