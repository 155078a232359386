#include <tenbin/error.hpp>
#include <tenbin/url.hpp>

#include "url/url_detail.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace tenbin {

namespace {

// Expansion stops here: a URL list is for a few dozen endpoints, and a
// hostile pattern like "{1..99999}{1..99999}" must not eat memory.
constexpr std::size_t default_max_expansions = 65536;

// The URL as a message quotes it: control bytes escaped (a NUL would end
// the message where what() is read as a C string), long ones cut.
std::string quoted_url(std::string_view url) {
    constexpr std::size_t max_shown = 256;
    std::string out = "'";
    for (char c : url.substr(0, max_shown)) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u != 0x7f) {
            out += c;
            continue;
        }
        constexpr char hex[] = "0123456789abcdef";
        out += {'\\', 'x', hex[u >> 4], hex[u & 15]};
    }
    out += url.size() > max_shown ? "'... (" + std::to_string(url.size()) + " bytes)" : "'";
    return out;
}

[[noreturn]] void bad_url(std::string_view url, const std::string& why) {
    throw error(errc::bad_url, quoted_url(url) + ": " + why);
}

// Expansion recurses per group: patterns with deeper nesting or more
// groups than any endpoint list needs are refused.
constexpr int max_brace_depth = 16;
constexpr std::size_t max_brace_groups = 256;

// Index of the '}' closing the '{' at `open`, or npos.
std::size_t matching_brace(std::string_view s, std::size_t open, std::string_view whole) {
    int depth = 0;
    for (std::size_t i = open; i < s.size(); ++i) {
        if (s[i] == '{') {
            if (++depth > max_brace_depth) bad_url(whole, "braces nested too deeply");
        } else if (s[i] == '}' && --depth == 0) {
            return i;
        }
    }
    return std::string_view::npos;
}

// Splits the inside of a brace group at its top-level commas.
std::vector<std::string_view> top_level_alternatives(std::string_view inner) {
    std::vector<std::string_view> out;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i < inner.size(); ++i) {
        if (inner[i] == '{') ++depth;
        else if (inner[i] == '}') --depth;
        else if (inner[i] == ',' && depth == 0) {
            out.push_back(inner.substr(start, i - start));
            start = i + 1;
        }
    }
    out.push_back(inner.substr(start));
    return out;
}

