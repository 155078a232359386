#include <tenbin/error.hpp>
#include <tenbin/security.hpp>

#include "connect/security_detail.hpp"
#include "base/atomic_file.hpp"
#include "base/os_error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

namespace tenbin {

namespace {

namespace fs = std::filesystem;
using detail::atomic_file;
using detail::os_error;
using detail::unique_fd;

constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
// How often the library's threads look up from a quiet socket to see
// whether they were asked to stop: the bound on how long stopping takes.
constexpr int poll_ms = 50;
// Certificates are a few hundred bytes; anything far larger is no
// certificate, and is not read whole.
constexpr std::size_t max_certificate_bytes = 64 * 1024;

void require_curve() {
    if (!curve_available())
        throw error(errc::unsupported,
                    "this libzmq was built without CURVE security (zmq_has(\"curve\") is false: it needs libsodium)");
}

bool is_z85_key(std::string_view key) {
    static constexpr std::string_view alphabet =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    return key.size() == 40 && key.find_first_not_of(alphabet) == std::string_view::npos;
}

// The 32 key bytes of a Z85 key already checked by is_z85_key.
std::string key_bytes(const std::string& z85) {
    std::string raw(32, '\0');
    if (!zmq_z85_decode(reinterpret_cast<std::uint8_t*>(raw.data()), z85.c_str()))
        throw error(errc::bad_argument, "'" + z85 + "' is not a Z85 key");
    return raw;
}

void check_key(const std::string& key, const std::string& what) {
    if (!is_z85_key(key))
        throw error(errc::bad_argument, what + " is not a CURVE key (40 characters of Z85), but " +
                                            std::to_string(key.size()) + " characters" +
                                            (key.size() == 40 ? " outside Z85's alphabet" : ""));
}

// Whether `secret` is the secret key of `public_key`.
bool keys_match(const curve_keys& keys) {
    char derived[41] = {};
    return zmq_curve_public(derived, keys.secret_key.c_str()) == 0 && keys.public_key == derived;
}

void check_keys(const curve_keys& keys, const std::string& whose) {
    check_key(keys.public_key, whose + " public key");
    check_key(keys.secret_key, whose + " secret key");
    if (!keys_match(keys))
        throw error(errc::bad_argument, whose + " secret key does not belong to its public key");
}

std::string protocol_error_text(int code) {
    switch (code) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return "security mechanism mismatch: the peer does not use CURVE (or this side does not)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return "cryptographic failure: the client does not hold this server's public key (or the handshake "
               "was corrupted)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE: return "key exchange failed";
    default: break;
    }
    char text[64];
    std::snprintf(text, sizeof text, "handshake protocol error 0x%08x", static_cast<unsigned>(code));
    return text;
}

handshake_refusal refusal_of(int event, int value, std::string endpoint) {
    handshake_refusal r{event, value, std::move(endpoint), {}};
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        r.reason = value == 400 ? "authentication refused: the client's key is not on the server's allow-list "
                                  "(ZAP status 400)"
                                : "authentication failed (ZAP status " + std::to_string(value) + ")";
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        r.reason = protocol_error_text(value);
    else
        r.reason = std::string("handshake broke off (") + std::strerror(value) +
                   "): the peer hung up, as a peer without CURVE or with other keys may";
    return r;
}

}  // namespace

bool curve_available() noexcept { return zmq_has("curve") == 1; }

curve_keys generate_curve_keys() {
    require_curve();
    char pub[41] = {}, sec[41] = {};
    if (zmq_curve_keypair(pub, sec) != 0) throw zmq::error_t();
    return {pub, sec};
}

namespace detail {

// The ZAP handler of one context: a REP socket at inproc://zeromq.zap.01
// answered on a thread of its own. Each server socket with an allow-list
// has a ZAP domain here, holding the raw public keys it admits; requests
// for other domains (servers without a list, or sockets not ours) are
// admitted, as libzmq admits them without a handler.
class zap_handler {
public:
    // The running handler of `context`, started if there is none.
    static std::shared_ptr<zap_handler> of(zmq::context_t& context);

    explicit zap_handler(zmq::context_t& context) : context_(context.handle()), socket_(context, zmq::socket_type::rep) {
        socket_.set(zmq::sockopt::linger, 0);
        try {
            socket_.bind(zap_endpoint);
        } catch (const zmq::error_t& e) {
            if (e.num() != EADDRINUSE) throw;
            throw error(errc::bad_argument, std::string("cannot run tenbin's ZAP handler: another one is bound at ") +
                                                zap_endpoint + " on this ZeroMQ context");
        }
        thread_ = std::thread([this] { run(); });
    }
    ~zap_handler();
    zap_handler(const zap_handler&) = delete;
    zap_handler& operator=(const zap_handler&) = delete;

