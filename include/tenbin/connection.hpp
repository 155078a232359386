// tenbin: a connection, one ZeroMQ socket on the endpoints of tensorcom
// URLs (see url.hpp) that sends or receives tensor lists, as Python
// tensorcom's `Connection` does.
#pragma once

#include <tenbin/metrics.hpp>
#include <tenbin/pool.hpp>
#include <tenbin/security.hpp>
#include <tenbin/statistics.hpp>
#include <tenbin/stream.hpp>
#include <tenbin/url.hpp>
#include <tenbin/zmq.hpp>

#include <chrono>
#include <cstdint>
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
        // The batch before is let go first: with acked delivery's
        // on_release its acknowledgement is confirmed before the next comes,
        // so a trainer killed while it waits does not have it processed
        // again elsewhere.
        current_.reset();
        if (auto b = (source_->*next)()) current_.emplace(std::move(*b));
        return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_; }

private:
    Source* source_ = nullptr;
    std::optional<value_type> current_;
};
}  // namespace detail

/// When an acked consumer acknowledges a batch (see connection_options::acked).
enum class ack_mode {
    /// When the user's code takes it (recv, next): a consumer killed while
    /// it processes the batch loses it.
    on_take,
    /// When the user's code drops its last tensor of it (or its last copy):
    /// a consumer killed while it processes the batch gives it back to
    /// the producer, which sends it to another. A batch kept for long (its
    /// labels, say) holds one of the consumer's credits meanwhile.
    on_release,
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
    /// A router receives with recv_message() and answers with reply().
    std::optional<socket_kind> kind{};
    /// Bind (true) or connect (false) every endpoint, overriding the schemes.
    std::optional<bool> bind{};
    /// A topic for pub and sub sockets ("" = none, as tensorcom). A pub
    /// connection sends it as a frame of its own in front of every message
    /// (which a Python tensorcom subscriber cannot decode: refused with
    /// tensorcom_compatible). A sub connection subscribes to it and takes
    /// both a tenbin publisher's topic frame and a Python tensorcom
    /// publisher's plain messages, whose first bytes ZeroMQ's prefix match
    /// compares with the topic as tensorcom's `#topic` does
    /// (envelope_spec::topic(name)). Messages of longer topics that the
    /// prefix match lets through ("training" for "train") are passed over,
    /// counted (other_topics()) and said once (on_notice). A URL's fragment
    /// sets it too (`zsub://host:7880#train`); a different topic in both
    /// is an error.
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
    /// The policy for a slow subscriber. PUB sockets wait at the high-water
    /// mark (ZMQ_XPUB_NODROP) instead of dropping messages for a slow
    /// subscriber: backpressure, as PUSH has. By default (false) a slow
    /// subscriber loses messages, as ZeroMQ's PUB drops them; a numbered
    /// stream (`producer`, `stream`) makes every one of them a gap counted
    /// on the subscriber's side (stream_stats().gaps).
    bool pub_nodrop = false;
    /// PUB: the first send waits (at most `send_timeout`) until this many
    /// subscribers joined, and `wait_for_names` too (named subscribers:
    /// connection_options::name on their side). An acked producer hands
    /// out its first batch once this many consumers (and the named ones)
    /// said hello, instead of after two heartbeats: none gets the first
    /// window alone, and none starts late (sends queue meanwhile, then
    /// wait as when no consumer has credit).
    std::size_t wait_for = 0;
    /// PUB, acked producers: the names of subscribers or consumers to wait
    /// for (see wait_for).
    std::vector<std::string> wait_for_names{};
    /// PUB with a numbered stream: the messages of the current epoch kept
    /// (at most this many, its start) and sent again when a subscriber
    /// joins, so that a late one gets the epoch's start; those that had
    /// them drop them as duplicates. 0: none kept.
    std::size_t replay_window = 0;
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
    /// Sending: number the messages (see position.hpp and stream.hpp) as
    /// the producer of this name, stable across restarts (1 to 64
    /// printable ASCII characters); consumers then know its epochs, count
    /// what they miss and resume from where they were.
    std::string producer{};
    /// Sending: number the messages under a name made up for this
    /// connection when `producer` is empty.
    bool stream = false;
    /// Receiving: how numbered streams are followed (epochs, sharding).
    stream_options streams{};
    /// Receiving a numbered stream: the state to resume from (see state()),
    /// in place before the socket opens. The same as load_state() right
    /// after construction, except that no batch can come before it (a
    /// loader receives from the start), and an acked consumer's producers
    /// hear of it in its first hello.
    std::optional<stream_state> resume_from{};
    /// Acknowledged delivery, for zpush/zpull URLs (both ends must set it):
    /// a consumer holds `credit` credits and the producer sends a batch
    /// only to a consumer with one, so no batch waits in a queue towards a
    /// consumer that did not ask for it; the consumer acknowledges each
    /// (`ack`), and the batches a consumer had not acknowledged when it
    /// died (its connection dropped, or it was silent for two
    /// `ack_heartbeat` intervals) go to the others. The messages are
    /// numbered (`stream` is implied), so a consumer never takes a batch
    /// twice: at least once on the wire, exactly once at the consumer. A
    /// producer that restarts and replays its data skips the batches its
    /// consumers report they have. Both ends open a ZeroMQ ROUTER socket
    /// (a tensorcom peer cannot be one), shared by the caller's thread and
    /// a thread of the connection that keeps heartbeats, acknowledgements
    /// and redeliveries going meanwhile; endpoints are given at
    /// construction (add() refuses).
    bool acked = false;
    /// Acked consumers: batches taken and not yet acknowledged at most.
    /// With on_release at least 2: a loop may keep its batch while it asks
    /// for the next.
    std::size_t credit = 16;
    /// Acked consumers: when a batch is acknowledged.
    ack_mode ack = ack_mode::on_release;
    /// Acked delivery: each end tells the other it lives at least this
    /// often. A consumer silent for two intervals is dead to its producer
    /// (its batches go to the others within two intervals of its death);
    /// a producer silent for three is gone to its consumers, which ask
    /// until it answers. Each end tells the other its interval, and judges
    /// it by the longer of the two: a consumer set to beat less often than
    /// its producer is found dead by its own interval, not taken for dead
    /// between its beats (a peer of an earlier build, which does not say,
    /// is judged by this end's interval).
    std::chrono::milliseconds ack_heartbeat{1000};
    /// This end's name: an acked consumer's for its producers, a label in
    /// metrics. Made up when empty.
    std::string name{};
    /// Count the peers connected to the socket (tcp and ipc connections),
    /// for the metrics' `tenbin_peers`: a ZeroMQ socket monitor, read on a
    /// thread of its own. Not with `curve` (whose monitor is the socket's
    /// one): no count then.
    bool count_peers = false;
    /// Where the connection says, once each, what it did that the caller
    /// would not otherwise see (messages of another topic passed over, ...).
    /// Unset: written to stderr, "tenbin: " in front.
    std::function<void(const std::string&)> on_notice{};
};

