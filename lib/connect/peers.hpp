// Counting a socket's peers for the metrics (connection_options::count_peers):
// a ZeroMQ socket monitor read on a thread of its own, off the paths that
// send and receive.
#pragma once

#include "metrics/meter.hpp"

#include <zmq.hpp>

#include <memory>

namespace tenbin::detail {

struct peer_monitor;

// Keeps `meter`'s peer gauge: tcp and ipc connections the socket accepted
// or made, until they close. Start it before the socket binds or connects
// (a monitor sees only what happens after it starts), and at most one per
// socket (libzmq has one monitor a socket: not beside CURVE's). Like
// curve_guard, it never touches the socket again: destroy it before the
// context, before or after the socket closes; whoever closes the socket stops
// its monitor first (connection::impl::close_socket). Stopping waits at most
// about 50 ms for its thread.
class peer_watch {
public:
    peer_watch() noexcept;
    peer_watch(zmq::context_t& context, zmq::socket_ref socket, std::shared_ptr<connection_meter> meter);
    peer_watch(peer_watch&&) noexcept;
    peer_watch& operator=(peer_watch&&) noexcept;
    ~peer_watch();

private:
    std::unique_ptr<peer_monitor> monitor_;
};

}  // namespace tenbin::detail
