#include <tenbin/connect.hpp>

#include "connect/connect_detail.hpp"

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

struct loader::state {
    // A batch, or an error to raise in the consumer.
    using item = std::variant<std::vector<tensor>, std::exception_ptr>;
    // A received item and its tensor bytes, on its way to the queue.
    struct arrival {
        item what;
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
    std::thread thread;

    void run();
    template <class Receive>
    bool receive_into(std::vector<arrival>& got, Receive&& receive);
    // Room left in the queue, in messages and in tensor bytes.
    struct room_left {
        std::size_t messages;
        std::uint64_t bytes;
    };
    room_left queue_all(std::vector<arrival>& got);
    // Adds `a` to the queue (the caller holds the mutex).
    void push(arrival& a);
    // The front of the queue, or nothing when it is empty (the caller
    // holds the mutex and has waited as it wants).
    std::optional<std::vector<tensor>> take();
    bool ready() const { return !queue.empty() || stop || finished; }
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
bool loader::state::receive_into(std::vector<arrival>& got, Receive&& receive) {
    std::optional<std::vector<tensor>> batch;
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
        if (!opt.skip_malformed) got.emplace_back().what.emplace<std::exception_ptr>(std::move(failure));
        return true;
    }
    // Whatever the caller's transform throws is the caller's to see, in
    // that batch's place, never skipped as malformed input; the loader
    // goes on.
    if (opt.transform && !stop.load(std::memory_order_relaxed)) {  // once closed, it is dropped anyway
        try {
            batch = opt.transform(std::move(*batch));
        } catch (...) {
            failure = std::current_exception();
        }
        if (failure) {
            got.emplace_back().what.emplace<std::exception_ptr>(std::move(failure));
            return true;
        }
    }
    arrival& a = got.emplace_back();
    a.bytes = data_bytes(*batch);
    a.what = std::move(*batch);
    return true;
}

// Queues what was received, in order, under one lock and with one wake-up
// of the consumer (perf: three locks and a wake-up a message). Waits for
// room as needed (see refill); returns the room left.
loader::state::room_left loader::state::queue_all(std::vector<arrival>& got) {
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

void loader::state::push(arrival& a) {
    if (std::holds_alternative<std::vector<tensor>>(a.what)) stats.add(a.bytes);
    queue.push_back(std::move(a.what));
    queued_bytes += a.bytes;
    peak_messages = std::max(peak_messages, queue.size());
    peak_bytes = std::max(peak_bytes, queued_bytes);
}

std::optional<std::vector<tensor>> loader::state::take() {
    if (queue.empty()) return std::nullopt;
    auto item = std::move(queue.front());
    queue.pop_front();
    auto* batch = std::get_if<std::vector<tensor>>(&item);
    if (batch) queued_bytes -= data_bytes(*batch);
    if (queue.size() <= refill_mark()) drained.notify_one();
    if (!batch) std::rethrow_exception(std::get<std::exception_ptr>(item));
    return std::move(*batch);
}

void loader::state::run() {
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
        started = true;
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
            if (!receive_into(got, [&] { return conn->recv(); })) continue;
            const std::size_t most = std::min(room.messages, max_burst);
            // A skipped malformed message adds nothing to `got`.
            std::uint64_t in_hand = got.empty() ? 0 : got.back().bytes;
            // Not after close(): what stays on the socket is not taken (nor
            // transformed) only to be dropped.
            for (std::size_t taken = 1; taken < most && in_hand < room.bytes &&
                                        !stop.load(std::memory_order_relaxed);
                 ++taken) {
                const std::size_t before = got.size();
                if (!receive_into(got, [&] { return conn->try_recv(); })) break;
                if (got.size() > before) in_hand += got.back().bytes;
            }
            room = queue_all(got);
        }
    } catch (...) {
        fatal = std::current_exception();
    }
    std::lock_guard lock(mutex);
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
    : state_(std::make_shared<state>()) {
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
    state_->stats = statistics(opt.connection.stats_horizon);
    state_->opt = std::move(opt);
    state_->urls.assign(urls.begin(), urls.end());
    state_->context = std::move(context);
    state_->thread = std::thread([s = state_] { s->run(); });
    // A refused endpoint is the constructor's error, as for a connection.
    std::exception_ptr failure;
    {
        std::unique_lock lock(state_->mutex);
        state_->changed.wait(lock, [&] { return state_->started; });
        failure = state_->setup_failure;
    }
    if (failure) {
        state_->thread.join();
        std::rethrow_exception(failure);
    }
}

loader::~loader() {
    close();
    if (state_->thread.joinable()) state_->thread.join();
}

void loader::close() {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
    state_->changed.notify_all();
    state_->drained.notify_all();
}

// Both wait and take under one lock: with several consumers, a batch one
// was woken for cannot go to another in between.
std::optional<std::vector<tensor>> loader::next() {
    if (const auto& t = state_->opt.connection.recv_timeout) return next(*t);
    state& s = *state_;
    std::unique_lock lock(s.mutex);
    s.changed.wait(lock, [&] { return s.ready(); });
    return s.take();  // nothing: closed or ended, and drained
}

std::optional<std::vector<tensor>> loader::next(std::chrono::milliseconds timeout) {
    state& s = *state_;
    std::unique_lock lock(s.mutex);
    // A timeout returns nothing, as connection::recv does (would-block is no error).
    if (!s.changed.wait_until(lock, detail::deadline_after(timeout), [&] { return s.ready(); })) return std::nullopt;
    return s.take();
}

bool loader::closed() const {
    std::lock_guard lock(state_->mutex);
    return state_->stop.load() || (state_->finished && state_->queue.empty());
}

statistics loader::stats() const {
    std::lock_guard lock(state_->mutex);
    return state_->stats;
}
std::size_t loader::queued_messages() const {
    std::lock_guard lock(state_->mutex);
    return state_->queue.size();
}
std::uint64_t loader::queued_bytes() const {
    std::lock_guard lock(state_->mutex);
    return state_->queued_bytes;
}
std::size_t loader::peak_queued_messages() const {
    std::lock_guard lock(state_->mutex);
    return state_->peak_messages;
}
std::uint64_t loader::peak_queued_bytes() const {
    std::lock_guard lock(state_->mutex);
    return state_->peak_bytes;
}
std::uint64_t loader::malformed() const {
    std::lock_guard lock(state_->mutex);
    return state_->malformed;
}
std::uint64_t loader::refused_handshakes() const noexcept { return state_->refused.load(); }
std::vector<endpoint> loader::endpoints() const {
    std::lock_guard lock(state_->mutex);  // set before the constructor returned
    return state_->endpoints;
}

}  // namespace tenbin