namespace detail {
struct connection_access;
}  // namespace detail

/// A consumer as an acked producer sees it (connection::consumers()).
struct consumer_info {
    std::string name;  ///< the consumer's connection_options::name
    std::chrono::system_clock::time_point connected_since;  ///< its first message
    std::chrono::system_clock::time_point last_heard;       ///< its last message
    std::size_t credits = 0;         ///< batches it would take now
    std::size_t in_flight = 0;       ///< batches sent to it, not acknowledged
    std::uint64_t acknowledged = 0;  ///< batches it acknowledged
    std::uint64_t redelivered = 0;   ///< batches it got that another consumer had been given
};

/// What an acked connection counted so far.
struct delivery_counters {
    std::uint64_t sent = 0;          ///< batches sent (redeliveries too)
    std::uint64_t acknowledged = 0;  ///< batches acknowledged
    std::uint64_t redelivered = 0;   ///< batches sent again, their consumer lost
    std::uint64_t skipped = 0;       ///< batches not sent: a consumer reported it had them
    std::uint64_t consumers_lost = 0;   ///< consumers found dead (or gone)
    std::uint64_t producers_lost = 0;   ///< producers a consumer found dead
    std::uint64_t bad_acks = 0;      ///< acks of batches never sent to their consumer, ignored
    std::uint64_t bad_messages = 0;  ///< malformed control messages, ignored
};

