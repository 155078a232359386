// tenbin recv: receive ZeroMQ messages of tensors and describe them.
#include "common.hpp"
#include "shard.hpp"
#include "sockets.hpp"

#include <tenbin/zmq.hpp>

#include <iostream>
#include <optional>
#include <memory>
#include <span>
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
    socket_choice socket;
};

// A REP socket must answer every request before it may receive again; a
// ROUTER answers peers that expect it (REQ peers, whose envelope ends with an
// empty delimiter), malformed messages included. The answer is one empty
// frame.
void reply(zmq::socket_t& socket, zmq::socket_type type, std::span<const zmq::const_buffer> envelope) {
    if (type == zmq::socket_type::rep) {
        socket.send(zmq::message_t{}, zmq::send_flags::none);
    } else if (type == zmq::socket_type::router && envelope.size() >= 2 && envelope.back().size() == 0) {
        for (const auto& frame : envelope) socket.send(frame, zmq::send_flags::sndmore);
        socket.send(zmq::message_t{}, zmq::send_flags::none);
    }
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
    const auto endpoints = resolve_endpoints(opt.socket, {opt.url});
    const zmq::socket_type type = zmq_socket_type(endpoints.front().kind);
    if (!opt.save.empty() && !is_shard(opt.save))
        throw usage_error("--save '" + opt.save + "': a shard is a .tar file (webdataset), e.g. recorded.tar");
    std::optional<shard_writer> shard;
    if (!opt.save.empty()) shard.emplace(opt.save);
    // What arrived before a timeout is kept too.
    const auto save = [&] {
        if (!shard) return;
        shard->finish();
        std::cerr << "tenbin recv: saved " << shard->members() << " messages to " << opt.save << "\n";
    };

    // +shm: received through a connection, which maps the shared memory.
    std::optional<connection> shm;
    if (endpoints.front().shm) {
        const tenbin::socket_kind kind = endpoints.front().kind;
        if (kind != tenbin::socket_kind::pull && kind != tenbin::socket_kind::sub && kind != tenbin::socket_kind::pair)
            throw usage_error("+shm receives on pull, sub or pair sockets");
        connection_options co = connection_options_for(opt.socket, opt.url);
        if (const int ms = timeout_ms(opt.timeout); ms >= 0) co.recv_timeout = std::chrono::milliseconds(ms);
        shm.emplace(open_connection(opt.socket, {opt.url}, co, "tenbin recv"));
    }

    recv_options ro;
    ro.decode.limits.max_bytes = opt.socket.max_bytes;
    zmq::context_t context;
    // Before the socket: it outlives the socket, whose lingering messages
    // stay under its allow-list to the end.
    curve_guard curve;
    // Bounded before attach (libzmq applies it to new connections): a
    // flooding peer fills 16 messages, not libzmq's 1000.
    zmq::socket_t socket = bounded_socket(context, type, ro.decode.limits);
    socket.set(zmq::sockopt::rcvtimeo, timeout_ms(opt.timeout));
    socket.set(zmq::sockopt::linger, 1000);  // replies only; never hang at exit
    // A zsub URL's #topic: subscribed to, and taken off the front of each message.
    const std::string& topic = endpoints.front().topic;
    if (type == zmq::socket_type::sub) socket.set(zmq::sockopt::subscribe, topic);
    if (!shm) {
        curve = secure(context, socket, opt.socket, endpoints, "tenbin recv");
        attach(socket, opt.socket, endpoints, "tenbin recv");
    }

    if (type == zmq::socket_type::router) ro.envelope = envelope_spec::router();
    if (type == zmq::socket_type::sub && !topic.empty()) ro.envelope = envelope_spec::topic();
    // ZeroMQ matches prefixes: a longer topic ("training" for "train") is not ours.
    const auto other_topic = [&](std::span<const zmq::const_buffer> envelope) {
        return !topic.empty() && type == zmq::socket_type::sub &&
               (envelope.empty() || std::string_view(static_cast<const char*>(envelope.front().data()),
                                                     envelope.front().size()) != topic);
    };

    std::size_t malformed = 0;
    for (std::size_t i = 1; i <= opt.count; ++i) {
        std::optional<message> m;
        try {
            if (shm) {
                if (auto t = shm->recv()) {
                    m.emplace();
                    m->tensors = std::move(*t);
                }
            } else {
                m = zrecv(socket, ro);
            }
        } catch (const tenbin::error& e) {
            // zrecv drained the message: report it, answer it (a ROUTER
            // finds its envelope in the error) and go on with the next.
            const auto* with_envelope = dynamic_cast<const malformed_message*>(&e);
            if (with_envelope && other_topic(with_envelope->envelope_buffers())) {
                --i;
                continue;
            }
            ++malformed;
            print_malformed(e, i, opt.json);
            reply(socket, type, with_envelope ? with_envelope->envelope_buffers() : std::vector<zmq::const_buffer>{});
            continue;
        }
        if (!m) {
            std::cerr << "tenbin recv: error: " << name(errc::timeout) << ": received " << i - 1
                      << " of " << opt.count << " messages; nothing arrived within " << seconds_text(opt.timeout)
                      << plain_endpoint_hint({opt.url}, endpoints) << std::endl;
            save();
            return exit_timeout;
        }
        if (other_topic(m->envelope_buffers())) {
            --i;
            continue;
        }
        print_message(*m, i, opt.json);
        if (shard) shard->add(m->tensors);
        reply(socket, type, m->envelope_buffers());
    }
    save();
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
    app->add_option("-n,--count", opt->count, "How many messages to receive")
        ->check(positive)
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
                    "KEY.ten per message, in order (000000.ten, 000001.ten, ...); replay it with\n"
                    "tenbin send/serve --file FILE.tar");
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
        "Exit status: 0 all messages arrived and decoded, 1 error (refused endpoint,\n"
        "...), 2 timed out waiting for a message (even if some were malformed),\n"
        "3 all arrived but some were malformed, 64 wrong options or arguments (bad\n"
        "URL, ...).\n"
        "Examples:\n"
        "  tenbin recv 'tcp://*:5555' -n 100 --json                 (PULL binds)\n"
        "  tenbin recv zpull://*:7880 -n 1000 --save recorded.tar   (record a stream)\n"
        "  tenbin recv tcp://localhost:5556 --socket sub --timeout 0   (SUB connects)");
    return {app, [opt] { return run_recv(*opt); }};
}

}  // namespace tenbin::cli
