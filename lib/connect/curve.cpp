// CURVE keys and the CURVE options of a socket (see security.hpp).
#include <tenbin/error.hpp>
#include <tenbin/security.hpp>

#include "connect/security_detail.hpp"

namespace tenbin {

namespace detail {

void require_curve() {
    if (!curve_available())
        throw error(errc::unsupported,
                    "this libzmq was built without CURVE security (zmq_has(\"curve\") is false: it needs libsodium)");
}

std::string key_problem(std::string_view key) {
    static constexpr std::string_view alphabet =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if (key.size() != 40 || key.find_first_not_of(alphabet) != std::string_view::npos)
        return "is not a CURVE key (40 characters of Z85), but " + std::to_string(key.size()) + " characters" +
               (key.size() == 40 ? " outside Z85's alphabet" : "");
    // Each 5 characters stand for 4 bytes: a value of at most 2^32 - 1,
    // which Z85's alphabet can overshoot ("#####").
    for (std::size_t at = 0; at < key.size(); at += 5) {
        std::uint64_t value = 0;
        for (std::size_t i = at; i < at + 5; ++i) value = value * 85 + alphabet.find(key[i]);
        if (value > 0xffffffff)
            return "is not a CURVE key: characters " + std::to_string(at + 1) + " to " + std::to_string(at + 5) +
                   " encode a value over 2^32 - 1, which no Z85 encoder writes";
    }
    return {};
}

std::string key_bytes(const std::string& z85) {
    std::string raw(32, '\0');
    if (!zmq_z85_decode(reinterpret_cast<std::uint8_t*>(raw.data()), z85.c_str()))
        throw error(errc::bad_argument, "'" + z85 + "' is not a Z85 key");
    return raw;
}

bool keys_match(const curve_keys& keys) {
    char derived[41] = {};
    return zmq_curve_public(derived, keys.secret_key.c_str()) == 0 && keys.public_key == derived;
}

namespace {

void check_key(const std::string& key, const std::string& what) {
    if (std::string problem = key_problem(key); !problem.empty())
        throw error(errc::bad_argument, what + " " + problem);
}

}  // namespace

void check_keys(const curve_keys& keys, const std::string& whose) {
    check_key(keys.public_key, whose + " public key");
    check_key(keys.secret_key, whose + " secret key");
    if (!keys_match(keys))
        throw error(errc::bad_argument, whose + " secret key does not belong to its public key");
}

void check_curve_options(const curve_options& opt, bool serves, bool connects) {
    require_curve();
    check_keys(opt.keys, "curve_options::keys'");
    if (connects) {
        if (opt.server_key.empty())
            throw error(errc::bad_argument, "a socket that connects with CURVE needs the server's public key "
                                            "(curve_options::server_key)");
        check_key(opt.server_key, "curve_options::server_key");
    }
    if (serves)
        for (const std::string& k : opt.allowed_clients) check_key(k, "an allowed client key ('" + k + "')");
}

void set_curve_server(zmq::socket_ref socket, const curve_options& opt) {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
    socket.set(zmq::sockopt::curve_publickey, opt.keys.public_key);
}

void set_curve_client(zmq::socket_ref socket, const curve_options& opt) {
    // Setting the server key makes the socket a CURVE client (as_server 0)
    // for the connects that follow.
    socket.set(zmq::sockopt::curve_serverkey, opt.server_key);
    socket.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
    socket.set(zmq::sockopt::curve_publickey, opt.keys.public_key);
}

}  // namespace detail

bool curve_available() noexcept { return zmq_has("curve") == 1; }

curve_keys generate_curve_keys() {
    detail::require_curve();
    char pub[41] = {}, sec[41] = {};
    if (zmq_curve_keypair(pub, sec) != 0) throw zmq::error_t();
    return {pub, sec};
}

void check_curve_address(std::string_view address) {
    if (address.starts_with("inproc://"))
        throw error(errc::bad_argument, "CURVE cannot secure " + std::string(address) +
                                            ": libzmq joins inproc peers without a handshake, so the keys would be "
                                            "ignored; use ipc:// or tcp:// for CURVE, or no keys within the process");
}

curve_guard enable_curve(zmq::context_t& context, zmq::socket_ref socket, const curve_options& opt, curve_role role) {
    const bool serves = role == curve_role::server;
    detail::check_curve_options(opt, serves, !serves);
    curve_guard guard = detail::watch_curve(context, socket, opt, serves);
    if (serves)
        detail::set_curve_server(socket, opt);
    else
        detail::set_curve_client(socket, opt);
    return guard;
}

}  // namespace tenbin