/// One ZeroMQ socket on the endpoints of one or more URLs (brace-expanded):
/// fan-in or fan-out. Not thread-safe: use a connection from one thread.
class connection {
public:
    /// Opens the socket and binds/connects every endpoint. Throws bad_url
    /// (also for an address ZeroMQ cannot parse), or error(io_error) naming
    /// the endpoint when ZeroMQ refuses it ("cannot bind to tcp://*:7880:
    /// Address already in use"). A connect to a host that is down or whose
    /// name does not resolve (yet) is no error: libzmq keeps trying in the
    /// background, as for every connect, and receives wait meanwhile (set
    /// `recv_timeout`, or give `loader::next` a timeout).
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

    /// Binds or connects the socket to the endpoints of more URLs (each
    /// brace-expanded), as the constructor does for its own: same socket
    /// kind, transport family (+shm or not) and topic, or bad_url; CURVE
    /// roles and ZMQ_IMMEDIATE as for the first endpoints. A refused
    /// endpoint throws io_error, and the endpoints added before it in the
    /// same call stay.
    void add(std::span<const std::string> urls);
    /// The same for one URL.
    void add(std::string_view url);

    /// Sends one message. Returns false when the send timeout expired.
    /// Owned tensors go without a copy (see zsend_multipart): ZeroMQ reads
    /// their bytes until it has sent them (over inproc, until the receiver
    /// drops them); refilling a sent tensor gives it a copy first, and a
    /// `tensor_pool` tensor needs none.
    /// Throws bad_argument for 64-bit dtypes unless allow64, for what
    /// tensorcom cannot decode with tensorcom_compatible, wrong infos, a
    /// socket that cannot send (zpull, zsub) or must reply (router: see
    /// reply()), or a closed connection.
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
    /// Receives one message with its envelope (a ROUTER's peer identity, a
    /// topic frame) and its position, for reply() and for streams; waits
    /// as recv() does.
    [[nodiscard]] std::optional<message> recv_message();
    /// Answers the sender of `to` (a message this connection received) with
    /// `tensors`: through its envelope on a router, as the one reply a rep
    /// socket owes; on other sockets the same as send(). Returns false when
    /// the send timed out. Throws as send() does.
    [[nodiscard]] bool reply(const message& to, tensor_span tensors);
    /// Numbered streams, sending: ends the producer's current epoch (an
    /// end mark, no tensors) and begins the next. False when the send timed
    /// out (nothing changed). Throws bad_argument unless the connection
    /// numbers its messages (`producer`, `stream`), or with
    /// tensorcom_compatible (a tensorcom receiver cannot take a message
    /// without tensors). A PUSH socket gives the mark to one of its peers,
    /// as it does every message: each consumer of several sees a later
    /// epoch's batches instead (see stream.hpp).
    [[nodiscard]] bool end_epoch();
    /// Ends the stream: the producer sends nothing more. As end_epoch().
    [[nodiscard]] bool end_stream();
    /// Where the next message sent stands (producer, epoch, seq); nothing
    /// when the connection does not number its messages.
    std::optional<stream_position> position() const;
    /// Numbers the next message `seq` of epoch `epoch`: a producer that
    /// replays its data resumes the numbering where its consumers are.
    /// Throws bad_argument unless the connection numbers its messages.
    void seek(std::uint64_t epoch, std::uint64_t seq);

