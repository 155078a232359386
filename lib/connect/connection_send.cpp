// A connection sending: its audience, numbering, marks and replies.
#include "connect/connection_impl.hpp"

namespace tenbin {

void connection::impl::absorb_subscriptions() {
    zmq::message_t m;
    while (detail::socket_call("read subscriptions", [&] { return bool(socket.recv(m, zmq::recv_flags::dontwait)); })) {
        if (m.size() == 0) continue;
        const bool subscribes = m.data<char>()[0] == 1;
        const std::string_view topic(m.data<char>() + 1, m.size() - 1);
        if (topic.starts_with(detail::name_topic)) {
            const std::string who(topic.substr(detail::name_topic.size()));
            if (subscribes) {
                subscriber_names.insert(who);
            } else if (auto it = subscriber_names.find(who); it != subscriber_names.end()) {
                subscriber_names.erase(it);
            }
            continue;
        }
        if (subscribes) {
            ++subscribers;
            joined = true;
        } else if (subscribers > 0) {
            --subscribers;
        }
    }
}

// Before the first send, the audience asked for; false at the send timeout.
bool connection::impl::wait_for_audience() {
    const auto deadline = opt.send_timeout ? detail::deadline_after(*opt.send_timeout)
                                           : std::chrono::steady_clock::time_point::max();
    const auto complete = [&] {
        return subscribers >= opt.wait_for &&
               std::all_of(opt.wait_for_names.begin(), opt.wait_for_names.end(),
                           [&](const std::string& n) { return subscriber_names.count(n) != 0; });
    };
    for (absorb_subscriptions(); !complete(); absorb_subscriptions())
        if (!detail::socket_call("wait for subscribers", [&] { return detail::readable_before(socket, deadline); })) return false;
    return true;
}

bool connection::impl::send(tensor_span tensors, std::span<const zmq::const_buffer> envelope) {
    if (xpub) {
        if (stats.messages() == 0 && !wait_for_audience()) return false;
        absorb_subscriptions();
        if (joined && !retained.empty()) {
            // A subscriber joined: the epoch's start again (those that had
            // it drop it by its position).
            send_options again;
            const zmq::const_buffer t(opt.topic.data(), opt.topic.size());
            if (detail::has_topic(opt, kind)) again.envelope = {&t, 1};
            for (auto& kept : retained) {
                again.position = &kept.second;
                if (!detail::socket_call("send", [&] { return link->send(socket, kept.first, again, opt.send_timeout); }))
                    return false;
            }
        }
        joined = false;
    }
    if (!opt.allow64) check_no64(tensors);
    if (opt.tensorcom_compatible) check_tensorcom(tensors);
    std::vector<tensor> renamed;
    if (!opt.infos.empty()) {
        renamed = with_infos(tensors, opt.infos);
        tensors = renamed;
    }
    send_options so;
    so.envelope = envelope;
    const zmq::const_buffer topic(opt.topic.data(), opt.topic.size());
    if (kind == socket_kind::pub && detail::has_topic(opt, kind)) so.envelope = {&topic, 1};
    if (numbering) {
        numbering->sent_ns = detail::realtime_ns();
        so.position = &*numbering;
    }
    detail::send_timer timer(*meter);
    const bool sent = delivery ? delivery->send(tensors, *numbering, opt.send_timeout)
                               : detail::socket_call("send", [&] { return link->send(socket, tensors, so, opt.send_timeout); });
    if (sent) {
        const std::uint64_t bytes = detail::data_bytes(tensors);
        stats.add(bytes);
        if (xpub && opt.replay_window > 0 && numbering && retained.size() < opt.replay_window) {
            retained.emplace_back(keep(tensors), *numbering);
        }
        meter->sent(bytes);
        if (numbering) ++numbering->seq;
    }
    return sent;
}

bool connection::impl::send_mark(stream_position::mark m) {
    check_open(m == stream_position::mark::epoch_end ? "end an epoch" : "end a stream");
    if (!numbering)
        throw error(errc::bad_argument, "only a connection that numbers its messages (connection_options::producer "
                                        "or stream) ends epochs and streams");
    if (opt.tensorcom_compatible)
        throw error(errc::bad_argument, "an end mark is a message without tensors, which a Python tensorcom "
                                        "receiver cannot take (tensorcom_compatible)");
    const endpoint& ep = endpoints.front();
    if (!detail::can_send(ep.kind)) detail::cannot(ep, "send");
    stream_position end = *numbering;
    end.kind = m;
    end.sent_ns = detail::realtime_ns();
    send_options so;
    const zmq::const_buffer topic(opt.topic.data(), opt.topic.size());
    if (kind == socket_kind::pub && detail::has_topic(opt, kind)) so.envelope = {&topic, 1};
    so.position = &end;
    if (delivery)
        delivery->mark(end);
    else if (!detail::socket_call("send", [&] { return link->send(socket, {}, so, opt.send_timeout); }))
        return false;
    retained.clear();  // a new epoch: its own start is kept
    numbering->previous = numbering->seq;
    ++numbering->epoch;
    numbering->seq = 0;
    return true;
}

bool connection::end_epoch() { return s_->send_mark(stream_position::mark::epoch_end); }
bool connection::end_stream() { return s_->send_mark(stream_position::mark::stream_end); }

std::optional<stream_position> connection::position() const {
    if (!s_ || !s_->numbering) return std::nullopt;
    return s_->numbering;
}

void connection::seek(std::uint64_t epoch, std::uint64_t seq) {
    if (!s_ || !s_->numbering)
        throw error(errc::bad_argument, "only a connection that numbers its messages (connection_options::producer "
                                        "or stream) can seek");
    s_->numbering->epoch = epoch;
    s_->numbering->seq = seq;
}

std::size_t connection::subscribers(bool refresh) {
    if (refresh && s_ && s_->xpub) s_->absorb_subscriptions();
    return s_ ? s_->subscribers : 0;
}

std::vector<std::string> connection::subscriber_names(bool refresh) {
    if (refresh && s_ && s_->xpub) s_->absorb_subscriptions();
    return s_ ? std::vector<std::string>(s_->subscriber_names.begin(), s_->subscriber_names.end())
              : std::vector<std::string>{};
}

std::vector<consumer_info> connection::consumers() const {
    return s_ && s_->delivery ? s_->delivery->consumers() : std::vector<consumer_info>{};
}

delivery_counters connection::delivery_stats() const {
    return s_ && s_->delivery ? s_->delivery->counters() : delivery_counters{};
}

bool connection::send(tensor_span tensors) {
    if (!s_) throw error(errc::bad_argument, "cannot send: the connection is closed (or moved from)");
    s_->check_open("send");
    const endpoint& ep = s_->endpoints.front();
    if (!detail::can_send(ep.kind)) detail::cannot(ep, "send");
    if (ep.kind == socket_kind::router)
        detail::cannot(ep, "send without an envelope: answer a received message with reply()");
    return s_->send(tensors, {});
}

bool connection::reply(const message& to, tensor_span tensors) {
    if (!s_) throw error(errc::bad_argument, "cannot reply: the connection is closed (or moved from)");
    s_->check_open("reply");
    const endpoint& ep = s_->endpoints.front();
    if (!detail::can_send(ep.kind)) detail::cannot(ep, "send");
    // A REP socket keeps its requester's envelope itself.
    if (ep.kind != socket_kind::router) return s_->send(tensors, {});
    const std::vector<zmq::const_buffer> envelope = to.envelope_buffers();
    return s_->send(tensors, envelope);
}

}  // namespace tenbin
