// tenbin stat: per-tensor statistics over a number of messages
// (tensorcom's tensorstat).
#include "common.hpp"
#include "interrupt.hpp"
#include "progress.hpp"
#include "sockets.hpp"

#include <tenbin/connect.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <unordered_map>

namespace tenbin::cli {
namespace {

struct stat_cli_options {
    std::vector<std::string> urls{"zsub://127.0.0.1:7880"};
    std::size_t count = 10;
    bool json = false;
    double timeout = 30;
    socket_choice socket;
    metrics_choice metrics;
};

template <class T>
double at(const std::byte* p, std::size_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, float16>) return v.to_float();
    else return static_cast<double>(v);
}

double element(const tensor& t, std::size_t i) {
    const std::byte* p = t.data().data();
    switch (t.dtype()) {
    case dtype::f2: return at<float16>(p, i);
    case dtype::f4: return at<float>(p, i);
    case dtype::f8: return at<double>(p, i);
    case dtype::i1: return at<std::int8_t>(p, i);
    case dtype::i2: return at<std::int16_t>(p, i);
    case dtype::i4: return at<std::int32_t>(p, i);
    case dtype::i8: return at<std::int64_t>(p, i);
    case dtype::u1: return at<std::uint8_t>(p, i);
    case dtype::u2: return at<std::uint16_t>(p, i);
    case dtype::u4: return at<std::uint32_t>(p, i);
    case dtype::u8: return at<std::uint64_t>(p, i);
    }
    return 0;
}

// Running statistics of the tensors of one layout (position in the message,
// info, dtype and shape) over all messages (Welford's update: stable for long
// runs). NaNs are counted apart.
struct summary {
    std::size_t index = 0;
    std::string info;
    dtype type = dtype::u1;
    shape_t shape;
    std::uint64_t messages = 0, n = 0, nans = 0;
    double min = std::numeric_limits<double>::infinity(), max = -min, mean = 0, m2 = 0;

