// A loader's receiving: its thread's (messages off the connection,
// transformed, queued for the consumers), and a consumer's that reads the
// socket itself.
#include "connect/loader_shared.hpp"

#include <algorithm>
#include <climits>

#include <poll.h>
#include <unistd.h>

namespace tenbin {

namespace {
// How often the loader thread looks up from a quiet socket to see whether
// it was asked to stop: the bound on how long close() takes.
constexpr std::chrono::milliseconds poll_interval{50};
// Messages taken off the socket before they are queued (see run).
constexpr std::size_t max_burst = 64;

}  // namespace

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
    a.bytes = batch->bytes = detail::data_bytes(batch->tensors);
    a.what = std::move(*batch);
    return true;
}

// Queues what was received, in order, under one lock and with one wake-up
// of the consumer (perf: three locks and a wake-up a message). Waits for
// room as needed (see refill); returns the room left.
loader::shared::room_left loader::shared::queue_all(std::vector<arrival>& got, bool give_back) {
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
    if (give_back) reading = reader::nobody;
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
        if (m.position && !tracker)
            tracker.emplace(opt.connection.streams, opt.queue_messages, opt.queue_bytes, !opt.connection.acked);
        const auto now = m.position ? detail::stream_tracker::coarse_now() : detail::stream_tracker::clock::time_point{};
        // Unnumbered, or next in order with nothing kept back: straight to the queue (perf).
        if (!m.position || tracker->take_in_order(*m.position, now)) {
            queue.push_back(detail::stream_event{detail::stream_event::kind::message, std::move(m), 0});
            queued_bytes += a.bytes;
        } else {
            tracker->add(std::move(m), now, given);
            push_events(given);
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
        if (e.message.ack && opt.connection.ack == ack_mode::on_release) {
            detail::mark_taken(*e.message.ack);
            last_taken[std::this_thread::get_id()] = e.message.ack;
        }
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
        connection_options copt = with_sliced_timeouts(opt.connection, poll_interval);
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
    int fd = -1;
    try {
        if (!opt.transform) fd = detail::connection_access::pollable_fd(*conn);
    } catch (const std::exception&) {
        // The thread reads alone then.
    }
    {
        std::lock_guard lock(mutex);
        endpoints = conn->endpoints();
        connection_meter = detail::connection_access::meter(*conn);
        started = true;
        this->conn = &*conn;
        socket_fd = fd;
        changed.notify_all();
    }
    std::vector<arrival> got;
    std::exception_ptr fatal;
    try {
        if (socket_fd >= 0) {
            receive_shared(*conn, got);
        } else {
            receive_alone(*conn, got);
        }
    } catch (...) {
        fatal = std::current_exception();
    }
    std::unique_lock lock(mutex);
    // A consumer reading the socket gives it back (close() woke it) before it goes.
    turn.wait(lock, [&] { return reading != reader::consumer; });
    this->conn = nullptr;
    socket_fd = -1;
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

// One message (waited for with `first` = none), then those already waiting
// while the queue had room for them, in messages and in bytes: never more
// in hand than that room, or one message when it is full (as before
// batching). What stays on the socket counts against its high-water mark
// instead. A burst is queued after at most max_burst messages, so that a
// deep queue does not keep the consumer waiting for a long burst to end.
bool loader::shared::receive_burst(connection& c, std::vector<arrival>& got, room_left room, zmq::recv_flags first) {
    const std::size_t most = std::max<std::size_t>(1, std::min(room.messages, max_burst));
    // A skipped malformed message adds nothing to `got`.
    std::uint64_t in_hand = 0;
    for (std::size_t taken = 0; taken < most && (taken == 0 || in_hand < room.bytes); ++taken) {
        // Not after close(): what stays on the socket is not taken (nor
        // transformed) only to be dropped.
        if (stop.load(std::memory_order_relaxed)) return false;
        const std::size_t before = got.size();
        const auto flags = taken == 0 ? first : zmq::recv_flags::dontwait;
        if (!receive_into(got, [&] { return detail::connection_access::receive(c, flags); })) return true;
        if (got.size() > before) in_hand += got.back().bytes;
    }
    return false;
}

void loader::shared::receive_alone(connection& c, std::vector<arrival>& got) {
    room_left room{opt.queue_messages, opt.queue_bytes};
    while (!stop.load(std::memory_order_relaxed)) {
        if (receive_burst(c, got, room, zmq::recv_flags::none) && got.empty()) {
            std::lock_guard lock(mutex);
            tick();  // quiet: a silent producer may be due
            continue;
        }
        room = queue_all(got);
    }
}

void loader::shared::receive_shared(connection& c, std::vector<arrival>& got) {
    using clock = std::chrono::steady_clock;
    room_left room{opt.queue_messages, opt.queue_bytes};
    for (;;) {
        {
            // The thread's turn: nobody reads, and no consumer gave the
            // socket back just now (it may be back for the next message).
            std::unique_lock lock(mutex);
            for (;;) {
                if (stop || socket_failed) return;
                const auto now = clock::now();
                if (reading == reader::consumer) {
                    // A consumer that waited long says when it leaves.
                    if (now - consumer_since >= hand_back) {
                        turn.wait_for(lock, poll_interval);
                    } else {
                        turn.wait_until(lock, consumer_since + hand_back);
                    }
                } else if (now < consumer_left + hand_back) {
                    turn.wait_until(lock, consumer_left + hand_back);
                } else {
                    break;
                }
                tick();
            }
            reading = reader::thread;
        }
        // A failure leaves the socket the thread's: run() queues what is in
        // hand, then the error.
        const bool empty = receive_burst(c, got, room, zmq::recv_flags::dontwait);
        // Given back only with what was taken queued, ahead of anything a
        // consumer reads next.
        room = queue_all(got, true);
        // Nothing there: wait on the socket without holding it (a consumer may take it meanwhile).
        if (empty && !wait_readable(clock::now() + poll_interval)) {
            std::lock_guard lock(mutex);
            tick();  // quiet: a silent producer may be due
        }
    }
}

bool loader::shared::wait_readable(std::chrono::steady_clock::time_point deadline) {
    pollfd fds[2] = {{socket_fd, POLLIN, 0}, {stop_fd.get(), POLLIN, 0}};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int timeout = deadline == std::chrono::steady_clock::time_point::max()
                            ? -1
                            : static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT_MAX));
    const int n = ::poll(fds, 2, timeout);
    if (n <= 0) return n < 0;  // EINTR: as if readable (the caller looks again)
    return (fds[0].revents & POLLIN) != 0;
}

