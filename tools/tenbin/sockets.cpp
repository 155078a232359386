#include "sockets.hpp"
#include "common.hpp"
#include "interrupt.hpp"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>

namespace tenbin::cli {

namespace {

std::string upper(std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

// "a", "a and b", "a, b and c" (or "a, b or c").
std::string listed(const std::vector<std::string>& words, std::string_view last = "and") {
    std::string out;
    for (std::size_t i = 0; i < words.size(); ++i)
        out += (i == 0 ? "" : i + 1 == words.size() ? " " + std::string(last) + " " : ", ") + words[i];
    return out;
}

// Whether a plain endpoint of `kind` binds for this command when neither
// --bind nor --connect is given.
bool plain_binds(const socket_choice& choice, tenbin::socket_kind kind) {
    return binds_by_default(kind) || (choice.receiving && kind == tenbin::socket_kind::pair);
}

// A PUB whose peers pub_audience counts.
bool watchable(const connection_options& co, socket_kind kind) {
    return kind == socket_kind::pub && co.wait_for == 0 && co.wait_for_names.empty() && !co.curve;
}

}  // namespace

void pub_audience::prepare(connection_options& co, socket_kind kind) {
    if (watchable(co, kind)) co.count_peers = true;
}

pub_audience::pub_audience(const connection& conn)
    : conn_(conn),
      watches_(watchable(conn.options(), conn.endpoints().at(0).kind) && conn.options().count_peers) {}

void pub_audience::read() {
    sampled_ = std::chrono::steady_clock::now();
    metric_set m;
    conn_.metrics()->collect(m);
    peers_ = static_cast<std::size_t>(m.value("tenbin_peers").value_or(0));
    most_ = std::max(most_, peers_);
}

void pub_audience::sample() {
    if (watches_ && std::chrono::steady_clock::now() - sampled_ >= std::chrono::milliseconds(100)) read();
}

void pub_audience::warn_if_nobody(const std::string& who, std::size_t sent, const std::string& remedy) {
    if (!watches_ || sent == 0) return;
    read();
    if (most_ > 0) return;
    std::cerr << who << ": warning: no subscriber was connected: the " << sent
              << (sent == 1 ? " message" : " messages")
              << " went to nobody (a PUB drops what it sends while nobody is subscribed; " << remedy << ")"
              << std::endl;
}

bool is_plain_endpoint(const std::string& url) {
    return url.starts_with("tcp://") || url.starts_with("ipc://") || url.starts_with("inproc://") ||
           url.starts_with("shm://");
}

void add_socket_choice(CLI::App& app, socket_choice& choice, std::vector<std::string> kinds,
                       tenbin::socket_kind plain_default, bool receiving) {
    choice.command = "tenbin " + app.get_name();
    choice.kinds = std::move(kinds);
    choice.plain_default = plain_default;
    choice.receiving = receiving;
    std::vector<std::string> binding, connecting;
    for (const auto& k : choice.kinds)
        (plain_binds(choice, *parse_socket_kind(k)) ? binding : connecting).push_back(k);
    std::string sides;
    if (!binding.empty()) sides += listed(binding) + (binding.size() == 1 ? " binds" : " bind");
    if (!binding.empty() && !connecting.empty()) sides += "; ";
    if (!connecting.empty()) sides += listed(connecting) + (connecting.size() == 1 ? " connects" : " connect");
    app.add_option("--socket", choice.socket,
                   "Socket kind for a plain endpoint (tcp://, ipc://, inproc://), default " +
                       std::string(name(plain_default)) + "\n(" + sides +
                       "); a tensorcom URL (zpush://, zsub://, ...) implies it")
        ->check(CLI::IsMember(choice.kinds));
    auto* b = app.add_flag("--bind", choice.bind, "Bind, whatever the URL's or the kind's default");
    auto* c = app.add_flag("--connect", choice.connect, "Connect, whatever the URL's or the kind's default");
    b->excludes(c);
    auto* h = app.add_option("--heartbeat", choice.heartbeat,
                             "Ping each peer every this many seconds and drop one silent for three pings (a "
                             "dead host, a cut network); 0: off")
                  ->check(nonnegative);
    // Its first spelling, in milliseconds: kept for scripts, out of the help
    // (every other time is in seconds).
    app.add_option_function<double>(
           "--heartbeat-ms", [&choice](double ms) { choice.heartbeat = ms / 1000; },
           "--heartbeat in milliseconds")
        ->check(nonnegative)
        ->excludes(h)
        ->group("");
    const char* security = "Security (ZeroMQ CURVE; the side that binds is the server)";
    app.add_option("--curve-cert", choice.curve_cert,
                   "This side's secret certificate (NAME.key_secret from tenbin keygen or pyzmq):\n"
                   "authenticate and encrypt with CURVE")
        ->type_name("FILE")
        ->group(security);
    app.add_option("--curve-server", choice.curve_server,
                   "The server's public certificate (NAME.key), for a side that connects")
        ->type_name("FILE")
        ->group(security);
    app.add_option("--curve-allow", choice.curve_allow,
                   "A folder of clients' public certificates (*.key) allowed in, for a side that\n"
                   "binds; without it, any client holding a key pair gets in")
        ->type_name("DIR")
        ->group(security);
    app.add_flag("--acked", choice.acked,
                 "Acknowledged delivery (both sides; the producer binds, as zrpush and zrpull\n"
                 "URLs say): a batch goes only to a receiver with credit, and a dead receiver's\n"
                 "unacknowledged batches go to others");
    app.add_option("--ack-heartbeat", choice.ack_heartbeat,
                   "With --acked: each end says it lives this often (seconds); a receiver silent for\n"
                   "two is dead to the sender, a sender silent for three gone to its receivers\n"
                   "(each end counts the longer of its own and its peer's)")
        ->check(positive)
        ->capture_default_str();
    if (receiving) {
        app.add_option("--credit", choice.credit, "With --acked: batches taken and not yet acknowledged at most (at least 2 with on-release)")
            ->check(positive)
            ->capture_default_str();
        app.add_option("--ack", choice.ack,
                       "With --acked: acknowledge a batch when it is taken (on-take) or when it has been\n"
                       "handled (on-release: printed, saved, counted)")
            ->transform(CLI::CheckedTransformer(
                std::map<std::string, ack_mode>{{"on-take", ack_mode::on_take}, {"on-release", ack_mode::on_release}}))
            ->default_str("on-release");
    }
    if (receiving)
        app.add_option("--max-bytes", choice.max_bytes,
                       "Tensor bytes one message may carry (e.g. 64MiB; k, M, G are powers of 1024);\n"
                       "a message over it is refused as limit_exceeded, and a peer sending a frame\n"
                       "over it by more than 64 MiB is disconnected before the frame is allocated")
            ->transform(CLI::AsSizeValue(false))
            ->check(positive)
            ->capture_default_str();
}

std::string plain_endpoint_note(const socket_choice& choice) {
    const tenbin::socket_kind kind = choice.plain_default;
    const bool bind = plain_binds(choice, kind);
    return "Without --socket, a plain endpoint (tcp://, ipc://, inproc://) makes a\n" + upper(name(kind)) +
           " socket that " + (bind ? "binds" : "connects") + ", so the peer must be a " + std::string(peer_kinds(kind)) + " that " +
           (bind ? "connects" : "binds") + "\n(--bind, --connect and --socket change that).\n";
}

connection_options connection_options_for(const socket_choice& choice, const std::string& url) {
    connection_options co;
    const bool plain = is_plain_endpoint(url);
    if (!choice.socket.empty()) co.kind = parse_socket_kind(choice.socket);
    else if (plain) co.kind = choice.plain_default;
    // A plain endpoint binds as the help says (plain_binds: as tensorcom
    // binds its kind, and a receiving PAIR too).
    if (plain && co.kind && plain_binds(choice, *co.kind)) co.bind = true;
    if (choice.bind) co.bind = true;
    if (choice.connect) co.bind = false;
    // Seconds as the options' milliseconds, at least one.
    const auto ms = [](double seconds) {
        return std::max(std::chrono::milliseconds(1),
                        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds)));
    };
    if (choice.heartbeat > 0) co.heartbeat = ms(choice.heartbeat);
    if (choice.receiving) co.decode.limits.max_bytes = choice.max_bytes;
    co.acked = choice.acked;
    co.credit = choice.credit;
    co.ack = choice.ack;
    co.ack_heartbeat = ms(choice.ack_heartbeat);
    return co;
}

