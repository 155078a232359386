// tenbin: connections and prefetching loaders, as Python tensorcom's
// `Connection` offers them, on URLs (see url.hpp).
//
// A `connection` owns one ZeroMQ socket bound/connected to every endpoint of
// its URLs and sends or receives tensor lists on it. A `loader` receives on
// a background thread into a bounded queue so that decoding and transforms
// overlap the consumer's work.
#pragma once

#include <tenbin/pool.hpp>
#include <tenbin/security.hpp>
#include <tenbin/url.hpp>
#include <tenbin/zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

namespace detail {
// Range-for over what `(source->*next)()` yields, until it yields nothing.
template <class Source, std::optional<std::vector<tensor>> (Source::*next)()>
class batch_iterator {
public:
    using value_type = std::vector<tensor>;
    using difference_type = std::ptrdiff_t;
    batch_iterator() = default;
    explicit batch_iterator(Source* source) : source_(source) { ++*this; }
    value_type& operator*() { return *current_; }
    batch_iterator& operator++() {
        current_ = (source_->*next)();
        return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_; }

private:
    Source* source_ = nullptr;
    std::optional<value_type> current_;
};
}  // namespace detail

/// Messages and bytes over a connection's life and over a recent window,
/// as tensorcom's Statistics. Not synchronised: one thread updates it.
class statistics {
public:
    /// The clock rates are measured with.
    using clock = std::chrono::steady_clock;

    /// Statistics whose recent window covers the last `horizon` messages.
    explicit statistics(std::size_t horizon = 1000) : horizon_(horizon) { reset(); }
    /// Starts over: counts to zero, the clock from now.
    void reset();
    /// Counts one message of `bytes` tensor bytes, now.
    void add(std::uint64_t bytes);

    /// Messages counted since the start (or reset).
    std::uint64_t messages() const noexcept { return messages_; }
    /// Tensor bytes counted since the start (or reset).
    std::uint64_t bytes() const noexcept { return bytes_; }
    /// Messages per second from the start (or reset) to the last message
    /// counted: a stream gone quiet keeps the rate it had (0 before any).
    double rate() const;
    /// Bytes per second over the same span as rate().
    double throughput() const;
    /// Messages per second between the first and last of the last `horizon`
    /// messages (0 until two are counted, so always 0 for a horizon under 2).
    double recent_rate() const;
    /// Bytes per second over the same window as recent_rate().
    double recent_throughput() const;
    /// "120 msgs, 12.5 msg/s, 96.1 MB/s (recent 13.0 msg/s, 99.8 MB/s)".
    std::string summary() const;

private:
    struct sample {
        clock::time_point when;
        std::uint64_t bytes;
    };
    std::size_t horizon_;
    clock::time_point start_{};
    clock::time_point last_{};
    std::uint64_t messages_ = 0;
    std::uint64_t bytes_ = 0;
    std::deque<sample> recent_;
    std::uint64_t recent_bytes_ = 0;
};

/// How a connection behaves. The defaults suit large tensor batches.
struct connection_options {
    /// Send in the multipart form (zero-copy); false sends single-part.
    /// Receiving accepts either form.
    bool multipart = true;
    /// Infos to send in place of the tensors' own (one per tensor).
    std::vector<std::string> infos{};
    /// tensorcom refuses 64-bit dtypes (f8, i8, u8) unless allowed, since
    /// they usually mean a forgotten conversion; so does send() here.
    bool allow64 = false;
    /// send() refuses what a Python tensorcom receiver cannot decode: u4
    /// (upstream's dtype table misspells uint32) and rank-0 tensors (see
    /// check_tensorcom). Set it when the peer is tensorcom; 64-bit dtypes
    /// stay allow64's business (tensorcom receives them, refuses to send).
    bool tensorcom_compatible = false;
    /// Socket kind for plain endpoints, and explicit bind/connect (see url.hpp).
    /// Not router: a connection keeps no envelope (zrecv with
    /// envelope_spec::router() does).
    std::optional<socket_kind> kind{};
    /// Bind (true) or connect (false) every endpoint, overriding the schemes.
    std::optional<bool> bind{};
    /// A topic for pub and sub sockets ("" = none, as tensorcom). When set, a
    /// pub connection sends it as a frame of its own in front of every
    /// message, and a sub connection subscribes to it and expects exactly
    /// that frame (recv_options::envelope = topic()): messages of longer
    /// topics that ZeroMQ's prefix matching lets through ("training" for
    /// "train") are dropped. Such messages are not tensorcom's
    /// wire: a Python tensorcom subscriber, or a sub connection without the
    /// topic, cannot decode them. A URL's fragment sets it too
    /// (`zsub://host:7880#train`); a different topic in both is an error.
    std::string topic{};
    /// Bounds on each received message (see `limits`; the frames accepted
    /// in one message follow `limits.max_tensors`, recv_options::max_frames),
    /// and the infos every received message must carry when set.
    decode_options decode{};

