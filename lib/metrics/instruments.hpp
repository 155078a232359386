// The instruments metrics are kept in where their events happen: counters
// and histograms that the event's thread raises with relaxed atomics and a
// scrape reads from another thread, and the one list of the families
// tenbin exports (names, types, help), which the docs' table follows.
#pragma once

#include <tenbin/metrics.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

namespace tenbin::detail {

// A count raised by its owner's events (any thread), read by a scrape.
class counter {
public:
    void add(std::uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
    std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> v_{0};
};

// The bucket bounds of every duration histogram, in seconds: from 10 us (a
// batch already there, an ipc hop) to a minute (a producer gone quiet).
inline constexpr std::array<double, 21> seconds_bounds = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
    0.05, 0.1,    0.25, 0.5,  1,      2.5,  5,    10,     30,   60};

// Durations counted in the buckets of seconds_bounds, and their sum.
// Lock-free: observe() is two relaxed increments. A scrape reads the
// buckets one by one, so it may miss an observation made meanwhile in a
// bucket already read; the next scrape has it.
class duration_histogram {
public:
    void observe(std::chrono::nanoseconds d) noexcept;
    // Cumulative counts per bound, then the total; and the sum in seconds.
    std::vector<std::uint64_t> buckets() const;
    double sum() const noexcept;

private:
    std::array<std::atomic<std::uint64_t>, seconds_bounds.size() + 1> counts_{};
    std::atomic<std::uint64_t> sum_ns_{0};
};

// The time a consumer waited for each batch it got. A wait that gave
// nothing (a timeout: Python and the tool wait in slices of 50-100 ms, to
// see signals) is added to the next one that gives a batch, so that one
// batch is one observation however its wait was cut up.
class wait_histogram {
public:
    void waited(std::chrono::nanoseconds d, bool got) noexcept {
        if (!got) {
            carried_.fetch_add(static_cast<std::uint64_t>(d.count()), std::memory_order_relaxed);
            return;
        }
        const std::uint64_t carried = carried_.load(std::memory_order_relaxed) == 0
                                          ? 0
                                          : carried_.exchange(0, std::memory_order_relaxed);
        histogram_.observe(d + std::chrono::nanoseconds(carried));
    }
    const duration_histogram& histogram() const noexcept { return histogram_; }

private:
    duration_histogram histogram_;
    std::atomic<std::uint64_t> carried_{0};
};

// One family tenbin exports.
struct family_spec {
    std::string_view name;
    metric_type type;
    std::string_view help;
};

// Every family, by what it measures (the docs' table lists the same, in
// this order; tests/test_metrics.cpp compares them).
namespace families {
inline constexpr family_spec messages_sent{"tenbin_messages_sent_total", metric_type::counter,
                                           "Messages sent (batches; a stream's end marks are not counted)."};
inline constexpr family_spec bytes_sent{"tenbin_bytes_sent_total", metric_type::counter,
                                        "Tensor bytes sent (headers and envelopes not counted)."};
inline constexpr family_spec send_duration{
    "tenbin_send_duration_seconds", metric_type::histogram,
    "Time each send() took, waiting at a full queue (high-water mark) or a full +shm pool included."};
inline constexpr family_spec peers{"tenbin_peers", metric_type::gauge,
                                   "Peers connected to the socket now (tcp and ipc connections, as ZeroMQ's "
                                   "socket monitor reports them; connection_options::count_peers)."};
inline constexpr family_spec messages_received{"tenbin_messages_received_total", metric_type::counter,
                                               "Messages received (batches; a stream's end marks are not counted)."};
inline constexpr family_spec bytes_received{"tenbin_bytes_received_total", metric_type::counter,
                                            "Tensor bytes received."};
inline constexpr family_spec malformed{"tenbin_malformed_messages_total", metric_type::counter,
                                       "Messages received and refused, by error class (bad_header, "
                                       "limit_exceeded, ...)."};
inline constexpr family_spec other_topics{"tenbin_other_topic_messages_total", metric_type::counter,
                                          "Messages of a longer topic passed over by a subscriber (ZeroMQ "
                                          "matches topic prefixes)."};
inline constexpr family_spec receive_wait{
    "tenbin_receive_wait_seconds", metric_type::histogram,
    "Time the consumer's code waited in next() or recv() for each batch it got: how long training starved."};
inline constexpr family_spec latency{
    "tenbin_delivery_latency_seconds", metric_type::histogram,
    "Time from a numbered batch's send to its receipt (the producer's and the consumer's real-time clocks)."};
inline constexpr family_spec queue_messages{"tenbin_queue_messages", metric_type::gauge,
                                            "Batches waiting in a loader's queue now."};
inline constexpr family_spec queue_bytes{"tenbin_queue_bytes", metric_type::gauge,
                                         "Tensor bytes waiting in a loader's queue now."};
inline constexpr family_spec stream_epoch{"tenbin_stream_epoch", metric_type::gauge,
                                          "The epoch the consumer is in (numbered streams)."};
inline constexpr family_spec stream_epochs{"tenbin_stream_epochs_total", metric_type::counter,
                                           "Epochs the consumer has ended."};
inline constexpr family_spec stream_gaps{"tenbin_stream_gaps_total", metric_type::counter,
                                         "Batches an epoch's end says were sent and never came: lost."};
inline constexpr family_spec stream_duplicates{"tenbin_stream_duplicates_total", metric_type::counter,
                                               "Batches received again and dropped."};
inline constexpr family_spec stream_late{"tenbin_stream_late_total", metric_type::counter,
                                         "Batches of an epoch already over, given in the current one."};
inline constexpr family_spec stream_timed_out{
    "tenbin_stream_producers_timed_out_total", metric_type::counter,
    "Times an epoch ended without a producer that stayed silent for epoch_timeout."};
inline constexpr family_spec stream_dropped_remainder{
    "tenbin_stream_dropped_remainder_total", metric_type::counter,
    "Batches dropped so that every rank gets as many (drop_last)."};
inline constexpr family_spec stream_padded{"tenbin_stream_padded_total", metric_type::counter,
                                           "Batches given again so that every rank gets as many."};
inline constexpr family_spec stream_after_end{"tenbin_stream_after_end_total", metric_type::counter,
                                              "Batches received after the stream's end, dropped."};
inline constexpr family_spec delivery_consumers{"tenbin_delivery_consumers", metric_type::gauge,
                                                "Consumers an acked producer knows now (alive or not yet found dead)."};
inline constexpr family_spec consumer_credits{"tenbin_delivery_consumer_credits", metric_type::gauge,
                                              "Batches a consumer (label consumer) would take now."};
inline constexpr family_spec consumer_in_flight{"tenbin_delivery_consumer_in_flight", metric_type::gauge,
                                                "Batches sent to a consumer and not acknowledged yet."};
inline constexpr family_spec consumer_acknowledged{"tenbin_delivery_consumer_acknowledged_total", metric_type::counter,
                                                   "Batches a consumer acknowledged."};
inline constexpr family_spec consumer_redelivered{"tenbin_delivery_consumer_redelivered_total", metric_type::counter,
                                                  "Batches a consumer got that another consumer had been given."};
inline constexpr family_spec delivery_sent{"tenbin_delivery_sent_total", metric_type::counter,
                                           "Batches an acked producer sent (redeliveries too)."};
inline constexpr family_spec delivery_acknowledged{"tenbin_delivery_acknowledged_total", metric_type::counter,
                                                   "Batches acknowledged."};
inline constexpr family_spec delivery_redelivered{"tenbin_delivery_redelivered_total", metric_type::counter,
                                                  "Batches sent again because their consumer was lost."};
inline constexpr family_spec delivery_skipped{"tenbin_delivery_skipped_total", metric_type::counter,
                                              "Batches not sent: a consumer reported it had them (a replaying producer)."};
inline constexpr family_spec delivery_consumers_lost{"tenbin_delivery_consumers_lost_total", metric_type::counter,
                                                     "Consumers found dead or gone; their batches went to others."};
inline constexpr family_spec delivery_producers_lost{"tenbin_delivery_producers_lost_total", metric_type::counter,
                                                     "Producers an acked consumer found dead."};
inline constexpr family_spec delivery_bad_acks{"tenbin_delivery_bad_acks_total", metric_type::counter,
                                               "Acknowledgements of batches never sent to their consumer, ignored."};
inline constexpr family_spec delivery_bad_messages{"tenbin_delivery_bad_control_messages_total", metric_type::counter,
                                                   "Malformed control messages of acked delivery, ignored."};
inline constexpr family_spec curve_refused{"tenbin_curve_refused_handshakes_total", metric_type::counter,
                                           "CURVE handshakes refused on the socket, either side's doing."};
inline constexpr family_spec shm_pool_bytes{"tenbin_shm_pool_bytes", metric_type::gauge,
                                            "Shared memory a +shm sender's pool holds now, in use and idle."};
inline constexpr family_spec shm_pool_in_use_bytes{
    "tenbin_shm_pool_in_use_bytes", metric_type::gauge,
    "Shared memory of a +shm sender's pool that sent messages or the sender's tensors hold now."};
inline constexpr family_spec shm_pool_limit_bytes{"tenbin_shm_pool_limit_bytes", metric_type::gauge,
                                                  "The most shared memory a +shm sender's pool may hold "
                                                  "(connection_options::shm_pool_bytes)."};
inline constexpr family_spec shm_pool_waits{"tenbin_shm_pool_waits_total", metric_type::counter,
                                            "Sends that waited for a receiver to give back pool memory."};
inline constexpr family_spec shm_pool_free_bytes{"tenbin_shm_pool_free_bytes", metric_type::gauge,
                                                 "Shared memory a +shm sender's pool may still give to sends: its "
                                                 "limit less what is in use."};
inline constexpr family_spec shm_segments{"tenbin_shm_segments", metric_type::gauge,
                                          "Shared-memory segments of a +shm sender's pool now (one per block)."};
inline constexpr family_spec shm_copy_ins{"tenbin_shm_copy_ins_total", metric_type::counter,
                                          "Messages a +shm sender copied (some of) into its pool: tensors not from "
                                          "connection::pool()."};
inline constexpr family_spec shm_copy_in_bytes{"tenbin_shm_copy_in_bytes_total", metric_type::counter,
                                               "Tensor bytes those copies copied."};
inline constexpr family_spec shm_peers{"tenbin_shm_peers", metric_type::gauge,
                                       "Receivers on a +shm sender's side channel now."};
inline constexpr family_spec shm_peers_refused{"tenbin_shm_peers_refused_total", metric_type::counter,
                                               "Side-channel connections refused (past shm_max_peers, out of "
                                               "descriptors, another user's)."};
inline constexpr family_spec shm_leases_expired{"tenbin_shm_leases_expired_total", metric_type::counter,
                                                "Messages given up at the end of their lease (shm_lease)."};
inline constexpr family_spec shm_segments_retired{"tenbin_shm_segments_retired_total", metric_type::counter,
                                                  "Segments still held by a receiver moved out of the pool."};
inline constexpr family_spec shm_retires_failed{"tenbin_shm_retires_failed_total", metric_type::counter,
                                                "Retires that failed (no descriptor or memory); the block stayed out "
                                                "of the pool."};
inline constexpr family_spec shm_blocks_pinned{"tenbin_shm_blocks_pinned", metric_type::gauge,
                                               "Pool blocks kept out of the pool now by a failed retire."};
inline constexpr family_spec shm_peers_cut_off{"tenbin_shm_peers_cut_off_total", metric_type::counter,
                                               "Receivers cut off (held past shm_max_held_bytes, wrote nonsense, read "
                                               "no replies)."};
inline constexpr family_spec shm_laggard_drops{"tenbin_shm_laggard_drops_total", metric_type::counter,
                                               "PUB messages given up for a subscriber that had not got to them (one "
                                               "per subscriber and message)."};
inline constexpr family_spec shm_senders{"tenbin_shm_senders", metric_type::gauge,
                                         "Senders' side channels a +shm receiver has open now."};
inline constexpr family_spec shm_mappings{"tenbin_shm_mappings", metric_type::gauge,
                                          "Segments a +shm receiver maps now (tensors kept included)."};
inline constexpr family_spec shm_mapped_bytes{"tenbin_shm_mapped_bytes", metric_type::gauge,
                                              "Bytes a +shm receiver maps now."};
inline constexpr family_spec shm_messages_skipped{"tenbin_shm_messages_skipped_total", metric_type::counter,
                                                  "Messages their sender gave up before this receiver claimed them "
                                                  "(a laggard, a late subscriber, a lease)."};
inline constexpr family_spec shm_claim_timeouts{"tenbin_shm_claim_timeouts_total", metric_type::counter,
                                                "Side channels silent past shm_claim_timeout."};
inline constexpr family_spec shm_links_broken{"tenbin_shm_links_broken_total", metric_type::counter,
                                              "Side channels given up (the sender closed, cut this receiver off, "
                                              "or wrote what it may not)."};
inline constexpr family_spec shm_refused{"tenbin_shm_refused_total", metric_type::counter,
                                         "Messages a +shm receiver refused at a bound (shm_max_*)."};
inline constexpr family_spec shm_senders_evicted{"tenbin_shm_senders_evicted_total", metric_type::counter,
                                                 "Idle side channels a +shm receiver closed to make room."};
}  // namespace families

// Every family above, in the docs' order.
std::span<const family_spec> all_families() noexcept;

// Adds series to a metric_set under one source's labels.
class metric_writer {
public:
    metric_writer(metric_set& out, const metric_labels& labels) : out_(out), labels_(labels) {}
    // A counter's or gauge's series, with `extra` labels after the source's.
    void write(const family_spec& f, double value, const metric_labels& extra = {});
    void write(const family_spec& f, const duration_histogram& h);
    // The family with no series (yet): it is listed all the same.
    void declare(const family_spec& f);

private:
    metric_set& out_;
    const metric_labels& labels_;
};

}  // namespace tenbin::detail
