// The parts of a connection (see connection.hpp), shared by the files that
// implement it: construction and endpoints (connection.cpp), sending
// (connection_send.cpp), receiving and streams (connection_receive.cpp),
// metrics (connection_metrics.cpp).
#pragma once

#include <tenbin/connection.hpp>

#include "connect/connect_detail.hpp"
#include "connect/delivery.hpp"
#include "connect/link.hpp"
#include "connect/peers.hpp"
#include "connect/security_detail.hpp"
#include "connect/stream_tracker.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <unistd.h>

namespace tenbin {

namespace detail {

// Whether `socket` has a message before `deadline`.
inline bool readable_before(zmq::socket_ref socket, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        zmq_pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
        const int rc = zmq_poll(&item, 1, to_ms(left));
        if (rc > 0) return true;
        if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
    }
}

// Runs `f`; what libzmq throws (a socket error, a terminated context)
// becomes a tenbin::error, so that a connection's caller catches one type.
template <class F>
auto socket_call(const char* what, F&& f) {
    try {
        return f();
    } catch (const zmq::error_t& e) {
        if (e.num() == ETERM || e.num() == ENOTSOCK)
            throw error(errc::closed, std::string("cannot ") + what + ": the connection's ZeroMQ context was "
                                                                "terminated (or its socket closed) meanwhile");
        throw error(errc::io_error, std::string("cannot ") + what + ": " + e.what());
    }
}

// "this connection's socket (tcp://...) is a pull socket, which cannot send".
[[noreturn]] inline void cannot(const endpoint& ep, const std::string& what) {
    throw error(errc::bad_argument, "this connection's socket (" + ep.address + ") is a " +
                                        std::string(name(ep.kind)) + " socket, which cannot " + what);
}

inline bool has_topic(const connection_options& opt, socket_kind kind) {
    return !opt.topic.empty() && (kind == socket_kind::pub || kind == socket_kind::sub);
}

}  // namespace detail

struct connection::impl {
    std::shared_ptr<zmq::context_t> context;
    // Between the two: its threads and sockets end after the socket closes
    // and before the context can terminate.
    curve_guard curve;
    detail::peer_watch peers;  // as curve
    zmq::socket_t socket;
    connection_options opt;
    std::vector<endpoint> endpoints;
    socket_kind kind{};
    bool shm = false;           // +shm endpoints
    std::vector<std::string> connected;  // acked: the routing ids given to the endpoints connected to
    bool serves_curve = false;  // a ZAP handler admits CURVE clients
    statistics stats;
    recv_options receiving;     // made once (perf: decode options hold a vector)
    std::uint64_t other_topics = 0;
    std::set<std::string> said;  // notices given
    // Streams: the numbering of what is sent, and what received is given when.
    std::optional<stream_position> numbering;
    std::optional<detail::stream_tracker> tracker;
    std::deque<detail::stream_event> ready;  // given by the tracker, not yet returned
    std::vector<detail::stream_event> given;  // the tracker's output for one message (kept: perf)
    std::uint64_t consumer_epoch = 0;
    bool epoch_ended = false, stream_ended = false;
    // PUB watching its audience (an XPUB socket): subscribers joined, the
    // named ones, and the current epoch's start kept for late ones.
    bool xpub = false;
    std::size_t subscribers = 0;
    std::multiset<std::string> subscriber_names;
    bool joined = false;  // a subscriber joined since the last send
    std::deque<std::pair<std::vector<tensor>, stream_position>> retained;
    void absorb_subscriptions();
    bool wait_for_audience();
    // After the socket, so that it goes first (+shm: its side channel).
    std::unique_ptr<detail::link> link;
    // Acked delivery: the thread that runs the socket; goes before the link.
    std::unique_ptr<detail::delivery> delivery;
    std::shared_ptr<detail::connection_meter> meter;
    // A +shm receiver's counts (detail::shm_receiver_counters) as of its last
    // receive: they are the receiving thread's to read, a scrape reads these.
    std::array<std::atomic<std::uint64_t>, 8> shm_received{};
    std::atomic<bool> shm_receives{false};
    void publish_shm_received();

    // Before any part a scrape reads goes.
    ~impl() {
        if (meter) meter->detach();
    }
    // What a scrape reads of the parts (thread-safe readings only).
    void collect(detail::metric_writer& w) const;
    std::optional<message> take(zmq::recv_flags flags);

    void open_endpoints(std::vector<endpoint> eps);
    void notice(const std::string& key, const std::string& text);
    std::optional<message> receive(zmq::recv_flags flags);
    std::optional<detail::tracked> receive_tracked(zmq::recv_flags flags);
    std::optional<detail::tracked> delivered(std::optional<std::chrono::milliseconds> wait);
    std::optional<message> next(zmq::recv_flags flags);
    // Before the socket closes (see transport/ipc_readers.hpp).
    void await_ipc_readers() const;
    // Stops the socket's monitor, then closes it.
    void close_socket();
    void stop_delivery() {
        if (delivery) delivery->stop(opt.linger);
    }
    bool send(tensor_span tensors, std::span<const zmq::const_buffer> envelope);
    bool send_mark(stream_position::mark m);
    detail::stream_tracker& streams() {
        // Made on first use: a connection that never sees a position has none.
        if (!tracker) tracker.emplace(opt.streams, 1024, opt.decode.limits.max_bytes, !opt.acked);
        return *tracker;
    }
    void check_open(const char* what) const {
        // libzmq would say "Socket operation on non-socket", or touch a null handle.
        if (!socket.handle())
            throw error(errc::bad_argument, std::string("cannot ") + what + ": the connection is closed (or moved from)");
    }
};

}  // namespace tenbin
