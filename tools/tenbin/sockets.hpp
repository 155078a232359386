// tenbin tool: how URL-taking subcommands choose their socket. A tensorcom
// URL (zpush://, zsub+ipc://, ...) names the socket and who binds; a plain
// ZeroMQ endpoint takes --socket (or the command's default) and binds as
// tensorcom would for that kind. --bind/--connect override either.
#pragma once

#include <tenbin/connect.hpp>
#include <tenbin/metrics.hpp>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenbin::cli {

struct socket_choice {
    std::string socket;  ///< empty: from the URL, or the command's default
    bool bind = false;
    bool connect = false;
    double heartbeat = 0;  ///< seconds; 0: no heartbeats
    /// Receiving commands: tensor bytes a message may carry (--max-bytes).
    std::uint64_t max_bytes = tenbin::limits{}.max_bytes;
    /// CURVE: this side's secret certificate, the server's public one, a
    /// folder of allowed clients' public ones (empty: not given).
    std::string curve_cert, curve_server, curve_allow;
    /// Acknowledged delivery (--acked; connection_options::acked), its
    /// --ack-heartbeat, and a receiving command's --credit and --ack.
    bool acked = false;
    std::size_t credit = connection_options{}.credit;
    ack_mode ack = connection_options{}.ack;
    double ack_heartbeat = 1;  ///< --ack-heartbeat, seconds

    // What the command can do (set by add_socket_choice):
    std::string command;  ///< "tenbin recv", for messages
    std::vector<std::string> kinds;  ///< the socket kinds it allows
    tenbin::socket_kind plain_default = tenbin::socket_kind::push;  ///< a plain endpoint's kind
    bool receiving = false;  ///< it receives (else it sends)
};

/// Records what the command can do in `choice` (the socket kinds it allows,
/// the kind a plain endpoint gets without --socket, whether it receives) and
/// adds --socket (one of `kinds`), --bind, --connect, --heartbeat and
/// --curve-cert, --curve-server, --curve-allow, --acked; a receiving command
/// also gets --max-bytes, --credit and --ack.
void add_socket_choice(CLI::App& app, socket_choice& choice, std::vector<std::string> kinds,
                       tenbin::socket_kind plain_default, bool receiving);

/// --metrics and --metrics-wait: where the command serves its connection's
/// metrics to Prometheus, and how long it waits at the end for a last scrape.
struct metrics_choice {
    std::string address;  ///< empty: no exporter
    double wait = 0;
};

/// Adds --metrics HOST:PORT and --metrics-wait SECONDS.
void add_metrics_choice(CLI::App& app, metrics_choice& choice);

/// With --metrics, names the connection for the `connection` label (an
/// acked one keeps the name made up for it: that name tells its producers
/// apart from the others) and counts its peers (tenbin_peers).
void name_for_metrics(const metrics_choice& choice, connection_options& co, const std::string& name);

/// Serves `conn`'s metrics at --metrics while alive (the address it took
/// said on stderr as `who`), and when it goes, waits at most --metrics-wait
/// for a scrape (or a signal), so that the last counts are read. Nothing
/// without --metrics. Throws usage_error for an address it cannot read.
class metrics_server {
public:
    metrics_server(const metrics_choice& choice, const connection& conn, const std::string& who);
    ~metrics_server();
    metrics_server(const metrics_server&) = delete;
    metrics_server& operator=(const metrics_server&) = delete;

private:
    std::optional<metrics_exporter> exporter_;
    double wait_ = 0;
};

/// A PUB drops what it sends while nobody is subscribed, without a word.
/// serve and send count the peers connected to theirs (count_peers, a
/// socket monitor; not under CURVE, whose monitor is the socket's one, nor
/// with wait_for, which counts subscribers itself), read at most every
/// 100 ms, and warn at the end when none ever was there.
class pub_audience {
public:
    /// Turns count_peers on in `co` for a PUB it can watch (before the
    /// connection opens: a monitor sees only what comes after it starts).
    static void prepare(connection_options& co, socket_kind kind);
    explicit pub_audience(const connection& conn);
    /// Whether it counts `conn`'s peers.
    bool watches() const noexcept { return watches_; }
    /// After each send.
    void sample();
    /// Peers connected at the last sample.
    std::size_t peers() const noexcept { return peers_; }
    /// At the end, after `sent` messages: "who: warning: ..." on stderr,
    /// with `remedy`, when no peer was connected at any sample.
    void warn_if_nobody(const std::string& who, std::size_t sent, const std::string& remedy);

private:
    void read();  // the peers connected now

