// The threads CURVE runs (see security.hpp): the ZAP handler of a context,
// which admits the clients on each server's allow-list, and the monitor of
// each secured socket, which reports refused handshakes.
#include <tenbin/error.hpp>
#include <tenbin/security.hpp>

#include "connect/security_detail.hpp"

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

constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
// How often the library's threads look up from a quiet socket to see
// whether they were asked to stop: the bound on how long stopping takes.
constexpr int poll_ms = 50;

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

}  // namespace detail

curve_guard::curve_guard() noexcept = default;
curve_guard::curve_guard(std::unique_ptr<detail::curve_watch> watch) noexcept : watch_(std::move(watch)) {}
curve_guard::curve_guard(curve_guard&&) noexcept = default;
curve_guard& curve_guard::operator=(curve_guard&&) noexcept = default;
curve_guard::~curve_guard() = default;

std::uint64_t curve_guard::refused_handshakes() const noexcept { return watch_ ? watch_->refused.load() : 0; }

}  // namespace tenbin