    // A new domain admitting `keys` (Z85), for one socket.
    std::string add(const std::vector<std::string>& keys) {
        std::set<std::string> raw;
        for (const std::string& k : keys) raw.insert(key_bytes(k));
        static std::atomic<std::uint64_t> next{0};
        std::string domain = "tenbin-curve-" + std::to_string(next.fetch_add(1));
        const std::lock_guard lock(mutex_);
        domains_.emplace(domain, std::move(raw));
        return domain;
    }
    void remove(const std::string& domain) {
        const std::lock_guard lock(mutex_);
        domains_.erase(domain);
    }

private:
    void run();
    // "200" or "400" for one request (frames as RFC 27 orders them).
    const char* decide(const std::vector<zmq::message_t>& request);

    void* context_;
    zmq::socket_t socket_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::map<std::string, std::set<std::string>, std::less<>> domains_;
};

namespace {
// Handlers by context. A handler leaving unbinds its endpoint under this
// mutex and then drops its entry, so a new handler for the same context
// waits for that instead of failing to bind.
std::mutex registry_mutex;
std::condition_variable registry_changed;
std::map<void*, std::weak_ptr<zap_handler>> registry;
}  // namespace

std::shared_ptr<zap_handler> zap_handler::of(zmq::context_t& context) {
    std::unique_lock lock(registry_mutex);
    for (;;) {
        const auto it = registry.find(context.handle());
        if (it == registry.end()) break;
        if (auto running = it->second.lock()) return running;
        registry_changed.wait(lock);  // one is leaving
    }
    auto handler = std::make_shared<zap_handler>(context);
    registry.emplace(context.handle(), handler);
    return handler;
}

zap_handler::~zap_handler() {
    stop_ = true;
    thread_.join();
    const std::lock_guard lock(registry_mutex);
    // Synchronous for inproc, unlike zmq_close: the name is free at once.
    try {
        socket_.unbind(zap_endpoint);
    } catch (const zmq::error_t&) {
    }
    socket_.close();
    const auto it = registry.find(context_);
    if (it != registry.end() && it->second.expired()) registry.erase(it);
    registry_changed.notify_all();
}

const char* zap_handler::decide(const std::vector<zmq::message_t>& request) {
    const std::string domain = request[2].to_string();
    const std::lock_guard lock(mutex_);
    const auto it = domains_.find(domain);
    if (it == domains_.end()) return "200";
    if (request[5].to_string_view() != "CURVE" || request.size() < 7 || request[6].size() != 32) return "400";
    return it->second.count(request[6].to_string()) ? "200" : "400";
}

void zap_handler::run() {
    while (!stop_.load()) {
        zmq_pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        const int rc = zmq_poll(&item, 1, poll_ms);
        if (rc < 0 && zmq_errno() == ETERM) return;
        if (rc <= 0) continue;
        std::vector<zmq::message_t> request;
        try {
            do {
                zmq::message_t part;
                if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
                request.push_back(std::move(part));
            } while (request.back().more());
            if (request.empty()) continue;
            // A malformed request still gets its reply: a REP socket must
            // answer before it can receive again.
            const bool ok = request.size() >= 6 && request[0].to_string_view() == "1.0";
            const char* status = ok ? decide(request) : "500";
            const std::string_view text = status[0] == '2' ? "OK" : status[0] == '4' ? "key not allowed" : "bad request";
            socket_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
            socket_.send(request.size() > 1 ? zmq::buffer(request[1].data(), request[1].size()) : zmq::const_buffer(),
                         zmq::send_flags::sndmore);
            socket_.send(zmq::buffer(std::string_view(status)), zmq::send_flags::sndmore);
            socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
            socket_.send(zmq::const_buffer(), zmq::send_flags::sndmore);  // user id
            socket_.send(zmq::const_buffer(), zmq::send_flags::none);     // metadata
        } catch (const zmq::error_t& e) {
            if (e.num() == ETERM) return;
        }
    }
}

// The monitor of one secured socket and its ZAP domain, if any.
struct curve_watch {
    std::shared_ptr<zap_handler> zap;
    std::string domain;
    std::function<void(const handshake_refusal&)> on_refused;
    std::atomic<std::uint64_t> refused{0};
    std::atomic<bool> stop{false};
    zmq::socket_t monitor;
    std::thread thread;

    ~curve_watch() {
        stop = true;
        if (thread.joinable()) thread.join();
        monitor.close();
        if (zap) zap->remove(domain);
    }

