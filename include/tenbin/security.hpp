// tenbin: authenticated and encrypted ZeroMQ connections (CURVE), and the
// certificate files that hold their keys.
//
// CURVE (ZeroMQ's RFC 26, on libsodium) gives every socket a key pair. The
// side that binds is the CURVE *server*, the side that connects the
// *client*, whatever the socket kinds: a zpull:// that binds is a server
// receiving from clients that push, a zpub:// that binds a server sending
// to its subscribers. A client must know the server's public key in
// advance; the server learns each client's public key in the handshake
// and, with an allow-list, admits only the listed ones. A socket without
// CURVE, or with a wrong key, never completes its handshake: nothing it
// sends is delivered, nothing is delivered to it.
//
// The allow-list is enforced by a ZAP handler (RFC 27) that the library
// runs: one per ZeroMQ context, bound at inproc://zeromq.zap.01, started
// with the first server socket given an allow-list on that context and
// stopped when the last one is gone (before the context can terminate). A
// server without an allow-list uses no handler of its own: libzmq then
// admits any client holding a key pair (and, when another socket on the
// context started the handler, the handler admits it too).
//
// Keys travel as 40-character Z85 text. Certificates are the text files
// that pyzmq's `zmq.auth.create_certificates` and czmq write:
// `NAME.key` holds the public key, `NAME.key_secret` both keys:
//
//     #   comment lines
//     metadata
//     curve
//         public-key = "<40 Z85 characters>"
//         secret-key = "<40 Z85 characters>"     (NAME.key_secret only)
//
// Each side keeps its NAME.key_secret (mode 0600) and hands out NAME.key.
#pragma once

#include <tenbin/config.hpp>

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// Whether this libzmq can do CURVE (zmq_has("curve"): built with libsodium
/// or tweetnacl; Debian's is).
[[nodiscard]] bool curve_available() noexcept;

/// A CURVE key pair, each key as 40 characters of Z85.
struct curve_keys {
    std::string public_key;  ///< handed out to peers (NAME.key)
    std::string secret_key;  ///< kept by this side only (NAME.key_secret)
};

/// A fresh key pair (zmq_curve_keypair). Throws errc::unsupported without
/// CURVE.
[[nodiscard]] curve_keys generate_curve_keys();

/// A refused CURVE handshake, as ZeroMQ's socket monitor reports it.
struct handshake_refusal {
    /// ZMQ_EVENT_HANDSHAKE_FAILED_AUTH (the ZAP handler said no: the client's
    /// key is not allowed), _PROTOCOL (a peer without CURVE, or a client
    /// with a wrong server key) or _NO_DETAIL (the connection broke).
    int event = 0;
    /// The ZAP status code for AUTH (400: not allowed), a
    /// ZMQ_PROTOCOL_ERROR_* code for PROTOCOL, an errno for NO_DETAIL.
    int value = 0;
    /// The endpoint of the socket it happened on (on a binding socket, its
    /// bound address; libzmq gives no peer address here).
    std::string endpoint;
    /// "security mechanism mismatch: the peer does not use CURVE", ...
    std::string reason;
};

/// CURVE settings of one socket (see connection_options::curve).
struct curve_options {
    /// This side's key pair (both sides need one).
    curve_keys keys;
    /// The server's public key: required on a side that connects.
    std::string server_key;
    /// On a side that binds: the public keys (Z85) of the clients allowed
    /// in. Empty: any client holding a key pair. Another server on the same
    /// context may have a list of its own (each has its ZAP domain).
    std::vector<std::string> allowed_clients;
    /// Called for every refused handshake, on a thread of the library's (a
    /// monitor thread per socket): it must be thread-safe and quick; what it
    /// throws is dropped. Refusals are counted whether or not it is set.
    std::function<void(const handshake_refusal&)> on_refused;
};

/// Whether a socket takes the CURVE server role (it binds) or the client
/// role (it connects to a server whose key it knows).
enum class curve_role { server, client };

namespace detail {
struct curve_watch;
}

/// Throws errc::bad_argument when CURVE cannot secure `address`: an
/// inproc:// endpoint, whose peers libzmq joins without any handshake, so
/// that keys there would be ignored without a word (inproc stays inside the
/// process; use ipc:// or tcp:// where CURVE is wanted). enable_curve cannot
/// see the addresses a socket will take: check them with this.
void check_curve_address(std::string_view address);

