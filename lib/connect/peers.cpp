#include "connect/peers.hpp"

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>

namespace tenbin::detail {

namespace {
// How often the thread looks up from a quiet monitor to see whether it was
// asked to stop: the bound on how long stopping takes.
constexpr int poll_ms = 50;
}  // namespace

struct peer_monitor {
    std::shared_ptr<connection_meter> meter;
    zmq::socket_t socket;
    std::atomic<bool> stop{false};
    std::thread thread;

    ~peer_monitor() {
        stop = true;
        if (thread.joinable()) thread.join();
        socket.close();
    }

    void run() {
        // A connection is its file descriptor, from the event that opened
        // it to the one that closed it (a failed handshake closes one too).
        std::set<std::uint32_t> open;
        while (!stop.load()) {
            zmq_pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
            const int rc = zmq_poll(&item, 1, poll_ms);
            if (rc < 0 && zmq_errno() == ETERM) return;
            if (rc <= 0) continue;
            try {
                zmq::message_t head, where;
                if (!socket.recv(head, zmq::recv_flags::dontwait)) continue;
                if (head.more()) (void)socket.recv(where);
                if (head.size() < 6) continue;
                std::uint16_t event = 0;
                std::uint32_t fd = 0;
                std::memcpy(&event, head.data(), 2);
                std::memcpy(&fd, static_cast<const char*>(head.data()) + 2, 4);
                if (event == ZMQ_EVENT_MONITOR_STOPPED) return;  // the socket closed
                if (event == ZMQ_EVENT_ACCEPTED || event == ZMQ_EVENT_CONNECTED) {
                    if (open.insert(fd).second) meter->peer(+1);
                } else if (open.erase(fd)) {
                    meter->peer(-1);
                }
            } catch (const zmq::error_t& e) {
                if (e.num() == ETERM) return;
            }
        }
    }
};

peer_watch::peer_watch() noexcept = default;
peer_watch::peer_watch(peer_watch&&) noexcept = default;
peer_watch& peer_watch::operator=(peer_watch&&) noexcept = default;
peer_watch::~peer_watch() = default;

peer_watch::peer_watch(zmq::context_t& context, zmq::socket_ref socket, std::shared_ptr<connection_meter> meter)
    : monitor_(std::make_unique<peer_monitor>()) {
    static std::atomic<std::uint64_t> next{0};
    const std::string address = "inproc://tenbin-peer-monitor-" + std::to_string(next.fetch_add(1));
    constexpr int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
                           ZMQ_EVENT_MONITOR_STOPPED;
    if (zmq_socket_monitor(socket.handle(), address.c_str(), events) != 0) throw zmq::error_t();
    monitor_->meter = std::move(meter);
    monitor_->meter->count_peers();
    monitor_->socket = zmq::socket_t(context, zmq::socket_type::pair);
    monitor_->socket.set(zmq::sockopt::linger, 0);
    monitor_->socket.connect(address);
    peer_monitor* m = monitor_.get();
    m->thread = std::thread([m] { m->run(); });
}

}  // namespace tenbin::detail