    void run() {
        while (!stop.load()) {
            zmq_pollitem_t item{monitor.handle(), 0, ZMQ_POLLIN, 0};
            const int rc = zmq_poll(&item, 1, poll_ms);
            if (rc < 0 && zmq_errno() == ETERM) return;
            if (rc <= 0) continue;
            try {
                zmq::message_t head, where;
                if (!monitor.recv(head, zmq::recv_flags::dontwait)) continue;
                if (head.more()) (void)monitor.recv(where);
                if (head.size() < 6) continue;
                std::uint16_t event = 0;
                std::uint32_t value = 0;
                std::memcpy(&event, head.data(), 2);
                std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
                if (event == ZMQ_EVENT_MONITOR_STOPPED) return;  // the socket closed
                refused.fetch_add(1);
                if (on_refused) {
                    try {
                        on_refused(refusal_of(event, static_cast<int>(value), where.to_string()));
                    } catch (...) {
                        // The caller's to handle; a library thread cannot raise it.
                    }
                }
            } catch (const zmq::error_t& e) {
                if (e.num() == ETERM) return;
            }
        }
    }
};

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

curve_guard watch_curve(zmq::context_t& context, zmq::socket_ref socket, const curve_options& opt, bool serves) {
    auto watch = std::make_unique<curve_watch>();
    watch->on_refused = opt.on_refused;
    if (serves && !opt.allowed_clients.empty()) {
        watch->zap = zap_handler::of(context);
        watch->domain = watch->zap->add(opt.allowed_clients);
        socket.set(zmq::sockopt::zap_domain, watch->domain);
    }
    static std::atomic<std::uint64_t> next{0};
    const std::string address = "inproc://tenbin-curve-monitor-" + std::to_string(next.fetch_add(1));
    constexpr int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_MONITOR_STOPPED;
    if (zmq_socket_monitor(socket.handle(), address.c_str(), events) != 0) throw zmq::error_t();
    watch->monitor = zmq::socket_t(context, zmq::socket_type::pair);
    watch->monitor.set(zmq::sockopt::linger, 0);
    watch->monitor.connect(address);
    curve_watch* w = watch.get();
    w->thread = std::thread([w] { w->run(); });
    return curve_guard(std::move(watch));
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

curve_guard::curve_guard() noexcept = default;
curve_guard::curve_guard(std::unique_ptr<detail::curve_watch> watch) noexcept : watch_(std::move(watch)) {}
curve_guard::curve_guard(curve_guard&&) noexcept = default;
curve_guard& curve_guard::operator=(curve_guard&&) noexcept = default;
curve_guard::~curve_guard() = default;

std::uint64_t curve_guard::refused_handshakes() const noexcept { return watch_ ? watch_->refused.load() : 0; }

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

// ---- certificate files --------------------------------------------------------

namespace {

[[noreturn]] void io_failure(const fs::path& file, const std::string& what) {
    throw os_error(file.string() + ": " + what);
}

[[noreturn]] void malformed(const fs::path& file, std::size_t line, const std::string& what) {
    throw error(errc::bad_certificate,
                file.string() + (line ? ":" + std::to_string(line) : std::string()) + ": " + what);
}

std::string_view trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

bool is_name(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("$-_@.&+/").find(c) != std::string_view::npos;
    });
}

// The whole of a certificate file and its mode (taken from the open file,
// so it is the mode of what is read).
std::string read_certificate(const fs::path& file, mode_t& mode_out) {
    const unique_fd owned(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    const int fd = owned.get();
    if (fd < 0) io_failure(file, "cannot open the certificate");
    struct stat st {};
    if (::fstat(fd, &st) != 0) io_failure(file, "cannot stat the certificate");
    if (!S_ISREG(st.st_mode)) malformed(file, 0, "not a regular file");
    mode_out = st.st_mode;
    if (static_cast<std::uint64_t>(st.st_size) > max_certificate_bytes)
        malformed(file, 0, std::to_string(st.st_size) + " bytes, too large for a certificate (at most " +
                               std::to_string(max_certificate_bytes) + ")");
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) io_failure(file, "cannot read the certificate");
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    return text;
}

// The keys of a certificate's `curve` section (ZPL: a section name at the
// start of a line, its `name = value` properties indented below it).
curve_keys parse_certificate(const fs::path& file, std::string_view text) {
    curve_keys keys;
    std::size_t public_line = 0, secret_line = 0;
    std::string section;
    std::size_t number = 0;
    while (!text.empty()) {
        ++number;
        const auto eol = text.find('\n');
        std::string_view line = text.substr(0, eol);
        text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const std::string_view body = trim(line);
        if (body.empty() || body.front() == '#') continue;
        const bool indented = line.front() == ' ' || line.front() == '\t';
        const auto eq = body.find('=');
        if (eq == std::string_view::npos) {
            if (!is_name(body)) malformed(file, number, "expected a section name or 'name = value'");
            if (!indented) section = body;
            continue;
        }
        const std::string_view key = trim(body.substr(0, eq));
        std::string_view value = trim(body.substr(eq + 1));
        if (!is_name(key)) malformed(file, number, "'" + std::string(key) + "' is no property name");
        if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
            const auto close = value.find(value.front(), 1);
            if (close == std::string_view::npos) malformed(file, number, "a quoted value has no closing quote");
            const std::string_view after = trim(value.substr(close + 1));
            if (!after.empty() && after.front() != '#') malformed(file, number, "text after a quoted value");
            value = value.substr(1, close - 1);
        } else {
            value = trim(value.substr(0, value.find('#')));
        }
        if (section != "curve" || !indented) continue;
        if (key != "public-key" && key != "secret-key") continue;
        const bool is_public = key == "public-key";
        std::size_t& seen = is_public ? public_line : secret_line;
        if (seen)
            malformed(file, number, std::string(key) + " given twice (first on line " + std::to_string(seen) + ")");
        if (!is_z85_key(value))
            malformed(file, number, std::string(key) + " is not a CURVE key (40 characters of Z85), but " +
                                        std::to_string(value.size()) + " characters" +
                                        (value.size() == 40 ? " outside Z85's alphabet" : ""));
        seen = number;
        (is_public ? keys.public_key : keys.secret_key) = value;
    }
    if (!public_line) malformed(file, 0, "no public-key in a 'curve' section: not a ZeroMQ certificate");
    return keys;
}

