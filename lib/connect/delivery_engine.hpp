// What the producer's and the consumer's delivery threads share: the
// thread, its wake-ups, the ROUTER socket's peers, heartbeats and the
// socket monitor that tells of a dropped connection.
#pragma once

#include "connect/delivery.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace tenbin::detail {

// Batch ids of one producer that are done, compactly: per epoch every seq
// below `next`, and those in `above`; every epoch below `before`.
class position_set {
public:
    bool contains(batch_id id) const;
    void add(batch_id id);
    // Every batch of epochs before `epoch`.
    void add_epochs_before(std::uint64_t epoch);
    // What a consumer reports (its producer_state of this producer).
    void add(const producer_state& p);
    // The report of it: the epochs before as `epoch`, the latest epoch's batches as next/taken.
    producer_state report() const;

private:
    std::uint64_t before_ = 0;
    std::map<std::uint64_t, std::pair<std::uint64_t, std::set<std::uint64_t>>> epochs_;
};

class delivery_engine : public delivery {
public:
    delivery_engine(zmq::context_t& context, zmq::socket_ref socket, link& l, delivery_options opt);
    ~delivery_engine() override;

    void stop(std::chrono::milliseconds linger) override;

protected:
    using clock = std::chrono::steady_clock;

    // Derived classes call stop() in their destructors: the thread calls
    // their overrides until it ends.

    // A peer as the ROUTER knows it (its routing id is the key).
    struct peer_base {
        std::string name;
        std::uint64_t incarnation = 0;
        clock::time_point heard{}, sent{};
        std::chrono::milliseconds beat{0};  // its heartbeat interval, as its hello says (0: not said)
        std::chrono::system_clock::time_point since{};
        bool answered = false;  // it said hello
    };

    void begin();  // starts the thread (the derived object made)
    void wake() noexcept;
    int wake_fd() const noexcept { return wake_fd_; }
    int socket_fd() const noexcept { return socket_fd_; }
    // What became of a control message: sent, or not, because the peer's
    // queue is full (it lives) or the ROUTER has no such peer (gone).
    enum class sent { yes, full, gone };
    // Sends control `c` to `rid`. The caller holds the mutex.
    sent send_control(const std::string& rid, const control& c);
    // Sends `rid`, then the frame `body()` makes (a control message or a
    // pack): made only once the routing id was taken, so that a full
    // queue leaves what it would be made of as it was.
    sent send_frame(const std::string& rid, const std::function<zmq::message_t()>& body);
    // The user's thread, after it used the socket (under the mutex): what
    // came meanwhile is handled now. Its sends may have taken the
    // wake-up the thread waits for (ZMQ_FD signals only a change).
    void receive_waiting(clock::time_point now);
    control hello(bool answer) const;
    // Liveness, the same at both ends. A turn comes at least every
    // turn_every(), and each end's heartbeat is due a turn before the
    // interval is up, so that its peer hears from it at least once per
    // interval. A peer is dead once silent for `beats` intervals less a
    // turn: one that dies is found within `beats` intervals. The interval
    // is the longer of this end's and the peer's, so that a peer set to
    // beat less often is not taken for dead while it lives.
    std::chrono::milliseconds turn_every() const;
    bool beat_due(clock::time_point sent, clock::time_point now) const;
    bool dead(const peer_base& p, clock::time_point now, int beats) const;
    // How often a hello goes again to a peer that has not answered yet.
    std::chrono::milliseconds hello_retry() const {
        return std::min<std::chrono::milliseconds>(opt_.heartbeat, std::chrono::milliseconds(100));
    }

    // Each turn of the thread, under the mutex: messages that came, then
    // the derived engine's work; `probe` after a connection dropped.
    virtual void on_control(const std::string& rid, control c, clock::time_point now) = 0;
    virtual void on_data(const std::string& rid, message&& m, std::vector<zmq::message_t>& body,
                         clock::time_point now) = 0;
    virtual void turn(clock::time_point now, bool probe) = 0;
    // Before the thread ends: goodbyes (under the mutex).
    virtual void leave() = 0;
    // Whether stopping may end the thread now (a producer waits for acks).
    virtual bool drained() const { return true; }
    // Whether the next turn should come at once, not after the poll's
    // interval (a producer whose send found a consumer's queue full: a
    // ROUTER cannot say when it has room again).
    virtual bool hurried() const { return false; }
    // When the next turn is due at the latest, if sooner than the poll's
    // interval (a producer's batch that waits a moment for its consumer).
    virtual clock::time_point due() const { return clock::time_point::max(); }
    // Whether the thread waits on the socket (not while a consumer's user
    // thread reads it: the thread's turns come on a timer then).
    virtual bool watches_socket() const { return true; }
    // After each turn, and when the thread ends: the user's threads hear
    // of what changed.
    virtual void notify() { changed_.notify_all(); }

    zmq::socket_ref socket_;
    link& link_;
    delivery_options opt_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;  // for the user's thread
    bool stopping_ = false;
    bool ended_ = false;  // the thread is done
    bool napping_ = false;  // its next turn is a poll interval away, not a millisecond (wake() it for one sooner)
    clock::time_point stop_by_{};
    delivery_counters counters_;

private:
    void run();
    void receive_all(clock::time_point now);
    bool readable();  // under the mutex

    int wake_fd_ = -1;
    // The socket's ZMQ_FD: the thread waits on it, not on the socket, which
    // the user's thread uses too (under the mutex).
    int socket_fd_ = -1;
    // A dropped connection is probed for until this time: the peer's pipe
    // may end after the event, and a probe before that still gets through.
    clock::time_point probe_until_{};
    zmq::socket_t monitor_;
    std::string monitor_address_;
    std::thread thread_;
};

std::unique_ptr<delivery> make_delivery_producer(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                                 delivery_options opt);
std::unique_ptr<delivery> make_delivery_consumer(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                                 delivery_options opt);

}  // namespace tenbin::detail
