#include <tenbin/connect.hpp>

#include "connect/connect_detail.hpp"
#include "connect/stream_tracker.hpp"
#include "metrics/meter.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <variant>

namespace tenbin {

namespace {
// How often the loader thread looks up from a quiet socket to see whether
// it was asked to stop: the bound on how long close() takes.
constexpr std::chrono::milliseconds poll_interval{50};
// Messages taken off the socket before they are queued (see run).
constexpr std::size_t max_burst = 64;

std::uint64_t data_bytes(const std::vector<tensor>& batch) {
    std::uint64_t n = 0;
    for (const tensor& t : batch) n += t.nbytes();
    return n;
}
}  // namespace

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
    std::uint64_t consumer_epoch = 0;
    bool epoch_ended = false, stream_ended = false;
    std::thread thread;
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
    room_left queue_all(std::vector<arrival>& got);
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

// Receives one message by `receive` and adds it to `got`: its batch
// (transformed), or the error to raise in the consumer. False when nothing
// came (a skipped malformed message counts as something).
template <class Receive>
bool loader::shared::receive_into(std::vector<arrival>& got, Receive&& receive) {
    std::optional<detail::tracked> batch;
    // The exception leaves its handler before it is queued: this thread's
    // reference to it is dropped before the consumer can take it (through
    // the mutex), so the consumer frees it. Queueing from inside the
    // handler was correct, but the reference counts live in libstdc++,
    // which ThreadSanitizer does not see, so it reported the exception
    // freed here as racing with the consumer's reading it.
    std::exception_ptr failure;
    try {
        batch = receive();
        if (!batch) return false;
    } catch (const error& e) {
        if (e.code() == errc::closed) throw;  // the socket is gone: fatal
        failure = std::current_exception();
    }
    if (failure) {
        // A bad message costs that message only: zrecv drained it, the
        // socket is at a message boundary.
        std::lock_guard lock(mutex);
        ++malformed;
        if (!opt.skip_malformed) got.emplace_back().what = std::move(failure);
        return true;
    }
    // End marks carry no tensors for the transform.
    const bool mark = batch->position && batch->position->kind != stream_position::mark::batch;
    // Whatever the caller's transform throws is the caller's to see, in
    // that batch's place, never skipped as malformed input; the loader
    // goes on.
    if (opt.transform && !mark && !stop.load(std::memory_order_relaxed)) {  // once closed, it is dropped anyway
        try {
            batch->tensors = opt.transform(std::move(batch->tensors));
        } catch (...) {
            failure = std::current_exception();
        }
        if (failure) {
            got.emplace_back().what = std::move(failure);
            return true;
        }
    }
    arrival& a = got.emplace_back();
    a.bytes = batch->bytes = data_bytes(batch->tensors);
    a.what = std::move(*batch);
    return true;
}

// Queues what was received, in order, under one lock and with one wake-up
// of the consumer (perf: three locks and a wake-up a message). Waits for
// room as needed (see refill); returns the room left.
loader::shared::room_left loader::shared::queue_all(std::vector<arrival>& got) {
    std::unique_lock lock(mutex);
    for (arrival& a : got) {
        if (!has_room(a.bytes)) {
            changed.notify_all();  // the consumer may take what is queued meanwhile
            drained.wait(lock, [&] { return stop || refill(a.bytes); });
        }
        if (stop) break;
        push(a);
    }
    got.clear();
    changed.notify_all();
    return {opt.queue_messages > queue.size() ? opt.queue_messages - queue.size() : 0,
            opt.queue_bytes > queued_bytes ? opt.queue_bytes - queued_bytes : 0};
}

void loader::shared::push(arrival& a) {
    if (auto* e = std::get_if<std::exception_ptr>(&a.what)) {
        queue.push_back(std::move(*e));
    } else {
        auto& m = std::get<detail::tracked>(a.what);
        stats.add(a.bytes);
        if (!m.position) {  // unnumbered: straight to the queue (perf)
            queue.push_back(detail::stream_event{detail::stream_event::kind::message, std::move(m), 0});
            queued_bytes += a.bytes;
        } else {
            if (!tracker) tracker.emplace(opt.connection.streams, opt.queue_messages, opt.queue_bytes, !opt.connection.acked);
            std::vector<detail::stream_event> events;
            tracker->add(std::move(m), std::chrono::steady_clock::now(), events);
            push_events(events);
        }
    }
    peak_messages = std::max(peak_messages, queue.size());
    peak_bytes = std::max(peak_bytes, queued_bytes);
}

void loader::shared::push_events(std::vector<detail::stream_event>& events) {
    for (detail::stream_event& e : events) {
        queued_bytes += e.message.bytes;
        queue.push_back(std::move(e));
    }
    if (!events.empty()) changed.notify_all();
    events.clear();
}

void loader::shared::tick() {
    if (!tracker) return;
    std::vector<detail::stream_event> events;
    tracker->tick(std::chrono::steady_clock::now(), events);
    push_events(events);
}

std::optional<std::vector<tensor>> loader::shared::take() {
    epoch_ended = false;
    if (queue.empty()) return std::nullopt;
    auto item = std::move(queue.front());
    queue.pop_front();
    if (queue.size() <= refill_mark()) drained.notify_one();
    if (auto* e = std::get_if<std::exception_ptr>(&item)) std::rethrow_exception(*e);
    detail::stream_event& e = std::get<detail::stream_event>(item);
    switch (e.what) {
    case detail::stream_event::kind::message:
        queued_bytes -= e.message.bytes;
        return std::move(e.message.tensors);  // its ack token (ack_mode::on_take) goes with the event
    case detail::stream_event::kind::epoch_end: {
        ++consumer_epoch;
        epoch_ended = true;
        // The last epoch's end says the stream's too.
        const auto* after = queue.empty() ? nullptr : std::get_if<detail::stream_event>(&queue.front());
        if (after && after->what == detail::stream_event::kind::stream_end) {
            queue.pop_front();
            stream_ended = true;
            changed.notify_all();
        }
        return std::nullopt;
    }
    case detail::stream_event::kind::stream_end:
        stream_ended = true;
        changed.notify_all();  // other consumers waiting see the end too
        return std::nullopt;
    }
    return std::nullopt;
}

void loader::shared::run() {
    std::optional<connection> conn;
    try {
        connection_options copt = opt.connection;
        copt.recv_timeout = poll_interval;
        if (copt.curve) {
            // Counted here too: the connection is this thread's, its
            // monitor thread ends before it does.
            copt.curve->on_refused = [this, user = std::move(copt.curve->on_refused)](const handshake_refusal& r) {
                refused.fetch_add(1);
                if (user) user(r);
            };
        }
        conn.emplace(context, urls, copt);
    } catch (...) {
        // Raised by the constructor, which waits for this.
        std::lock_guard lock(mutex);
        setup_failure = std::current_exception();
        started = finished = true;
        changed.notify_all();
        return;
    }
    {
        std::lock_guard lock(mutex);
        endpoints = conn->endpoints();
        connection_meter = detail::connection_access::meter(*conn);
        started = true;
        this->conn = &*conn;
        changed.notify_all();
    }
    // One message waited for, then those already waiting while the queue
    // had room for them, in messages and in bytes: never more in hand than
    // that room, or one message when it is full (as before batching). What
    // stays on the socket counts against its high-water mark instead. A
    // burst is queued after at most max_burst messages, so that a deep
    // queue does not keep the consumer waiting for a long burst to end.
    std::vector<arrival> got;
    std::exception_ptr fatal;
    try {
        room_left room{opt.queue_messages, opt.queue_bytes};
        while (!stop.load(std::memory_order_relaxed)) {
            if (!receive_into(got, [&] { return detail::connection_access::receive(*conn, zmq::recv_flags::none); })) {
                std::lock_guard lock(mutex);
                tick();  // quiet: a silent producer may be due
                continue;
            }
            const std::size_t most = std::min(room.messages, max_burst);
            // A skipped malformed message adds nothing to `got`.
            std::uint64_t in_hand = got.empty() ? 0 : got.back().bytes;
            // Not after close(): what stays on the socket is not taken (nor
            // transformed) only to be dropped.
            for (std::size_t taken = 1; taken < most && in_hand < room.bytes &&
                                        !stop.load(std::memory_order_relaxed);
                 ++taken) {
                const std::size_t before = got.size();
                if (!receive_into(got, [&] { return detail::connection_access::receive(*conn, zmq::recv_flags::dontwait); }))
                    break;
                if (got.size() > before) in_hand += got.back().bytes;
            }
            room = queue_all(got);
        }
    } catch (...) {
        fatal = std::current_exception();
    }
    std::lock_guard lock(mutex);
    this->conn = nullptr;
    // Fatal: the socket failed. Raised once in the consumer, after every
    // batch received before it, those still in hand included (no more
    // than the room they were taken for); queued outside the handler, as
    // above.
    if (fatal) {
        for (arrival& a : got) push(a);
        arrival last{std::move(fatal)};
        push(last);
    }
    finished = true;
    changed.notify_all();
}

loader::loader(std::string_view url, loader_options opt)
    : loader(std::vector<std::string>{std::string(url)}, std::move(opt)) {}

loader::loader(std::span<const std::string> urls, loader_options opt)
    : loader(detail::default_context(urls, {.kind = opt.connection.kind, .bind = opt.connection.bind}), urls,
             std::move(opt)) {}

loader::loader(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls, loader_options opt)
    : s_(std::make_shared<shared>()) {
    // Parse now so that a bad URL fails in the caller's thread.
    const socket_kind kind = parse_urls(urls, {.kind = opt.connection.kind, .bind = opt.connection.bind}).front().kind;
    if (!detail::can_receive(kind))
        throw error(errc::bad_url, "a loader receives, but '" + urls.front() + "' makes a " +
                                       std::string(name(kind)) + " socket, which cannot");
    // It only receives: REQ and REP must take turns sending, and a ROUTER
    // needs an envelope on every message.
    if (kind == socket_kind::req || kind == socket_kind::rep || kind == socket_kind::router)
        throw error(errc::bad_url, "a loader only receives, but '" + urls.front() + "' makes a " +
                                       std::string(name(kind)) +
                                       " socket, which must also send; use pull, sub, dealer or pair");
    if (opt.reuse_allocations) reuse_large_allocations();
    s_->stats = statistics(opt.connection.stats_horizon);
    s_->opt = std::move(opt);
    s_->urls.assign(urls.begin(), urls.end());
    s_->context = std::move(context);
    s_->thread = std::thread([s = s_] { s->run(); });
    // A refused endpoint is the constructor's error, as for a connection.
    std::exception_ptr failure;
    {
        std::unique_lock lock(s_->mutex);
        s_->changed.wait(lock, [&] { return s_->started; });
        failure = s_->setup_failure;
    }
    if (failure) {
        s_->thread.join();
        std::rethrow_exception(failure);
    }
}

loader::~loader() {
    if (!s_) return;
    close();
    if (s_->thread.joinable()) s_->thread.join();
}

loader::loader(loader&&) noexcept = default;
loader& loader::operator=(loader&& o) noexcept {
    if (this == &o) return *this;
    if (s_) {
        close();
        if (s_->thread.joinable()) s_->thread.join();
    }
    s_ = std::move(o.s_);
    return *this;
}

std::uint64_t loader::epoch() const {
    std::lock_guard lock(s_->mutex);
    return s_->consumer_epoch;
}
bool loader::epoch_ended() const {
    std::lock_guard lock(s_->mutex);
    return s_->epoch_ended;
}
bool loader::stream_ended() const {
    std::lock_guard lock(s_->mutex);
    return s_->stream_ended;
}
stream_counters loader::stream_stats() const {
    std::lock_guard lock(s_->mutex);
    return s_->tracker ? s_->tracker->counters() : stream_counters{};
}

stream_state loader::state() const {
    std::lock_guard lock(s_->mutex);
    if (!s_->tracker) return stream_state{s_->consumer_epoch, {}};
    // Queued batches are not the consumer's yet.
    std::vector<stream_position> pending;
    for (const auto& item : s_->queue)
        if (const auto* e = std::get_if<detail::stream_event>(&item))
            if (e->what == detail::stream_event::kind::message && e->message.position)
                pending.push_back(*e->message.position);
    return s_->tracker->state(s_->consumer_epoch, pending);
}

void loader::load_state(const stream_state& st) {
    shared& s = *s_;
    std::lock_guard lock(s.mutex);
    if (!s.tracker)
        s.tracker.emplace(s.opt.connection.streams, s.opt.queue_messages, s.opt.queue_bytes, !s.opt.connection.acked);
    // Queued batches the state has are duplicates now, and so are the ends
    // of epochs before its own.
    std::deque<shared::item> kept;
    for (auto& item : s.queue) {
        if (auto* e = std::get_if<detail::stream_event>(&item)) {
            const bool taken = e->what == detail::stream_event::kind::message && e->message.position &&
                               detail::stream_tracker::taken_in(st, *e->message.position);
            const bool old_end = e->what == detail::stream_event::kind::epoch_end && e->epoch < st.epoch;
            if (taken || old_end) {
                s.queued_bytes -= e->message.bytes;
                continue;
            }
        }
        kept.push_back(std::move(item));
    }
    s.queue = std::move(kept);
    std::vector<detail::stream_event> events;
    s.tracker->load(st, std::chrono::steady_clock::now(), events);
    s.push_events(events);
    s.consumer_epoch = st.epoch;
    s.stream_ended = false;
    if (s.conn) detail::connection_access::seed(*s.conn, st);
    s.drained.notify_one();
}

void loader::close() {
    std::lock_guard lock(s_->mutex);
    s_->stop = true;
    s_->changed.notify_all();
    s_->drained.notify_all();
}

// Both wait and take under one lock: with several consumers, a batch one
// was woken for cannot go to another in between.
std::optional<std::vector<tensor>> loader::next() {
    if (const auto& t = s_->opt.connection.recv_timeout) return next(*t);
    shared& s = *s_;
    std::unique_lock lock(s.mutex);
    s.flush_acks();
    const auto since = s.wait_begins();
    s.changed.wait(lock, [&] { return s.ready(); });
    return s.waited(s.take(), since);  // nothing: closed or ended, and drained
}

std::optional<std::vector<tensor>> loader::next(std::chrono::milliseconds timeout) {
    shared& s = *s_;
    std::unique_lock lock(s.mutex);
    s.flush_acks();
    const auto since = s.wait_begins();
    // A timeout returns nothing, as connection::recv does (would-block is no error).
    if (!s.changed.wait_until(lock, detail::deadline_after(timeout), [&] { return s.ready(); }))
        return s.waited(std::nullopt, since);
    return s.waited(s.take(), since);
}

bool loader::closed() const {
    std::lock_guard lock(s_->mutex);
    return s_->stop.load() || (s_->finished && s_->queue.empty());
}

statistics loader::stats() const {
    std::lock_guard lock(s_->mutex);
    return s_->stats;
}
std::size_t loader::queued_messages() const {
    std::lock_guard lock(s_->mutex);
    return s_->queue.size();
}
std::uint64_t loader::queued_bytes() const {
    std::lock_guard lock(s_->mutex);
    return s_->queued_bytes;
}
std::size_t loader::peak_queued_messages() const {
    std::lock_guard lock(s_->mutex);
    return s_->peak_messages;
}
std::uint64_t loader::peak_queued_bytes() const {
    std::lock_guard lock(s_->mutex);
    return s_->peak_bytes;
}
std::uint64_t loader::malformed() const {
    std::lock_guard lock(s_->mutex);
    return s_->malformed;
}
std::uint64_t loader::refused_handshakes() const noexcept { return s_->refused.load(); }

std::shared_ptr<const metrics_source> loader::metrics() const {
    if (!s_) throw error(errc::bad_argument, "cannot read metrics: the loader was moved from");
    std::lock_guard lock(s_->mutex);
    if (s_->connection_meter) s_->connection_meter->time();
    return s_;
}

void loader::shared::collect(metric_set& out) const {
    detail::loader_readings r;
    std::shared_ptr<detail::connection_meter> conn;
    {
        std::lock_guard lock(mutex);
        r.queued_messages = queue.size();
        r.queued_bytes = queued_bytes;
        if (tracker) r.streams = tracker->counters();
        r.epoch = consumer_epoch;
        conn = connection_meter;
    }
    detail::collect_loader(out, r, waits, conn.get());
}
std::vector<endpoint> loader::endpoints() const {
    std::lock_guard lock(s_->mutex);  // set before the constructor returned
    return s_->endpoints;
}

}  // namespace tenbin