// `text` as `file`, replacing it at once: written to a temporary file of
// mode 0600 beside it, given `mode`, then renamed.
void write_atomically(const fs::path& file, const std::string& text, mode_t mode) {
    atomic_file out(file, mode);
    if (::fchmod(out.fd(), mode) != 0) io_failure(file, "cannot set the certificate's mode");  // past the umask
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(out.fd(), text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) io_failure(file, "cannot write the certificate");
        done += static_cast<std::size_t>(n);
    }
    out.commit(true);
}

std::string certificate_text(const curve_keys& keys, bool secret) {
    std::string text = secret ? "#   ZeroMQ CURVE secret certificate (written by tenbin)\n"
                                "#   Keep it private: readable by its owner only (mode 0600).\n"
                              : "#   ZeroMQ CURVE public certificate (written by tenbin)\n"
                                "#   Give it to the peers that must trust this key.\n";
    text += "\nmetadata\ncurve\n    public-key = \"" + keys.public_key + "\"\n";
    if (secret) text += "    secret-key = \"" + keys.secret_key + "\"\n";
    return text;
}

}  // namespace

certificate_files write_certificates(const fs::path& dir, const std::string& name, const curve_keys& keys) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
        throw error(errc::bad_argument, "a certificate name must be a file name without '/', not '" + name + "'");
    require_curve();
    check_keys(keys, "the certificate's");
    certificate_files files{dir / (name + ".key"), dir / (name + ".key_secret")};
    write_atomically(files.secret_file, certificate_text(keys, true), 0600);
    write_atomically(files.public_file, certificate_text(keys, false), 0644);
    return files;
}

certificate_files create_certificates(const fs::path& dir, const std::string& name) {
    return write_certificates(dir, name, generate_curve_keys());
}

curve_keys load_secret_certificate(const fs::path& file) {
    require_curve();
    mode_t st_mode = 0;
    curve_keys keys = parse_certificate(file, read_certificate(file, st_mode));
    if (keys.secret_key.empty())
        malformed(file, 0, "holds no secret-key: a public certificate (NAME.key), not a secret one (NAME.key_secret)");
    if (st_mode & (S_IRGRP | S_IROTH)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st_mode & 07777));
        throw error(errc::bad_certificate, file.string() + ": a secret certificate must be readable by its owner "
                                                           "only, but its mode is " +
                                               mode + "; run chmod 600 on it");
    }
    if (!keys_match(keys)) malformed(file, 0, "its secret-key does not belong to its public-key");
    return keys;
}

std::string load_public_certificate(const fs::path& file) {
    mode_t ignored = 0;
    return parse_certificate(file, read_certificate(file, ignored)).public_key;
}

std::vector<std::string> load_public_certificates(const fs::path& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw error(errc::io_error, dir.string() + ": not a directory of public certificates");
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".key") files.push_back(it->path());
    if (ec) throw error(errc::io_error, dir.string() + ": cannot list the directory: " + ec.message());
    if (files.empty())
        throw error(errc::bad_certificate, dir.string() + ": no public certificates (*.key) in it; an empty "
                                                          "allow-list would let any client in");
    std::sort(files.begin(), files.end());
    std::vector<std::string> keys;
    for (const fs::path& f : files) keys.push_back(load_public_certificate(f));
    return keys;
}

}  // namespace tenbin
