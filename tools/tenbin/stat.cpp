// tenbin stat: per-tensor statistics over a number of messages
// (tensorcom's tensorstat).
#include "common.hpp"
#include "progress.hpp"
#include "sockets.hpp"

#include <tenbin/connect.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>

namespace tenbin::cli {
namespace {

struct stat_cli_options {
    std::vector<std::string> urls;
    std::size_t count = 10;
    bool json = false;
    double timeout = 30;
    socket_choice socket;
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

// Running statistics of one tensor position over all messages (Welford's
// update: stable for long runs). NaNs are counted apart.
struct summary {
    std::string info;
    dtype type = dtype::u1;
    shape_t shape;
    std::uint64_t n = 0, nans = 0;
    double min = std::numeric_limits<double>::infinity(), max = -min, mean = 0, m2 = 0;

    void add(const tensor& t) {
        info = t.info();
        type = t.dtype();
        shape = t.shape();
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

int run_stat(const stat_cli_options& opt) {
    connection_options co = connection_options_for(opt.socket, opt.urls.front(), tenbin::socket_kind::sub);
    co.allow64 = true;
    if (timeout_ms(opt.timeout) >= 0) co.recv_timeout = std::chrono::milliseconds(timeout_ms(opt.timeout));
    connection conn(opt.urls, co);
    for (const endpoint& ep : conn.endpoints())
        if (ep.bind) std::cerr << "tenbin stat: " << name(ep.kind) << " bound to " << ep.address << "\n";

    std::vector<summary> stats;
    std::size_t malformed = 0, received = 0;
    progress report("tenbin stat", 2);
    while (received < opt.count) {
        std::optional<std::vector<tensor>> batch;
        try {
            batch = conn.recv();
        } catch (const error& e) {
            ++malformed;
            std::cerr << "tenbin stat: error: " << name(e.code()) << ": " << one_line(e.what()) << "\n";
            continue;
        }
        if (!batch) {
            std::cerr << "tenbin stat: error: timeout: " << received << " of " << opt.count << " messages within "
                      << opt.timeout << " s\n";
            return exit_timeout;
        }
        ++received;
        if (stats.size() < batch->size()) stats.resize(batch->size());
        for (std::size_t i = 0; i < batch->size(); ++i) stats[i].add((*batch)[i]);
        report.update(conn.stats());
    }
    report.finish(conn.stats());

    if (opt.json) {
        nlohmann::ordered_json j;
        j["messages"] = received;
        nlohmann::ordered_json ts = nlohmann::ordered_json::array();
        for (std::size_t i = 0; i < stats.size(); ++i) {
            const summary& s = stats[i];
            nlohmann::ordered_json o{{"index", i},         {"info", s.info}, {"dtype", std::string(code(s.type))},
                                     {"shape", s.shape},   {"count", s.n},   {"nan", s.nans}};
            if (s.n) o.update({{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"std", s.stddev()}});
            ts.push_back(o);
        }
        j["tensors"] = ts;
        std::cout << json_line(j) << '\n';
    } else {
        std::printf("%zu messages\n%5s %-8s %-5s %-18s %12s %12s %12s %12s\n", received, "index", "info", "dtype",
                    "shape", "min", "max", "mean", "std");
        for (std::size_t i = 0; i < stats.size(); ++i) {
            const summary& s = stats[i];
            std::printf("%5zu %-8s %-5s %-18s %12.6g %12.6g %12.6g %12.6g%s\n", i, s.info.c_str(),
                        std::string(code(s.type)).c_str(), shape_text(s.shape).c_str(), s.min, s.max, s.mean,
                        s.stddev(), s.nans ? (" (" + std::to_string(s.nans) + " NaN)").c_str() : "");
        }
    }
    return malformed ? exit_malformed : exit_ok;
}

}  // namespace

subcommand add_stat(CLI::App& parent) {
    auto opt = std::make_shared<stat_cli_options>();
    CLI::App* app = parent.add_subcommand(
        "stat", "Per-tensor min, max, mean and standard deviation over N messages (tensorstat)");
    app->add_option("urls", opt->urls, "tensorcom URLs or ZeroMQ endpoints (one socket on all; braces expand)")
        ->required();
    app->add_option("--count,-n", opt->count, "messages to take")->capture_default_str();
    app->add_flag("--json", opt->json, "print the result as one JSON line");
    app->add_option("--timeout", opt->timeout, "seconds to wait for each message (0: forever); exit 2 after")
        ->capture_default_str();
    add_socket_choice(*app, opt->socket, {"sub", "pull", "pair"});
    return {app, [opt] { return run_stat(*opt); }};
}

}  // namespace tenbin::cli
