// A connection receiving: topics passed over, streams followed, acked
// batches taken.
#include "connect/connection_impl.hpp"

namespace tenbin {

std::uint64_t connection::epoch() const noexcept { return s_ ? s_->consumer_epoch : 0; }
bool connection::epoch_ended() const noexcept { return s_ && s_->epoch_ended; }
bool connection::stream_ended() const noexcept { return s_ && s_->stream_ended; }
stream_counters connection::stream_stats() const { return s_ && s_->tracker ? s_->tracker->counters() : stream_counters{}; }

stream_state connection::state() const {
    if (!s_ || !s_->tracker) return stream_state{s_ ? s_->consumer_epoch : 0, {}};
    std::vector<stream_position> pending;
    for (const detail::stream_event& e : s_->ready)
        if (e.what == detail::stream_event::kind::message && e.message.position) pending.push_back(*e.message.position);
    return s_->tracker->state(s_->consumer_epoch, pending);
}

void connection::load_state(const stream_state& st) {
    if (!s_) throw error(errc::bad_argument, "cannot load a state: the connection is closed (or moved from)");
    std::vector<detail::stream_event> out;
    s_->streams().load(st, std::chrono::steady_clock::now(), out);
    // What was waiting to be returned is checked against the state too.
    std::deque<detail::stream_event> ready;
    for (detail::stream_event& e : s_->ready)
        if (e.what != detail::stream_event::kind::message || !e.message.position ||
            !detail::stream_tracker::taken_in(st, *e.message.position))
            ready.push_back(std::move(e));
    for (detail::stream_event& e : out) ready.push_back(std::move(e));
    s_->ready = std::move(ready);
    s_->consumer_epoch = st.epoch;
    s_->stream_ended = false;
    if (s_->delivery) s_->delivery->seed(st);
}

std::optional<std::vector<tensor>> connection::recv() {
    std::optional<message> m = recv_message();
    if (!m) return std::nullopt;
    return std::move(m->tensors);
}

std::optional<std::vector<tensor>> connection::try_recv() {
    if (!s_) throw error(errc::bad_argument, "cannot receive: the connection is closed (or moved from)");
    std::optional<message> m = s_->take(zmq::recv_flags::dontwait);
    if (!m) return std::nullopt;
    return std::move(m->tensors);
}

std::optional<message> connection::recv_message() {
    if (!s_) throw error(errc::bad_argument, "cannot receive: the connection is closed (or moved from)");
    return s_->take(zmq::recv_flags::none);
}

// next() as the consumer sees it, for the metrics: its wait timed, the
// streams' counts published.
std::optional<message> connection::impl::take(zmq::recv_flags flags) {
    detail::wait_timer wait(*meter);
    std::optional<message> m = next(flags);
    if (m) wait.got();
    if (tracker) meter->streams(tracker->counters(), consumer_epoch);
    return m;
}

namespace {

detail::tracked tracked_of(message&& m) {
    detail::tracked t;
    t.bytes = detail::data_bytes(m.tensors);
    t.tensors = std::move(m.tensors);
    t.position = std::move(m.position);
    if (!m.envelope.empty()) t.envelope = std::make_shared<std::vector<zmq::message_t>>(std::move(m.envelope));
    return t;
}

message message_of(detail::tracked&& t) {
    message m;
    m.tensors = std::move(t.tensors);
    m.position = std::move(t.position);
    if (t.envelope)
        for (zmq::message_t& f : *t.envelope) m.envelope.emplace_back(f.data(), f.size());
    return m;
}

}  // namespace

// The next message to give: as it came when it has no position; through
// the stream tracker when it has, which gives each epoch's batches and then
// nothing once at the epoch's end. The tracker's own deadline (a silent
// producer) bounds every wait while it has one.
std::optional<message> connection::impl::next(zmq::recv_flags flags) {
    epoch_ended = false;
    // The batches the caller let go are acknowledged before it gets another.
    if (delivery) delivery->flush_acks();
    using clock = std::chrono::steady_clock;
    const bool waits = flags == zmq::recv_flags::none;
    // The deadline, read from the clock only when a wait comes (perf: a
    // message that is there needs none).
    std::optional<clock::time_point> deadline;
    const auto until = [&] {
        if (!deadline)
            deadline = waits && opt.recv_timeout ? detail::deadline_after(*opt.recv_timeout) : clock::time_point::max();
        return *deadline;
    };
    for (;;) {
        while (!ready.empty()) {
            detail::stream_event e = std::move(ready.front());
            ready.pop_front();
            switch (e.what) {
            case detail::stream_event::kind::message: return message_of(std::move(e.message));
            case detail::stream_event::kind::epoch_end:
                ++consumer_epoch;
                epoch_ended = true;
                // The last epoch's end says the stream's too.
                if (!ready.empty() && ready.front().what == detail::stream_event::kind::stream_end) {
                    ready.pop_front();
                    stream_ended = true;
                }
                return std::nullopt;
            case detail::stream_event::kind::stream_end: stream_ended = true; break;
            }
        }
        if (stream_ended) return std::nullopt;
        std::optional<detail::tracked> t;
        std::optional<message> m;
        const auto tick = tracker ? tracker->deadline() : clock::time_point::max();
        const auto tick_now = [&] {
            std::vector<detail::stream_event> out;
            tracker->tick(clock::now(), out);
            for (detail::stream_event& x : out) ready.push_back(std::move(x));
        };
        if (delivery) {
            check_open("receive");
            t = delivered(std::chrono::milliseconds(0));  // one that came
            if (!t && waits) {
                std::optional<std::chrono::milliseconds> wait;
                if (std::min(until(), tick) != clock::time_point::max())
                    wait = std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(
                                                                      std::min(until(), tick) - clock::now()));
                t = delivered(wait);
            }
            if (!t) {
                if (!waits || clock::now() >= until()) return std::nullopt;
                tick_now();
                continue;
            }
        } else if (waits && tick != clock::time_point::max()) {
            check_open("receive");
            // A message already there needs no poll (perf: a system call a message).
            m = receive(zmq::recv_flags::dontwait);
            if (!m) {
                const bool came = detail::socket_call(
                    "receive", [&] { return detail::readable_before(socket, std::min(until(), tick)); });
                if (!came) {
                    if (clock::now() >= until()) return std::nullopt;
                    tick_now();
                    continue;
                }
                m = receive(zmq::recv_flags::dontwait);
                if (!m) continue;
            }
        } else {
            m = receive(flags);
            if (!m) return std::nullopt;
        }
        // Unnumbered, or next in order with nothing waiting: as it came (perf: no detour).
        if (m) {
            if (!m->position || streams().take_in_order(*m->position, detail::stream_tracker::coarse_now())) return m;
            t = tracked_of(std::move(*m));
        } else if (!t->position || streams().take_in_order(*t->position, detail::stream_tracker::coarse_now())) {
            return message_of(std::move(*t));
        }
        streams().add(std::move(*t), detail::stream_tracker::coarse_now(), given);
        for (detail::stream_event& x : given) ready.push_back(std::move(x));
        given.clear();
    }
}

