// A connection: its socket made, endpoints opened, parts reached.
#include "connect/connection_impl.hpp"
#include "transport/ipc_readers.hpp"

namespace tenbin {

namespace {

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
    if (s.opt.resume_from && !detail::can_receive(s.kind))
        throw error(errc::bad_argument, "resume_from is a receiver's state; a producer resumes with seek()");
    // The URL's #topic is the option's, spelled in the URL.
    if (const std::string& url_topic = eps.front().topic; !url_topic.empty()) {
        if (!s.opt.topic.empty() && s.opt.topic != url_topic)
            throw error(errc::bad_argument, "the URL's #" + url_topic + " and connection_options::topic '" +
                                                s.opt.topic + "' differ; give the topic once");
        s.opt.topic = url_topic;
    }
    if (s.kind == socket_kind::pub && detail::has_topic(s.opt, s.kind) && s.opt.tensorcom_compatible)
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
    s.socket.set(zmq::sockopt::linger, detail::can_send(s.kind) ? detail::to_ms(s.opt.linger) : 0);
    if (s.opt.recv_timeout) s.socket.set(zmq::sockopt::rcvtimeo, detail::to_ms(*s.opt.recv_timeout));
    if (s.opt.send_timeout) s.socket.set(zmq::sockopt::sndtimeo, detail::to_ms(*s.opt.send_timeout));
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
    if (s.kind == socket_kind::sub && detail::has_topic(s.opt, s.kind)) s.receiving.envelope = envelope_spec::topic(s.opt.topic);

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
        // A loop keeps its batch (unacknowledged with on_release) while it
        // asks for the next: with one credit, nothing more could come.
        d.credit = std::max<std::size_t>(s.opt.credit, s.opt.ack == ack_mode::on_release ? 2 : 1);
        d.ack = s.opt.ack;
        d.heartbeat = s.opt.ack_heartbeat;
        d.decode = s.opt.decode;
        d.connected = s.connected;
        if (detail::can_receive(s.kind)) d.resume_from = s.opt.resume_from;
        d.wait_for = s.opt.wait_for;
        d.wait_for_names = s.opt.wait_for_names;
        s.delivery = detail::delivery::start(*s.context, s.socket, *s.link, std::move(d));
    }
    std::vector<std::string> addresses;
    for (const endpoint& ep : s.endpoints) addresses.push_back(ep.address);
    s.meter->label(s.opt.name, addresses);
    s.meter->attach([&s](detail::metric_writer& w) { s.collect(w); });
    // Nothing was taken yet: the caller's thread reads the socket. (An acked
    // consumer's engine had the state before its thread began, for its
    // first hello; seeding it again adds nothing.)
    if (s.opt.resume_from) load_state(*s.opt.resume_from);
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

connection_options with_sliced_timeouts(connection_options opt, std::chrono::milliseconds slice) {
    if (!opt.shm_claim_timeout) opt.shm_claim_timeout = opt.recv_timeout.value_or(std::chrono::seconds(30));
    opt.recv_timeout = opt.send_timeout = slice;
    return opt;
}

void set_heartbeat(zmq::socket_ref socket, std::chrono::milliseconds interval) {
    if (interval.count() <= 0) throw error(errc::bad_argument, "a heartbeat interval must be positive");
    const int ivl = std::min(detail::to_ms(interval), INT32_MAX / 3);
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
void connection::impl::close_socket() {
    if (!socket) return;
    // Its monitor (peers, CURVE or acked delivery watch through it) stops
    // first: libzmq reports the teardown's disconnects to it, and leaks each
    // report it cannot deliver once the reader is gone or the context ends.
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    socket.close();
}

void connection::impl::await_ipc_readers() const {
    if (!socket || !detail::can_send(kind) || opt.linger.count() <= 0) return;
    std::vector<std::string> addresses;
    for (const endpoint& ep : endpoints) addresses.push_back(ep.address);
    (void)detail::await_ipc_readers(addresses, opt.linger);
}

connection::~connection() { close(); }

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

void connection::close() {
    if (!s_) return;
    s_->stop_delivery();
    s_->await_ipc_readers();
    s_->link->close(s_->opt.linger);
    s_->close_socket();
}

}  // namespace tenbin