std::vector<endpoint> resolve_endpoints(const socket_choice& choice, const std::vector<std::string>& urls) {
    const connection_options co = connection_options_for(choice, urls.front());
    std::vector<endpoint> eps = parse_urls(urls, {.kind = co.kind, .bind = co.bind});
    const std::string kind(name(eps.front().kind));
    if (std::find(choice.kinds.begin(), choice.kinds.end(), kind) == choice.kinds.end())
        throw error(errc::bad_url, "'" + urls.front() + "' makes a " + kind + " socket, which " + choice.command +
                                       " cannot use; it takes " + listed(choice.kinds, "or") + " sockets");
    return eps;
}

std::string silence_hint(const std::vector<std::string>& urls, const std::vector<endpoint>& endpoints) {
    if (endpoints.empty()) return {};
    if (std::none_of(urls.begin(), urls.end(), is_plain_endpoint)) return "; hint: " + peer_needed(endpoints);
    return "; hint: a plain endpoint, so " + peer_needed(endpoints) + " (see --socket, --bind, --connect)";
}

std::optional<curve_options> curve_for(const socket_choice& choice, const std::vector<endpoint>& endpoints,
                                       const std::string& who, std::shared_ptr<std::atomic<std::uint64_t>> refused) {
    if (choice.curve_cert.empty()) {
        if (!choice.curve_server.empty() || !choice.curve_allow.empty())
            throw usage_error("--curve-server and --curve-allow need --curve-cert (this side's secret certificate)");
        return std::nullopt;
    }
    for (const endpoint& ep : endpoints) {
        try {
            check_curve_address(ep.address);
        } catch (const error& e) {
            throw usage_error(e.what());
        }
    }
    const bool binds = std::any_of(endpoints.begin(), endpoints.end(), [](const endpoint& e) { return e.bind; });
    const bool connects = std::any_of(endpoints.begin(), endpoints.end(), [](const endpoint& e) { return !e.bind; });
    if (connects && choice.curve_server.empty())
        throw usage_error("this side connects, so it needs --curve-server FILE (the server's public certificate) "
                          "beside --curve-cert");
    if (!binds && !choice.curve_allow.empty())
        throw usage_error("--curve-allow is for the side that binds (the server); this side connects");
    if (!connects && !choice.curve_server.empty())
        throw usage_error("--curve-server is for the side that connects; this side binds (it is the server)");
    curve_options opt;
    opt.keys = load_secret_certificate(choice.curve_cert);
    if (!choice.curve_server.empty()) opt.server_key = load_public_certificate(choice.curve_server);
    if (!choice.curve_allow.empty()) opt.allowed_clients = load_public_certificates(choice.curve_allow);
    if (!refused) refused = std::make_shared<std::atomic<std::uint64_t>>(0);
    // A refused client retries several times a second: the first refusal
    // is shown, then the 10th, 100th...
    opt.on_refused = [who, refused](const handshake_refusal& r) {
        const std::uint64_t n = refused->fetch_add(1) + 1;
        std::uint64_t mark = 1;
        while (mark < n && mark <= UINT64_MAX / 10) mark *= 10;
        if (mark != n) return;
        std::cerr << (who + ": refused handshake on " + r.endpoint + ": " + r.reason +
                      (n > 1 ? " (" + std::to_string(n) + " so far)" : std::string()) + "\n");
    };
    return opt;
}

