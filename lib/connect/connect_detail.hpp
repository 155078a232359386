// What connections and loaders share: their default context, which socket
// kinds can send or receive, deadlines.
#pragma once

#include <tenbin/connection.hpp>
#include <tenbin/url.hpp>

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tenbin::detail {

class connection_meter;

// Inproc endpoints only meet within one context, so connections and
// loaders made without a context share a process-wide one (alive while any
// of them is) when any of their endpoints is inproc. Others get a context
// of their own, hence their own I/O thread: one shared thread would make a
// loader and a sender in one process take turns at tcp speed.
std::shared_ptr<zmq::context_t> default_context(std::span<const std::string> urls, const url_options& opt);

// `timeout` from now; the end of time when that is past what the clock can
// hold (milliseconds::max() means "wait for ever", not an overflow).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
    using clock = std::chrono::steady_clock;
    const clock::time_point now = clock::now();
    if (timeout >= std::chrono::floor<std::chrono::milliseconds>(clock::time_point::max() - now))
        return clock::time_point::max();
    return now + timeout;
}

// A timeout for the C APIs (zmq_poll, poll, socket options) that take int milliseconds.
inline int to_ms(std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX));
}

// The bytes of a batch's tensor data (statistics, queue bounds).
inline std::uint64_t data_bytes(tensor_span batch) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) n += batch[i].data.size();
    return n;
}

// The subscription a named subscriber adds (connection_options::name): a
// topic no tenbin message starts with (a header starts with a dtype code).
inline const std::string name_topic = "\x01~tenbin-subscriber:";

// A producer name made up for this process: host, process id, random.
std::string made_up_producer_name();

// CLOCK_REALTIME in nanoseconds, as position frames carry it.
inline std::uint64_t realtime_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

// A connection's receive without its stream tracking, for the loader,
// which follows streams on its own thread with its queue in view.
struct tracked;
struct connection_access {
    static std::optional<tracked> receive(connection& c, zmq::recv_flags flags);
    // Acked consumers: what a resumed consumer has, for its producers (thread-safe).
    static void seed(connection& c, const stream_state& s);
    // Acked consumers: see delivery::flush_acks (thread-safe).
    static void flush_acks(connection& c);
    static std::shared_ptr<connection_meter> meter(connection& c);
    // Any thread: a receive waiting for a +shm sender gives up (errc::closed).
    static void interrupt(connection& c) noexcept;
    // The socket's ZMQ_FD when receiving is reading the ZeroMQ socket and
    // nothing else (no delivery thread, no +shm link), else -1: after a
    // receive found nothing, it turns readable when a message may have
    // come, so a thread can wait on it without using the socket.
    static int pollable_fd(connection& c);
};

inline bool can_send(socket_kind k) noexcept { return k != socket_kind::pull && k != socket_kind::sub; }
inline bool can_receive(socket_kind k) noexcept { return k != socket_kind::push && k != socket_kind::pub; }

}  // namespace tenbin::detail