    /// High-water marks in messages. ZeroMQ counts messages, not bytes: its
    /// default of 1000 would queue 77 GB of 77 MB batches. 16 keeps a few
    /// batches in flight per peer.
    int send_hwm = 16;
    /// Receive high-water mark in messages (see `send_hwm`).
    int recv_hwm = default_recv_hwm;
    /// How long closing waits to deliver queued messages. ZeroMQ's default
    /// is forever (a hang at exit when the peer is gone); tensorcom's 0
    /// silently drops them. Unsent messages after this are dropped. Pull
    /// and sub sockets close at once (linger 0): they have no messages of
    /// yours to deliver, and a sub that never met its publisher would
    /// otherwise wait this long for its subscription to go out.
    std::chrono::milliseconds linger{10000};
    /// Receive timeout: recv() gives up and returns nothing. Unset = wait.
    std::optional<std::chrono::milliseconds> recv_timeout{};
    /// Send timeout: send() gives up and returns false. Unset = wait.
    std::optional<std::chrono::milliseconds> send_timeout{};
    /// PUB sockets wait at the high-water mark (ZMQ_XPUB_NODROP) instead of
    /// dropping messages for a slow subscriber: backpressure, as PUSH has.
    bool pub_nodrop = false;
    /// ZMQ_IMMEDIATE on connecting sockets that send: queue only to peers
    /// whose connection is complete, so messages are not stranded in the
    /// pipe of a peer that is down (they go to live peers, or send blocks).
    /// Never on sub sockets, where it would hold back the subscription until
    /// the socket is next used, losing what is published meanwhile.
    bool immediate = true;
    /// ZMTP heartbeats: every `heartbeat` a ping goes to each peer, and a
    /// connection silent for three of these is dropped (and the peer is
    /// told to do the same). A peer whose host died, whose network was cut
    /// or whose process hangs is then noticed: no message queues towards it
    /// any more, and a connecting socket dials it again. Unset: off, as
    /// ZeroMQ's default, and such a peer is noticed only if TCP does (a
    /// PUSH keeps queueing up to its high-water mark into the dead pipe).
    /// Both ends need libzmq 4.2 or later (pyzmq's has it).
    std::optional<std::chrono::milliseconds> heartbeat{};
    /// Messages in the statistics' recent window.
    std::size_t stats_horizon = 1000;
    /// CURVE security (see security.hpp): endpoints that bind serve as CURVE
    /// servers (admitting `allowed_clients`, or any client with a key pair),
    /// endpoints that connect are clients of the server whose key is
    /// `server_key`. Unset: plain ZeroMQ, anyone who reaches the port is in.
    /// Refused handshakes are counted (refused_handshakes()) and passed to
    /// `on_refused`.
    std::optional<curve_options> curve{};
    /// `+shm` senders: bytes of shared memory the connection's pool may
    /// hold (sent messages not yet given back included). A full pool makes
    /// send() wait, at most `send_timeout`.
    std::size_t shm_pool_bytes = std::size_t{1} << 30;
    /// `+shm` senders: a sent message not given back this long after its
    /// send is given up: a receiver still holding it keeps its bytes (they
    /// move out of the pool), one that has not claimed it yet skips it.
    std::chrono::milliseconds shm_lease{60000};
    /// `+shm` senders: receivers on the side channel at once (each costs
    /// the sender a socket and a ring). More are refused, and their
    /// receive fails saying so; those already in are not disturbed.
    std::size_t shm_max_peers = 64;
    /// `+shm` senders: bytes one receiver may hold (received, not yet
    /// dropped) while others are connected. Past them it is cut off (its
    /// receive fails, saying so) and what it held moves out of the pool
    /// (its pages stay as they are for it): a receiver that never drops
    /// what it gets cannot stop the stream to the others. 0: three
    /// quarters of `shm_pool_bytes`. A loader's `queue_bytes` plus what
    /// the consumer keeps must fit.
    std::uint64_t shm_max_held_bytes = 0;
    /// `+shm` PUB senders: a message no subscriber holds is given up this
    /// long after its send for the subscribers that have not got to it (a
    /// stopped or slow one), who skip it: the others are not held up, as
    /// over plain PUB/SUB, and each drop is counted on both sides. With
    /// `pub_nodrop`, the publisher waits for them instead (up to
    /// `shm_lease`). `+shm` PUSH/PAIR senders wait while `send_hwm +
    /// recv_hwm` messages per receiver are sent and not yet claimed, so a
    /// killed receiver loses about what it would over tcp.
    std::chrono::milliseconds shm_laggard_after{1000};
    /// `+shm` receivers: how long a receive waits on a sender's side
    /// channel (to connect, to be read, for the answer to a claim). Past
    /// it the receive throws errc::timeout and skips that message. Unset:
    /// `recv_timeout`, or 30 s without one.
    std::optional<std::chrono::milliseconds> shm_claim_timeout{};
    /// `+shm` receivers: senders at once. Past them the least recently
    /// used one whose tensors are all dropped is closed; if every one has
    /// tensors held, the message is refused (errc::limit_exceeded).
    std::size_t shm_max_senders = 64;
    /// `+shm` receivers: segments and bytes mapped at once, all senders
    /// together (tensors kept included). A message that would go past
    /// them is refused (errc::limit_exceeded), after idle senders' are
    /// unmapped.
    std::size_t shm_max_mappings = 16384;
    /// See `shm_max_mappings`.
    std::uint64_t shm_max_mapped_bytes = std::uint64_t{64} << 30;
};

