#include "metrics/meter.hpp"

namespace tenbin::detail {

namespace {

std::uint64_t realtime_now_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

void write_streams(metric_writer& w, const stream_counters& c, std::uint64_t epoch) {
    w.write(families::stream_epoch, static_cast<double>(epoch));
    w.write(families::stream_epochs, static_cast<double>(c.epochs));
    w.write(families::stream_gaps, static_cast<double>(c.gaps));
    w.write(families::stream_duplicates, static_cast<double>(c.duplicates));
    w.write(families::stream_late, static_cast<double>(c.late));
    w.write(families::stream_timed_out, static_cast<double>(c.producers_timed_out));
    w.write(families::stream_dropped_remainder, static_cast<double>(c.dropped_remainder));
    w.write(families::stream_padded, static_cast<double>(c.padded));
    w.write(families::stream_after_end, static_cast<double>(c.after_end));
}

// The fields of stream_counters and the epoch, in the order they are published.
template <class Counters, class Epoch>
auto stream_fields(Counters& c, Epoch& epoch) {
    return std::array{&c.gaps,   &c.duplicates,        &c.late,   &c.epochs,    &c.producers_timed_out,
                      &c.dropped_remainder, &c.padded, &c.after_end, &epoch};
}

}  // namespace

void connection_meter::label(const std::string& name, const std::vector<std::string>& endpoints) {
    std::string joined;
    for (const std::string& e : endpoints) joined += (joined.empty() ? "" : ",") + e;
    labels_ = {{"connection", name}, {"endpoint", joined}};
}

void connection_meter::refused(errc code) noexcept {
    const auto i = static_cast<std::size_t>(code);
    refused_[i < refused_.size() ? i : 0].add();
}

void connection_meter::streams(const stream_counters& c, std::uint64_t epoch) noexcept {
    const std::uint64_t e = epoch;
    const auto fields = stream_fields(c, e);
    static_assert(fields.size() == std::tuple_size_v<decltype(streams_)>);
    for (std::size_t i = 0; i < fields.size(); ++i) streams_[i].store(*fields[i], std::memory_order_relaxed);
    streams_seen_.store(true, std::memory_order_relaxed);
}

void connection_meter::delivered(std::uint64_t sent_ns) noexcept {
    const std::uint64_t now = realtime_now_ns();
    // Clocks of two hosts may disagree: a receipt "before" its send is 0.
    latency_.observe(std::chrono::nanoseconds(now > sent_ns ? static_cast<std::int64_t>(now - sent_ns) : 0));
}

void connection_meter::attach(std::function<void(metric_writer&)> part) {
    const std::lock_guard lock(parts_mutex_);
    parts_.push_back(std::move(part));
}

void connection_meter::detach() {
    const std::lock_guard lock(parts_mutex_);
    parts_.clear();
}

void connection_meter::write(metric_writer& w, bool consumer_side) const {
    if (sends_) {
        w.write(families::messages_sent, static_cast<double>(messages_sent_.get()));
        w.write(families::bytes_sent, static_cast<double>(bytes_sent_.get()));
        w.write(families::send_duration, send_duration_);
    }
    if (receives_) {
        w.write(families::messages_received, static_cast<double>(messages_received_.get()));
        w.write(families::bytes_received, static_cast<double>(bytes_received_.get()));
        w.declare(families::malformed);
        for (std::size_t i = 0; i < refused_.size(); ++i)
            if (const std::uint64_t n = refused_[i].get())
                w.write(families::malformed, static_cast<double>(n), {{"error", std::string(name(static_cast<errc>(i)))}});
        w.write(families::other_topics, static_cast<double>(other_topics_.get()));
        if (consumer_side) w.write(families::receive_wait, receive_wait_.histogram());
        w.write(families::latency, latency_);
        if (consumer_side) {
            stream_counters c;
            std::uint64_t epoch = 0;
            if (streams_seen_.load(std::memory_order_relaxed)) {
                const auto fields = stream_fields(c, epoch);
                for (std::size_t i = 0; i < fields.size(); ++i) *fields[i] = streams_[i].load(std::memory_order_relaxed);
            }
            write_streams(w, c, epoch);
        }
    }
    if (counts_peers_) w.write(families::peers, static_cast<double>(peers_.load(std::memory_order_relaxed)));
    const std::lock_guard lock(parts_mutex_);
    for (const auto& part : parts_) part(w);
}

void connection_meter::collect(metric_set& out) const {
    metric_writer w(out, labels_);
    write(w, true);
}

void connection_meter::collect_for_loader(metric_set& out) const {
    metric_writer w(out, labels_);
    write(w, false);
}

void collect_loader(metric_set& out, const loader_readings& r, const wait_histogram& waits,
                    const connection_meter* connection) {
    static const metric_labels none;
    metric_writer w(out, connection ? connection->labels() : none);
    if (connection) connection->collect_for_loader(out);
    w.write(families::queue_messages, static_cast<double>(r.queued_messages));
    w.write(families::queue_bytes, static_cast<double>(r.queued_bytes));
    w.write(families::receive_wait, waits.histogram());
    write_streams(w, r.streams, r.epoch);
}

}  // namespace tenbin::detail