connection open_connection(const socket_choice& choice, const std::vector<std::string>& urls,
                           const connection_options& co, const std::string& who) {
    const std::vector<endpoint> eps = resolve_endpoints(choice, urls);  // throws for a kind the command cannot use
    connection_options sliced = with_sliced_timeouts(co, interrupt_poll);
    if (!sliced.curve) sliced.curve = curve_for(choice, eps, who);
    connection conn(urls, sliced);
    for (std::size_t i = 0; i < conn.endpoints().size() && i < eps.size(); ++i) {
        const endpoint& ep = conn.endpoints()[i];
        if (ep.bind && ep.address != eps[i].address)
            std::cerr << who << ": " << name(ep.kind) << " bound to " << ep.address << "\n";
    }
    return conn;
}

void add_metrics_choice(CLI::App& app, metrics_choice& choice) {
    const char* group = "Metrics (Prometheus)";
    app.add_option("--metrics", choice.address,
                   "Serve this connection's metrics (docs: Metrics) at http://HOST:PORT/metrics\n"
                   "for Prometheus; a bare PORT is 127.0.0.1; port 0 takes a free one (said on stderr)")
        ->type_name("HOST:PORT")
        ->group(group);
    app.add_option("--metrics-wait", choice.wait,
                   "At the end, wait at most this many seconds for a last scrape, so that the final\n"
                   "counts are read (0: do not wait)")
        ->check(nonnegative)
        ->capture_default_str()
        ->needs(app.get_option("--metrics"))
        ->group(group);
}

