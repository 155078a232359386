// tenbin recv: receive ZeroMQ messages of tensors and describe them.
#include "common.hpp"
#include "interrupt.hpp"
#include "shard.hpp"
#include "sockets.hpp"

#include <tenbin/connection.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct recv_cli_options {
    std::string url;
    std::optional<std::size_t> count;  // default 1, or 0 (no bound) with --epochs
    std::size_t epochs = 0;            // 0: not bounded by epochs
    std::string state;                 // --state FILE: resumed from, saved at exit
    double timeout = 30;
    bool json = false;
    std::string save;
    bool force = false;
    socket_choice socket;
    metrics_choice metrics;
};

// A REP socket must answer every request before it may receive again; a
// ROUTER answers peers that expect it (REQ peers, whose envelope ends with an
// empty delimiter), malformed messages included. The answer is one empty
// frame (the empty list).
bool owes_reply(socket_kind kind, const message& m) {
    return kind == socket_kind::rep ||
           (kind == socket_kind::router && m.envelope.size() >= 2 && m.envelope.back().size() == 0);
}

void print_message(const message& m, std::size_t number, bool json) {
    const std::optional<stream_position>& at = m.position;
    if (json) {
        nlohmann::ordered_json j;
        if (at) {
            j["producer"] = at->producer;
            j["epoch"] = at->epoch;
            j["seq"] = at->seq;
        }
        j["tensors"] = describe(m.tensors);
        std::cout << json_line(j) << '\n';
    } else {
        std::uint64_t total = 0;
        for (const auto& t : m.tensors) total += t.nbytes();
        std::cout << "message " << number << ": " << (m.single ? "single-part" : "multipart") << ", "
                  << m.tensors.size() << (m.tensors.size() == 1 ? " tensor, " : " tensors, ") << total
                  << " data bytes";
        if (at)
            std::cout << " (producer " << printable(at->producer) << ", epoch " << at->epoch << ", seq " << at->seq
                      << ")";
        std::cout << '\n';
        if (!m.tensors.empty()) print_table(std::cout, m.tensors);
    }
    std::cout.flush();
}

void print_malformed(const tenbin::error& e, std::size_t number, bool json) {
    if (json) {
        nlohmann::ordered_json j;
        j["error"] = std::string(name(e.code()));
        j["message"] = cli_text(e.what());
        std::cout << json_line(j) << std::endl;
    } else {
        std::cerr << "tenbin recv: message " << number << ": error: " << name(e.code()) << ": "
                  << cli_text(e.what()) << std::endl;
    }
}

// The state --state FILE holds: what the receiver had taken, to resume.
std::optional<stream_state> read_state(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;  // a first run
    std::ostringstream text;
    text << in.rdbuf();
    try {
        return stream_state_from_json(text.str());
    } catch (const tenbin::error& e) {
        throw error(e.code(), "--state " + path + ": " + e.what());
    }
}

// Written beside and renamed, so that a kill leaves the old state or the new.
void write_state(const std::string& path, const stream_state& state) {
    const std::string part = path + ".part";
    {
        std::ofstream out(part, std::ios::trunc);
        out << to_json(state) << '\n';
        out.flush();
        if (!out) throw error(errc::io_error, "--state: cannot write " + part);
    }
    if (std::rename(part.c_str(), path.c_str()) != 0)
        throw error(errc::io_error, "--state: cannot rename " + part + " to " + path + ": " + std::strerror(errno));
}

int run_recv(const recv_cli_options& opt) {
    if (!opt.save.empty() && !is_shard(opt.save))
        throw usage_error("--save '" + opt.save + "': a shard is a .tar file (webdataset), e.g. recorded.tar");
    const std::size_t count = opt.count.value_or(opt.epochs ? 0 : 1);
    std::optional<shard_writer> shard;
    if (!opt.save.empty()) shard.emplace(opt.save, opt.force);
    connection_options co = connection_options_for(opt.socket, opt.url);
    co.linger = std::chrono::milliseconds(1000);  // replies only; never hang at exit
    name_for_metrics(opt.metrics, co, "recv");
    if (!opt.state.empty()) co.resume_from = read_state(opt.state);
    connection conn = open_connection(opt.socket, {opt.url}, co, "tenbin recv");
    const socket_kind kind = conn.endpoints().front().kind;

    // What arrived before a timeout is kept too.
    const auto save = [&] {
        if (!opt.state.empty()) write_state(opt.state, conn.state());
        if (!shard) return;
        shard->finish();
        std::cerr << "tenbin recv: saved " << shard->members() << " messages to " << opt.save << "\n";
    };
    const auto answer = [&](const message& m) {
        if (owes_reply(kind, m)) (void)reply_until(conn, m, {}, deadline_in(opt.timeout));
    };

    const interrupt_catcher catcher;
    const metrics_server metrics(opt.metrics, conn, "tenbin recv");
    const std::string of_count = count ? " of " + std::to_string(count) : std::string();
    std::size_t malformed = 0, received = 0, epochs = 0;
    while ((count == 0 || received < count) && (opt.epochs == 0 || epochs < opt.epochs) && !interrupted()) {
        std::optional<message> m;
        try {
            m = receive_until(conn, deadline_in(opt.timeout));
        } catch (const tenbin::error& e) {
            if (!about_one_message(e)) {
                save();  // what arrived before the socket failed is kept
                throw;
            }
            // The connection drained the message: report it, answer it (a
            // ROUTER finds its envelope in the error) and go on with the next.
            ++malformed;
            print_malformed(e, ++received, opt.json);
            message bad;
            if (const auto* with_envelope = dynamic_cast<const malformed_message*>(&e))
                for (const std::string& frame : with_envelope->envelope())
                    bad.envelope.emplace_back(frame.data(), frame.size());
            answer(bad);
            continue;
        }
        if (!m && conn.epoch_ended()) {
            ++epochs;
            std::cerr << "tenbin recv: epoch " << conn.epoch() - 1 << " ended after " << received << " messages"
                      << std::endl;
        }
        if (!m && conn.stream_ended()) {
            std::cerr << "tenbin recv: the stream ended after " << received << " messages" << std::endl;
            break;
        }
        if (!m && conn.epoch_ended()) continue;
        if (!m) {
            if (interrupted()) break;
            std::cerr << "tenbin recv: error: " << name(errc::timeout) << ": received " << received << of_count
                      << " messages; nothing arrived within " << seconds_text(opt.timeout)
                      << silence_hint({opt.url}, conn.endpoints()) << std::endl;
            save();
            return exit_timeout;
        }
        print_message(*m, ++received, opt.json);
        if (shard) shard->add(m->tensors);
        answer(*m);
    }
    save();
    if (interrupted()) {
        std::cerr << "tenbin recv: interrupted after " << received << of_count << " messages ("
                  << interrupting_signal() << ")" << std::endl;
        return interrupted_status();
    }
    return malformed ? exit_malformed : exit_ok;
}

}  // namespace

