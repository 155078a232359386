// tenbin tool: how URL-taking subcommands choose their socket. A tensorcom
// URL (zpush://, zsub+ipc://, ...) names the socket and who binds; a plain
// ZeroMQ endpoint takes --socket (or the command's default) and binds as
// tensorcom would for that kind. --bind/--connect override either.
#pragma once

#include <tenbin/connect.hpp>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tenbin::cli {

struct socket_choice {
    std::string socket;  ///< empty: from the URL, or the command's default
    bool bind = false;
    bool connect = false;
    int heartbeat_ms = 0;  ///< 0: no heartbeats
};

/// Adds --socket (one of `kinds`), --bind, --connect and --heartbeat-ms.
void add_socket_choice(CLI::App& app, socket_choice& choice, const std::vector<std::string>& kinds);

/// connection_options with kind and bind set from `choice`; when `url` is a
/// plain endpoint and no --socket was given, the kind is `plain_default`.
connection_options connection_options_for(const socket_choice& choice, const std::string& url,
                                          tenbin::socket_kind plain_default);

/// The endpoints `url` names (braces expand) for a socket that sends or,
/// with `receiving`, receives. A tensorcom URL implies the kind, which must
/// be one of `kinds`; a plain endpoint takes --socket or `plain_default`,
/// and binds as tensorcom would for that kind (a receiving PAIR binds, so
/// that two PAIR commands meet). Throws bad_url.
std::vector<endpoint> resolve_endpoints(const socket_choice& choice, const std::string& url,
                                        const std::vector<std::string>& kinds,
                                        tenbin::socket_kind plain_default, bool receiving);

/// Sets the chosen heartbeats on `socket`, then binds or connects it to
/// each endpoint; a refused address is bad_url (malformed) or io_error (in
/// use, unreachable). A wildcard bind's actual endpoint is printed on stderr.
void attach(zmq::socket_t& socket, const socket_choice& choice, const std::vector<endpoint>& endpoints,
            const std::string& who);

/// Prints, on stderr, the endpoints the connection bound to a wildcard
/// (tcp://host:*), so that a peer can be pointed at them.
void report_bound_endpoints(const connection& conn, const std::string& who);

}  // namespace tenbin::cli