void name_for_metrics(const metrics_choice& choice, connection_options& co, const std::string& name) {
    if (choice.address.empty()) return;
    if (!co.acked && co.name.empty()) co.name = name;
    co.count_peers = true;
}

metrics_server::metrics_server(const metrics_choice& choice, const connection& conn, const std::string& who)
    : wait_(choice.wait) {
    if (choice.address.empty()) return;
    try {
        exporter_.emplace(choice.address, std::vector{conn.metrics()});
    } catch (const error& e) {
        if (e.code() == errc::bad_argument) throw usage_error("--metrics: " + std::string(e.what()));
        throw;
    }
    std::cerr << who << ": metrics at http://" << exporter_->address() << "/metrics\n";
}

metrics_server::~metrics_server() {
    using namespace std::chrono;
    if (!exporter_ || !(wait_ > 0)) return;
    const auto deadline = deadline_in(wait_);  // none: for ever
    const std::uint64_t begun = exporter_->scrapes_begun();  // the counts are final now
    // In slices, so that a signal ends the wait.
    while (!interrupted()) {
        milliseconds slice = interrupt_poll;
        if (deadline) {
            const auto left = duration_cast<milliseconds>(*deadline - steady_clock::now());
            if (left.count() <= 0) return;
            slice = std::min(slice, left);
        }
        if (exporter_->wait_for_scrape(slice, begun)) return;
    }
}

std::optional<std::chrono::steady_clock::time_point> deadline_in(double seconds) {
    if (timeout_ms(seconds) < 0) return std::nullopt;
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms(seconds));
}

namespace {

// Waits in slices of at most interrupt_poll, each as `option` of the socket,
// until `attempt` succeeds, the deadline passes or a signal comes. An acked
// connection's socket belongs to its thread: there every wait is the
// connection's own timeouts, interrupt_poll (open_connection).
template <class Option, class Attempt>
auto in_slices(connection& conn, Option option, std::optional<std::chrono::steady_clock::time_point> deadline,
               Attempt attempt) -> decltype(attempt()) {
    using namespace std::chrono;
    for (;;) {
        if (interrupted()) return {};
        milliseconds slice = interrupt_poll;
        if (deadline) {
            const auto left = duration_cast<milliseconds>(*deadline - steady_clock::now());
            if (left.count() <= 0) return {};
            slice = std::min(slice, left);
        }
        if (!conn.options().acked) conn.socket().set(option, static_cast<int>(slice.count()));
        if (auto done = attempt()) return done;
    }
}

}  // namespace

std::optional<message> receive_until(connection& conn, std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::optional<message> m;
    in_slices(conn, zmq::sockopt::rcvtimeo, deadline, [&] {
        m = conn.recv_message();
        return m || conn.epoch_ended() || conn.stream_ended();
    });
    return m;
}

bool send_until(connection& conn, tensor_span tensors, std::optional<std::chrono::steady_clock::time_point> deadline) {
    return in_slices(conn, zmq::sockopt::sndtimeo, deadline, [&] { return conn.send(tensors); });
}

bool end_until(connection& conn, bool stream, std::optional<std::chrono::steady_clock::time_point> deadline) {
    return in_slices(conn, zmq::sockopt::sndtimeo, deadline,
                     [&] { return stream ? conn.end_stream() : conn.end_epoch(); });
}

bool acknowledged_until(const connection& conn, std::uint64_t sent,
                        std::optional<std::chrono::steady_clock::time_point> deadline) {
    while (conn.delivery_stats().acknowledged < sent) {
        if (interrupted() || (deadline && std::chrono::steady_clock::now() >= *deadline)) return false;
        sleep_unless_interrupted(0.05);
    }
    return true;
}

bool reply_until(connection& conn, const message& to, tensor_span tensors,
                 std::optional<std::chrono::steady_clock::time_point> deadline) {
    return in_slices(conn, zmq::sockopt::sndtimeo, deadline, [&] { return conn.reply(to, tensors); });
}

}  // namespace tenbin::cli