    const connection& conn_;
    bool watches_;
    std::chrono::steady_clock::time_point sampled_{};
    std::size_t peers_ = 0, most_ = 0;
};

/// Whether `url` is a plain ZeroMQ endpoint (tcp://, ipc://, inproc://)
/// rather than a tensorcom URL.
bool is_plain_endpoint(const std::string& url);

/// "A plain endpoint (tcp://, ipc://, inproc://) makes a PUSH socket that
/// connects ..." for a command's help footer, ending with a line break.
std::string plain_endpoint_note(const socket_choice& choice);

/// connection_options with kind, bind, heartbeats, limits and acked delivery set from
/// `choice`: when `url` is a
/// plain endpoint and no --socket was given, the kind is the command's
/// default; a plain endpoint binds as tensorcom would for the kind, and so
/// does a receiving PAIR (so that two PAIR commands meet).
connection_options connection_options_for(const socket_choice& choice, const std::string& url);

/// The endpoints `urls` name (braces expand), as connection_options_for
/// reads them; the kind must be one the command allows. Throws bad_url.
std::vector<endpoint> resolve_endpoints(const socket_choice& choice, const std::vector<std::string>& urls);

/// For a timeout message: what the socket did and what peer it needs at the
/// other end ("; hint: ...", tenbin::peer_needed); for a plain endpoint,
/// whose defaults are easy to mismatch, the options that change them.
std::string silence_hint(const std::vector<std::string>& urls, const std::vector<endpoint>& endpoints);

/// The CURVE settings --curve-cert, --curve-server and --curve-allow give
/// for a socket on `endpoints` (nothing without --curve-cert): certificates
/// loaded, refused handshakes reported on stderr as `who` (the first, the
/// 10th, the 100th...) and counted in `refused` when given (it must outlive
/// the socket). Throws usage_error for a combination that cannot work.
std::optional<curve_options> curve_for(const socket_choice& choice, const std::vector<endpoint>& endpoints,
                                       const std::string& who,
                                       std::shared_ptr<std::atomic<std::uint64_t>> refused = nullptr);

/// The connection for `urls` with `co` (connection_options_for's, with the
/// command's own settings added): the kind checked as resolve_endpoints
/// does, each bind whose address ZeroMQ completed (a '*' host, port 0)
/// reported on stderr as `who`, CURVE as curve_for gives it unless `co` has
/// its own. Its receives and sends wait interrupt_poll at a time, for the
/// functions below; `co`'s timeouts are not used.
connection open_connection(const socket_choice& choice, const std::vector<std::string>& urls,
                           const connection_options& co, const std::string& who);

/// When a wait of `seconds` from now ends; nothing for 0 (no end).
std::optional<std::chrono::steady_clock::time_point> deadline_in(double seconds);

/// The next message on a connection from open_connection, waiting until
/// `deadline` (none: for ever) or a signal (see interrupt.hpp): nothing when
/// either comes first, or when an epoch or the stream ended (see
/// connection::epoch_ended, stream_ended). Throws as connection::recv_message
/// does.
std::optional<message> receive_until(connection& conn, std::optional<std::chrono::steady_clock::time_point> deadline);
/// Sends `tensors` on a connection from open_connection, waiting as
/// receive_until does; false when the deadline or a signal came first
/// (nothing was sent). Throws as connection::send does.
bool send_until(connection& conn, tensor_span tensors, std::optional<std::chrono::steady_clock::time_point> deadline);
/// Ends the epoch (or with `stream`, the stream) as connection::end_epoch
/// (end_stream) does, waiting as send_until does.
bool end_until(connection& conn, bool stream, std::optional<std::chrono::steady_clock::time_point> deadline);
/// An acked connection: waits until its consumers acknowledged `sent`
/// batches (a queued batch is no delivered one), as receive_until waits;
/// false when the deadline or a signal came first.
bool acknowledged_until(const connection& conn, std::uint64_t sent,
                        std::optional<std::chrono::steady_clock::time_point> deadline);
/// Answers `to` as connection::reply does, waiting as send_until does.
bool reply_until(connection& conn, const message& to, tensor_span tensors,
                 std::optional<std::chrono::steady_clock::time_point> deadline);

}  // namespace tenbin::cli
