// tenbin send: the tensors of a file as ZeroMQ messages.
#include "common.hpp"
#include "interrupt.hpp"
#include "sockets.hpp"

#include <tenbin/connection.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct send_cli_options {
    std::string url;
    std::string file;
    std::size_t count = 1;
    bool single = false;
    socket_choice socket;
    std::optional<double> delay;
    double timeout = 30;
    double linger = 5;
    bool verbose = false;
    bool tensorcom = false;
};

int run_send(const send_cli_options& opt) {
    // One message, or a recorded shard's messages in order.
    std::vector<std::vector<tensor>> messages;
    std::vector<std::string> sources;
    try {
        messages = load_messages(opt.file, &sources);
    } catch (...) {
        print_current_error(opt.file);
        return current_error_status();
    }

    if (opt.tensorcom)
        for (std::size_t m = 0; m < messages.size(); ++m) check_tensorcom_flag(messages[m], sources[m]);

    const auto endpoints = resolve_endpoints(opt.socket, {opt.url});
    const socket_kind kind = endpoints.front().kind;
    const bool is_req = kind == socket_kind::req;
    if (endpoints.front().shm && opt.single)
        throw usage_error("--single has no +shm form: shared memory replaces the data frames");
    connection_options co = connection_options_for(opt.socket, opt.url);
    co.multipart = !opt.single;
    co.allow64 = true;  // the file's tensors as they are
    // Queued messages get this long to leave at exit.
    co.linger = std::chrono::milliseconds(static_cast<std::int64_t>(std::min(opt.linger * 1000.0, 1e12)));
    // With no receiver, sending times out (status 2) instead of queueing a
    // message that is dropped at exit; not for REQ, where a reply that
    // arrives just before the peer disconnects could be dropped (and a REQ
    // with no peer times out on the reply anyway).
    co.immediate = !is_req;
    pub_audience::prepare(co, kind);
    connection conn = open_connection(opt.socket, {opt.url}, co, "tenbin send");
    pub_audience peers(conn);

    const interrupt_catcher catcher;
    sleep_unless_interrupted(opt.delay.value_or(kind == socket_kind::pub ? 1.0 : 0.0));

    const char* where = "tenbin send";
    const std::size_t total = opt.count * messages.size();  // 0: until interrupted
    const auto numbered = [&](std::size_t i) {
        return "message " + std::to_string(i + 1) + (total ? " of " + std::to_string(total) : std::string());
    };
    std::size_t sent = 0;
    for (; (total == 0 || sent < total) && !interrupted(); ++sent) {
        const std::size_t i = sent;
        const std::vector<tensor>& tensors = messages[i % messages.size()];
        if (!send_until(conn, tensors, deadline_in(opt.timeout))) {
            if (interrupted()) break;
            std::cerr << where << ": error: " << name(errc::timeout) << ": " << numbered(i)
                      << " could not be sent within " << seconds_text(opt.timeout) << " (is a receiver there?)"
                      << silence_hint({opt.url}, conn.endpoints()) << std::endl;
            return exit_timeout;
        }
        if (is_req) {
            // A REQ socket must take the whole reply before sending again;
            // whatever it holds.
            bool replied = false;
            try {
                replied = receive_until(conn, deadline_in(opt.timeout)).has_value();
            } catch (const tenbin::error&) {
                replied = true;  // not tensors, but a reply (drained)
            }
            if (!replied) {
                if (interrupted()) break;
                std::cerr << where << ": error: " << name(errc::timeout) << ": no reply to " << numbered(i)
                          << " within " << seconds_text(opt.timeout) << std::endl;
                return exit_timeout;
            }
        }
        peers.sample();
        if (opt.verbose)
            std::cerr << where << ": sent " << numbered(i) << " ("
                      << (opt.single ? "single-part" : "multipart") << ", " << tensors.size()
                      << (tensors.size() == 1 ? " tensor)" : " tensors)") << std::endl;
    }
    if (opt.socket.acked && !interrupted() && !acknowledged_until(conn, sent, deadline_in(opt.timeout)) &&
        !interrupted()) {
        std::cerr << where << ": error: " << name(errc::timeout) << ": " << conn.delivery_stats().acknowledged
                  << " of " << sent << " messages were acknowledged within " << seconds_text(opt.timeout)
                  << std::endl;
        return exit_timeout;
    }
    peers.warn_if_nobody(where, sent, "a longer --delay gives subscribers time to join");
    if (interrupted()) {
        // Those queued still get --linger to leave, as the connection closes.
        std::cerr << where << ": interrupted after " << sent << " messages (" << interrupting_signal() << ")"
                  << std::endl;
        return interrupted_status();
    }
    return exit_ok;
}

}  // namespace

