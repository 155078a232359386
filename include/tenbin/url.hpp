// tenbin: connection URLs as Python tensorcom spells them.
//
//   zpush://host:port        PUSH, connects      zrpush://...   PUSH, binds
//   zpull://host:port        PULL, binds         zrpull://...   PULL, connects
//   zpub://host:port         PUB, binds          zrpub://...    PUB, connects
//   zsub://host:port         SUB, connects       zrsub://...    SUB, binds
//
// A transport suffix picks ipc or inproc instead of tcp: `zpub+ipc:///tmp/x`,
// `zpush+inproc://name`; `+shm` (`zpush+shm://name`) is ipc carrying tensor
// bytes in shared memory (Linux, see connect.hpp). Plain ZeroMQ endpoints
// (`tcp://...`, `ipc://...`, `inproc://...`, and `shm://NAME` for ipc with
// shared memory) work too when the socket kind is given. Braces expand into
// several endpoints of ONE socket: `zsub://host:78{80..83}`, `{a,b}`.
//
// As Python's urlparse reads them for tensorcom: the scheme's case is
// ignored (`ZPULL://`), a `#topic` fragment is a topic for pub and sub
// sockets (connection_options::topic), and a trailing '/' after host:port is
// ignored. A path after host:port or a `?query`, which tensorcom silently
// drops, is refused with a message saying so.
#pragma once

#include <tenbin/config.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// The ZeroMQ socket kinds tenbin connections use.
enum class socket_kind { push, pull, pub, sub, req, rep, dealer, router, pair };

/// "push", "pull", ...
[[nodiscard]] std::string_view name(socket_kind kind) noexcept;
/// The kind named `text` ("push", "PUSH", ...), or nothing.
[[nodiscard]] std::optional<socket_kind> parse_socket_kind(std::string_view text) noexcept;
/// Whether tensorcom binds this kind by default: pull and pub bind, the
/// others (push, sub, req, dealer, pair) connect; rep and router bind.
[[nodiscard]] bool binds_by_default(socket_kind kind) noexcept;

/// One place a socket binds to or connects to.
struct endpoint {
    /// The ZeroMQ socket type to open.
    socket_kind kind = socket_kind::pull;
    /// True to bind to `address`, false to connect to it.
    bool bind = false;
    std::string address;  ///< what zmq_bind/zmq_connect take, e.g. "tcp://host:7880"
    /// The URL's `#fragment`: a topic for pub and sub sockets ("" = none).
    std::string topic{};
    /// A `+shm` URL: `address` is ipc, the tensor bytes go in shared memory.
    bool shm = false;
    /// Field-wise equality.
    friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// The kinds a socket of `kind` talks to: "PULL" for push, "REP or ROUTER"
/// for req, ...
[[nodiscard]] std::string_view peer_kinds(socket_kind kind) noexcept;
/// What a socket made from `ep` needs at the other end, for a message
/// saying that nothing arrived or nothing could be sent: "this SUB socket
/// connected to tcp://h:7880 needs a PUB that binds there, and gets only
/// what the PUB sends after it joined". Both ends binding, or both
/// connecting, never meet; nor do kinds that do not pair (a SUB and a PUSH).
[[nodiscard]] std::string peer_needed(const endpoint& ep);
/// The same for a socket of several endpoints: its first, "(and N more)";
/// "" for none.
[[nodiscard]] std::string peer_needed(std::span<const endpoint> endpoints);

/// Expands braces: "a{1..3}" -> a1 a2 a3, "{x,y}z" -> xz yz, nested and
/// repeated groups multiply; "{01..10}" keeps the zero padding. Text without
/// braces comes back as it is. Throws `error(errc::bad_url)` on unbalanced
/// braces or a range of more than 65536 items.
[[nodiscard]] std::vector<std::string> brace_expand(std::string_view pattern);

/// How to read a URL: an explicit kind (required for plain ZeroMQ
/// endpoints, and must agree with a tensorcom scheme) and an explicit
/// bind/connect choice (overriding the scheme's).
struct url_options {
    /// The socket kind, when the URL's scheme does not give one.
    std::optional<socket_kind> kind{};
    /// Bind (true) or connect (false), overriding the scheme's default.
    std::optional<bool> bind{};
};

/// Parses one URL (no brace expansion). Throws `error(errc::bad_url)` naming
/// what is wrong: unknown scheme or transport, missing address, a plain
/// endpoint without a kind, a kind that contradicts the scheme, a topic
/// on a socket that is neither pub nor sub, a path or query after a tcp
/// host:port.
[[nodiscard]] endpoint parse_url(std::string_view url, const url_options& opt = {});

/// Expands and parses every URL; all must agree on the socket kind, since
/// they are the endpoints of one socket, and on the topic. Throws bad_url.
[[nodiscard]] std::vector<endpoint> parse_urls(std::span<const std::string> urls, const url_options& opt = {});

}  // namespace tenbin
TENBIN_API_END
