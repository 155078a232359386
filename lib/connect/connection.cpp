#include <tenbin/connection.hpp>

#include "connect/connect_detail.hpp"
#include "connect/delivery.hpp"
#include "connect/link.hpp"
#include "connect/peers.hpp"
#include "connect/security_detail.hpp"
#include "connect/stream_tracker.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <unistd.h>

namespace tenbin {

namespace {

int to_ms(std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX));
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

// Runs `f`; what libzmq throws (a socket error, a terminated context)
// becomes a tenbin::error, so that a connection's caller catches one type.
template <class F>
auto socket_call(const char* what, F&& f) {
    try {
        return f();
    } catch (const zmq::error_t& e) {
        if (e.num() == ETERM || e.num() == ENOTSOCK)
            throw error(errc::closed, std::string("cannot ") + what + ": the connection's ZeroMQ context was "
                                                                "terminated (or its socket closed) meanwhile");
        throw error(errc::io_error, std::string("cannot ") + what + ": " + e.what());
    }
}

// "this connection's socket (tcp://...) is a pull socket, which cannot send".
[[noreturn]] void cannot(const endpoint& ep, const std::string& what) {
    throw error(errc::bad_argument, "this connection's socket (" + ep.address + ") is a " +
                                        std::string(name(ep.kind)) + " socket, which cannot " + what);
}

bool has_topic(const connection_options& opt, socket_kind kind) {
    return !opt.topic.empty() && (kind == socket_kind::pub || kind == socket_kind::sub);
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

struct connection::impl {
    std::shared_ptr<zmq::context_t> context;
    // Between the two: its threads and sockets end after the socket closes
    // and before the context can terminate.
    curve_guard curve;
    detail::peer_watch peers;  // as curve
    zmq::socket_t socket;
    connection_options opt;
    std::vector<endpoint> endpoints;
    socket_kind kind{};
    bool shm = false;           // +shm endpoints
    std::vector<std::string> connected;  // acked: the routing ids given to the endpoints connected to
    bool serves_curve = false;  // a ZAP handler admits CURVE clients
    statistics stats;
    recv_options receiving;     // made once (perf: decode options hold a vector)
    std::uint64_t other_topics = 0;
    std::set<std::string> said;  // notices given
    // Streams: the numbering of what is sent, and what received is given when.
    std::optional<stream_position> numbering;
    std::optional<detail::stream_tracker> tracker;
    std::deque<detail::stream_event> ready;  // given by the tracker, not yet returned
    std::uint64_t consumer_epoch = 0;
    bool epoch_ended = false, stream_ended = false;
    // PUB watching its audience (an XPUB socket): subscribers joined, the
    // named ones, and the current epoch's start kept for late ones.
    bool xpub = false;
    std::size_t subscribers = 0;
    std::multiset<std::string> subscriber_names;
    bool joined = false;  // a subscriber joined since the last send
    std::deque<std::pair<std::vector<tensor>, stream_position>> retained;
    void absorb_subscriptions();
    bool wait_for_audience();
    // After the socket, so that it goes first (+shm: its side channel).
    std::unique_ptr<detail::link> link;
    // Acked delivery: the thread that runs the socket; goes before the link.
    std::unique_ptr<detail::delivery> delivery;
    std::shared_ptr<detail::connection_meter> meter;
    // A +shm receiver's counts (detail::shm_receiver_counters) as of its last
    // receive: they are the receiving thread's to read, a scrape reads these.
    std::array<std::atomic<std::uint64_t>, 8> shm_received{};
    std::atomic<bool> shm_receives{false};
    void publish_shm_received();

    // Before any part a scrape reads goes.
    ~impl() {
        if (meter) meter->detach();
    }
    // What a scrape reads of the parts (thread-safe readings only).
    void collect(detail::metric_writer& w) const;
    std::optional<message> take(zmq::recv_flags flags);

    void open_endpoints(std::vector<endpoint> eps);
    void notice(const std::string& key, const std::string& text);
    std::optional<message> receive(zmq::recv_flags flags);
    std::optional<detail::tracked> receive_tracked(zmq::recv_flags flags);
    std::optional<detail::tracked> delivered(std::optional<std::chrono::milliseconds> wait);
    std::optional<message> next(zmq::recv_flags flags);
    void stop_delivery() {
        if (delivery) delivery->stop(opt.linger);
    }
    bool send(tensor_span tensors, std::span<const zmq::const_buffer> envelope);
    bool send_mark(stream_position::mark m);
    detail::stream_tracker& streams() {
        // Made on first use: a connection that never sees a position has none.
        if (!tracker) tracker.emplace(opt.streams, 1024, opt.decode.limits.max_bytes, !opt.acked);
        return *tracker;
    }
    void check_open(const char* what) const {
        // libzmq would say "Socket operation on non-socket", or touch a null handle.
        if (!socket.handle())
            throw error(errc::bad_argument, std::string("cannot ") + what + ": the connection is closed (or moved from)");
    }
};

void connection::impl::notice(const std::string& key, const std::string& text) {
    if (!said.insert(key).second) return;
    if (opt.on_notice)
        opt.on_notice(text);
    else
        std::cerr << "tenbin: " << text << std::endl;
}

// Sets each endpoint's per-connection options, then binds or connects it.
void connection::impl::open_endpoints(std::vector<endpoint> eps) {
    for (endpoint& ep : eps) {
        if (ep.kind != kind || ep.shm != shm)
            throw error(errc::bad_url, "'" + ep.address + "' is a " + std::string(name(ep.kind)) +
                                           (ep.shm ? " +shm" : "") + " endpoint; this connection's socket is a " +
                                           std::string(name(kind)) + (shm ? " +shm" : "") + " one");
        if (!ep.topic.empty() && ep.topic != opt.topic)
            throw error(errc::bad_url, "'#" + ep.topic + "': this connection's topic is '" + opt.topic +
                                           "' (one socket has one topic)");
        if (opt.curve) {
            if (ep.bind && !serves_curve)
                throw error(errc::bad_argument, "cannot bind " + ep.address + " with CURVE: the connection was "
                                                "opened with connecting endpoints only, so it has no ZAP handler "
                                                "to admit clients; open it with the bound endpoint");
            (ep.bind ? detail::set_curve_server : detail::set_curve_client)(socket, *opt.curve);
        }
        // Only where it queues outgoing messages: on a sub socket it would
        // hold back the subscription until the application next calls into
        // the socket, and what is published meanwhile is lost.
        if (opt.acked) {
            // Acked delivery's ROUTER names the peers it connects to, so that
            // it can say hello first.
            if (!ep.bind) {
                connected.push_back("~ep" + std::to_string(endpoints.size()));
                socket.set(zmq::sockopt::connect_routing_id, connected.back());
            }
        } else if (!ep.bind && opt.immediate && detail::can_send(kind)) {
            socket.set(zmq::sockopt::immediate, 1);
        }
        ep.address = attach(socket, ep);
        endpoints.push_back(std::move(ep));
    }
}

std::string detail::made_up_producer_name() {
    char host[65] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
    std::string name;
    for (const char* c = host; *c && name.size() < 32; ++c)
        name += (*c > 0x20 && *c < 0x7f) ? *c : '_';
    std::random_device rd;
    char tail[24];
    std::snprintf(tail, sizeof tail, "-%d-%04x", static_cast<int>(::getpid()), rd() & 0xffff);
    return name + tail;
}

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
    : s_(std::make_unique<impl>()) {
    impl& s = *s_;
    s.context = std::move(context);
    s.opt = std::move(opt);
    s.stats = statistics(s.opt.stats_horizon);
    std::vector<endpoint> eps = parse_urls(urls, {.kind = s.opt.kind, .bind = s.opt.bind});
    s.kind = eps.front().kind;
    // The URL's #topic is the option's, spelled in the URL.
    if (const std::string& url_topic = eps.front().topic; !url_topic.empty()) {
        if (!s.opt.topic.empty() && s.opt.topic != url_topic)
            throw error(errc::bad_argument, "the URL's #" + url_topic + " and connection_options::topic '" +
                                                s.opt.topic + "' differ; give the topic once");
        s.opt.topic = url_topic;
    }
    if (s.kind == socket_kind::pub && has_topic(s.opt, s.kind) && s.opt.tensorcom_compatible)
        throw error(errc::bad_argument, "a topic makes a publisher send a topic frame in front of each message, "
                                        "which a Python tensorcom subscriber cannot decode (tensorcom_compatible)");
    s.shm = eps.front().shm;
    if (s.opt.acked) {
        if (s.kind != socket_kind::push && s.kind != socket_kind::pull)
            throw error(errc::bad_argument, "acked delivery is for zpush and zpull URLs (a producer and its "
                                            "consumers), not a " + std::string(name(s.kind)) + " socket");
        if (s.opt.streams.world_size > 1)
            throw error(errc::bad_argument, "acked consumers share their producers' batches among themselves: "
                                            "streams.world_size is for a stream every consumer receives whole");
        if (s.kind == socket_kind::push) s.opt.stream = true;  // acks name batches by their positions
    }
    s.xpub = s.kind == socket_kind::pub && (s.opt.wait_for > 0 || !s.opt.wait_for_names.empty() || s.opt.replay_window > 0);
    if (s.opt.replay_window > 0 && s.kind == socket_kind::pub && s.opt.producer.empty()) s.opt.stream = true;
    s.socket = zmq::socket_t(*s.context, s.opt.acked ? zmq::socket_type::router
                                         : s.xpub    ? zmq::socket_type::xpub
                                                     : zmq_socket_type(s.kind));
    // Every subscription and unsubscription, each subscriber's, and those of
    // subscribers that leave.
    if (s.xpub) s.socket.set(zmq::sockopt::xpub_verboser, 1);
    if (s.opt.acked) {
        std::random_device rd;
        const std::uint64_t id = (std::uint64_t{rd()} << 32) ^ rd();
        s.socket.set(zmq::sockopt::routing_id, zmq::const_buffer(&id, sizeof id));
        s.socket.set(zmq::sockopt::router_mandatory, 1);
        s.socket.set(zmq::sockopt::router_handover, 1);
    }
    s.socket.set(zmq::sockopt::sndhwm, s.opt.send_hwm);
    s.socket.set(zmq::sockopt::linger, detail::can_send(s.kind) ? to_ms(s.opt.linger) : 0);
    if (s.opt.recv_timeout) s.socket.set(zmq::sockopt::rcvtimeo, to_ms(*s.opt.recv_timeout));
    if (s.opt.send_timeout) s.socket.set(zmq::sockopt::sndtimeo, to_ms(*s.opt.send_timeout));
    if (s.opt.heartbeat) set_heartbeat(s.socket, *s.opt.heartbeat);
    bound_receive(s.socket, s.opt.decode.limits, s.opt.recv_hwm);
    if (s.kind == socket_kind::sub) {
        s.socket.set(zmq::sockopt::subscribe, s.opt.topic);
        // A named subscriber says its name to the publisher as a topic no
        // message begins with.
        if (!s.opt.name.empty()) s.socket.set(zmq::sockopt::subscribe, detail::name_topic + s.opt.name);
    }
    if (s.kind == socket_kind::pub && s.opt.pub_nodrop) s.socket.set(zmq::sockopt::xpub_nodrop, 1);

    s.receiving.decode = s.opt.decode;
    // A message has as many frames as tensors twice, the envelope's and
    // the position's beside.
    s.receiving.max_frames =
        std::max(s.receiving.max_frames, 2 * std::min<std::size_t>(s.opt.decode.limits.max_tensors, SIZE_MAX / 4) + 4);
    if (s.kind == socket_kind::router) s.receiving.envelope = envelope_spec::router();
    if (s.kind == socket_kind::sub && has_topic(s.opt, s.kind)) s.receiving.envelope = envelope_spec::topic(s.opt.topic);

    if (!s.opt.producer.empty() || s.opt.stream) {
        stream_position p;
        p.producer = s.opt.producer.empty() ? detail::made_up_producer_name() : s.opt.producer;
        std::random_device rd;
        p.incarnation = (std::uint64_t{rd()} << 32) ^ rd();
        (void)encode_position(p);  // the name checked now, not at the first send
        s.numbering = std::move(p);
    }
    s.meter = std::make_shared<detail::connection_meter>(detail::can_send(s.kind), detail::can_receive(s.kind));
    s.link = s.shm ? detail::shm_link(detail::can_send(s.kind), detail::can_receive(s.kind), shm_options_of(s.opt, s.kind))
                   : detail::plain_link(s.opt.multipart);
    if (s.opt.curve) {
        s.serves_curve = std::any_of(eps.begin(), eps.end(), [](const endpoint& e) { return e.bind; });
        const bool connects = std::any_of(eps.begin(), eps.end(), [](const endpoint& e) { return !e.bind; });
        detail::check_curve_options(*s.opt.curve, s.serves_curve, connects);
        s.curve = detail::watch_curve(*s.context, s.socket, *s.opt.curve, s.serves_curve);
    } else if (s.opt.count_peers) {
        s.peers = detail::peer_watch(*s.context, s.socket, s.meter);
    }
    s.open_endpoints(std::move(eps));
    if (s.opt.acked) {
        if (s.opt.name.empty()) s.opt.name = s.numbering ? s.numbering->producer : detail::made_up_producer_name();
        detail::delivery_options d;
        d.role = s.kind == socket_kind::push ? detail::peer_role::producer : detail::peer_role::consumer;
        d.name = s.numbering ? s.numbering->producer : s.opt.name;
        d.incarnation = s.numbering ? s.numbering->incarnation : std::random_device{}();
        d.credit = std::max<std::size_t>(s.opt.credit, 1);
        d.ack = s.opt.ack;
        d.heartbeat = s.opt.ack_heartbeat;
        d.decode = s.opt.decode;
        d.connected = s.connected;
        s.delivery = detail::delivery::start(*s.context, s.socket, *s.link, std::move(d));
    }
    std::vector<std::string> addresses;
    for (const endpoint& ep : s.endpoints) addresses.push_back(ep.address);
    s.meter->label(s.opt.name, addresses);
    s.meter->attach([&s](detail::metric_writer& w) { s.collect(w); });
}

namespace {
// The fields of detail::shm_receiver_counters a scrape shows, in the order they are published.
template <class Counters>
auto shm_received_fields(Counters& c) {
    return std::array{&c.senders,        &c.mappings,     &c.mapped_bytes, &c.messages_skipped,
                      &c.claim_timeouts, &c.links_broken, &c.refused,      &c.senders_evicted};
}
}  // namespace

void connection::impl::publish_shm_received() {
    const std::optional<detail::shm_receiver_counters> c = link->receiver_counters();
    if (!c) return;
    const auto fields = shm_received_fields(*c);
    for (std::size_t i = 0; i < fields.size(); ++i) shm_received[i].store(*fields[i], std::memory_order_relaxed);
    shm_receives.store(true, std::memory_order_relaxed);
}

void connection::impl::collect(detail::metric_writer& w) const {
    namespace f = detail::families;
    auto write = [&w](const detail::family_spec& family, auto value, const metric_labels& extra = {}) {
        w.write(family, static_cast<double>(value), extra);
    };
    if (opt.curve) write(f::curve_refused, curve.refused_handshakes());
    if (tensor_pool* p = link->pool()) {
        const pool_stats ps = p->stats();
        write(f::shm_pool_bytes, ps.bytes);
        write(f::shm_pool_in_use_bytes, ps.in_use_bytes);
        write(f::shm_pool_limit_bytes, opt.shm_pool_bytes);
        write(f::shm_pool_free_bytes, opt.shm_pool_bytes > ps.in_use_bytes ? opt.shm_pool_bytes - ps.in_use_bytes : 0);
        write(f::shm_segments, ps.buffers);
        write(f::shm_pool_waits, ps.waits);
    }
    if (const std::optional<detail::shm_sender_counters> c = link->sender_counters()) {
        write(f::shm_copy_ins, c->copy_ins);
        write(f::shm_copy_in_bytes, c->copy_in_bytes);
        write(f::shm_peers, c->peers);
        write(f::shm_peers_refused, c->peers_refused);
        write(f::shm_leases_expired, c->leases_expired);
        write(f::shm_segments_retired, c->segments_retired);
        write(f::shm_retires_failed, c->retires_failed);
        write(f::shm_blocks_pinned, c->blocks_pinned);
        write(f::shm_peers_cut_off, c->peers_cut_off);
        write(f::shm_laggard_drops, c->laggard_drops);
    }
    if (shm_receives.load(std::memory_order_relaxed)) {
        detail::shm_receiver_counters c;
        const auto fields = shm_received_fields(c);
        for (std::size_t i = 0; i < fields.size(); ++i) *fields[i] = shm_received[i].load(std::memory_order_relaxed);
        write(f::shm_senders, c.senders);
        write(f::shm_mappings, c.mappings);
        write(f::shm_mapped_bytes, c.mapped_bytes);
        write(f::shm_messages_skipped, c.messages_skipped);
        write(f::shm_claim_timeouts, c.claim_timeouts);
        write(f::shm_links_broken, c.links_broken);
        write(f::shm_refused, c.refused);
        write(f::shm_senders_evicted, c.senders_evicted);
    }
    if (delivery) {
        const delivery_counters d = delivery->counters();
        write(f::delivery_sent, d.sent);
        write(f::delivery_acknowledged, d.acknowledged);
        write(f::delivery_redelivered, d.redelivered);
        write(f::delivery_skipped, d.skipped);
        write(f::delivery_consumers_lost, d.consumers_lost);
        write(f::delivery_producers_lost, d.producers_lost);
        write(f::delivery_bad_acks, d.bad_acks);
        write(f::delivery_bad_messages, d.bad_messages);
        if (detail::can_send(kind)) {
            const std::vector<consumer_info> consumers = delivery->consumers();
            write(f::delivery_consumers, consumers.size());
            w.declare(f::consumer_credits);
            w.declare(f::consumer_in_flight);
            w.declare(f::consumer_acknowledged);
            w.declare(f::consumer_redelivered);
            // By name: one that restarts under its name, before the old
            // one is found dead, is one series.
            std::map<std::string, consumer_info> by_name;
            for (const consumer_info& c : consumers) {
                consumer_info& n = by_name[c.name];
                n.credits += c.credits;
                n.in_flight += c.in_flight;
                n.acknowledged += c.acknowledged;
                n.redelivered += c.redelivered;
            }
            for (const auto& [name, c] : by_name) {
                const metric_labels who{{"consumer", name}};
                write(f::consumer_credits, c.credits, who);
                write(f::consumer_in_flight, c.in_flight, who);
                write(f::consumer_acknowledged, c.acknowledged, who);
                write(f::consumer_redelivered, c.redelivered, who);
            }
        }
    }
}

std::shared_ptr<const metrics_source> connection::metrics() const {
    if (!s_) throw error(errc::bad_argument, "cannot read metrics: the connection was moved from");
    s_->meter->time();
    return s_->meter;
}

void connection::add(std::string_view url) { add(std::vector<std::string>{std::string(url)}); }

void connection::add(std::span<const std::string> urls) {
    s_->check_open("add endpoints");
    if (s_->delivery)
        throw error(errc::bad_argument, "an acked connection's thread runs its socket: give every endpoint when "
                                        "it is opened");
    s_->open_endpoints(parse_urls(urls, {.kind = s_->opt.kind, .bind = s_->opt.bind}));
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
connection& connection::operator=(connection&& o) noexcept {
    if (this == &o) return *this;
    close();
    s_ = std::move(o.s_);
    return *this;
}
connection::~connection() {
    if (!s_) return;
    s_->stop_delivery();
    s_->link->close(s_->opt.linger);
}

const statistics& connection::stats() const noexcept { return s_->stats; }
statistics& connection::stats() noexcept { return s_->stats; }
std::uint64_t connection::other_topics() const noexcept { return s_->other_topics; }
const std::vector<endpoint>& connection::endpoints() const noexcept { return s_->endpoints; }
zmq::socket_ref connection::socket() noexcept { return s_ ? zmq::socket_ref(s_->socket) : zmq::socket_ref(); }
const connection_options& connection::options() const noexcept { return s_->opt; }
std::uint64_t connection::refused_handshakes() const noexcept { return s_ ? s_->curve.refused_handshakes() : 0; }
bool connection::closed() const noexcept { return !s_ || !s_->socket.handle(); }

tensor_pool& connection::pool() {
    if (!s_) throw error(errc::bad_argument, "cannot take the pool: the connection is closed (or moved from)");
    s_->check_open("take the pool");
    tensor_pool* p = s_->link->pool();
    if (!p) throw error(errc::bad_argument, "connection::pool() is for +shm connections that send");
    return *p;
}

void connection::impl::absorb_subscriptions() {
    zmq::message_t m;
    while (socket_call("read subscriptions", [&] { return bool(socket.recv(m, zmq::recv_flags::dontwait)); })) {
        if (m.size() == 0) continue;
        const bool subscribes = m.data<char>()[0] == 1;
        const std::string_view topic(m.data<char>() + 1, m.size() - 1);
        if (topic.starts_with(detail::name_topic)) {
            const std::string who(topic.substr(detail::name_topic.size()));
            if (subscribes) {
                subscriber_names.insert(who);
            } else if (auto it = subscriber_names.find(who); it != subscriber_names.end()) {
                subscriber_names.erase(it);
            }
            continue;
        }
        if (subscribes) {
            ++subscribers;
            joined = true;
        } else if (subscribers > 0) {
            --subscribers;
        }
    }
}

// Before the first send, the audience asked for; false at the send timeout.
bool connection::impl::wait_for_audience() {
    const auto deadline = opt.send_timeout ? detail::deadline_after(*opt.send_timeout)
                                           : std::chrono::steady_clock::time_point::max();
    const auto complete = [&] {
        return subscribers >= opt.wait_for &&
               std::all_of(opt.wait_for_names.begin(), opt.wait_for_names.end(),
                           [&](const std::string& n) { return subscriber_names.count(n) != 0; });
    };
    for (absorb_subscriptions(); !complete(); absorb_subscriptions())
        if (!socket_call("wait for subscribers", [&] { return readable_before(socket, deadline); })) return false;
    return true;
}

bool connection::impl::send(tensor_span tensors, std::span<const zmq::const_buffer> envelope) {
    if (xpub) {
        if (stats.messages() == 0 && !wait_for_audience()) return false;
        absorb_subscriptions();
        if (joined && !retained.empty()) {
            // A subscriber joined: the epoch's start again (those that had
            // it drop it by its position).
            send_options again;
            const zmq::const_buffer t(opt.topic.data(), opt.topic.size());
            if (has_topic(opt, kind)) again.envelope = {&t, 1};
            for (auto& kept : retained) {
                again.position = &kept.second;
                if (!socket_call("send", [&] { return link->send(socket, kept.first, again, opt.send_timeout); }))
                    return false;
            }
        }
        joined = false;
    }
    if (!opt.allow64) check_no64(tensors);
    if (opt.tensorcom_compatible) check_tensorcom(tensors);
    std::vector<tensor> renamed;
    if (!opt.infos.empty()) {
        renamed = with_infos(tensors, opt.infos);
        tensors = renamed;
    }
    send_options so;
    so.envelope = envelope;
    const zmq::const_buffer topic(opt.topic.data(), opt.topic.size());
    if (kind == socket_kind::pub && has_topic(opt, kind)) so.envelope = {&topic, 1};
    if (numbering) {
        numbering->sent_ns = detail::realtime_ns();
        so.position = &*numbering;
    }
    detail::send_timer timer(*meter);
    const bool sent = delivery ? delivery->send(tensors, *numbering, opt.send_timeout)
                               : socket_call("send", [&] { return link->send(socket, tensors, so, opt.send_timeout); });
    if (sent) {
        std::uint64_t bytes = 0;
        for (std::size_t i = 0; i < tensors.size(); ++i) bytes += tensors[i].data.size();
        stats.add(bytes);
        if (xpub && opt.replay_window > 0 && numbering && retained.size() < opt.replay_window) {
            retained.emplace_back(keep(tensors), *numbering);
        }
        meter->sent(bytes);
        if (numbering) ++numbering->seq;
    }
    return sent;
}

bool connection::impl::send_mark(stream_position::mark m) {
    check_open(m == stream_position::mark::epoch_end ? "end an epoch" : "end a stream");
    if (!numbering)
        throw error(errc::bad_argument, "only a connection that numbers its messages (connection_options::producer "
                                        "or stream) ends epochs and streams");
    if (opt.tensorcom_compatible)
        throw error(errc::bad_argument, "an end mark is a message without tensors, which a Python tensorcom "
                                        "receiver cannot take (tensorcom_compatible)");
    const endpoint& ep = endpoints.front();
    if (!detail::can_send(ep.kind)) cannot(ep, "send");
    stream_position end = *numbering;
    end.kind = m;
    end.sent_ns = detail::realtime_ns();
    send_options so;
    const zmq::const_buffer topic(opt.topic.data(), opt.topic.size());
    if (kind == socket_kind::pub && has_topic(opt, kind)) so.envelope = {&topic, 1};
    so.position = &end;
    if (delivery)
        delivery->mark(end);
    else if (!socket_call("send", [&] { return link->send(socket, {}, so, opt.send_timeout); }))
        return false;
    retained.clear();  // a new epoch: its own start is kept
    numbering->previous = numbering->seq;
    ++numbering->epoch;
    numbering->seq = 0;
    return true;
}

bool connection::end_epoch() { return s_->send_mark(stream_position::mark::epoch_end); }
bool connection::end_stream() { return s_->send_mark(stream_position::mark::stream_end); }

std::optional<stream_position> connection::position() const {
    if (!s_ || !s_->numbering) return std::nullopt;
    return s_->numbering;
}

void connection::seek(std::uint64_t epoch, std::uint64_t seq) {
    if (!s_ || !s_->numbering)
        throw error(errc::bad_argument, "only a connection that numbers its messages (connection_options::producer "
                                        "or stream) can seek");
    s_->numbering->epoch = epoch;
    s_->numbering->seq = seq;
}

std::uint64_t connection::epoch() const noexcept { return s_ ? s_->consumer_epoch : 0; }
bool connection::epoch_ended() const noexcept { return s_ && s_->epoch_ended; }
bool connection::stream_ended() const noexcept { return s_ && s_->stream_ended; }
stream_counters connection::stream_stats() const { return s_ && s_->tracker ? s_->tracker->counters() : stream_counters{}; }

stream_state connection::state() const {
    if (!s_ || !s_->tracker) return stream_state{s_ ? s_->consumer_epoch : 0, {}};
    std::vector<stream_position> pending;
    for (const detail::stream_event& e : s_->ready)
        if (e.what == detail::stream_event::kind::message && e.message.position) pending.push_back(*e.message.position);
    return s_->tracker->state(s_->consumer_epoch, pending);
}

void connection::load_state(const stream_state& st) {
    if (!s_) throw error(errc::bad_argument, "cannot load a state: the connection is closed (or moved from)");
    std::vector<detail::stream_event> out;
    s_->streams().load(st, std::chrono::steady_clock::now(), out);
    // What was waiting to be returned is checked against the state too.
    std::deque<detail::stream_event> ready;
    for (detail::stream_event& e : s_->ready)
        if (e.what != detail::stream_event::kind::message || !e.message.position ||
            !detail::stream_tracker::taken_in(st, *e.message.position))
            ready.push_back(std::move(e));
    for (detail::stream_event& e : out) ready.push_back(std::move(e));
    s_->ready = std::move(ready);
    s_->consumer_epoch = st.epoch;
    s_->stream_ended = false;
    if (s_->delivery) s_->delivery->seed(st);
}

std::size_t connection::subscribers(bool refresh) {
    if (refresh && s_ && s_->xpub) s_->absorb_subscriptions();
    return s_ ? s_->subscribers : 0;
}

std::vector<std::string> connection::subscriber_names(bool refresh) {
    if (refresh && s_ && s_->xpub) s_->absorb_subscriptions();
    return s_ ? std::vector<std::string>(s_->subscriber_names.begin(), s_->subscriber_names.end())
              : std::vector<std::string>{};
}

std::vector<consumer_info> connection::consumers() const {
    return s_ && s_->delivery ? s_->delivery->consumers() : std::vector<consumer_info>{};
}

delivery_counters connection::delivery_stats() const {
    return s_ && s_->delivery ? s_->delivery->counters() : delivery_counters{};
}

bool connection::send(tensor_span tensors) {
    if (!s_) throw error(errc::bad_argument, "cannot send: the connection is closed (or moved from)");
    s_->check_open("send");
    const endpoint& ep = s_->endpoints.front();
    if (!detail::can_send(ep.kind)) cannot(ep, "send");
    if (ep.kind == socket_kind::router)
        cannot(ep, "send without an envelope: answer a received message with reply()");
    return s_->send(tensors, {});
}

bool connection::reply(const message& to, tensor_span tensors) {
    if (!s_) throw error(errc::bad_argument, "cannot reply: the connection is closed (or moved from)");
    s_->check_open("reply");
    const endpoint& ep = s_->endpoints.front();
    if (!detail::can_send(ep.kind)) cannot(ep, "send");
    // A REP socket keeps its requester's envelope itself.
    if (ep.kind != socket_kind::router) return s_->send(tensors, {});
    const std::vector<zmq::const_buffer> envelope = to.envelope_buffers();
    return s_->send(tensors, envelope);
}

std::optional<std::vector<tensor>> connection::recv() {
    std::optional<message> m = recv_message();
    if (!m) return std::nullopt;
    return std::move(m->tensors);
}

std::optional<std::vector<tensor>> connection::try_recv() {
    if (!s_) throw error(errc::bad_argument, "cannot receive: the connection is closed (or moved from)");
    std::optional<message> m = s_->take(zmq::recv_flags::dontwait);
    if (!m) return std::nullopt;
    return std::move(m->tensors);
}

std::optional<message> connection::recv_message() {
    if (!s_) throw error(errc::bad_argument, "cannot receive: the connection is closed (or moved from)");
    return s_->take(zmq::recv_flags::none);
}

// next() as the consumer sees it, for the metrics: its wait timed, the
// streams' counts published.
std::optional<message> connection::impl::take(zmq::recv_flags flags) {
    detail::wait_timer wait(*meter);
    std::optional<message> m = next(flags);
    if (m) wait.got();
    if (tracker) meter->streams(tracker->counters(), consumer_epoch);
    return m;
}

namespace {

detail::tracked tracked_of(message&& m) {
    detail::tracked t;
    for (const tensor& x : m.tensors) t.bytes += x.nbytes();
    t.tensors = std::move(m.tensors);
    t.position = std::move(m.position);
    if (!m.envelope.empty()) t.envelope = std::make_shared<std::vector<zmq::message_t>>(std::move(m.envelope));
    return t;
}

message message_of(detail::tracked&& t) {
    message m;
    m.tensors = std::move(t.tensors);
    m.position = std::move(t.position);
    if (t.envelope)
        for (zmq::message_t& f : *t.envelope) m.envelope.emplace_back(f.data(), f.size());
    return m;
}

}  // namespace

// The next message to give: as it came when it has no position; through
// the stream tracker when it has, which gives each epoch's batches and then
// nothing once at the epoch's end. The tracker's own deadline (a silent
// producer) bounds every wait while it has one.
std::optional<message> connection::impl::next(zmq::recv_flags flags) {
    epoch_ended = false;
    // The batches the caller let go are acknowledged before it gets another.
    if (delivery) delivery->flush_acks();
    using clock = std::chrono::steady_clock;
    const bool waits = flags == zmq::recv_flags::none;
    const auto until = waits && opt.recv_timeout ? detail::deadline_after(*opt.recv_timeout) : clock::time_point::max();
    for (;;) {
        while (!ready.empty()) {
            detail::stream_event e = std::move(ready.front());
            ready.pop_front();
            switch (e.what) {
            case detail::stream_event::kind::message: return message_of(std::move(e.message));
            case detail::stream_event::kind::epoch_end:
                ++consumer_epoch;
                epoch_ended = true;
                // The last epoch's end says the stream's too.
                if (!ready.empty() && ready.front().what == detail::stream_event::kind::stream_end) {
                    ready.pop_front();
                    stream_ended = true;
                }
                return std::nullopt;
            case detail::stream_event::kind::stream_end: stream_ended = true; break;
            }
        }
        if (stream_ended) return std::nullopt;
        std::optional<detail::tracked> t;
        const auto tick = tracker ? tracker->deadline() : clock::time_point::max();
        const auto tick_now = [&] {
            std::vector<detail::stream_event> out;
            tracker->tick(clock::now(), out);
            for (detail::stream_event& x : out) ready.push_back(std::move(x));
        };
        if (delivery) {
            check_open("receive");
            std::optional<std::chrono::milliseconds> wait = std::chrono::milliseconds(0);
            if (waits && std::min(until, tick) != clock::time_point::max())
                wait = std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(
                                                                  std::min(until, tick) - clock::now()));
            else if (waits)
                wait.reset();
            t = delivered(wait);
            if (!t) {
                if (!waits || clock::now() >= until) return std::nullopt;
                tick_now();
                continue;
            }
        } else if (waits && tick != clock::time_point::max()) {
            check_open("receive");
            const bool came = socket_call("receive", [&] { return readable_before(socket, std::min(until, tick)); });
            if (!came) {
                if (clock::now() >= until) return std::nullopt;
                tick_now();
                continue;
            }
            std::optional<message> m = receive(zmq::recv_flags::dontwait);
            if (!m) continue;
            t = tracked_of(std::move(*m));
        } else {
            std::optional<message> m = receive(flags);
            if (!m) return std::nullopt;
            if (!m->position) return m;  // unnumbered: as it came (perf: no detour)
            t = tracked_of(std::move(*m));
        }
        if (!t->position) return message_of(std::move(*t));
        std::vector<detail::stream_event> out;
        streams().add(std::move(*t), clock::now(), out);
        for (detail::stream_event& x : out) ready.push_back(std::move(x));
    }
}

std::optional<detail::tracked> connection::impl::receive_tracked(zmq::recv_flags flags) {
    if (!delivery) {
        std::optional<message> m = receive(flags);
        if (!m) return std::nullopt;
        return tracked_of(std::move(*m));
    }
    check_open("receive");
    return delivered(flags == zmq::recv_flags::dontwait ? std::optional(std::chrono::milliseconds(0)) : opt.recv_timeout);
}

// Acked consumers: the next batch the delivery thread has, counted.
std::optional<detail::tracked> connection::impl::delivered(std::optional<std::chrono::milliseconds> wait) {
    std::optional<detail::tracked> t = delivery->receive(wait);
    if (t) {
        stats.add(t->bytes);
        meter->received(t->bytes, t->position ? &*t->position : nullptr);
    }
    return t;
}

std::optional<detail::tracked> detail::connection_access::receive(connection& c, zmq::recv_flags flags) {
    return c.s_->receive_tracked(flags);
}

void detail::connection_access::seed(connection& c, const stream_state& s) {
    if (c.s_->delivery) c.s_->delivery->seed(s);
}
std::shared_ptr<detail::connection_meter> detail::connection_access::meter(connection& c) { return c.s_->meter; }

void detail::connection_access::flush_acks(connection& c) {
    if (c.s_->delivery) c.s_->delivery->flush_acks();
}

// The next message for this receiver. Messages of longer topics that
// ZeroMQ's prefix matching lets through are passed over; they do not
// restart the wait: with a timeout, a blocking receive ends when it is
// over, however many such messages came meanwhile.
std::optional<message> connection::impl::receive(zmq::recv_flags flags) {
    check_open("receive");
    const endpoint& ep = endpoints.front();
    if (!detail::can_receive(ep.kind)) cannot(ep, "receive");
    const bool bounded = opt.recv_timeout && flags == zmq::recv_flags::none;
    const auto deadline = bounded ? detail::deadline_after(*opt.recv_timeout) : std::chrono::steady_clock::time_point{};
    const bool topic = receiving.envelope.how == envelope_spec::kind::topic;
    auto other_topic = [&](std::string_view frame) {
        if (frame == opt.topic) return false;
        ++other_topics;
        meter->other_topic();
        notice("other topic", "a subscriber of topic '" + opt.topic + "' passes over messages of topic '" +
                                  std::string(frame.substr(0, 64)) + "' (and any other longer topic) that ZeroMQ's "
                                  "prefix match lets through (counted: other_topics())");
        return true;
    };
    return socket_call("receive", [&]() -> std::optional<message> {
        for (bool first = true;; first = false) {
            receiving.flags = flags;
            if (bounded && !first) {
                if (!readable_before(socket, deadline)) return std::nullopt;
                receiving.flags = zmq::recv_flags::dontwait;  // it is there
            }
            std::optional<message> m(std::in_place);
            bool got = false;
            try {
                got = link->receive(socket, receiving, *m);
            } catch (const malformed_message& e) {
                if (topic && !e.envelope().empty() && other_topic(e.envelope().front())) continue;
                meter->refused(e.code());
                throw;
            } catch (const error& e) {
                if (e.code() != errc::closed) meter->refused(e.code());
                throw;
            }
            if (!got) {
                if (bounded && !first) continue;  // polled, but taken by no one else: a spurious wake-up
                return std::nullopt;
            }
            if (topic && !m->envelope.empty() &&
                other_topic({m->envelope.front().data<char>(), m->envelope.front().size()}))
                continue;
            std::uint64_t bytes = 0;
            for (const tensor& t : m->tensors) bytes += t.nbytes();
            stats.add(bytes);
            meter->received(bytes, m->position ? &*m->position : nullptr);
            publish_shm_received();
            return m;
        }
    });
}

void connection::close() {
    if (!s_) return;
    s_->stop_delivery();
    s_->link->close(s_->opt.linger);
    if (s_->socket) s_->socket.close();
}

}  // namespace tenbin