std::optional<long long> to_number(std::string_view s) {
    long long v = 0;
    if (s.empty()) return std::nullopt;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// "1..3", "08..11", "a..e", optionally "..step"; nothing if not a range.
//
// Bounds, steps and positions are computed in unsigned 64-bit arithmetic
// and the items are counted before any is made: with signed arithmetic,
// "{0..9223372036854775807..9223372036854775807}" overflowed (undefined
// behaviour, then an endless loop), "{a..z..4294967296}" truncated its step
// to int 0 (an endless loop filling memory) and a step or bound of
// -9223372036854775808 was negated (undefined). Fixed for the fuzz target
// fuzz/fuzz_url.cpp; see tests/test_hostile.cpp.
std::optional<std::vector<std::string>> expand_range(std::string_view inner, std::string_view whole,
                                                     std::size_t max_expansions) {
    using u64 = unsigned long long;
    const auto magnitude = [](long long v) { return v < 0 ? 0ULL - static_cast<u64>(v) : static_cast<u64>(v); };
    const std::size_t dots = inner.find("..");
    if (dots == std::string_view::npos) return std::nullopt;
    const std::string_view from = inner.substr(0, dots);
    std::string_view to = inner.substr(dots + 2);
    u64 step = 1;
    if (const std::size_t dots2 = to.find(".."); dots2 != std::string_view::npos) {
        const auto s = to_number(to.substr(dots2 + 2));
        if (!s || *s == 0) return std::nullopt;
        step = magnitude(*s);
        to = to.substr(0, dots2);
    }
    long long a = 0, b = 0;
    if (const auto na = to_number(from), nb = to_number(to); na && nb) {
        a = *na;
        b = *nb;
    } else if (from.size() == 1 && to.size() == 1 && std::isalpha(static_cast<unsigned char>(from[0])) &&
               std::isalpha(static_cast<unsigned char>(to[0]))) {
        a = static_cast<unsigned char>(from[0]);
        b = static_cast<unsigned char>(to[0]);
    } else {
        return std::nullopt;
    }
    const bool numeric = !(from.size() == 1 && std::isalpha(static_cast<unsigned char>(from[0])));
    const bool up = a <= b;
    const u64 span = up ? static_cast<u64>(b) - static_cast<u64>(a) : static_cast<u64>(a) - static_cast<u64>(b);
    if (span / step >= max_expansions)
        bad_url(whole, "range {" + std::string(inner) + "} has more than " + std::to_string(max_expansions) +
                           " items");
    const u64 count = span / step + 1;
    // Zero padding: "{08..11}" gives 08 09 10 11, as Python's braceexpand does.
    const bool padded = numeric && ((from.size() > 1 && from[0] == '0') || (to.size() > 1 && to[0] == '0'));
    const std::size_t width = padded ? std::max(from.size(), to.size()) : 0;
    std::vector<std::string> out;
    out.reserve(static_cast<std::size_t>(count));
    for (u64 i = 0; i < count; ++i) {
        // Within [min(a, b), max(a, b)]: the conversion back is exact.
        const u64 offset = i * step;  // <= span
        const auto v = static_cast<long long>(up ? static_cast<u64>(a) + offset : static_cast<u64>(a) - offset);
        if (!numeric) {
            out.emplace_back(1, static_cast<char>(v));
            continue;
        }
        std::string text = std::to_string(magnitude(v));
        if (text.size() + (v < 0) < width) text.insert(0, width - text.size() - (v < 0), '0');
        out.push_back((v < 0 ? "-" : "") + text);
    }
    return out;
}

void expand_into(std::string_view pattern, std::string_view whole, std::vector<std::string>& out,
                 std::size_t max_expansions) {
    const std::size_t open = pattern.find('{');
    if (open == std::string_view::npos) {
        if (pattern.find('}') != std::string_view::npos) bad_url(whole, "unbalanced '}'");
        out.emplace_back(pattern);
        return;
    }
    if (pattern.substr(0, open).find('}') != std::string_view::npos) bad_url(whole, "unbalanced '}'");
    const std::size_t close = matching_brace(pattern, open, whole);
    if (close == std::string_view::npos) bad_url(whole, "unbalanced '{'");
    const std::string_view prefix = pattern.substr(0, open);
    const std::string_view inner = pattern.substr(open + 1, close - open - 1);
    const std::string_view suffix = pattern.substr(close + 1);

    std::vector<std::string> middles;
    const auto alternatives = top_level_alternatives(inner);
    if (alternatives.size() > 1) {
        for (std::string_view alt : alternatives) expand_into(alt, whole, middles, max_expansions);
    } else if (auto range = expand_range(inner, whole, max_expansions)) {
        middles = std::move(*range);
    } else {
        // A group with neither commas nor a range stays literal, braces and all.
        std::vector<std::string> inside;
        expand_into(inner, whole, inside, max_expansions);
        for (auto& s : inside) middles.push_back("{" + s + "}");
    }
    std::vector<std::string> tails;
    expand_into(suffix, whole, tails, max_expansions);
    if (middles.size() * tails.size() + out.size() > max_expansions)
        bad_url(whole, "expands to more than " + std::to_string(max_expansions) + " URLs");
    for (const auto& m : middles)
        for (const auto& t : tails) out.push_back(std::string(prefix) + m + t);
}

struct scheme_info {
    std::string_view name;
    socket_kind kind;
    bool bind;
};
constexpr scheme_info schemes[] = {
    {"zpush", socket_kind::push, false}, {"zpull", socket_kind::pull, true},
    {"zpub", socket_kind::pub, true},    {"zsub", socket_kind::sub, false},
    {"zrpush", socket_kind::push, true}, {"zrpull", socket_kind::pull, false},
    {"zrpub", socket_kind::pub, false},  {"zrsub", socket_kind::sub, true},
};

constexpr std::string_view kind_names[] = {"push", "pull", "pub", "sub", "req",
                                           "rep", "dealer", "router", "pair"};

}  // namespace

std::string_view name(socket_kind kind) noexcept { return kind_names[static_cast<int>(kind)]; }

