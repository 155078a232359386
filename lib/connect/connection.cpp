#include <tenbin/connect.hpp>

#include "connect/connect_detail.hpp"
#include "shm/shm.hpp"
#include "connect/security_detail.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace tenbin {

namespace {

int to_ms(std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX));
}

bool topic_applies(const connection_options& opt, socket_kind kind) {
    return !opt.topic.empty() && (kind == socket_kind::pub || kind == socket_kind::sub);
}

// Whether `socket` has a message before `deadline`.
bool readable_before(zmq::socket_ref socket, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        zmq_pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
        const int rc = zmq_poll(&item, 1, to_ms(left));
        if (rc > 0) return true;
        if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
    }
}

// The next message whose topic frame is `topic`. ZeroMQ subscriptions
// match prefixes: messages of longer topics that start with it come too,
// and are dropped here, malformed or not. They do not restart the wait:
// with a `timeout`, a blocking receive ends when it is over, however many
// other messages came meanwhile. `ro` is the caller's, whose flags this
// changes after the first message (not copied: it holds expect_infos).
std::optional<message> receive_of_topic(zmq::socket_ref socket, recv_options& ro, const std::string& topic,
                                        std::optional<std::chrono::milliseconds> timeout) {
    const bool bounded = timeout && ro.flags == zmq::recv_flags::none;
    const auto deadline = bounded ? detail::deadline_after(*timeout) : std::chrono::steady_clock::time_point{};
    for (bool first = true;; first = false) {
        if (bounded && !first) {
            if (!readable_before(socket, deadline)) return std::nullopt;
            ro.flags = zmq::recv_flags::dontwait;  // it is there
        }
        std::optional<message> m;
        try {
            m = zrecv(socket, ro);
        } catch (const malformed_message& e) {
            if (e.envelope().front() != topic) continue;
            throw;
        }
        if (!m) {
            if (bounded && !first) continue;  // polled, but taken by no one else: only a spurious wake-up
            return m;
        }
        const zmq::message_t& frame = m->envelope.front();
        if (std::string_view(frame.data<char>(), frame.size()) == topic) return m;
    }
}

// Sending on a pull socket (or receiving on a push one) would fail in
// libzmq as "Operation not supported": say what is wrong instead.
void check_direction(const endpoint& ep, bool can, const char* what) {
    if (!can)
        throw error(errc::bad_argument, "this connection's socket (" + ep.address + ") is a " +
                                            std::string(name(ep.kind)) + " socket, which cannot " + what);
}

// A closed or moved-from connection has no socket: libzmq would say
// "Socket operation on non-socket", or the call would touch a null handle.
void check_open(const zmq::socket_t& socket, const char* what) {
    if (!socket.handle())
        throw error(errc::bad_argument, std::string("cannot ") + what + ": the connection is closed (or moved from)");
}

// The +shm side's options, from the connection's.
detail::shm_options shm_options_of(const connection_options& o, socket_kind kind) {
    detail::shm_options s;
    s.pool_bytes = o.shm_pool_bytes;
    s.lease = o.shm_lease;
    s.fan_out = kind == socket_kind::pub;
    s.max_peers = o.shm_max_peers;
    s.max_held_bytes = o.shm_max_held_bytes;
    s.laggard_after = o.shm_laggard_after;
    s.block_laggards = o.pub_nodrop;  // one slow-subscriber policy for both
    s.max_unclaimed = static_cast<std::size_t>(std::max(o.send_hwm, 0) + std::max(o.recv_hwm, 0));
    s.claim_timeout = o.shm_claim_timeout ? o.shm_claim_timeout : o.recv_timeout;
    s.max_senders = o.shm_max_senders;
    s.max_mappings = o.shm_max_mappings;
    s.max_mapped_bytes = o.shm_max_mapped_bytes;
    return s;
}

}  // namespace

