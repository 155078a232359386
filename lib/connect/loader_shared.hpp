// A loader's state shared by its consumers and its receiving thread (see
// loader.hpp): the thread's side is in loader_thread.cpp, the consumers'
// in loader.cpp.
#pragma once

#include <tenbin/connect.hpp>

#include "base/fd.hpp"
#include "connect/connect_detail.hpp"
#include "connect/stream_tracker.hpp"
#include "metrics/meter.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <variant>

namespace tenbin {

struct loader::shared : metrics_source {
    // A message or the end of an epoch (as the stream tracker gives them),
    // or an error to raise in the consumer.
    using item = std::variant<detail::stream_event, std::exception_ptr>;
    // A received message and its tensor bytes, or an error, on its way to
    // the stream tracker and the queue.
    struct arrival {
        std::variant<detail::tracked, std::exception_ptr> what;
        std::uint64_t bytes = 0;
    };

    loader_options opt;
    std::vector<std::string> urls;
    std::shared_ptr<zmq::context_t> context;

    mutable std::mutex mutex;
    // For the consumer (and the constructor): queued, stop, started or finished
    // changed.
    std::condition_variable changed;
    // For the loader thread: the queue went down to its refill mark, or stop.
    std::condition_variable drained;
    std::deque<item> queue;
    std::uint64_t queued_bytes = 0;
    std::size_t peak_messages = 0;
    std::uint64_t peak_bytes = 0;
    std::uint64_t malformed = 0;
    statistics stats;
    std::vector<endpoint> endpoints;
    bool started = false;            // the socket is bound/connected (or failed)
    std::exception_ptr setup_failure;  // why the socket could not be set up
    std::atomic<std::uint64_t> refused{0};  // CURVE handshakes refused (counted on a monitor thread)
    std::atomic<bool> stop = false;  // close() was called (set under the mutex; read without it to leave the loop)
    bool finished = false;           // the thread has ended
    connection* conn = nullptr;      // the thread's, while it runs (acked: seeded by load_state)
    // Streams: what is given when (fed under the mutex), and the consumer's side.
    std::optional<detail::stream_tracker> tracker;
    std::vector<detail::stream_event> given;  // the tracker's output for one message (kept: perf)
    std::uint64_t consumer_epoch = 0;
    bool epoch_ended = false, stream_ended = false;
    // Acked, on_release: the batch each consumer thread took last, for
    // release_last().
    std::map<std::thread::id, std::weak_ptr<const detail::ack_token>> last_taken;
    std::thread thread;
    // Who reads a plain socket (connection_access::pollable_fd; not with a
    // transform, whose work is the thread's to overlap with the
    // consumer's). A consumer that finds the queue empty while nobody reads
    // receives on its own thread and waits on the socket itself: a message
    // then wakes one thread, not two (perf: at 256 B the hand-over from
    // the thread cost more than the receive). The thread takes the socket
    // back once the consumer has been gone for `hand_back`, so that it
    // prefetches while the consumer works, and waits on the socket's
    // descriptor, not in a receive, when nothing is there, so that a
    // consumer can take the socket meanwhile.
    enum class reader { nobody, thread, consumer };
    static constexpr std::chrono::milliseconds hand_back{1};
    reader reading = reader::nobody;
    std::chrono::steady_clock::time_point consumer_since{}, consumer_left{};
    int socket_fd = -1;          // the thread's connection's, while it runs; -1: the thread reads alone
    std::vector<arrival> consumer_got;  // what the reading consumer took (kept: perf)
    detail::unique_fd stop_fd;   // eventfd: readable once closed (wakes whoever waits on socket_fd)
    std::condition_variable turn;  // for the thread: a consumer gave the socket back
    bool socket_failed = false;  // a consumer met a fatal error: raised, the thread ends
    // Metrics: the consumer's waits in next(), and the connection's meter
    // (set with `endpoints`).
    detail::wait_histogram waits;
    std::shared_ptr<detail::connection_meter> connection_meter;

    void collect(metric_set& out) const override;
    // When the consumer's wait for a batch began: nothing when one is
    // ready (the clock is read only by a consumer that is going to wait).
    std::optional<std::chrono::steady_clock::time_point> wait_begins() const {
        if (ready()) return std::nullopt;
        return std::chrono::steady_clock::now();
    }
    std::optional<std::vector<tensor>> waited(std::optional<std::vector<tensor>> batch,
                                              std::optional<std::chrono::steady_clock::time_point> since) {
        waits.waited(since ? std::chrono::steady_clock::now() - *since : std::chrono::nanoseconds(0), batch.has_value());
        return batch;
    }

    void run();
    template <class Receive>
    bool receive_into(std::vector<arrival>& got, Receive&& receive);
    // Room left in the queue, in messages and in tensor bytes.
    struct room_left {
        std::size_t messages;
        std::uint64_t bytes;
    };
    // The thread's loop: receiving alone (it waits in the receive), or
    // sharing the socket with the consumers (see `reading`).
    void receive_alone(connection& c, std::vector<arrival>& got);
    void receive_shared(connection& c, std::vector<arrival>& got);
    // Receives one message (`first`: waiting or not), then what is waiting
    // as `room` allows; true when the socket had no more.
    bool receive_burst(connection& c, std::vector<arrival>& got, room_left room, zmq::recv_flags first);
    // Waits until the socket's descriptor is readable (true: a message
    // may be there), or `deadline`, or close().
    bool wait_readable(std::chrono::steady_clock::time_point deadline);
    // A consumer's next(): waits (reading the socket itself when it may)
    // until `deadline`.
    std::optional<std::vector<tensor>> next(std::chrono::steady_clock::time_point deadline);
    bool may_read_here() const { return reading == reader::nobody && socket_fd >= 0 && !stop && !socket_failed; }
    // Receives on the consumer's thread (the caller holds `lock`, released
    // meanwhile) until a message came (true) or `deadline`; queues what
    // came.
    bool read_here(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);
    // Queues `got` (waiting for room); `give_back`: then nobody reads the
    // socket (see `reading`).
    room_left queue_all(std::vector<arrival>& got, bool give_back = false);
    // Adds `a` to the queue, through the stream tracker (the caller holds
    // the mutex).
    void push(arrival& a);
    void push_events(std::vector<detail::stream_event>& events);
    // Ends epochs whose silent producers timed out (the caller holds the mutex).
    void tick();
    // Acked: the batches the consumer let go are acknowledged before it
    // gets another (the caller holds the mutex, which keeps `conn` alive).
    void flush_acks() {
        if (conn && opt.connection.acked) detail::connection_access::flush_acks(*conn);
    }
    // The front of the queue, or nothing when it is empty (the caller
    // holds the mutex and has waited as it wants).
    std::optional<std::vector<tensor>> take();
    bool ready() const { return !queue.empty() || stop || finished || stream_ended; }
    // Whether a message of `bytes` may join the queue while it holds fewer
    // than `messages`.
    bool fits(std::uint64_t bytes, std::size_t messages) const {
        return queue.empty() || (queue.size() < messages && queued_bytes + bytes <= opt.queue_bytes);
    }
    bool has_room(std::uint64_t bytes) const { return fits(bytes, opt.queue_messages); }
    // A full queue is refilled once the consumer has taken it down to half
    // (perf: refilling each freed place made the two threads wake each
    // other for every message or few, and a wake-up of an idle core costs
    // microseconds: a loader of small messages ran at 0.1x of receiving on
    // the consumer's thread).
    std::size_t refill_mark() const { return opt.queue_messages / 2; }
    bool refill(std::uint64_t bytes) const { return fits(bytes, refill_mark() + 1); }
};

}  // namespace tenbin