std::optional<socket_kind> parse_socket_kind(std::string_view text) noexcept {
    std::string lower(text);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (std::size_t i = 0; i < std::size(kind_names); ++i)
        if (kind_names[i] == lower) return static_cast<socket_kind>(i);
    return std::nullopt;
}

bool binds_by_default(socket_kind kind) noexcept {
    return kind == socket_kind::pull || kind == socket_kind::pub || kind == socket_kind::rep ||
           kind == socket_kind::router;
}

std::vector<std::string> brace_expand(std::string_view pattern) {
    return detail::brace_expand(pattern, default_max_expansions);
}

std::vector<std::string> detail::brace_expand(std::string_view pattern, std::size_t max_expansions) {
    if (std::count(pattern.begin(), pattern.end(), '{') > static_cast<std::ptrdiff_t>(max_brace_groups))
        bad_url(pattern, "more than 256 brace groups");
    std::vector<std::string> out;
    expand_into(pattern, pattern, out, max_expansions);
    return out;
}

namespace {

// 0 to 65535 in decimal digits, or "*". libzmq reads a port with atoi and
// keeps 16 bits of it: 99999 would bind 34463 and -5 65531.
bool valid_port(std::string_view port) {
    if (port == "*") return true;
    if (port.empty() || port.size() > 5) return false;
    unsigned value = 0;
    for (char c : port) {
        if (c < '0' || c > '9') return false;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value <= 65535;
}

}  // namespace

endpoint parse_url(std::string_view url, const url_options& opt) {
    const std::size_t sep = url.find("://");
    if (sep == std::string_view::npos || sep == 0) bad_url(url, "expected SCHEME://ADDRESS");
    // Python's urlparse, which tensorcom uses, lowercases the scheme.
    std::string scheme_text(url.substr(0, sep));
    for (char& c : scheme_text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view scheme = scheme_text;
    std::string_view rest = url.substr(sep + 3);
    std::string_view transport = "tcp";
    if (const std::size_t plus = scheme.find('+'); plus != std::string_view::npos) {
        transport = scheme.substr(plus + 1);
        scheme = scheme.substr(0, plus);
    }

    endpoint ep;
    const auto known = std::find_if(std::begin(schemes), std::end(schemes),
                                    [&](const scheme_info& s) { return s.name == scheme; });
    if (known != std::end(schemes)) {
        if (opt.kind && *opt.kind != known->kind)
            bad_url(url, "scheme " + std::string(scheme) + " makes a " + std::string(name(known->kind)) +
                             " socket, not " + std::string(name(*opt.kind)));
        ep.kind = known->kind;
        ep.bind = known->bind;
        // A tensorcom URL is a URL: '#topic' is a fragment, '?...' a query
        // (a plain ZeroMQ endpoint below is taken as it is).
        if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
            ep.topic = std::string(rest.substr(hash + 1));
            rest = rest.substr(0, hash);
            if (!ep.topic.empty() && ep.kind != socket_kind::pub && ep.kind != socket_kind::sub)
                bad_url(url, "a #topic is for pub and sub sockets, not " + std::string(name(ep.kind)));
        }
        if (const std::size_t q = rest.find('?'); q != std::string_view::npos)
            bad_url(url, "a query ('" + std::string(rest.substr(q)) + "') is no part of a ZeroMQ address: tensorcom "
                         "would drop it silently and use " + std::string(transport) + "://" +
                         std::string(rest.substr(0, q)) + "; remove it");
    } else if (scheme == "tcp" || scheme == "ipc" || scheme == "inproc" || scheme == "shm") {
        if (transport != "tcp" || url.substr(0, sep).find('+') != std::string_view::npos)
            bad_url(url, "a plain ZeroMQ endpoint takes no '+transport'");
        if (!opt.kind)
            bad_url(url, "a plain ZeroMQ endpoint needs a socket kind (push, pull, pub, sub, ...), or use "
                         "zpush/zpull/zpub/zsub");
        transport = scheme;  // shm: below
        ep.kind = *opt.kind;
        ep.bind = binds_by_default(*opt.kind);
    } else {
        bad_url(url, "unknown scheme '" + std::string(scheme) +
                         "'; use zpush, zpull, zpub, zsub, zrpush, zrpull, zrpub, zrsub, tcp, ipc, inproc or shm");
    }
    // +shm: ZeroMQ carries the message over ipc, the bytes go in shared memory.
    if (transport == "shm") {
        ep.shm = true;
        transport = "ipc";
    }
    if (transport != "tcp" && transport != "ipc" && transport != "inproc")
        bad_url(url, "unknown transport '" + std::string(transport) + "'; use tcp, ipc, inproc or shm");
    if (opt.bind) ep.bind = *opt.bind;

    std::string_view address = rest;
    if (transport == "tcp") {
        // A bare trailing '/' is common, and harmless.
        if (const std::size_t slash = address.find('/'); slash != std::string_view::npos) {
            if (address.substr(slash) != "/")
                bad_url(url, "a tcp address takes no path ('" + std::string(address.substr(slash)) +
                                 "'): tensorcom would ignore it and use tcp://" +
                                 std::string(address.substr(0, slash)) + "; remove it");
            address = address.substr(0, slash);
        }
        const std::size_t colon = address.rfind(':');
        if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size())
            bad_url(url, "a tcp address is HOST:PORT");
        const std::string_view port = address.substr(colon + 1);
        if (!valid_port(port))
            bad_url(url, "port '" + std::string(port) + "' is not a number from 0 to 65535 (or * to bind any)");
    }
    if (address.empty()) bad_url(url, "the address is empty");
    for (char c : address)
        if (static_cast<unsigned char>(c) < 32 || c == 127) bad_url(url, "control character in the address");
    for (char c : ep.topic)
        if (static_cast<unsigned char>(c) < 32 || c == 127) bad_url(url, "control character in the #topic");
    ep.address = std::string(transport) + "://" + std::string(address);
    return ep;
}