subcommand add_recv(CLI::App& parent) {
    auto opt = std::make_shared<recv_cli_options>();
    auto* app = parent.add_subcommand("recv", "Receive ZeroMQ messages of tensors and describe them");
    app->add_option("URL", opt->url,
                    "tensorcom URL (zpull://host:port, ...) or ZeroMQ endpoint, e.g.\n"
                    "tcp://*:5555 or ipc:///tmp/t.sock (see --socket)")
        ->required();
    app->add_option("-n,--count", opt->count,
                    "How many messages to receive (default 1, or no bound with --epochs); 0: until\n"
                    "interrupted")
        ->check(nonnegative);
    app->add_option("--epochs", opt->epochs,
                    "Stop after this many epochs of a numbered stream (tenbin serve --epochs)")
        ->check(positive);
    app->add_option("--state", opt->state,
                    "Resume a numbered stream from the state in FILE (if it exists: batches taken\n"
                    "before are dropped as duplicates) and save the state there at exit (JSON)")
        ->type_name("FILE");
    app->add_option("--timeout", opt->timeout,
                    "Seconds to wait for each message before giving up with exit status 2;\n"
                    "0 waits forever")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--json", opt->json,
                  "One JSON line per message: {\"tensors\": [{\"info\", \"dtype\", \"shape\", "
                  "\"nbytes\", \"sha256\"}, ...]} (first \"producer\", \"epoch\", \"seq\" for a "
                  "numbered message), or {\"error\": CLASS, \"message\": TEXT} "
                  "for a malformed one");
    app->add_option("--save", opt->save,
                    "Record the messages that decode into FILE.tar, a webdataset shard: one member\n"
                    "KEY.ten per message, in order (000000.ten, 000001.ten, ...), dated when it\n"
                    "came; written as FILE.tar.part (one recorder per FILE) and renamed at the end,\n"
                    "Ctrl-C included; replay it with tenbin send/serve --file FILE.tar");
    app->add_flag("--force", opt->force,
                  "Replace --save's FILE when it exists (a regular file only: a FIFO, device,\n"
                  "directory or symbolic link is never replaced); without it, recv fails with\n"
                  "status 1 before receiving")
        ->needs(app->get_option("--save"));
    add_socket_choice(*app, opt->socket, {"pull", "sub", "router", "rep", "pair"}, tenbin::socket_kind::pull,
                      true);
    add_metrics_choice(*app, opt->metrics);
    app->footer(
        "Receives --count messages, multipart or single-part (either is accepted, as\n"
        "Python tensorcom sends them), and describes each: a table, or with --json\n"
        "one line per message. A malformed message is reported (stderr, or a JSON\n"
        "error line on stdout) and counts as received; receiving goes on.\n"
        "A SUB socket subscribes to everything, or to the URL's #topic (zsub://h:p#topic);\n"
        "REP (and ROUTER, to REQ peers) answers each message with one empty frame.\n"
        "A numbered stream (tenbin serve --producer or --epochs, --acked) gives each\n"
        "message's producer, epoch and seq; epoch ends and the stream's end are said on\n"
        "stderr, a batch received twice is dropped, and the stream's end stops recv.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it between messages; what arrived is kept\n"
        "(--save finishes the shard, --state is saved).\n"
        "Exit status: 0 all messages arrived and decoded (or the stream ended), 1 error (refused endpoint,\n"
        "...), 2 timed out waiting for a message (even if some were malformed),\n"
        "3 all arrived but some were malformed, 64 wrong options or arguments (bad\n"
        "URL, ...), 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin recv 'tcp://*:5555' -n 100 --json                 (PULL binds)\n"
        "  tenbin recv zpull://*:7880 -n 1000 --save recorded.tar   (record a stream)\n"
        "  tenbin recv zrpull://feeder:7880 --acked --epochs 3 --state s.json --json\n"
        "  tenbin recv tcp://localhost:5556 --socket sub --timeout 0   (SUB connects)");
    return {app, [opt] { return run_recv(*opt); }};
}

}  // namespace tenbin::cli
