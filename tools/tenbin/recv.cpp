// tenbin recv: receive ZeroMQ messages of tensors and describe them.
#include "common.hpp"
#include "interrupt.hpp"
#include "shard.hpp"
#include "sockets.hpp"

#include <tenbin/connection.hpp>

#include <iostream>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct recv_cli_options {
    std::string url;
    std::size_t count = 1;
    double timeout = 30;
    bool json = false;
    std::string save;
    bool force = false;
    socket_choice socket;
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
    if (json) {
        nlohmann::ordered_json j;
        j["tensors"] = describe(m.tensors);
        std::cout << json_line(j) << '\n';
    } else {
        std::uint64_t total = 0;
        for (const auto& t : m.tensors) total += t.nbytes();
        std::cout << "message " << number << ": " << (m.single ? "single-part" : "multipart") << ", "
                  << m.tensors.size() << (m.tensors.size() == 1 ? " tensor, " : " tensors, ")
                  << total << " data bytes\n";
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

int run_recv(const recv_cli_options& opt) {
    if (!opt.save.empty() && !is_shard(opt.save))
        throw usage_error("--save '" + opt.save + "': a shard is a .tar file (webdataset), e.g. recorded.tar");
    std::optional<shard_writer> shard;
    if (!opt.save.empty()) shard.emplace(opt.save, opt.force);
    connection_options co = connection_options_for(opt.socket, opt.url);
    co.linger = std::chrono::milliseconds(1000);  // replies only; never hang at exit
    connection conn = open_connection(opt.socket, {opt.url}, co, "tenbin recv");
    const socket_kind kind = conn.endpoints().front().kind;

    // What arrived before a timeout is kept too.
    const auto save = [&] {
        if (!shard) return;
        shard->finish();
        std::cerr << "tenbin recv: saved " << shard->members() << " messages to " << opt.save << "\n";
    };
    const auto answer = [&](const message& m) {
        if (owes_reply(kind, m)) (void)reply_until(conn, m, {}, deadline_in(opt.timeout));
    };

    const interrupt_catcher catcher;
    const std::string of_count = opt.count ? " of " + std::to_string(opt.count) : std::string();
    std::size_t malformed = 0, received = 0;
    for (std::size_t i = 1; (opt.count == 0 || i <= opt.count) && !interrupted(); ++i) {
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
            received = i;
            print_malformed(e, i, opt.json);
            message bad;
            if (const auto* with_envelope = dynamic_cast<const malformed_message*>(&e))
                for (const std::string& frame : with_envelope->envelope())
                    bad.envelope.emplace_back(frame.data(), frame.size());
            answer(bad);
            continue;
        }
        if (!m) {
            if (interrupted()) break;
            std::cerr << "tenbin recv: error: " << name(errc::timeout) << ": received " << i - 1 << of_count
                      << " messages; nothing arrived within " << seconds_text(opt.timeout)
                      << plain_endpoint_hint({opt.url}, conn.endpoints()) << std::endl;
            save();
            return exit_timeout;
        }
        received = i;
        print_message(*m, i, opt.json);
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
    app->add_option("-n,--count", opt->count, "How many messages to receive; 0: until interrupted")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_option("--timeout", opt->timeout,
                    "Seconds to wait for each message before giving up with exit status 2;\n"
                    "0 waits forever")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--json", opt->json,
                  "One JSON line per message: {\"tensors\": [{\"info\", \"dtype\", \"shape\", "
                  "\"nbytes\", \"sha256\"}, ...]}, or {\"error\": CLASS, \"message\": TEXT} "
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
    app->footer(
        "Receives --count messages, multipart or single-part (either is accepted, as\n"
        "Python tensorcom sends them), and describes each: a table, or with --json\n"
        "one line per message. A malformed message is reported (stderr, or a JSON\n"
        "error line on stdout) and counts as received; receiving goes on.\n"
        "A SUB socket subscribes to everything, or to the URL's #topic (zsub://h:p#topic);\n"
        "REP (and ROUTER, to REQ peers) answers each message with one empty frame.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it between messages; what arrived is kept\n"
        "(--save finishes the shard).\n"
        "Exit status: 0 all messages arrived and decoded, 1 error (refused endpoint,\n"
        "...), 2 timed out waiting for a message (even if some were malformed),\n"
        "3 all arrived but some were malformed, 64 wrong options or arguments (bad\n"
        "URL, ...), 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin recv 'tcp://*:5555' -n 100 --json                 (PULL binds)\n"
        "  tenbin recv zpull://*:7880 -n 1000 --save recorded.tar   (record a stream)\n"
        "  tenbin recv tcp://localhost:5556 --socket sub --timeout 0   (SUB connects)");
    return {app, [opt] { return run_recv(*opt); }};
}

}  // namespace tenbin::cli
