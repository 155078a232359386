// tenbin monitor: watch a stream of tensor messages (tensorcom's tensormon).
#include "common.hpp"
#include "interrupt.hpp"
#include "sockets.hpp"

#include <tenbin/connect.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace tenbin::cli {
namespace {

struct monitor_cli_options {
    std::vector<std::string> urls{"zsub://127.0.0.1:7880"};
    std::size_t count = 0;
    bool json = false;
    double interval = 1;
    double timeout = 0;
    socket_choice socket;
    metrics_choice metrics;
};

// "f2[256,3,224,224] images, i4[256] labels"
std::string layout(const std::vector<tensor>& tensors) {
    std::ostringstream out;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor& t = tensors[i];
        out << (i ? ", " : "") << code(t.dtype()) << shape_text(t.shape());
        if (!t.info().empty()) out << ' ' << printable(t.info());
    }
    return out.str();
}

// "epoch 2 (2 ended, 0 gaps, 0 duplicates)": where a numbered stream is.
std::string epoch_text(const connection& conn) {
    const stream_counters c = conn.stream_stats();
    return "epoch " + std::to_string(conn.epoch()) + " (" + std::to_string(c.epochs) + " ended, " +
           std::to_string(c.gaps) + " gaps, " + std::to_string(c.duplicates) + " duplicates)";
}

int run_monitor(const monitor_cli_options& opt) {
    using clock = std::chrono::steady_clock;
    connection_options co = connection_options_for(opt.socket, opt.urls.front());
    co.allow64 = true;
    name_for_metrics(opt.metrics, co, "monitor");
    connection conn = open_connection(opt.socket, opt.urls, co, "tenbin monitor");

    const bool live = !opt.json && ::isatty(STDOUT_FILENO) == 1;
    std::size_t total = 0, window_messages = 0, malformed = 0;
    std::uint64_t window_bytes = 0;
    std::vector<tensor> last;
    bool numbered = false;  // a message with a position came: epochs are shown
    auto window_start = clock::now(), last_arrival = clock::now();

    auto report = [&](bool final) {
        const double secs = std::chrono::duration<double>(clock::now() - window_start).count();
        const double rate = secs > 0 ? window_messages / secs : 0, mbps = secs > 0 ? window_bytes / secs / 1e6 : 0;
        if (opt.json) {
            nlohmann::ordered_json j;
            j["messages"] = total;
            j["rate"] = rate;
            j["mbps"] = mbps;
            j["malformed"] = malformed;
            j["refused"] = conn.refused_handshakes();
            if (numbered) {
                const stream_counters c = conn.stream_stats();
                j["epoch"] = conn.epoch();
                j["epochs"] = c.epochs;
                j["gaps"] = c.gaps;
                j["duplicates"] = c.duplicates;
            }
            nlohmann::ordered_json ts = nlohmann::ordered_json::array();
            for (const tensor& t : last)
                ts.push_back({{"info", t.info()}, {"dtype", std::string(code(t.dtype()))}, {"shape", t.shape()}});
            j["tensors"] = ts;
            std::cout << json_line(j) << std::endl;
        } else {
            char head[96];
            std::snprintf(head, sizeof head, "%8zu msgs %9.1f msg/s %9.1f MB/s", total, rate, mbps);
            const std::uint64_t refused = conn.refused_handshakes();
            std::cout << (live ? "\r" : "") << head << "  " << layout(last)
                      << (malformed ? "  (" + std::to_string(malformed) + " malformed)" : "")
                      << (refused ? "  (" + std::to_string(refused) + " refused handshakes)" : "")
                      << (numbered ? "  " + epoch_text(conn) : "")
                      << (live ? (final ? "\x1b[K\n" : "\x1b[K") : "\n") << std::flush;
        }
        window_start = clock::now();
        window_messages = 0;
        window_bytes = 0;
    };

    const auto interval = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(opt.interval));
    const interrupt_catcher catcher;
    const metrics_server metrics(opt.metrics, conn, "tenbin monitor");
    while ((opt.count == 0 || total < opt.count) && !interrupted()) {
        try {
            // Awake at least once per interval to report, even when nothing
            // comes, and in time for --timeout.
            auto wake = window_start + interval;
            if (const auto limit = deadline_in(opt.timeout))
                wake = std::min(wake, *limit - (clock::now() - last_arrival));
            if (auto batch = receive_until(conn, wake)) {
                ++total;
                ++window_messages;
                for (const tensor& t : batch->tensors) window_bytes += t.nbytes();
                numbered = numbered || batch->position.has_value();
                last = std::move(batch->tensors);
                last_arrival = clock::now();
            } else if (conn.epoch_ended() && !opt.json) {
                std::cout << (live ? "\r\x1b[K" : "") << "epoch " << conn.epoch() - 1 << " ended: " << epoch_text(conn)
                          << "\n" << std::flush;
            }
            if (conn.stream_ended()) break;
        } catch (const error& e) {
            if (!about_one_message(e)) throw;
            ++malformed;
            std::cerr << (live ? "\n" : "") << "tenbin monitor: error: " << name(e.code()) << ": "
                      << cli_text(e.what()) << "\n";
        }
        if (clock::now() - window_start >= std::chrono::duration<double>(opt.interval)) report(false);
        if (opt.timeout > 0 && clock::now() - last_arrival >= std::chrono::duration<double>(opt.timeout)) {
            report(true);
            std::cerr << "tenbin monitor: error: timeout: nothing for " << seconds_text(opt.timeout)
                      << silence_hint(opt.urls, conn.endpoints()) << "\n";
            return exit_timeout;
        }
    }
    report(true);
    if (interrupted()) return interrupted_status();
    return malformed ? exit_malformed : exit_ok;
}

}  // namespace

