// Acknowledged delivery (connection_options::acked): a thread of the
// connection shares its ROUTER socket with the user's thread, so that
// heartbeats, acknowledgements and redeliveries go on while the user's code
// trains or produces. The user's thread sends and receives on the socket
// itself when it can (under the engine's mutex): a hop through the thread
// costs more than a small batch.
//
// Producer: a batch the user sends goes to the consumer with the most
// credit (its window less what it holds unacknowledged), or waits in an
// inbox until one has credit, and is kept until that consumer acknowledges
// it. Small batches to a consumer with batches in hand go several to a
// ZeroMQ message (a pack, delivery_protocol.hpp). A consumer that says goodbye, whose connection drops (a
// monitor event, then a probe the ROUTER refuses), or that is silent for
// three heartbeats is dead: what it held goes first to the others. The end
// of an epoch goes to every consumer once every batch of that epoch was
// acknowledged, so a consumer's epoch ends when the group is done with it.
// Batches a consumer reports it has (in its hello: a producer restarted and
// replaying, say) are skipped.
//
// Consumer: says hello to each producer it connects to until it answers
// (and again when it falls silent: a restarted producer is found again),
// answers the hello of producers that connect to it, and acknowledges each
// batch as ack_mode says, through a token whose release queues the ack: the
// user's thread sends those a few at a time and before it waits, the
// thread within a millisecond or a turn (woken when it dozes).
#pragma once

#include "connect/delivery_protocol.hpp"
#include "connect/link.hpp"
#include "connect/stream_tracker.hpp"

#include <tenbin/connection.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenbin::detail {

struct delivery_options {
    peer_role role = peer_role::consumer;
    std::string name;                // this end's
    std::uint64_t incarnation = 0;   // this end's, made up at its start
    std::size_t credit = 16;         // a consumer's window
    ack_mode ack = ack_mode::on_release;
    std::chrono::milliseconds heartbeat{1000};
    decode_options decode{};
    // Routing ids this end gave the peers it connects to (the others say
    // hello first).
    std::vector<std::string> connected;
    // A consumer: what it has already (connection_options::resume_from).
    std::optional<stream_state> resume_from;
    // A producer: the consumers (how many, and named ones) that said hello
    // before it hands out its first batch (connection_options::wait_for).
    std::size_t wait_for = 0;
    std::vector<std::string> wait_for_names;
};

class delivery {
public:
    virtual ~delivery() = default;
    // The thread begins; the socket is its own from now on.
    static std::unique_ptr<delivery> start(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                           delivery_options opt);

    // Producer: hands `tensors` (at `pos`) over; false when no consumer
    // took it within `timeout` (unset: wait).
    virtual bool send(tensor_span tensors, const stream_position& pos,
                      std::optional<std::chrono::milliseconds> timeout) = 0;
    // Producer: an end mark, given to every consumer once its epoch's
    // batches were all acknowledged.
    virtual void mark(const stream_position& end) = 0;
    // Consumer: the next batch or end mark, its ack token inside it;
    // nothing after `timeout` (zero: only what is there).
    virtual std::optional<tracked> receive(std::optional<std::chrono::milliseconds> timeout) = 0;
    // Consumer: positions it has from before (a restart), told to producers.
    virtual void seed(const stream_state& taken) = 0;
    // Consumer: returns once the acknowledgements made so far were handed
    // to ZeroMQ (a consumer killed while it works on the next batch has
    // told of the ones before).
    virtual void flush_acks() {}

    // Producer: waits at most `linger` for acknowledgements; then both
    // ends say goodbye and the thread ends.
    virtual void stop(std::chrono::milliseconds linger) = 0;

    virtual std::vector<consumer_info> consumers() const = 0;
    virtual delivery_counters counters() const = 0;
};

}  // namespace tenbin::detail
