// Where a metrics exporter listens: "HOST:PORT", "[IPv6]:PORT", ":PORT" or
// "PORT" (loopback).
#pragma once

#include <string>
#include <string_view>

namespace tenbin::detail {

struct listen_address {
    std::string host;
    int port = 0;
};

// Throws bad_argument, saying what it takes, for anything else.
listen_address parse_listen_address(std::string_view address);
// "host:port", with an IPv6 host in brackets.
std::string format_address(const std::string& host, int port);

}  // namespace tenbin::detail
