// libFuzzer target: connection URLs. Each input line is brace-expanded and
// parsed alone and with explicit options; then all lines are parsed as the
// URLs of one socket. Only bad_url may be thrown; expansions stay within
// their bound; an accepted URL gives a tcp, ipc or inproc endpoint.
//
// Expansion runs under a bound of 128 (the library's is 65,536, tested in
// test_url.cpp): the same code, but an input that reaches the bound costs
// microseconds, not the milliseconds of 65,536 strings, which held the
// target to a few thousand executions a second. parse_urls, which expands
// to 65,536, gets the lines whose expansions together stay within it.
#include "common.hpp"

#include "url/url_detail.hpp"

#include <tenbin/url.hpp>

#include <string>
#include <string_view>

namespace {

constexpr std::size_t fuzz_max_expansions = 128;

void check_url_error(const tenbin::error& e) {
    if (e.code() != tenbin::errc::bad_url) fuzz::fail("URL code threw a class other than bad_url:", e.what());
}

void check_endpoint(const tenbin::endpoint& ep) {
    const std::string_view a = ep.address;
    if (!a.starts_with("tcp://") && !a.starts_with("ipc://") && !a.starts_with("inproc://"))
        fuzz::fail("endpoint with an unknown transport:", ep.address.c_str());
    for (char c : a)
        if (static_cast<unsigned char>(c) < 32 || c == 127) fuzz::fail("control character in an endpoint");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> lines;
    for (std::size_t at = 0; at <= text.size() && lines.size() < 8;) {
        const std::size_t nl = std::min(text.find('\n', at), text.size());
        lines.emplace_back(text.substr(at, nl - at));
        at = nl + 1;
    }

    const tenbin::url_options options[] = {
        {}, {.kind = tenbin::socket_kind::pull}, {.kind = tenbin::socket_kind::sub, .bind = true}};
    std::vector<std::string> within;  // lines whose expansions, all together, stay within the fuzz bound
    std::size_t expansions = 0;
    for (const std::string& line : lines) {
        try {
            const auto expanded = tenbin::detail::brace_expand(line, fuzz_max_expansions);
            if (expanded.size() > fuzz_max_expansions) fuzz::fail("brace expansion above its bound");
            if (line.find_first_of("{}") == std::string::npos &&
                (expanded.size() != 1 || expanded[0] != line))
                fuzz::fail("text without braces did not come back as it was");
            expansions += expanded.size();
            if (expansions <= fuzz_max_expansions) within.push_back(line);
        } catch (const tenbin::error& e) {
            check_url_error(e);
            // Refused for another reason than its size: as cheap to refuse again.
            if (std::string_view(e.what()).find("more than") == std::string_view::npos) within.push_back(line);
        }
        for (const auto& o : options) {
            try {
                const tenbin::endpoint ep = tenbin::parse_url(line, o);
                check_endpoint(ep);
                if (o.kind && ep.kind != *o.kind) fuzz::fail("parse_url ignored an explicit kind");
                if (o.bind && ep.bind != *o.bind) fuzz::fail("parse_url ignored an explicit bind");
            } catch (const tenbin::error& e) {
                check_url_error(e);
            }
        }
    }
    try {
        if (within.empty()) return 0;
        const auto eps = tenbin::parse_urls(within, {});
        if (eps.empty()) fuzz::fail("parse_urls returned no endpoint");
        for (const auto& ep : eps) {
            check_endpoint(ep);
            if (ep.kind != eps.front().kind) fuzz::fail("parse_urls mixed socket kinds");
        }
    } catch (const tenbin::error& e) {
        check_url_error(e);
    }
    return 0;
}
