#include "sockets.hpp"

#include <algorithm>
#include <iostream>

namespace tenbin::cli {

namespace {
bool is_plain_endpoint(const std::string& url) {
    return url.starts_with("tcp://") || url.starts_with("ipc://") || url.starts_with("inproc://");
}
}  // namespace

void add_socket_choice(CLI::App& app, socket_choice& choice, const std::vector<std::string>& kinds) {
    std::string names;
    for (const auto& k : kinds) names += (names.empty() ? "" : "|") + k;
    app.add_option("--socket", choice.socket,
                   "socket kind (" + names + "); a tensorcom URL implies it, a plain endpoint needs it")
        ->check(CLI::IsMember(kinds));
    auto* b = app.add_flag("--bind", choice.bind, "bind, whatever the URL's default");
    auto* c = app.add_flag("--connect", choice.connect, "connect, whatever the URL's default");
    b->excludes(c);
    app.add_option("--heartbeat-ms", choice.heartbeat_ms,
                   "ping each peer this often and drop one silent for three pings (a dead host, a cut "
                   "network); 0: off")
        ->check(CLI::NonNegativeNumber);
}

connection_options connection_options_for(const socket_choice& choice, const std::string& url,
                                          tenbin::socket_kind plain_default) {
    connection_options co;
    if (!choice.socket.empty()) co.kind = parse_socket_kind(choice.socket);
    else if (is_plain_endpoint(url)) co.kind = plain_default;
    if (choice.bind) co.bind = true;
    if (choice.connect) co.bind = false;
    if (choice.heartbeat_ms > 0) co.heartbeat = std::chrono::milliseconds(choice.heartbeat_ms);
    return co;
}

std::vector<endpoint> resolve_endpoints(const socket_choice& choice, const std::string& url,
                                        const std::vector<std::string>& kinds,
                                        tenbin::socket_kind plain_default, bool receiving) {
    const connection_options co = connection_options_for(choice, url, plain_default);
    const std::vector<std::string> urls{url};
    std::vector<endpoint> eps = parse_urls(urls, {.kind = co.kind, .bind = co.bind});
    const std::string kind(name(eps.front().kind));
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
        throw error(errc::bad_url, "'" + url + "' makes a " + kind + " socket, which cannot do this");
    if (receiving && is_plain_endpoint(url) && !co.bind && eps.front().kind == tenbin::socket_kind::pair)
        for (endpoint& ep : eps) ep.bind = true;
    return eps;
}

void attach(zmq::socket_t& socket, const socket_choice& choice, const std::vector<endpoint>& endpoints,
            const std::string& who) {
    if (choice.heartbeat_ms > 0) set_heartbeat(socket, std::chrono::milliseconds(choice.heartbeat_ms));
    for (const endpoint& ep : endpoints) {
        try {
            if (ep.bind)
                socket.bind(ep.address);
            else
                socket.connect(ep.address);
        } catch (const zmq::error_t& e) {
            const int n = e.num();
            const bool url_problem = n == EINVAL || n == EPROTONOSUPPORT || n == ENOCOMPATPROTO;
            throw error(url_problem ? errc::bad_url : errc::io_error,
                        std::string(ep.bind ? "cannot bind to " : "cannot connect to ") + ep.address + ": " +
                            e.what());
        }
        if (ep.bind && ep.address.find('*') != std::string::npos)
            std::cerr << who << ": bound to " << socket.get(zmq::sockopt::last_endpoint) << std::endl;
    }
}

void report_bound_endpoints(const connection& conn, const std::string& who) {
    for (const endpoint& ep : conn.endpoints())
        if (ep.bind) std::cerr << who << ": " << name(ep.kind) << " bound to " << ep.address << "\n";
}

}  // namespace tenbin::cli
