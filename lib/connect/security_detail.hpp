// What connections share with enable_curve: checking CURVE settings, the
// monitor and ZAP domain of a secured socket, and its CURVE socket options
// by role. A connection sets the role per endpoint (libzmq copies the
// options at each bind or connect), so one socket may serve and connect.
#pragma once

#include <tenbin/security.hpp>

namespace tenbin::detail {

// Throws errc::unsupported without CURVE, bad_argument for a bad key, or a
// connecting socket without the server's key.
void check_curve_options(const curve_options& opt, bool serves, bool connects);
// Starts the monitor of `socket` (on `context`, the socket's), and, when it
// serves with an allow-list, gives it a domain in the context's ZAP handler.
// Call before the socket binds or connects.
curve_guard watch_curve(zmq::context_t& context, zmq::socket_ref socket, const curve_options& opt, bool serves);
// The options for the binds that follow.
void set_curve_server(zmq::socket_ref socket, const curve_options& opt);
// The options for the connects that follow.
void set_curve_client(zmq::socket_ref socket, const curve_options& opt);

}  // namespace tenbin::detail
