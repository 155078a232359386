#include "connect/delivery_engine.hpp"

#include "base/os_error.hpp"
#include "transport/frames.hpp"

#include <algorithm>
#include <cerrno>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace tenbin::detail {

// ---- position_set ----------------------------------------------------------

bool position_set::contains(batch_id id) const {
    if (id.epoch < before_) return true;
    const auto it = epochs_.find(id.epoch);
    return it != epochs_.end() && (id.seq < it->second.first || it->second.second.count(id.seq) != 0);
}

void position_set::add(batch_id id) {
    if (id.epoch < before_) return;
    auto& [next, above] = epochs_[id.epoch];
    if (id.seq < next) return;
    if (id.seq == next && above.empty()) {
        ++next;  // in order, the usual case: no node to make
        return;
    }
    above.insert(id.seq);
    while (!above.empty() && *above.begin() == next) {
        above.erase(above.begin());
        ++next;
    }
}

void position_set::add_epochs_before(std::uint64_t epoch) {
    before_ = std::max(before_, epoch);
    epochs_.erase(epochs_.begin(), epochs_.lower_bound(before_));
}

void position_set::add(const producer_state& p) {
    add_epochs_before(p.epoch);
    if (p.next > 0) {
        auto& [next, above] = epochs_[p.epoch];
        if (p.next > next) {
            next = p.next;
            above.erase(above.begin(), above.lower_bound(next));
            while (!above.empty() && *above.begin() == next) {
                above.erase(above.begin());
                ++next;
            }
        }
    }
    for (std::uint64_t s : p.taken) add(batch_id{p.epoch, s});
}

// The epochs before and the first epoch begun; batches of later epochs go
// unreported (a hello's bound): a producer restarted and replaying may
// send those again, to the consumer that has them (it drops them) or to
// another.
producer_state position_set::report() const {
    producer_state p;
    p.epoch = before_;
    if (!epochs_.empty() && epochs_.begin()->first == before_) {
        const auto& [next, above] = epochs_.begin()->second;
        p.next = next;
        p.taken.assign(above.begin(), above.end());
        if (p.taken.size() > max_reported_taken) p.taken.resize(max_reported_taken);
    }
    return p;
}

// ---- the thread ------------------------------------------------------------

delivery_engine::delivery_engine(zmq::context_t& context, zmq::socket_ref socket, link& l, delivery_options opt)
    : socket_(socket), link_(l), opt_(std::move(opt)) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw os_error("eventfd for acked delivery");
    socket_fd_ = static_cast<int>(socket_.get(zmq::sockopt::fd));
    // Dropped connections, so that a dead peer is known at once, not after
    // its heartbeats.
    monitor_address_ = "inproc://tenbin-delivery-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    if (zmq_socket_monitor(socket_.handle(), monitor_address_.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
        throw error(errc::io_error, std::string("cannot watch the socket's connections: ") + zmq_strerror(zmq_errno()));
    monitor_ = zmq::socket_t(context, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(monitor_address_);
}

delivery_engine::~delivery_engine() {
    stop(std::chrono::milliseconds(0));
    // The socket's monitor is stopped by its connection, before it closes.
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void delivery_engine::begin() { thread_ = std::thread([this] { run(); }); }

void delivery_engine::wake() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = ::write(wake_fd_, &one, sizeof one);
}