/// What enable_curve leaves running for one socket: the watch on its
/// handshakes (a monitor thread) and its place in the context's ZAP handler.
/// Keep it alive while the socket is in use, and destroy it before the
/// context (declared after the context, as the socket is). It never touches
/// the socket again, so the socket may be closed before or after it. Before
/// closing the socket, stop its monitor: zmq_socket_monitor(socket, nullptr,
/// 0) (libzmq 4.3 leaks each event of the socket's teardown it cannot
/// deliver once the watch is gone); a tenbin::connection does so itself.
class curve_guard {
public:
    /// Watches nothing.
    curve_guard() noexcept;
    /// Takes over the other's watch; the other watches nothing.
    curve_guard(curve_guard&&) noexcept;
    /// Stops this guard's watch (as the destructor does), then takes over
    /// the other's.
    curve_guard& operator=(curve_guard&&) noexcept;
    /// Stops the monitor thread (waits at most about 50 ms for it) and
    /// leaves the ZAP handler (stopping it when this was its last socket).
    ~curve_guard();

    /// Handshakes refused on the socket so far (thread-safe).
    std::uint64_t refused_handshakes() const noexcept;
    /// Whether this guard watches a socket.
    explicit operator bool() const noexcept { return watch_ != nullptr; }

    /// Internal: made by enable_curve and connections.
    explicit curve_guard(std::unique_ptr<detail::curve_watch> watch) noexcept;

private:
    std::unique_ptr<detail::curve_watch> watch_;
};

/// Turns CURVE on for a socket of the caller's (for zsend_*/zrecv_* users),
/// as connection_options::curve does for a connection: call it before the
/// socket binds (role server) or connects (role client), never on inproc
/// (see check_curve_address). A server with
/// `allowed_clients` joins the ZAP handler of `context`, which must be the
/// socket's. Returns the guard that counts refused handshakes.
/// Throws errc::unsupported without CURVE in libzmq; bad_argument for a key
/// that is not 40 characters of Z85, a secret key that does not match its
/// public key, or a client without `server_key`; bad_argument when another
/// ZAP handler (not tenbin's) is bound on the context. The socket may have
/// some CURVE options set after a failure.
[[nodiscard]] curve_guard enable_curve(zmq::context_t& context, zmq::socket_ref socket, const curve_options& opt,
                                       curve_role role);

// ---- certificate files --------------------------------------------------------

/// Where write_certificates put a pair.
struct certificate_files {
    std::filesystem::path public_file;  ///< DIR/NAME.key
    std::filesystem::path secret_file;  ///< DIR/NAME.key_secret
};

/// Writes `keys` as DIR/NAME.key (public key only) and DIR/NAME.key_secret
/// (both), replacing files of those names. The secret file is created with
/// mode 0600 under a temporary name and renamed into place, so it is never
/// readable by others, nor seen half-written. Throws errc::io_error when
/// the directory is missing or a write fails; bad_argument for an empty
/// name or one holding '/', or keys that are not a matching Z85 pair.
certificate_files write_certificates(const std::filesystem::path& dir, const std::string& name,
                                     const curve_keys& keys);

/// A fresh pair (generate_curve_keys) written by write_certificates, as
/// pyzmq's zmq.auth.create_certificates(dir, name) does.
certificate_files create_certificates(const std::filesystem::path& dir, const std::string& name);

/// The key pair of a secret certificate (NAME.key_secret). Throws
/// errc::bad_certificate when group or others have any right to the file
/// (read or write: chmod 600 it), it is no regular file (a FIFO or device
/// is never opened), holds no secret key (a public certificate), or is
/// malformed, a key out of Z85's range included (the message names the file
/// and line); io_error when it cannot be read.
[[nodiscard]] curve_keys load_secret_certificate(const std::filesystem::path& file);

/// The public key of a certificate (NAME.key, or a NAME.key_secret, whose
/// secret key is then not read into the result). Throws as
/// load_secret_certificate does, but any permissions are fine.
[[nodiscard]] std::string load_public_certificate(const std::filesystem::path& file);

/// The public keys of every `*.key` file in `dir` (as czmq and pyzmq's
/// load_certificates), in file-name order. Throws errc::bad_certificate
/// when there are none (an empty allow-list would admit anyone) or one is
/// malformed; io_error when `dir` is no readable directory.
[[nodiscard]] std::vector<std::string> load_public_certificates(const std::filesystem::path& dir);

}  // namespace tenbin
TENBIN_API_END