bool loader::shared::read_here(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
    using clock = std::chrono::steady_clock;
    reading = reader::consumer;
    consumer_since = clock::now();
    connection& c = *conn;  // kept by the thread until the socket is given back
    lock.unlock();
    // One message: the consumer waits for each as it comes, and a burst
    // would end in one more look at an empty socket (a system call).
    std::vector<arrival>& got = consumer_got;
    std::exception_ptr fatal;
    try {
        while (!stop.load()) {
            if (receive_into(got, [&] { return detail::connection_access::receive(c, zmq::recv_flags::dontwait); })) {
                if (!got.empty()) break;
                continue;  // a malformed message skipped
            }
            if (!wait_readable(deadline)) break;
        }
    } catch (...) {
        fatal = std::current_exception();
    }
    lock.lock();
    reading = reader::nobody;
    const auto now = clock::now();
    consumer_left = now;
    // The thread waits for this one's leaving: one that waited long, or close().
    if (now - consumer_since >= hand_back || stop) turn.notify_one();
    for (arrival& a : got) push(a);
    if (fatal) {
        // As the thread's own (run): raised once, after what came before it.
        arrival last{std::move(fatal)};
        push(last);
        socket_failed = true;
        turn.notify_one();
    }
    const bool came = !got.empty();
    got.clear();
    if (!queue.empty()) changed.notify_all();  // other consumers
    return came;
}

}  // namespace tenbin