namespace detail {
class shm_sender;
class shm_receiver;
}  // namespace detail

/// One ZeroMQ socket on the endpoints of one or more URLs (brace-expanded):
/// fan-in or fan-out. Not thread-safe: use a connection from one thread.
class connection {
public:
    /// Opens the socket and binds/connects every endpoint. Throws bad_url
    /// (also for an address ZeroMQ cannot parse), bad_argument for a router
    /// kind, or error(io_error) naming the endpoint when ZeroMQ refuses it
    /// ("cannot bind to tcp://*:7880: Address already in use"). A connect to a host that is down or
    /// whose name does not resolve (yet) is no error: libzmq keeps trying in
    /// the background, as for every connect, and receives wait meanwhile
    /// (set `recv_timeout`, or give `loader::next` a timeout).
    /// Without a context given, a connection with an inproc endpoint uses
    /// one process-wide context, shared with every other such connection
    /// and loader alive (inproc endpoints meet only within one context);
    /// any other gets a context, and so a libzmq I/O thread, of its own.
    explicit connection(std::string_view url, connection_options opt = {});
    /// The same on several URLs (each brace-expanded) sharing one socket.
    explicit connection(std::span<const std::string> urls, connection_options opt = {});
    /// The same on the caller's context, which the connection shares (keeps
    /// alive) until it is destroyed.
    connection(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls,
               connection_options opt = {});
    /// Takes over the socket; the moved-from connection has none left (only
    /// destruction and assignment are valid on it).
    connection(connection&&) noexcept;
    /// Closes this connection's socket (as close() does) and takes over the
    /// other's.
    connection& operator=(connection&&) noexcept;
    ~connection();

    /// Sends one message. Returns false when the send timeout expired.
    /// Owned tensors go without a copy (see zsend_multipart): ZeroMQ reads
    /// their bytes until it has sent them (over inproc, until the receiver
    /// drops them); refilling a sent tensor gives it a copy first, and a
    /// `tensor_pool` tensor needs none.
    /// Throws bad_argument for 64-bit dtypes unless allow64, for what
    /// tensorcom cannot decode with tensorcom_compatible, wrong infos,
    /// a socket that cannot send (zpull, zsub), or a closed connection.
    [[nodiscard]] bool send(tensor_span tensors);
    /// Receives one message (either form). Returns nothing on timeout.
    /// Throws the codec's errors for malformed messages; the connection
    /// stays usable (the rest of a bad message is drained). Throws
    /// bad_argument on a socket that cannot receive (zpush, zpub) or a
    /// closed connection.
    [[nodiscard]] std::optional<std::vector<tensor>> recv();
    /// Receives one message if one is waiting now; nothing otherwise.
    /// Throws as recv() does.
    [[nodiscard]] std::optional<std::vector<tensor>> try_recv();
    /// Sends every tensor list `source` yields (tensorcom's serve);
    /// returns how many messages were sent.
    template <class Source>
    std::size_t serve(Source&& source) {
        std::size_t n = 0;
        for (auto&& batch : source) n += send(batch) ? 1 : 0;
        return n;
    }

