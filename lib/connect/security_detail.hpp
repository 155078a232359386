// What the three rooms of CURVE share: keys (curve.cpp), the ZAP handler and
// monitor threads (zap.cpp), certificate files (certificates.cpp); and what
// connections share with enable_curve: checking CURVE settings, the monitor
// and ZAP domain of a secured socket, and its CURVE socket options by role.
// A connection sets the role per endpoint (libzmq copies the options at each
// bind or connect), so one socket may serve and connect.
#pragma once

#include <tenbin/security.hpp>

#include <string>
#include <string_view>

namespace tenbin::detail {

// Throws errc::unsupported when this libzmq has no CURVE.
void require_curve();

// Why `key` is no CURVE key (40 characters of Z85), or empty when it is one.
std::string key_problem(std::string_view key);

// The 32 bytes of a Z85 key that key_problem accepts.
std::string key_bytes(const std::string& z85);

// Whether the secret key of `keys` is that of its public key.
bool keys_match(const curve_keys& keys);

// Throws bad_argument, naming `whose` keys, unless both are keys of one pair.
void check_keys(const curve_keys& keys, const std::string& whose);

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