std::optional<detail::tracked> connection::impl::receive_tracked(zmq::recv_flags flags) {
    if (!delivery) {
        std::optional<message> m = receive(flags);
        if (!m) return std::nullopt;
        return tracked_of(std::move(*m));
    }
    check_open("receive");
    return delivered(flags == zmq::recv_flags::dontwait ? std::optional(std::chrono::milliseconds(0)) : opt.recv_timeout);
}

// Acked consumers: the next batch the delivery thread has, counted.
std::optional<detail::tracked> connection::impl::delivered(std::optional<std::chrono::milliseconds> wait) {
    std::optional<detail::tracked> t = delivery->receive(wait);
    if (t) {
        stats.add(t->bytes);
        meter->received(t->bytes, t->position ? &*t->position : nullptr);
    }
    return t;
}

std::optional<detail::tracked> detail::connection_access::receive(connection& c, zmq::recv_flags flags) {
    return c.s_->receive_tracked(flags);
}

void detail::connection_access::seed(connection& c, const stream_state& s) {
    if (c.s_->delivery) c.s_->delivery->seed(s);
}
std::shared_ptr<detail::connection_meter> detail::connection_access::meter(connection& c) { return c.s_->meter; }

void detail::connection_access::interrupt(connection& c) noexcept {
    if (c.s_ && c.s_->link) c.s_->link->interrupt();
}

int detail::connection_access::pollable_fd(connection& c) {
    if (c.s_->delivery || c.s_->shm) return -1;
    return static_cast<int>(c.s_->socket.get(zmq::sockopt::fd));
}

void detail::connection_access::flush_acks(connection& c) {
    if (c.s_->delivery) c.s_->delivery->flush_acks();
}

// The next message for this receiver. Messages of longer topics that
// ZeroMQ's prefix matching lets through are passed over; they do not
// restart the wait: with a timeout, a blocking receive ends when it is
// over, however many such messages came meanwhile.
std::optional<message> connection::impl::receive(zmq::recv_flags flags) {
    check_open("receive");
    const endpoint& ep = endpoints.front();
    if (!detail::can_receive(ep.kind)) detail::cannot(ep, "receive");
    const bool bounded = opt.recv_timeout && flags == zmq::recv_flags::none;
    const auto deadline = bounded ? detail::deadline_after(*opt.recv_timeout) : std::chrono::steady_clock::time_point{};
    const bool topic = receiving.envelope.how == envelope_spec::kind::topic;
    auto other_topic = [&](std::string_view frame) {
        if (frame == opt.topic) return false;
        ++other_topics;
        meter->other_topic();
        notice("other topic", "a subscriber of topic '" + opt.topic + "' passes over messages of topic '" +
                                  std::string(frame.substr(0, 64)) + "' (and any other longer topic) that ZeroMQ's "
                                  "prefix match lets through (counted: other_topics())");
        return true;
    };
    return detail::socket_call("receive", [&]() -> std::optional<message> {
        for (bool first = true;; first = false) {
            receiving.flags = flags;
            if (bounded && !first) {
                if (!detail::readable_before(socket, deadline)) return std::nullopt;
                receiving.flags = zmq::recv_flags::dontwait;  // it is there
            }
            std::optional<message> m(std::in_place);
            bool got = false;
            try {
                got = link->receive(socket, receiving, *m);
            } catch (const malformed_message& e) {
                if (topic && !e.envelope().empty() && other_topic(e.envelope().front())) continue;
                meter->refused(e.code());
                throw;
            } catch (const error& e) {
                if (e.code() != errc::closed) meter->refused(e.code());
                throw;
            }
            if (!got) {
                if (bounded && !first) continue;  // polled, but taken by no one else: a spurious wake-up
                return std::nullopt;
            }
            if (topic && !m->envelope.empty() &&
                other_topic({m->envelope.front().data<char>(), m->envelope.front().size()}))
                continue;
            const std::uint64_t bytes = detail::data_bytes(m->tensors);
            stats.add(bytes);
            meter->received(bytes, m->position ? &*m->position : nullptr);
            publish_shm_received();
            return m;
        }
    });
}

}  // namespace tenbin
