// The ZeroMQ setups of the tests: sockets that time out and drop what is
// left at close, fresh addresses on each transport, linked pairs.
#pragma once

#include "support.hpp"

#include <tenbin/connect.hpp>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <string>

namespace test_zmq {

inline constexpr int receive_timeout_ms = 5000;

enum class transport { inproc, ipc, tcp };
constexpr transport all_transports[] = {transport::inproc, transport::ipc, transport::tcp};

inline const char* transport_name(transport t) {
    switch (t) {
    case transport::inproc: return "inproc";
    case transport::ipc: return "ipc";
    case transport::tcp: return "tcp";
    }
    return "?";
}

// A path unique per call for an ipc socket file (or a +shm name), in a
// directory removed when the tests end.
inline std::string fresh_ipc_path() {
    static std::atomic<int> counter{0};
    static const test_support::temp_dir ipc_dir("tenbin-zmq");
    return (ipc_dir.path() / ("s" + std::to_string(counter++))).string();
}

// A fresh address to bind: inproc names and ipc paths are unique per call;
// tcp lets the kernel pick the port.
inline std::string bind_address(transport t) {
    static std::atomic<int> counter{0};
    switch (t) {
    case transport::inproc: return "inproc://tenbin-test-" + std::to_string(counter++);
    case transport::ipc: return "ipc://" + fresh_ipc_path();
    case transport::tcp: return "tcp://127.0.0.1:*";
    }
    return {};
}

// Options for the tests' connections: sends and receives wait at most
// `wait`, and close gives queued messages `linger`.
inline tenbin::connection_options bounded_options(std::chrono::milliseconds wait = std::chrono::seconds(5),
                                                  std::chrono::milliseconds linger = std::chrono::seconds(1)) {
    tenbin::connection_options o;
    o.recv_timeout = wait;
    o.send_timeout = wait;
    o.linger = linger;
    return o;
}

// Every socket of these tests: receives and sends time out, close drops
// whatever is left.
inline zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type) {
    zmq::socket_t s(ctx, type);
    s.set(zmq::sockopt::rcvtimeo, receive_timeout_ms);
    s.set(zmq::sockopt::sndtimeo, receive_timeout_ms);
    s.set(zmq::sockopt::linger, 0);
    return s;
}

// Binds `server` and connects `client` to where it really listens.
inline void link(zmq::socket_t& server, zmq::socket_t& client, transport t) {
    server.bind(bind_address(t));
    client.connect(server.get(zmq::sockopt::last_endpoint));
}

// A ROUTER and a DEALER linked over inproc, for the envelope tests; `ctx`
// makes any other socket a test needs.
struct router_and_dealer {
    zmq::context_t ctx;
    zmq::socket_t router = make_socket(ctx, zmq::socket_type::router);
    zmq::socket_t dealer = make_socket(ctx, zmq::socket_type::dealer);
    router_and_dealer() { link(router, dealer, transport::inproc); }
};

// A PULL socket and a PUSH connected to it (over inproc unless told): a
// fixture, or a local where a test needs another transport. (Not taken
// apart by a structured binding: clang 14 cannot capture one in a lambda.)
struct pull_and_push {
    zmq::context_t ctx;
    zmq::socket_t pull = make_socket(ctx, zmq::socket_type::pull);
    zmq::socket_t push = make_socket(ctx, zmq::socket_type::push);
    explicit pull_and_push(transport t = transport::inproc) { link(pull, push, t); }
};

}  // namespace test_zmq