    void add(const tensor& t) {
        ++messages;
        for (std::size_t i = 0; i < t.count(); ++i) {
            const double x = element(t, i);
            if (std::isnan(x)) {
                ++nans;
                continue;
            }
            ++n;
            min = std::min(min, x);
            max = std::max(max, x);
            const double d = x - mean;
            mean += d / static_cast<double>(n);
            m2 += d * (x - mean);
        }
    }
    double stddev() const { return n ? std::sqrt(m2 / static_cast<double>(n)) : 0; }
};

// Rows are bounded: a peer sending a new shape in every message would
// otherwise grow them without end.
constexpr std::size_t max_rows = std::size_t{1} << 16;

// A row's layout, the key of the row map.
struct layout {
    std::size_t index = 0;
    std::string info;
    dtype type = dtype::u1;
    shape_t shape;
    bool operator==(const layout&) const = default;
};

struct layout_hash {
    std::size_t operator()(const layout& l) const noexcept {
        std::size_t h = std::hash<std::string>{}(l.info);
        auto mix = [&h](std::uint64_t v) { h ^= std::hash<std::uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
        mix(l.index);
        mix(static_cast<std::uint64_t>(l.type));
        for (std::size_t d = 0; d < l.shape.size(); ++d) mix(static_cast<std::uint64_t>(l.shape[d]));
        return h;
    }
};

int run_stat(const stat_cli_options& opt) {
    connection_options co = connection_options_for(opt.socket, opt.urls.front());
    co.allow64 = true;
    name_for_metrics(opt.metrics, co, "stat");
    connection conn = open_connection(opt.socket, opt.urls, co, "tenbin stat");

    std::vector<summary> stats;
    std::unordered_map<layout, std::size_t, layout_hash> rows;  // layout -> its row in stats
    std::size_t malformed = 0, received = 0;
    progress report("tenbin stat", 2);
    // The timeout runs from the last good message: a peer sending only
    // malformed ones must not keep stat waiting for ever.
    using clock = std::chrono::steady_clock;
    auto last_good = clock::now();
    const interrupt_catcher catcher;
    const metrics_server metrics(opt.metrics, conn, "tenbin stat");
    const std::string of_count = opt.count ? " of " + std::to_string(opt.count) : std::string();
    while ((opt.count == 0 || received < opt.count) && !interrupted()) {
        std::optional<message> batch;
        try {
            const auto limit = deadline_in(opt.timeout);
            batch = receive_until(conn, limit ? std::optional(*limit - (clock::now() - last_good)) : std::nullopt);
        } catch (const error& e) {
            if (!about_one_message(e)) throw;
            ++malformed;
            std::cerr << "tenbin stat: error: " << name(e.code()) << ": " << cli_text(e.what()) << "\n";
            continue;
        }
        if (!batch && conn.stream_ended()) break;
        if (!batch && conn.epoch_ended()) continue;
        if (!batch) {
            if (interrupted()) break;
            std::cerr << "tenbin stat: error: timeout: " << received << of_count << " messages within "
                      << seconds_text(opt.timeout) << silence_hint(opt.urls, conn.endpoints()) << "\n";
            return exit_timeout;
        }
        last_good = clock::now();
        ++received;
        for (std::size_t i = 0; i < batch->tensors.size(); ++i) {
            const tensor& t = batch->tensors[i];
            layout key{i, std::string(t.info()), t.dtype(), t.shape()};
            auto [row, added] = rows.try_emplace(std::move(key), stats.size());
            if (added) {  // a new layout: a row of its own, in first-seen order
                if (stats.size() == max_rows) {
                    std::cerr << "tenbin stat: error: " << name(errc::limit_exceeded) << ": message " << received
                              << " brings more than " << max_rows
                              << " distinct layouts (index, info, dtype, shape), each a row of its own; stopped\n";
                    return exit_failed;
                }
                stats.push_back({.index = i, .info = row->first.info, .type = t.dtype(), .shape = t.shape()});
            }
            stats[row->second].add(t);
        }
        report.update(conn.stats());
    }
    report.finish(conn.stats());
    if (interrupted())
        std::cerr << "tenbin stat: interrupted after " << received << of_count << " messages ("
                  << interrupting_signal() << ")\n";

    if (opt.json) {
        nlohmann::ordered_json j;
        j["messages"] = received;
        if (interrupted()) j["interrupted"] = true;
        nlohmann::ordered_json ts = nlohmann::ordered_json::array();
        for (const summary& s : stats) {
            nlohmann::ordered_json o{{"index", s.index}, {"info", s.info},         {"dtype", std::string(code(s.type))},
                                     {"shape", s.shape}, {"messages", s.messages}, {"count", s.n},
                                     {"nan", s.nans}};
            if (s.n) o.update({{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"std", s.stddev()}});
            ts.push_back(o);
        }
        j["tensors"] = ts;
        std::cout << json_line(j) << '\n';
    } else {
        std::printf("%zu messages\n%5s %-8s %-5s %-18s %12s %12s %12s %12s %6s\n", received, "index", "info",
                    "dtype", "shape", "min", "max", "mean", "std", "msgs");
        // "-" where JSON has no value: a tensor without elements (or only NaNs).
        auto number = [](const summary& s, double x) {
            char text[32] = "-";
            if (s.n) std::snprintf(text, sizeof text, "%.6g", x);
            return std::string(text);
        };
        for (const summary& s : stats) {
            const std::string nans = s.nans ? " (" + std::to_string(s.nans) + " NaN)" : "";
            std::printf("%5zu %-8s %-5s %-18s %12s %12s %12s %12s %6llu%s\n", s.index,
                        s.info.empty() ? "-" : printable(s.info).c_str(), std::string(code(s.type)).c_str(),
                        shape_text(s.shape).c_str(), number(s, s.min).c_str(), number(s, s.max).c_str(),
                        number(s, s.mean).c_str(), number(s, s.stddev()).c_str(),
                        static_cast<unsigned long long>(s.messages), nans.c_str());
        }
    }
    if (interrupted()) return interrupted_status();
    return malformed ? exit_malformed : exit_ok;
}

}  // namespace

subcommand add_stat(CLI::App& parent) {
    auto opt = std::make_shared<stat_cli_options>();
    CLI::App* app = parent.add_subcommand(
        "stat", "Per-tensor min, max, mean and standard deviation over N messages (tensorstat)");
    app->add_option("URL", opt->urls,
                    "tensorcom URLs or ZeroMQ endpoints (one socket on all; braces expand;\n"
                    "see --socket); default: tensormon's zsub://127.0.0.1:7880");
    app->add_option("--count,-n", opt->count, "Messages to take; 0: until interrupted")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--json", opt->json, "Print the result as one JSON line");
    app->add_option("--timeout", opt->timeout, "Seconds to wait for each good message, malformed ones aside (0: forever);\nexit 2 after")
        ->check(nonnegative)
        ->capture_default_str();
    add_socket_choice(*app, opt->socket, {"sub", "pull", "pair"}, tenbin::socket_kind::sub, true);
    add_metrics_choice(*app, opt->metrics);
    app->footer(
        "Takes --count messages and prints the min, max, mean and standard deviation\n"
        "of each tensor's values over all of them (NaNs counted apart): a table, or\n"
        "with --json one line {\"messages\", \"tensors\": [{\"index\", \"info\", \"dtype\",\n"
        "\"shape\", \"messages\", \"count\", \"nan\", \"min\", \"max\", \"mean\", \"std\"}]}.\n"
        "Each layout has a row of its own: tensors are merged only when they have\n"
        "the same index in the message, info, dtype and shape (msgs: how many\n"
        "messages had it; at most 65536 rows, beyond which stat stops with exit\n"
        "status 1). Without values (no elements, or only NaNs) a row shows\n"
        "'-' and its JSON has no min, max, mean and std. A malformed message is\n"
        "reported on stderr and not counted.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it early: the summary of the messages taken\n"
        "so far is printed (JSON: \"interrupted\": true) and the exit status is 130\n"
        "(143 for SIGTERM).\n"
        "Exit status: 0 all arrived, 1 error (refused endpoint, ...), 2 timed out\n"
        "waiting for a message, 3 all arrived but some were malformed, 64 wrong\n"
        "options or arguments (bad URL, ...), 130 interrupted, 143 terminated.\n"
        "Examples:\n"
        "  tenbin stat zsub://localhost:7881 -n 100                  (SUB connects)\n"
        "  tenbin stat 'zsub://trainer:78{80..83}' --json\n"
        "  tenbin stat 'tcp://*:5555' --socket pull -n 100           (PULL binds)");
    return {app, [opt] { return run_stat(*opt); }};
}

}  // namespace tenbin::cli
