#include "metrics/instruments.hpp"

#include <algorithm>

namespace tenbin::detail {

namespace {

// seconds_bounds in nanoseconds, for observe() to compare integers.
constexpr std::array<std::uint64_t, seconds_bounds.size()> bounds_ns = [] {
    std::array<std::uint64_t, seconds_bounds.size()> ns{};
    for (std::size_t i = 0; i < ns.size(); ++i) ns[i] = static_cast<std::uint64_t>(seconds_bounds[i] * 1e9 + 0.5);
    return ns;
}();

constexpr family_spec every_family[] = {
    families::messages_sent,
    families::bytes_sent,
    families::send_duration,
    families::peers,
    families::messages_received,
    families::bytes_received,
    families::malformed,
    families::other_topics,
    families::receive_wait,
    families::latency,
    families::queue_messages,
    families::queue_bytes,
    families::stream_epoch,
    families::stream_epochs,
    families::stream_gaps,
    families::stream_duplicates,
    families::stream_late,
    families::stream_timed_out,
    families::stream_dropped_remainder,
    families::stream_padded,
    families::stream_after_end,
    families::delivery_consumers,
    families::consumer_credits,
    families::consumer_in_flight,
    families::consumer_acknowledged,
    families::consumer_redelivered,
    families::delivery_sent,
    families::delivery_acknowledged,
    families::delivery_redelivered,
    families::delivery_skipped,
    families::delivery_consumers_lost,
    families::delivery_producers_lost,
    families::delivery_bad_acks,
    families::delivery_bad_messages,
    families::curve_refused,
    families::shm_pool_bytes,
    families::shm_pool_in_use_bytes,
    families::shm_pool_limit_bytes,
    families::shm_pool_waits,
    families::shm_pool_free_bytes,
    families::shm_segments,
    families::shm_copy_ins,
    families::shm_copy_in_bytes,
    families::shm_peers,
    families::shm_peers_refused,
    families::shm_leases_expired,
    families::shm_segments_retired,
    families::shm_retires_failed,
    families::shm_blocks_pinned,
    families::shm_peers_cut_off,
    families::shm_laggard_drops,
    families::shm_senders,
    families::shm_mappings,
    families::shm_mapped_bytes,
    families::shm_messages_skipped,
    families::shm_claim_timeouts,
    families::shm_links_broken,
    families::shm_refused,
    families::shm_senders_evicted,
};

}  // namespace

void duration_histogram::observe(std::chrono::nanoseconds d) noexcept {
    // A clock that stepped back (real time across hosts) counts as no time.
    const std::uint64_t ns = d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0;
    const std::size_t i = static_cast<std::size_t>(std::lower_bound(bounds_ns.begin(), bounds_ns.end(), ns) -
                                                   bounds_ns.begin());
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

std::vector<std::uint64_t> duration_histogram::buckets() const {
    std::vector<std::uint64_t> out(counts_.size());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) out[i] = total += counts_[i].load(std::memory_order_relaxed);
    return out;
}

double duration_histogram::sum() const noexcept {
    return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

std::span<const family_spec> all_families() noexcept { return every_family; }

void metric_writer::write(const family_spec& f, double value, const metric_labels& extra) {
    metric_labels labels = labels_;
    labels.insert(labels.end(), extra.begin(), extra.end());
    out_.add(f.name, f.type, f.help, std::move(labels), value);
}

void metric_writer::write(const family_spec& f, const duration_histogram& h) {
    out_.add_histogram(f.name, f.help, seconds_bounds, labels_, h.buckets(), h.sum());
}

void metric_writer::declare(const family_spec& f) {
    if (f.type == metric_type::histogram)
        out_.family(f.name, f.type, f.help, seconds_bounds);
    else
        out_.family(f.name, f.type, f.help);
}

}  // namespace tenbin::detail
