// What a connection counts for its metrics, kept beside it (shared, so that
// a scrape on another thread may read it while the connection works, and
// after it is gone), and the families a loader adds to its connection's.
#pragma once

#include "metrics/instruments.hpp"

#include <tenbin/error.hpp>
#include <tenbin/position.hpp>
#include <tenbin/stream.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace tenbin::detail {

class connection_meter final : public metrics_source {
public:
    using clock = std::chrono::steady_clock;

    connection_meter(bool sends, bool receives) : sends_(sends), receives_(receives) {}

    // The labels: the connection's name and the endpoints it was opened
    // on. Set once, before the meter is handed out.
    void label(const std::string& name, const std::vector<std::string>& endpoints);
    const metric_labels& labels() const noexcept { return labels_; }

    // The events, on the connection's thread.
    void sent(std::uint64_t bytes) noexcept {
        messages_sent_.add();
        bytes_sent_.add(bytes);
    }
    // A message of `bytes` and its `position` (null: unnumbered): a
    // batch is counted, and timed from its send once timed(); an end mark
    // is not.
    void received(std::uint64_t bytes, const stream_position* position) noexcept {
        if (position && position->kind != stream_position::mark::batch) return;
        messages_received_.add();
        bytes_received_.add(bytes);
        if (position && timed()) delivered(position->sent_ns);
    }
    void refused(errc code) noexcept;
    void other_topic() noexcept { other_topics_.add(); }
    // The stream tracker's counts, published after each receive that fed it.
    void streams(const stream_counters& c, std::uint64_t epoch) noexcept;
    // Receipt of a batch its producer sent at `sent_ns` (CLOCK_REALTIME).
    void delivered(std::uint64_t sent_ns) noexcept;

    // Timings cost clock reads: kept once somebody asked for the metrics.
    bool timed() const noexcept { return timed_.load(std::memory_order_relaxed); }
    void time() noexcept { timed_.store(true, std::memory_order_relaxed); }
    duration_histogram& send_duration() noexcept { return send_duration_; }
    wait_histogram& receive_wait() noexcept { return receive_wait_; }

    // Peers connected now, kept by a socket monitor (count_peers).
    void count_peers() noexcept { counts_peers_ = true; }
    void peer(int change) noexcept { peers_.fetch_add(change, std::memory_order_relaxed); }

    // What the connection reads of its parts for a scrape (thread-safe
    // readings only: its CURVE monitor's count, its +shm pool), until
    // detach(), which the connection calls before those parts go. A scrape
    // running meanwhile ends first.
    void attach(std::function<void(metric_writer&)> part);
    void detach();

    void collect(metric_set& out) const override;
    // A loader's connection: what the loader does not count itself (it
    // has its own queue, receive waits and stream tracking).
    void collect_for_loader(metric_set& out) const;

private:
    void write(metric_writer& w, bool consumer_side) const;

    const bool sends_, receives_;
    bool counts_peers_ = false;
    metric_labels labels_;
    std::atomic<bool> timed_{false};
    counter messages_sent_, bytes_sent_, messages_received_, bytes_received_, other_topics_;
    std::array<counter, 32> refused_;  // by errc
    duration_histogram send_duration_, latency_;
    wait_histogram receive_wait_;
    std::atomic<std::int64_t> peers_{0};
    // stream_counters' fields, and the epoch, as last published.
    std::atomic<bool> streams_seen_{false};
    std::array<std::atomic<std::uint64_t>, 9> streams_{};
    mutable std::mutex parts_mutex_;
    std::vector<std::function<void(metric_writer&)>> parts_;
};

// Times one receive: how long the consumer waited, and whether it got a
// batch (see wait_histogram). Nothing when the meter is not timed.
class wait_timer {
public:
    explicit wait_timer(connection_meter& m) : m_(m), timed_(m.timed()) {
        if (timed_) start_ = connection_meter::clock::now();
    }
    void got() noexcept { got_ = true; }
    ~wait_timer() {
        if (timed_) m_.receive_wait().waited(connection_meter::clock::now() - start_, got_);
    }
    wait_timer(const wait_timer&) = delete;
    wait_timer& operator=(const wait_timer&) = delete;

private:
    connection_meter& m_;
    bool timed_, got_ = false;
    connection_meter::clock::time_point start_{};
};

// Times one send (including one that timed out or failed).
class send_timer {
public:
    explicit send_timer(connection_meter& m) : m_(m), timed_(m.timed()) {
        if (timed_) start_ = connection_meter::clock::now();
    }
    ~send_timer() {
        if (timed_) m_.send_duration().observe(connection_meter::clock::now() - start_);
    }
    send_timer(const send_timer&) = delete;
    send_timer& operator=(const send_timer&) = delete;

private:
    connection_meter& m_;
    bool timed_;
    connection_meter::clock::time_point start_{};
};

// What a loader reads under its lock for a scrape.
struct loader_readings {
    std::uint64_t queued_messages = 0;
    std::uint64_t queued_bytes = 0;
    stream_counters streams{};
    std::uint64_t epoch = 0;
};

// A loader's series: its own (queue, receive waits, streams) and its
// connection's (`connection`: null before it is open).
void collect_loader(metric_set& out, const loader_readings& r, const wait_histogram& waits,
                    const connection_meter* connection);

}  // namespace tenbin::detail
