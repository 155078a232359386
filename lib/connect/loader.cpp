#include "connect/loader_shared.hpp"

#include "base/os_error.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

namespace tenbin {

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
                                       std::string(name(kind)) + " socket, which cannot receive; use pull, sub, "
                                       "dealer or pair");
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
    s_->stop_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!s_->stop_fd) throw detail::os_error("eventfd for a loader");
    // Before the thread: its first batch is already checked against it.
    if (s_->opt.connection.resume_from) load_state(*s_->opt.connection.resume_from);
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
    // A claim waiting for a silent +shm sender ends now, not at its timeout.
    if (s_->conn) detail::connection_access::interrupt(*s_->conn);
    // Whoever waits on the socket's descriptor (the thread, a consumer).
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = ::write(s_->stop_fd.get(), &one, sizeof one);
    s_->changed.notify_all();
    s_->drained.notify_all();
    s_->turn.notify_all();
}

std::optional<std::vector<tensor>> loader::next() {
    const auto& t = s_->opt.connection.recv_timeout;
    return s_->next(t ? detail::deadline_after(*t) : std::chrono::steady_clock::time_point::max());
}

std::optional<std::vector<tensor>> loader::next(std::chrono::milliseconds timeout) {
    return s_->next(detail::deadline_after(timeout));
}

// Both wait and take under one lock: with several consumers, a batch one
// was woken for cannot go to another in between.
std::optional<std::vector<tensor>> loader::shared::next(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex);
    flush_acks();
    const auto since = wait_begins();
    for (;;) {
        if (ready()) return waited(take(), since);  // nothing: closed or ended, and drained
        if (may_read_here()) {
            // A silent producer's epoch timeout (tick) bounds the wait too.
            const bool came = read_here(lock, tracker ? std::min(deadline, tracker->deadline()) : deadline);
            if (!came) tick();
            if (ready()) continue;
        } else if (deadline == std::chrono::steady_clock::time_point::max()) {
            changed.wait(lock);
            continue;
        } else {
            changed.wait_until(lock, deadline);
        }
        if (!ready() && std::chrono::steady_clock::now() >= deadline) {
            // A timeout returns nothing, as connection::recv does (would-block
            // is no error); an epoch_ended() after it must not tell of an
            // earlier end.
            epoch_ended = false;
            return waited(std::nullopt, since);
        }
    }
}

void loader::release_last() {
    if (!s_) return;  // moved from
    std::weak_ptr<const detail::ack_token> last;
    {
        std::lock_guard lock(s_->mutex);
        const auto it = s_->last_taken.find(std::this_thread::get_id());
        if (it == s_->last_taken.end()) return;
        last = std::move(it->second);
        s_->last_taken.erase(it);
    }
    if (const auto token = last.lock()) detail::acknowledge_now(*token);
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