subcommand add_send(CLI::App& parent) {
    auto opt = std::make_shared<send_cli_options>();
    auto* app = parent.add_subcommand("send", "Send the tensors of a file as ZeroMQ messages");
    app->add_option("URL", opt->url,
                    "tensorcom URL (zpush://host:port, ...) or ZeroMQ endpoint, e.g.\n"
                    "tcp://localhost:5555 or ipc:///tmp/t.sock (see --socket)")
        ->required();
    app->add_option("-f,--file", opt->file,
                    "File whose tensors make the message: .ten, .ten.zst, .npy, .npz or .safetensors\n"
                    "(names become infos), '-' = stdin (.ten, or .ten.zst by its magic); a .tar\n"
                    "shard (tenbin recv --save) replays its messages in order")
        ->required();
    app->add_option("-n,--count", opt->count,
                    "How many times to send the message (or the shard's messages); 0: until interrupted")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--single", opt->single,
                  "Send one frame holding the chunked buffer instead of a multipart message");
    add_socket_choice(*app, opt->socket, {"push", "pub", "dealer", "req", "pair"}, tenbin::socket_kind::push,
                      false);
    app->add_option("--delay", opt->delay,
                    "Seconds to wait after bind/connect before the first message, so that\n"
                    "subscribers can join (default: 1 for pub, 0 otherwise)")
        ->check(nonnegative);
    app->add_option("--timeout", opt->timeout,
                    "Seconds to wait for a message to be accepted (and for each reply with\n"
                    "--socket req); 0 waits forever")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_option("--linger", opt->linger,
                    "Seconds queued messages may take to leave at exit before they are\n"
                    "dropped (0 = drop at once)")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("-v,--verbose", opt->verbose, "Report each message sent on stderr");
    app->add_flag("--tensorcom", opt->tensorcom,
                  "Refuse to send what a Python tensorcom receiver cannot decode (u4, rank-0 tensors)");
    app->footer(
        "Sends the tensors of a .ten file (or single-part buffer) as one ZeroMQ\n"
        "message, --count times: multipart [header, data, header, data, ...] or,\n"
        "with --single, one frame holding the whole chunked buffer. Both are what\n"
        "Python tensorcom sends and receives. A REQ socket waits for a reply to each\n"
        "message. At exit, queued messages get --linger seconds to leave. For\n"
        "generated tensors, or batches at a rate, use tenbin serve --synthetic.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it between messages; those queued still get\n"
        "--linger seconds.\n"
        "Exit status: 0 sent, 1 error (unreadable file, refused endpoint, ...),\n"
        "2 timed out (no receiver took a message within --timeout, or no reply),\n"
        "64 wrong options or arguments (bad URL, ...), 130 interrupted (SIGINT),\n"
        "143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin send tcp://localhost:5555 -f batch.ten -n 100     (PUSH connects)\n"
        "  tenbin send 'tcp://*:5556' --socket pub -f batch.ten     (PUB binds)\n"
        "  tenbin send ipc:///tmp/tensors.sock --single -f batch.ten\n"
        "  tenbin send zpush://localhost:7880 -f recorded.tar       (replay a shard)");
    return {app, [opt] { return run_send(*opt); }};
}

}  // namespace tenbin::cli