std::shared_ptr<zmq::context_t> detail::default_context(std::span<const std::string> urls, const url_options& opt) {
    const std::vector<endpoint> eps = parse_urls(urls, opt);
    const bool inproc = std::any_of(eps.begin(), eps.end(), [](const endpoint& e) {
        return e.address.rfind("inproc://", 0) == 0;
    });
    if (!inproc) return std::make_shared<zmq::context_t>(1);
    static std::mutex m;
    static std::weak_ptr<zmq::context_t> shared;
    const std::lock_guard lock(m);
    std::shared_ptr<zmq::context_t> ctx = shared.lock();
    if (!ctx) {
        ctx = std::make_shared<zmq::context_t>(1);
        shared = ctx;
    }
    return ctx;
}

zmq::socket_type zmq_socket_type(socket_kind kind) noexcept {
    switch (kind) {
    case socket_kind::push: return zmq::socket_type::push;
    case socket_kind::pull: return zmq::socket_type::pull;
    case socket_kind::pub: return zmq::socket_type::pub;
    case socket_kind::sub: return zmq::socket_type::sub;
    case socket_kind::req: return zmq::socket_type::req;
    case socket_kind::rep: return zmq::socket_type::rep;
    case socket_kind::dealer: return zmq::socket_type::dealer;
    case socket_kind::router: return zmq::socket_type::router;
    case socket_kind::pair: return zmq::socket_type::pair;
    }
    return zmq::socket_type::pair;
}

void check_no64(tensor_span tensors) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const dtype t = tensors[i].dtype;
        if (itemsize(t) == 8)
            throw error(errc::bad_argument, "tensor " + std::to_string(i) + " is " + std::string(code(t)) +
                                                "; 64-bit dtypes need connection_options::allow64");
    }
}

void check_tensorcom(tensor_span tensors) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string which = "tensor " + std::to_string(i);
        if (tensors[i].dtype == dtype::u4)
            throw error(errc::bad_argument, which + " is u4, which a Python tensorcom receiver cannot decode (its "
                                                    "dtype table misspells uint32); send i4 or i8 instead");
        if (tensors[i].ndim() == 0)
            throw error(errc::bad_argument, which + " has rank 0, which a Python tensorcom receiver cannot "
                                                    "decode; give it shape [1]");
    }
}

connection::connection(std::string_view url, connection_options opt)
    : connection(std::vector<std::string>{std::string(url)}, std::move(opt)) {}

connection::connection(std::span<const std::string> urls, connection_options opt)
    : connection(detail::default_context(urls, {.kind = opt.kind, .bind = opt.bind}), urls, std::move(opt)) {}

connection::connection(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls,
                       connection_options opt)
    : context_(std::move(context)),
      opt_(std::move(opt)),
      endpoints_(parse_urls(urls, {.kind = opt_.kind, .bind = opt_.bind})),
      stats_(opt_.stats_horizon) {
    const socket_kind kind = endpoints_.front().kind;
    // The URL's #topic is the option's, spelled in the URL.
    if (const std::string& url_topic = endpoints_.front().topic; !url_topic.empty()) {
        if (!opt_.topic.empty() && opt_.topic != url_topic)
            throw error(errc::bad_argument, "the URL's #" + url_topic + " and connection_options::topic '" +
                                                opt_.topic + "' differ; give the topic once");
        opt_.topic = url_topic;
    }
    // Every message on a ROUTER starts with its peer's identity, which
    // send() and recv() have no place for.
    if (kind == socket_kind::router)
        throw error(errc::bad_argument, "a connection cannot be a router socket: it keeps no envelope, and a router "
                                        "needs one on every message; use zrecv/zsend_* with "
                                        "envelope_spec::router() on a zmq::socket_t (see examples/router_dealer.cpp)");
    socket_ = zmq::socket_t(*context_, zmq_socket_type(kind));
    socket_.set(zmq::sockopt::sndhwm, opt_.send_hwm);
    socket_.set(zmq::sockopt::linger, detail::can_send(kind) ? to_ms(opt_.linger) : 0);
    if (opt_.recv_timeout) socket_.set(zmq::sockopt::rcvtimeo, to_ms(*opt_.recv_timeout));
    if (opt_.send_timeout) socket_.set(zmq::sockopt::sndtimeo, to_ms(*opt_.send_timeout));
    if (opt_.heartbeat) set_heartbeat(socket_, *opt_.heartbeat);
    bound_receive(socket_, opt_.decode.limits, opt_.recv_hwm);
    if (kind == socket_kind::sub) socket_.set(zmq::sockopt::subscribe, opt_.topic);
    if (kind == socket_kind::pub && opt_.pub_nodrop) socket_.set(zmq::sockopt::xpub_nodrop, 1);
    if (endpoints_.front().shm) {
        if (detail::can_send(kind))
            shm_sender_ = detail::make_shm_sender(shm_options_of(opt_, kind));
        if (detail::can_receive(kind)) shm_receiver_ = detail::make_shm_receiver(shm_options_of(opt_, kind));
    }
    if (opt_.curve) {
        const bool serves = std::any_of(endpoints_.begin(), endpoints_.end(), [](const endpoint& e) { return e.bind; });
        const bool connects = std::any_of(endpoints_.begin(), endpoints_.end(), [](const endpoint& e) { return !e.bind; });
        detail::check_curve_options(*opt_.curve, serves, connects);
        curve_ = detail::watch_curve(*context_, socket_, *opt_.curve, serves);
    }
    for (endpoint& ep : endpoints_) {
        if (opt_.curve) (ep.bind ? detail::set_curve_server : detail::set_curve_client)(socket_, *opt_.curve);
        // Only where it queues outgoing messages: on a sub socket it would
        // hold back the subscription until the application next calls into
        // the socket, and what is published meanwhile is lost.
        if (!ep.bind && opt_.immediate && detail::can_send(kind)) socket_.set(zmq::sockopt::immediate, 1);
        ep.address = attach(socket_, ep);
    }
}

