// What connections and loaders share: their default context, which socket
// kinds can send or receive, deadlines.
#pragma once

#include <tenbin/url.hpp>

#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <string>

namespace tenbin::detail {

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

inline bool can_send(socket_kind k) noexcept { return k != socket_kind::pull && k != socket_kind::sub; }
inline bool can_receive(socket_kind k) noexcept { return k != socket_kind::push && k != socket_kind::pub; }

}  // namespace tenbin::detail