subcommand add_monitor(CLI::App& parent) {
    auto opt = std::make_shared<monitor_cli_options>();
    CLI::App* app = parent.add_subcommand(
        "monitor", "Watch a stream: messages/s, MB/s and tensor layout per interval (tensormon)");
    app->add_option("URL", opt->urls,
                    "tensorcom URLs or ZeroMQ endpoints (one socket on all; braces expand;\n"
                    "see --socket); default: tensormon's zsub://127.0.0.1:7880");
    app->add_option("--count,-n", opt->count, "Stop after this many messages; 0: until interrupted")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--json", opt->json, "One JSON line per interval");
    app->add_option("--interval", opt->interval, "Seconds between reports")->check(positive)->capture_default_str();
    app->add_option("--timeout", opt->timeout, "Exit with status 2 after this many seconds without a message (0: never)")
        ->check(nonnegative)
        ->capture_default_str();
    add_socket_choice(*app, opt->socket, {"sub", "pull", "pair"}, tenbin::socket_kind::sub, true);
    add_metrics_choice(*app, opt->metrics);
    app->footer(
        "Every --interval seconds, prints the messages so far, the messages and MB\n"
        "per second over the interval and the layout of the last message (on a\n"
        "terminal, one line rewritten in place); with --json, one line per interval\n"
        "{\"messages\", \"rate\", \"mbps\", \"malformed\", \"refused\", \"tensors\"}. A malformed\n"
        "message is reported on stderr and not counted. With --curve-cert, handshakes\n"
        "refused (a peer without keys, with a wrong server key, not allowed) are\n"
        "counted (\"refused\") and described on stderr. A numbered stream (tenbin serve\n"
        "--producer or --epochs) adds its epoch, the epochs ended and the batches lost\n"
        "(gaps) and received twice (duplicates): \"epoch\", \"epochs\", \"gaps\",\n"
        "\"duplicates\"; each epoch's end is a line of its own; the stream's end stops it.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it, with a last report.\n"
        "Exit status: 0 --count messages arrived (or the stream ended), 1 error (refused endpoint, ...),\n"
        "2 nothing arrived for --timeout seconds, 3 --count arrived but some were\n"
        "malformed, 64 wrong options or arguments (bad URL, ...), 130 interrupted\n"
        "(SIGINT), 143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin monitor zsub://localhost:7881                      (SUB connects)\n"
        "  tenbin monitor 'zsub://trainer:78{80..83}' --interval 5 --json\n"
        "  tenbin monitor 'tcp://*:5555' --socket pull -n 1000       (PULL binds)");
    return {app, [opt] { return run_monitor(*opt); }};
}

}  // namespace tenbin::cli