std::string attach(zmq::socket_ref socket, const endpoint& ep) {
    try {
        if (!ep.bind) {
            socket.connect(ep.address);
            return ep.address;
        }
        socket.bind(ep.address);
        return socket.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
        const int n = e.num();
        const bool url_problem = n == EINVAL || n == EPROTONOSUPPORT || n == ENOCOMPATPROTO;
        throw error(url_problem ? errc::bad_url : errc::io_error,
                    std::string(ep.bind ? "cannot bind to " : "cannot connect to ") + ep.address + ": " + e.what());
    }
}

void set_heartbeat(zmq::socket_ref socket, std::chrono::milliseconds interval) {
    if (interval.count() <= 0) throw error(errc::bad_argument, "a heartbeat interval must be positive");
    const int ivl = std::min(to_ms(interval), INT32_MAX / 3);
    socket.set(zmq::sockopt::heartbeat_ivl, ivl);
    socket.set(zmq::sockopt::heartbeat_timeout, 3 * ivl);
    // The peer's timeout for us, which ZMTP carries in deciseconds (16 bits
    // of them).
    socket.set(zmq::sockopt::heartbeat_ttl, std::clamp(3 * ivl, 100, 6553500));
}

connection::connection(connection&&) noexcept = default;
// Not the default, which assigns in declaration order: the context first,
// whose last owner would then wait in zmq_ctx_term for the old socket,
// still open, for ever.
connection& connection::operator=(connection&& o) noexcept {
    if (this == &o) return *this;
    close();
    curve_ = std::move(o.curve_);  // before the context it uses can go
    socket_ = std::move(o.socket_);
    context_ = std::move(o.context_);
    opt_ = std::move(o.opt_);
    endpoints_ = std::move(o.endpoints_);
    stats_ = std::move(o.stats_);
    shm_sender_ = std::move(o.shm_sender_);
    shm_receiver_ = std::move(o.shm_receiver_);
    return *this;
}
connection::~connection() {
    if (shm_sender_) detail::shm_close(*shm_sender_, opt_.linger);
}

tensor_pool& connection::pool() {
    check_open(socket_, "take the pool");
    if (!shm_sender_)
        throw error(errc::bad_argument, "connection::pool() is for +shm connections that send");
    return detail::shm_pool(*shm_sender_);
}