std::string_view peer_kinds(socket_kind kind) noexcept {
    using k = socket_kind;
    switch (kind) {
    case k::push: return "PULL";
    case k::pull: return "PUSH";
    case k::pub: return "SUB";
    case k::sub: return "PUB";
    case k::req: return "REP or ROUTER";
    case k::rep: return "REQ or DEALER";
    case k::dealer: return "ROUTER or REP";
    case k::router: return "DEALER or REQ";
    case k::pair: return "PAIR";
    }
    return "?";
}

std::string peer_needed(const endpoint& ep) {
    std::string kind(name(ep.kind));
    for (char& c : kind) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string out = "this " + kind + " socket " + (ep.bind ? "bound to " : "connected to ") + ep.address +
                      " needs a " + std::string(peer_kinds(ep.kind)) + " that " + (ep.bind ? "connects" : "binds") + " there";
    if (ep.kind == socket_kind::sub) out += ", and gets only what the PUB sends after it joined";
    if (ep.kind == socket_kind::pub) out += ", and drops what it sends before a SUB joined (see wait_for)";
    return out;
}

std::string peer_needed(std::span<const endpoint> endpoints) {
    if (endpoints.empty()) return {};
    endpoint shown = endpoints.front();
    if (endpoints.size() > 1) shown.address += " (and " + std::to_string(endpoints.size() - 1) + " more)";
    return peer_needed(shown);
}

std::vector<endpoint> parse_urls(std::span<const std::string> urls, const url_options& opt) {
    std::vector<endpoint> out;
    for (const std::string& u : urls)
        for (const std::string& one : brace_expand(u)) {
            out.push_back(parse_url(one, opt));
            if (out.back().kind != out.front().kind)
                bad_url(one, "makes a " + std::string(name(out.back().kind)) + " socket but '" + urls.front() +
                                 "' makes a " + std::string(name(out.front().kind)) +
                                 "; the URLs of one connection share one socket");
            if (out.back().shm != out.front().shm)
                bad_url(one, "mixes +shm with other transports in one connection; shared memory needs every "
                             "endpoint on this host, each given as +shm");
            if (out.back().topic != out.front().topic)
                bad_url(one, "has the topic '" + out.back().topic + "' but '" + urls.front() + "' has '" +
                                 out.front().topic + "'; the URLs of one connection share one topic");
        }
    if (out.empty()) throw error(errc::bad_url, "no URL given");
    return out;
}

}  // namespace tenbin
