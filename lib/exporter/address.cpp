#include "exporter/address.hpp"

#include <tenbin/error.hpp>

#include <charconv>

namespace tenbin::detail {

listen_address parse_listen_address(std::string_view address) {
    const auto bad = [&](const std::string& why) {
        return error(errc::bad_argument, "metrics address '" + std::string(address) + "': " + why +
                                             " (HOST:PORT, [IPv6]:PORT, or PORT for 127.0.0.1)");
    };
    listen_address out{"127.0.0.1", 0};
    std::string_view port = address;
    if (const auto colon = address.rfind(':'); colon != std::string_view::npos) {
        std::string_view host = address.substr(0, colon);
        port = address.substr(colon + 1);
        if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
            host = host.substr(1, host.size() - 2);
            if (host.empty()) throw bad("empty IPv6 address");
        } else if (host.find_first_of("[]:") != std::string_view::npos) {
            throw bad("an IPv6 address goes in brackets");
        }
        if (!host.empty()) out.host = host;
    }
    int n = -1;
    const auto r = std::from_chars(port.data(), port.data() + port.size(), n);
    if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || n < 0 || n > 65535)
        throw bad("'" + std::string(port) + "' is no port (0 to 65535)");
    out.port = n;
    return out;
}

std::string format_address(const std::string& host, int port) {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace tenbin::detail