bool connection::send(tensor_span tensors) {
    check_open(socket_, "send");
    check_direction(endpoints_.front(), detail::can_send(endpoints_.front().kind), "send");
    if (!opt_.allow64) check_no64(tensors);
    if (opt_.tensorcom_compatible) check_tensorcom(tensors);
    std::vector<tensor> renamed;
    if (!opt_.infos.empty()) {
        renamed = with_infos(tensors, opt_.infos);
        tensors = renamed;
    }
    send_options so;
    const zmq::const_buffer topic(opt_.topic.data(), opt_.topic.size());
    if (topic_applies(opt_, endpoints_.front().kind)) so.envelope = {&topic, 1};
    const bool sent = shm_sender_ ? detail::shm_send(*shm_sender_, socket_, tensors, so.envelope, opt_.send_timeout)
                      : opt_.multipart ? zsend_multipart(socket_, tensors, so) : zsend_single(socket_, tensors, so);
    if (sent) {
        std::uint64_t bytes = 0;
        for (std::size_t i = 0; i < tensors.size(); ++i) bytes += tensors[i].data.size();
        stats_.add(bytes);
    }
    return sent;
}

std::optional<std::vector<tensor>> connection::recv() { return receive(zmq::recv_flags::none); }
std::optional<std::vector<tensor>> connection::try_recv() { return receive(zmq::recv_flags::dontwait); }

std::optional<std::vector<tensor>> connection::receive(zmq::recv_flags flags) {
    check_open(socket_, "receive");
    check_direction(endpoints_.front(), detail::can_receive(endpoints_.front().kind), "receive");
    recv_options ro;
    ro.flags = flags;
    ro.decode = opt_.decode;
    // A message has as many frames as tensors twice, the topic's beside.
    ro.max_frames = std::max(ro.max_frames, 2 * std::min<std::size_t>(opt_.decode.limits.max_tensors, SIZE_MAX / 4) + 2);
    const bool topic = topic_applies(opt_, endpoints_.front().kind);
    if (shm_receiver_) return receive_shm(flags, ro, topic);
    if (topic) ro.envelope = envelope_spec::topic();
    // Without a topic, straight from zrecv (perf: no move through a loop).
    std::optional<message> m = topic ? receive_of_topic(socket_, ro, opt_.topic, opt_.recv_timeout) : zrecv(socket_, ro);
    if (!m) return std::nullopt;
    std::uint64_t bytes = 0;
    for (const tensor& t : m->tensors) bytes += t.nbytes();
    stats_.add(bytes);
    return std::move(m->tensors);
}

// +shm: the frames as they come, then the shared-memory decoding. A
// message the sender already gave up (a late subscriber's first) is skipped.
std::optional<std::vector<tensor>> connection::receive_shm(zmq::recv_flags flags, const recv_options& ro, bool topic) {
    std::vector<zmq::message_t> frames;
    for (;;) {
        frames.clear();
        zmq::message_t first;
        std::optional<std::size_t> got;
        do {
            try {
                got = socket_.recv(first, flags);
                break;
            } catch (const zmq::error_t& e) {
                if (e.num() != EINTR) throw;
            }
        } while (true);
        if (!got) return std::nullopt;
        bool more = first.more();
        frames.push_back(std::move(first));
        bool too_many = false;
        while (more) {
            zmq::message_t part;
            (void)socket_.recv(part, zmq::recv_flags::none);  // the rest is there (whole messages)
            more = part.more();
            if (frames.size() < ro.max_frames) frames.push_back(std::move(part));
            else too_many = true;
        }
        if (too_many) throw error(errc::limit_exceeded, "shm message of more than " + std::to_string(ro.max_frames) + " frames");
        std::span<const zmq::message_t> body(frames);
        if (topic) {
            const std::string_view t(frames.front().data<char>(), frames.front().size());
            if (t != opt_.topic) continue;  // a longer topic that ZeroMQ's prefix match let through
            body = body.subspan(1);
        }
        std::optional<std::vector<tensor>> tensors = detail::shm_receive(*shm_receiver_, body, ro.decode);
        if (!tensors) continue;
        std::uint64_t bytes = 0;
        for (const tensor& t : *tensors) bytes += t.nbytes();
        stats_.add(bytes);
        return tensors;
    }
}

void connection::close() {
    if (shm_sender_) detail::shm_close(*shm_sender_, opt_.linger);
    if (socket_) socket_.close();
}

}  // namespace tenbin