void delivery_engine::stop(std::chrono::milliseconds linger) {
    {
        std::lock_guard lock(mutex_);
        if (!stopping_) {
            stopping_ = true;
            stop_by_ = clock::now() + linger;
        }
    }
    wake();
    changed_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

control delivery_engine::hello(bool answer) const {
    control c;
    c.type = control_type::hello;
    c.role = opt_.role;
    c.answer = answer;
    c.window = static_cast<std::uint32_t>(std::min<std::size_t>(opt_.credit, UINT32_MAX));
    c.packs = opt_.role == peer_role::consumer;
    // Only on_release waits for them (flush_acks).
    c.unconfirmed = opt_.role == peer_role::consumer && opt_.ack != ack_mode::on_release;
    c.reports_taken = opt_.role == peer_role::consumer;
    c.incarnation = opt_.incarnation;
    c.name = opt_.name;
    return c;
}

delivery_engine::sent delivery_engine::send_control(const std::string& rid, const control& c) {
    return send_frame(rid, [&] {
        const std::vector<std::byte> bytes =
            encode_control(c, static_cast<std::uint32_t>(std::min<std::int64_t>(opt_.heartbeat.count(), UINT32_MAX)));
        return zmq::message_t(bytes.data(), bytes.size());
    });
}

delivery_engine::sent delivery_engine::send_frame(const std::string& rid, const std::function<zmq::message_t()>& body) {
    int rc;
    do rc = zmq_send(socket_.handle(), rid.data(), rid.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    while (rc < 0 && zmq_errno() == EINTR);
    // EHOSTUNREACH: no such peer (ROUTER_MANDATORY); EAGAIN: its queue is full.
    if (rc < 0) return zmq_errno() == EHOSTUNREACH ? sent::gone : sent::full;
    zmq::message_t frame = body();
    do rc = zmq_msg_send(frame.handle(), socket_.handle(), ZMQ_DONTWAIT);
    while (rc < 0 && zmq_errno() == EINTR);
    return rc >= 0 ? sent::yes : sent::full;
}

void delivery_engine::receive_all(clock::time_point now) {
    recv_options ro;
    ro.flags = zmq::recv_flags::dontwait;
    ro.envelope = envelope_spec::router();
    ro.decode = opt_.decode;
    ro.max_frames = 2 * std::min<std::size_t>(opt_.decode.limits.max_tensors, SIZE_MAX / 4) + 4;
    for (;;) {
        message m;
        std::vector<zmq::message_t> body;
        try {
            if (!zrecv_frames(socket_, ro, m, body)) return;
        } catch (const error&) {
            ++counters_.bad_messages;  // drained: the next message is whole
            continue;
        }
        const std::string rid(m.envelope.front().data<char>(), m.envelope.front().size());
        if (body.size() == 1 && is_control_frame({body[0].data<std::byte>(), body[0].size()})) {
            control c;
            try {
                c = decode_control({body[0].data<std::byte>(), body[0].size()});
            } catch (const error&) {
                ++counters_.bad_messages;
                continue;
            }
            on_control(rid, std::move(c), now);
        } else {
            on_data(rid, std::move(m), body, now);
        }
    }
}

bool delivery_engine::readable() { return (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }

void delivery_engine::receive_waiting(clock::time_point now) {
    if (readable()) receive_all(now);
}

std::chrono::milliseconds delivery_engine::turn_every() const {
    return std::chrono::milliseconds(std::clamp<long>(static_cast<long>(opt_.heartbeat.count() / 4), 1, 100));
}

bool delivery_engine::beat_due(clock::time_point sent, clock::time_point now) const {
    return now - sent >= opt_.heartbeat - turn_every();
}

bool delivery_engine::dead(const peer_base& p, clock::time_point now, int beats) const {
    return now - p.heard > beats * std::max(opt_.heartbeat, p.beat) - turn_every();
}

void delivery_engine::run() {
    // ppoll, not zmq_poll: a turn may be due in microseconds (due()). The
    // monitor's ZMQ_FD signals only a change, so it is drained every turn.
    const int monitor_fd = static_cast<int>(monitor_.get(zmq::sockopt::fd));
    bool hurry = false, waiting = false, watch = true;
    clock::time_point soon = clock::time_point::max();
    for (;;) {
        clock::duration wait = waiting ? clock::duration::zero()
                               : hurry ? clock::duration(std::chrono::milliseconds(1))
                                       : clock::duration(turn_every());
        if (soon != clock::time_point::max()) wait = std::clamp<clock::duration>(soon - clock::now(), {}, wait);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        pollfd fds[3] = {{socket_fd_, static_cast<short>(watch ? POLLIN : 0), 0}, {wake_fd_, POLLIN, 0},
                         {monitor_fd, POLLIN, 0}};
        const int rc = ::ppoll(fds, 3, &ts, nullptr);
        if (rc < 0 && errno != EINTR) break;  // cannot wait: the engine ends, as when its context goes
        if (rc > 0 && (fds[1].revents & POLLIN)) {
            std::uint64_t v;
            [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof v);
        }
        const auto now = clock::now();
        std::unique_lock lock(mutex_);
        try {
            zmq::message_t event;
            while (monitor_.recv(event, zmq::recv_flags::dontwait))  // both frames of each event
                probe_until_ = now + std::min<std::chrono::milliseconds>(opt_.heartbeat, std::chrono::milliseconds(500));
            receive_all(now);
            turn(now, now < probe_until_);
            hurry = hurried();
            waiting = readable();  // came while the turn sent
            watch = watches_socket();
            soon = due();
            napping_ = !hurry && !waiting && soon == clock::time_point::max();
        } catch (const zmq::error_t&) {
            break;  // the context went
        }
        notify();
        if (stopping_ && (drained() || now >= stop_by_)) break;
    }
    std::lock_guard lock(mutex_);
    try {
        leave();
    } catch (const zmq::error_t&) {
    }
    ended_ = true;
    notify();
}

std::unique_ptr<delivery> delivery::start(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                          delivery_options opt) {
    return opt.role == peer_role::producer ? make_delivery_producer(context, socket, l, std::move(opt))
                                           : make_delivery_consumer(context, socket, l, std::move(opt));
}

}  // namespace tenbin::detail
