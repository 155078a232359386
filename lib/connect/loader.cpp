#include <tenbin/connect.hpp>

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

std::uint64_t data_bytes(const std::vector<tensor>& batch) {
    std::uint64_t n = 0;
    for (const tensor& t : batch) n += t.nbytes();
    return n;
}
}  // namespace

struct loader::state {
    loader_options opt;
    std::vector<std::string> urls;
    std::shared_ptr<zmq::context_t> context;

    mutable std::mutex mutex;
    std::condition_variable changed;  // queue, stop, started or finished changed
    // A batch, or an error to raise in the consumer.
    std::deque<std::variant<std::vector<tensor>, std::exception_ptr>> queue;
    std::uint64_t queued_bytes = 0;
    std::size_t peak_messages = 0;
    std::uint64_t peak_bytes = 0;
    std::uint64_t malformed = 0;
    statistics stats;
    std::vector<endpoint> endpoints;
    bool started = false;   // the socket is bound/connected (or failed)
    bool stop = false;      // close() was called
    bool finished = false;  // the thread has ended
    std::thread thread;

    void run();
    void push(std::variant<std::vector<tensor>, std::exception_ptr> item, std::uint64_t bytes);
};

void loader::state::push(std::variant<std::vector<tensor>, std::exception_ptr> item, std::uint64_t bytes) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] {
        return stop || queue.empty() ||
               (queue.size() < opt.queue_messages && queued_bytes + bytes <= opt.queue_bytes);
    });
    if (stop) return;
    queue.push_back(std::move(item));
    queued_bytes += bytes;
    peak_messages = std::max(peak_messages, queue.size());
    peak_bytes = std::max(peak_bytes, queued_bytes);
    changed.notify_all();
}

void loader::state::run() {
    std::exception_ptr fatal;
    try {
        connection_options copt = opt.connection;
        copt.recv_timeout = poll_interval;
        connection conn(context, urls, copt);
        {
            std::lock_guard lock(mutex);
            endpoints = conn.endpoints();
            started = true;
            changed.notify_all();
        }
        for (;;) {
            {
                std::lock_guard lock(mutex);
                if (stop) break;
            }
            std::optional<std::vector<tensor>> batch;
            // The exception leaves its handler before it is queued: this
            // thread's reference to it is dropped before the consumer can
            // take it (through the mutex), so the consumer frees it.
            // Queueing from inside the handler was correct, but the
            // reference counts live in libstdc++, which ThreadSanitizer does
            // not see, so it reported the exception freed here as racing
            // with the consumer's reading it.
            std::exception_ptr failure;
            try {
                batch = conn.recv();
                if (!batch) continue;
                if (opt.transform) batch = opt.transform(std::move(*batch));
            } catch (const error&) {
                failure = std::current_exception();
            }
            if (failure) {
                // A bad message (or transform failure) costs that message
                // only: zrecv drained it, the socket is at a message boundary.
                std::unique_lock lock(mutex);
                ++malformed;
                if (opt.skip_malformed) continue;
                lock.unlock();
                push(std::move(failure), 0);
                continue;
            }
            const std::uint64_t bytes = data_bytes(*batch);
            {
                std::lock_guard lock(mutex);
                stats.add(bytes);
            }
            push(std::move(*batch), bytes);
        }
    } catch (...) {
        fatal = std::current_exception();
    }
    std::lock_guard lock(mutex);
    // Fatal: the socket failed or could not be set up. Raised once in the
    // consumer, after what was queued before it (queued outside the
    // handler, as above).
    if (fatal) {
        queue.push_back(std::move(fatal));
        started = true;
    }
    finished = true;
    changed.notify_all();
}

loader::loader(std::string_view url, loader_options opt)
    : loader(std::vector<std::string>{std::string(url)}, std::move(opt)) {}

loader::loader(std::span<const std::string> urls, loader_options opt)
    : loader(std::make_shared<zmq::context_t>(1), urls, std::move(opt)) {}

loader::loader(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls, loader_options opt)
    : state_(std::make_shared<state>()) {
    // Parse now so that a bad URL fails in the caller's thread.
    (void)parse_urls(urls, {.kind = opt.connection.kind, .bind = opt.connection.bind});
    if (opt.reuse_allocations) reuse_large_allocations();
    state_->stats = statistics(opt.connection.stats_horizon);
    state_->opt = std::move(opt);
    state_->urls.assign(urls.begin(), urls.end());
    state_->context = std::move(context);
    state_->thread = std::thread([s = state_] { s->run(); });
}

loader::~loader() {
    close();
    if (state_->thread.joinable()) state_->thread.join();
}

void loader::close() {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
    state_->changed.notify_all();
}

std::optional<std::vector<tensor>> loader::next() {
    if (const auto& t = state_->opt.connection.recv_timeout) return next(*t);
    std::unique_lock lock(state_->mutex);
    state_->changed.wait(lock, [&] { return !state_->queue.empty() || state_->stop || state_->finished; });
    lock.unlock();
    return next(std::chrono::milliseconds::zero());
}

std::optional<std::vector<tensor>> loader::next(std::chrono::milliseconds timeout) {
    state& s = *state_;
    std::unique_lock lock(s.mutex);
    const bool ready = s.changed.wait_for(lock, timeout, [&] { return !s.queue.empty() || s.stop || s.finished; });
    if (s.queue.empty()) {
        if (ready) return std::nullopt;  // closed or ended, and drained
        throw error(errc::timeout, "no batch within " + std::to_string(timeout.count()) + " ms");
    }
    auto item = std::move(s.queue.front());
    s.queue.pop_front();
    if (auto* batch = std::get_if<std::vector<tensor>>(&item)) {
        s.queued_bytes -= data_bytes(*batch);
        s.changed.notify_all();
        return std::move(*batch);
    }
    s.changed.notify_all();
    std::rethrow_exception(std::get<std::exception_ptr>(item));
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
std::vector<endpoint> loader::endpoints() const {
    std::unique_lock lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->started; });
    return state_->endpoints;
}

}  // namespace tenbin