    /// Numbered streams, receiving: the epoch the consumer is in. recv()
    /// and range-for end at its end, and the next ones are the next epoch's.
    std::uint64_t epoch() const noexcept;
    /// Whether the last receive that gave nothing ended an epoch (rather
    /// than timing out).
    bool epoch_ended() const noexcept;
    /// Whether every producer ended its stream: receives give nothing more.
    bool stream_ended() const noexcept;
    /// What this consumer has taken of its streams, to resume from.
    stream_state state() const;
    /// Resumes from `s` (a state() saved before): batches at or before its
    /// positions are dropped as duplicates, and the epoch is its epoch.
    void load_state(const stream_state& s);
    /// Gaps, duplicates and epochs counted so far.
    stream_counters stream_stats() const;

    /// PUB with wait_for, wait_for_names or replay_window (which watch
    /// subscriptions): the subscribers joined so far, and the names of the
    /// named ones; read when sending, or now by refresh.
    std::size_t subscribers(bool refresh = true);
    /// The names of the named subscribers (see subscribers()).
    std::vector<std::string> subscriber_names(bool refresh = true);
    /// Acked producers: the consumers (thread-safe).
    std::vector<consumer_info> consumers() const;
    /// Acked connections: what delivery counted (thread-safe).
    delivery_counters delivery_stats() const;

    /// Sends every tensor list `source` yields (tensorcom's serve);
    /// returns how many messages were sent.
    template <class Source>
    std::size_t serve(Source&& source) {
        std::size_t n = 0;
        for (auto&& batch : source) n += send(batch) ? 1 : 0;
        return n;
    }

    /// Range-for over received messages; ends at a receive timeout
    /// (recv_timeout), as a loader's does, and at the end of an epoch.
    /// Each message is let go before the next is asked for.
    using iterator = detail::batch_iterator<connection, &connection::recv>;
    /// Receives the first message (blocking as recv() does).
    iterator begin() { return iterator(this); }
    /// The end of a range-for.
    std::default_sentinel_t end() { return {}; }

    /// Messages and bytes sent or received so far.
    const statistics& stats() const noexcept;
    /// The same, to reset.
    statistics& stats() noexcept;
    /// Messages received and passed over because their topic frame names a
    /// longer topic than this subscriber's (ZeroMQ's subscriptions match
    /// prefixes: "training" reaches a subscriber of "train").
    std::uint64_t other_topics() const noexcept;
    /// What the connection counts and times (see metrics.hpp), readable from
    /// any thread, also after the connection is gone (with the counts it
    /// had). The first call turns the timings on.
    std::shared_ptr<const metrics_source> metrics() const;
    /// The endpoints as bound or connected; a tcp bind to port 0 or '*'
    /// shows the port ZeroMQ chose.
    const std::vector<endpoint>& endpoints() const noexcept;
    /// The underlying socket, for options the connection does not set; valid
    /// until close() or destruction.
    zmq::socket_ref socket() noexcept;
    /// The options the connection was opened with.
    const connection_options& options() const noexcept;
    /// CURVE handshakes refused on this connection's socket so far, either
    /// side's doing (thread-safe; 0 without `curve`). They go on until the
    /// connection closes: a refused client keeps reconnecting.
    std::uint64_t refused_handshakes() const noexcept;
    /// Closes the socket now (waiting at most `linger` for queued messages;
    /// `+shm`: also for receivers to claim what was sent).
    void close();
    /// Whether close() was called (or the connection was moved from).
    bool closed() const noexcept;
    /// `+shm` senders: the pool whose tensors send() hands over without a
    /// copy (fill them, send, drop them). Throws bad_argument on other
    /// connections, and once closed: close() retires the pool's blocks, as
    /// a receiver may still read them (tensors taken before stay valid).
    tensor_pool& pool();

private:
    friend struct detail::connection_access;
    struct impl;
    std::unique_ptr<impl> s_;
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

/// `opt` for a caller that waits in slices of `slice` (to look for an
/// interruption between them) and keeps its own deadline: receive and send
/// timeouts of `slice`, while a `+shm` receive's wait for its sender
/// (`shm_claim_timeout`) keeps the caller's receive timeout, which a slice
/// would cut short (the message would be skipped).
[[nodiscard]] connection_options with_sliced_timeouts(connection_options opt, std::chrono::milliseconds slice);

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

}  // namespace tenbin
TENBIN_API_END