    /// Range-for over received messages; ends at a receive timeout
    /// (recv_timeout), as a loader's does.
    using iterator = detail::batch_iterator<connection, &connection::recv>;
    /// Receives the first message (blocking as recv() does).
    iterator begin() { return iterator(this); }
    /// The end of a range-for.
    std::default_sentinel_t end() { return {}; }

    /// Messages and bytes sent or received so far.
    const statistics& stats() const noexcept { return stats_; }
    /// The same, to reset.
    statistics& stats() noexcept { return stats_; }
    /// The endpoints as bound or connected; a tcp bind to port 0 or '*'
    /// shows the port ZeroMQ chose.
    const std::vector<endpoint>& endpoints() const noexcept { return endpoints_; }
    /// The underlying socket, for options the connection does not set; valid
    /// until close() or destruction.
    zmq::socket_ref socket() noexcept { return socket_; }
    /// The options the connection was opened with.
    const connection_options& options() const noexcept { return opt_; }
    /// CURVE handshakes refused on this connection's socket so far, either
    /// side's doing (thread-safe; 0 without `curve`). They go on until the
    /// connection closes: a refused client keeps reconnecting.
    std::uint64_t refused_handshakes() const noexcept { return curve_.refused_handshakes(); }
    /// Closes the socket now (waiting at most `linger` for queued messages;
    /// `+shm`: also for receivers to claim what was sent).
    void close();
    /// `+shm` senders: the pool whose tensors send() hands over without a
    /// copy (fill them, send, drop them). Throws bad_argument on other
    /// connections, and once closed: close() retires the pool's blocks, as
    /// a receiver may still read them (tensors taken before stay valid).
    tensor_pool& pool();

private:
    std::optional<std::vector<tensor>> receive(zmq::recv_flags flags);
    std::optional<std::vector<tensor>> receive_shm(zmq::recv_flags flags, const recv_options& ro, bool topic);

    std::shared_ptr<zmq::context_t> context_;
    // Between the two: its threads and sockets end after the socket closes
    // and before the context can terminate.
    curve_guard curve_;
    zmq::socket_t socket_;
    connection_options opt_;
    std::vector<endpoint> endpoints_;
    statistics stats_;
    // `+shm` (see lib/shm/): after the socket, so that they go first.
    std::shared_ptr<detail::shm_sender> shm_sender_;
    std::shared_ptr<detail::shm_receiver> shm_receiver_;
};

/// The ZeroMQ socket type of a socket kind.
zmq::socket_type zmq_socket_type(socket_kind kind) noexcept;

/// Throws bad_argument when a tensor is 64-bit (f8, i8, u8), as tensorcom.
void check_no64(tensor_span tensors);

/// Throws bad_argument, naming the tensor, when a Python tensorcom receiver
/// could not decode the list: a u4 tensor (upstream tensorcom's dtype table
/// misspells uint32, so it fails on the code) or a rank-0 one (give it
/// shape [1]). 64-bit dtypes pass: tensorcom receives them (see check_no64).
void check_tensorcom(tensor_span tensors);

/// Turns on ZMTP heartbeats on a socket of the caller's, as
/// `connection_options::heartbeat` does: a ping every `interval`, a
/// connection silent for three of them dropped. Set it before connecting or
/// binding. Throws bad_argument unless `interval` is positive.
void set_heartbeat(zmq::socket_ref socket, std::chrono::milliseconds interval);

/// Binds or connects a socket of the caller's to `ep` (from parse_url),
/// as a connection does, and returns the address as ZeroMQ took it (a
/// bound tcp port 0 or `*` resolved). Throws bad_url for an address
/// ZeroMQ cannot read, or io_error naming the endpoint (libzmq's "Address
/// already in use" names none).
std::string attach(zmq::socket_ref socket, const endpoint& ep);

