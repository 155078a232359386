// How a connection's messages travel, behind one interface: the tenbin
// frames over ZeroMQ (plain), or headers over ZeroMQ with the tensors'
// bytes in shared memory (+shm). The connection does the rest (envelopes,
// topics, positions, statistics) the same way for both.
#pragma once

#include "shm/shm.hpp"

#include <tenbin/pool.hpp>
#include <tenbin/zmq.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace tenbin::detail {

class link {
public:
    virtual ~link() = default;

    // Sends one message as `so` says (envelope, position). False when the
    // send timed out: nothing was sent.
    virtual bool send(zmq::socket_ref socket, tensor_span tensors, const send_options& so,
                      std::optional<std::chrono::milliseconds> timeout) = 0;
    // Receives one message into `into`, as zrecv does. False when nothing
    // came; a message that turned out to have nothing for this receiver (a
    // +shm message its sender already gave up) is passed over.
    virtual bool receive(zmq::socket_ref socket, const recv_options& ro, message& into) = 0;
    // The tensors of a message's body frames (envelope and position frame
    // already taken off, as zrecv_frames leaves them); nothing when there
    // is nothing for this receiver (as receive()).
    virtual std::optional<std::vector<tensor>> decode(std::vector<zmq::message_t>& body, const decode_options& opt) = 0;
    // Waits at most `linger` for receivers to take what was sent.
    virtual void close(std::chrono::milliseconds /*linger*/) {}
    // Any thread: a receive waiting for a +shm sender gives up (errc::closed).
    virtual void interrupt() noexcept {}
    // Tensors this link sends without a copy; null when it has none.
    virtual tensor_pool* pool() { return nullptr; }
    // +shm, for the metrics: what the sender has done (thread-safe), and
    // what the receiver has (on the receiving thread only); nothing on
    // other links.
    virtual std::optional<shm_sender_counters> sender_counters() { return std::nullopt; }
    virtual std::optional<shm_receiver_counters> receiver_counters() { return std::nullopt; }
};

// The tenbin wire as it is: multipart, or single-part when `multipart` is false.
std::unique_ptr<link> plain_link(bool multipart);

// +shm: a sender when `sends`, a receiver when `receives` (PAIR is both).
std::unique_ptr<link> shm_link(bool sends, bool receives, const shm_options& opt);

}  // namespace tenbin::detail
