// What a scrape of a connection reads.
#include "connect/connection_impl.hpp"

namespace tenbin {

namespace {
// The fields of detail::shm_receiver_counters a scrape shows, in the order they are published.
template <class Counters>
auto shm_received_fields(Counters& c) {
    return std::array{&c.senders,        &c.mappings,     &c.mapped_bytes, &c.messages_skipped,
                      &c.claim_timeouts, &c.links_broken, &c.refused,      &c.senders_evicted};
}
}  // namespace

void connection::impl::publish_shm_received() {
    const std::optional<detail::shm_receiver_counters> c = link->receiver_counters();
    if (!c) return;
    const auto fields = shm_received_fields(*c);
    for (std::size_t i = 0; i < fields.size(); ++i) shm_received[i].store(*fields[i], std::memory_order_relaxed);
    shm_receives.store(true, std::memory_order_relaxed);
}

void connection::impl::collect(detail::metric_writer& w) const {
    namespace f = detail::families;
    auto write = [&w](const detail::family_spec& family, auto value, const metric_labels& extra = {}) {
        w.write(family, static_cast<double>(value), extra);
    };
    if (opt.curve) write(f::curve_refused, curve.refused_handshakes());
    if (tensor_pool* p = link->pool()) {
        const pool_stats ps = p->stats();
        write(f::shm_pool_bytes, ps.bytes);
        write(f::shm_pool_in_use_bytes, ps.in_use_bytes);
        write(f::shm_pool_limit_bytes, opt.shm_pool_bytes);
        write(f::shm_pool_free_bytes, opt.shm_pool_bytes > ps.in_use_bytes ? opt.shm_pool_bytes - ps.in_use_bytes : 0);
        write(f::shm_segments, ps.buffers);
        write(f::shm_pool_waits, ps.waits);
    }
    if (const std::optional<detail::shm_sender_counters> c = link->sender_counters()) {
        write(f::shm_copy_ins, c->copy_ins);
        write(f::shm_copy_in_bytes, c->copy_in_bytes);
        write(f::shm_peers, c->peers);
        write(f::shm_peers_refused, c->peers_refused);
        write(f::shm_leases_expired, c->leases_expired);
        write(f::shm_segments_retired, c->segments_retired);
        write(f::shm_retires_failed, c->retires_failed);
        write(f::shm_blocks_pinned, c->blocks_pinned);
        write(f::shm_peers_cut_off, c->peers_cut_off);
        write(f::shm_laggard_drops, c->laggard_drops);
    }
    if (shm_receives.load(std::memory_order_relaxed)) {
        detail::shm_receiver_counters c;
        const auto fields = shm_received_fields(c);
        for (std::size_t i = 0; i < fields.size(); ++i) *fields[i] = shm_received[i].load(std::memory_order_relaxed);
        write(f::shm_senders, c.senders);
        write(f::shm_mappings, c.mappings);
        write(f::shm_mapped_bytes, c.mapped_bytes);
        write(f::shm_messages_skipped, c.messages_skipped);
        write(f::shm_claim_timeouts, c.claim_timeouts);
        write(f::shm_links_broken, c.links_broken);
        write(f::shm_refused, c.refused);
        write(f::shm_senders_evicted, c.senders_evicted);
    }
    if (delivery) {
        const delivery_counters d = delivery->counters();
        write(f::delivery_sent, d.sent);
        write(f::delivery_acknowledged, d.acknowledged);
        write(f::delivery_redelivered, d.redelivered);
        write(f::delivery_skipped, d.skipped);
        write(f::delivery_consumers_lost, d.consumers_lost);
        write(f::delivery_producers_lost, d.producers_lost);
        write(f::delivery_bad_acks, d.bad_acks);
        write(f::delivery_bad_messages, d.bad_messages);
        if (detail::can_send(kind)) {
            const std::vector<consumer_info> consumers = delivery->consumers();
            write(f::delivery_consumers, consumers.size());
            w.declare(f::consumer_credits);
            w.declare(f::consumer_in_flight);
            w.declare(f::consumer_acknowledged);
            w.declare(f::consumer_redelivered);
            // By name: one that restarts under its name, before the old
            // one is found dead, is one series.
            std::map<std::string, consumer_info> by_name;
            for (const consumer_info& c : consumers) {
                consumer_info& n = by_name[c.name];
                n.credits += c.credits;
                n.in_flight += c.in_flight;
                n.acknowledged += c.acknowledged;
                n.redelivered += c.redelivered;
            }
            for (const auto& [name, c] : by_name) {
                const metric_labels who{{"consumer", name}};
                write(f::consumer_credits, c.credits, who);
                write(f::consumer_in_flight, c.in_flight, who);
                write(f::consumer_acknowledged, c.acknowledged, who);
                write(f::consumer_redelivered, c.redelivered, who);
            }
        }
    }
}

std::shared_ptr<const metrics_source> connection::metrics() const {
    if (!s_) throw error(errc::bad_argument, "cannot read metrics: the connection was moved from");
    s_->meter->time();
    return s_->meter;
}

}  // namespace tenbin