/// How a loader receives and queues.
struct loader_options {
    /// How the loader's connection is opened (its recv_timeout bounds
    /// next(), which then returns nothing).
    connection_options connection{};
    /// Bounds on the decoded messages waiting for the consumer. The queue
    /// accepts a message that exceeds `queue_bytes` only when it is empty,
    /// so one oversized message cannot stall the loader. A full queue is
    /// refilled once the consumer has taken it down to half (in one go:
    /// each refill wakes the loader thread once), so small messages want
    /// a deep queue; `queue_bytes` bounds it for large ones. Messages
    /// already waiting on the socket are queued 64 at a time, however deep
    /// the queue.
    std::size_t queue_messages = 64;
    /// Bound on the tensor bytes waiting in the queue.
    std::uint64_t queue_bytes = std::uint64_t{512} << 20;
    /// Run on the loader thread on each received batch before queueing.
    /// Whatever it throws is raised from next() in that batch's place (not
    /// counted as malformed, whatever `skip_malformed` says), and the
    /// loader goes on with the next batch. close() does not interrupt a
    /// transform that is running: the destructor waits for it to return,
    /// so a transform that can block long (on the consumer, say) makes
    /// destruction wait as long.
    std::function<std::vector<tensor>(std::vector<tensor>)> transform{};
    /// Malformed messages are skipped (counted in `malformed()`) instead of
    /// being raised from next(). Raising is the default.
    bool skip_malformed = false;
    /// Calls reuse_large_allocations() when the loader starts.
    bool reuse_allocations = true;
};

/// A prefetching receiver: a background thread receives, decodes and
/// transforms into a bounded queue; the consumer takes batches with next()
/// or range-for. Fan-in comes from the URLs (many publishers or pushers on
/// one socket). Errors on the loader thread reach the consumer in order: a
/// malformed message or a transform's exception is raised from next() (and
/// the loader goes on); a fatal error (the socket failing) is raised after
/// every batch received before it, and ends the loader. Several threads
/// may call next() at once: each batch goes to one of them.
class loader {
public:
    /// Starts the loader thread on the URLs (each brace-expanded) and waits
    /// until its socket is bound/connected. Throws bad_url (also for URLs
    /// of a socket that cannot receive, zpush and zpub, or that must also
    /// send: req, rep, router), or error(io_error) naming the endpoint when
    /// it is refused (address in use...), as `connection`. Without a context
    /// given, one is chosen as for `connection`.
    loader(std::span<const std::string> urls, loader_options opt = {});
    /// The same on one URL.
    explicit loader(std::string_view url, loader_options opt = {});
    /// The same on the caller's context, which the loader keeps alive.
    loader(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls,
           loader_options opt = {});
    /// Stops the thread and discards what is queued. Waits at most about
    /// 50 ms for the thread, plus the transform running, if any.
    ~loader();
    loader(const loader&) = delete;
    loader& operator=(const loader&) = delete;

    /// The next batch, waiting as long as it takes, or up to the
    /// connection's recv_timeout. Returns nothing when that timeout
    /// expired (as connection::recv does), and once close() was called and
    /// the queue is drained (closed() tells which).
    [[nodiscard]] std::optional<std::vector<tensor>> next();
    /// Like next(), but waits at most `timeout`, then returns nothing. A
    /// timeout past what the clock can count (milliseconds::max()) waits
    /// for ever.
    [[nodiscard]] std::optional<std::vector<tensor>> next(std::chrono::milliseconds timeout);
    /// Stops receiving (from any thread) and wakes a blocked next(). Queued
    /// batches can still be taken.
    void close();
    /// Whether close() was called, or a fatal error ended the loader and
    /// its queue is drained: next() returning nothing then is no timeout
    /// (thread-safe).
    bool closed() const;

    /// Range-for over batches; ends at a timeout of next() (the
    /// connection's recv_timeout, as a connection's range-for does), or
    /// once the loader is closed and drained.
    using iterator = detail::batch_iterator<loader, &loader::next>;
    /// Takes the first batch (blocking as next() does).
    iterator begin() { return iterator(this); }
    /// The end of a range-for.
    std::default_sentinel_t end() { return {}; }

    /// A snapshot of the receive statistics (thread-safe).
    statistics stats() const;
    /// Batches waiting in the queue now (thread-safe).
    std::size_t queued_messages() const;
    /// Tensor bytes waiting in the queue now (thread-safe).
    std::uint64_t queued_bytes() const;
    /// The most messages and bytes that were ever queued at once.
    std::size_t peak_queued_messages() const;
    /// The most bytes ever queued at once (thread-safe).
    std::uint64_t peak_queued_bytes() const;
    /// Malformed messages received so far: skipped with skip_malformed,
    /// raised from next() otherwise (thread-safe).
    std::uint64_t malformed() const;
    /// The endpoints as bound/connected (a bound `*` port resolved).
    std::vector<endpoint> endpoints() const;
    /// CURVE handshakes refused so far (see connection::refused_handshakes;
    /// thread-safe).
    std::uint64_t refused_handshakes() const noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;
};

}  // namespace tenbin
TENBIN_API_END
