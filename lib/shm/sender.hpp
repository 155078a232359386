// The +shm sender: its pool, the system calls and the side-channel thread
// that hands segments to receivers and takes messages back. What is in
// flight and who holds what is the ledger's (ledger.hpp).
#pragma once

#include "shm/internal.hpp"
#include "shm/ledger.hpp"
#include "shm/memory.hpp"
#include "shm/ring.hpp"

#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace tenbin::detail {

class shm_sender {
public:
    explicit shm_sender(const shm_options& o);
    ~shm_sender() { stop(); }
    shm_sender(const shm_sender&) = delete;
    shm_sender& operator=(const shm_sender&) = delete;

    // Stops the thread and the side channel; a fresh pool replaces the one
    // receivers may still read.
    void stop();
    tensor_pool& pool() { return pool_; }
    std::size_t in_flight();
    shm_sender_counters counters();
    // Waits until every message was claimed (or given up), at most `linger`.
    void drain(std::chrono::milliseconds linger);
    bool send(zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              const stream_position* position, std::optional<std::chrono::milliseconds> timeout);

private:
    // A receiver on the side channel, as the sockets see it (the ledger
    // keeps what it claimed and holds).
    struct peer {
        std::unique_ptr<shm_impl::shm_ring> ring;  // its quiet claims and releases
        unique_fd ring_fd;                         // the ring's memfd, until handed over
        bool ring_tried = false;                   // made (or failed to be) with the first answer
        bool cut = false;                          // cut off: dropped at its hang-up
    };

    void forget(std::uint64_t seq);
    // Given up while held (under the lock): the holders keep the old pages,
    // the pool gets fresh ones; what cannot move yet stays out of the pool.
    void retire(shm_impl::ledger::outcome& out);
    // What receivers appended to their rings, and the messages that leaves
    // done with (their blocks back to the pool): the sender's thread, on
    // each send, so that a copy-in takes the block given back last. Waits
    // while too many messages are sent and not claimed (ledger.hpp), at
    // most `timeout`: false then.
    bool settle(std::optional<std::chrono::milliseconds> timeout);
    // Every peer's ring entries (under the lock).
    void take_rings();
    // Peer `fd`'s ring entries (under the lock). A corrupt ring, or claims
    // past what it may hold, cut it off.
    void take_ring(int fd, peer& p);
    // Cuts peer `fd` off (under the lock): the ledger retires what it held,
    // it is told why, and the thread drops it at its hang-up.
    void cut_locked(int fd, peer& p, shm_impl::cut_reason why);
    void wake();

    // The side-channel thread (side_server.cpp).
    void run();
    // Drops finished and expired messages; returns when the next lease ends.
    shm_impl::time_point collect();
    void on_claim(int fd, peer& p, std::uint64_t seq, bool quiet);
    void on_release(int fd, std::uint64_t seq);
    // Peer `fd` has no room for a reply: it does not read them. Cut off.
    void not_reading(int fd, peer& p);
    // Peer `fd` hung up: what it held is released.
    void drop_peer(int fd);
    // Segments the pool closed, to tell the peers that had them.
    void note_closed();
    std::vector<int> peer_fds();
    // The requests waiting on peer `fd`'s socket (at most `most`; all by default).
    void serve(int fd, std::size_t most = std::numeric_limits<std::size_t>::max());
    void accept_peers();
    // Tells peer `fd` why, then closes it (never added to the peers).
    void refuse(int fd, shm_impl::cut_reason why);
    // Tells peer `fd` why it is cut off, if its socket has room.
    void tell_cut(int fd, shm_impl::cut_reason why);

    std::shared_ptr<shm_impl::shm_memory> memory_;
    tensor_pool pool_;
    std::string name_;
    unique_fd listen_;
    unique_fd wake_;
    std::mutex mutex_;
    std::condition_variable done_;
    shm_impl::ledger ledger_;
    // Kept for the moment the process runs out: closed to accept and
    // refuse a peer clearly, then taken again.
    unique_fd reserve_;
    // While out of descriptors and without the reserve: accept nothing
    // before this (the listener stays readable; polling it would spin).
    shm_impl::time_point accept_after_;
    std::size_t max_peers_;
    std::uint64_t peers_refused_ = 0;
    std::uint64_t copy_ins_ = 0, copy_in_bytes_ = 0;
    // Peers' sockets and rings: added, removed and changed by the thread
    // only (under the lock where others read them).
    std::map<int, peer> peers_;
    bool stopping_ = false;
    bool draining_ = false;  // close() lingers: receivers kick after each ring entry
    bool napping_ = false;   // the thread sleeps until a send, not reading the rings
    shm_impl::time_point last_send_;
    std::thread thread_;
};

}  // namespace tenbin::detail
