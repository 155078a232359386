// One sender's side channel as a +shm receiver sees it: the claims, the
// segments it maps from that sender, the ring its releases go through.
// Nothing here waits on the sender past the deadline it is given, and a
// release never waits at all: a sender that does not read, answers
// nonsense or hands over a ring that cannot be written breaks the link
// (why() says what happened), and the receiver says so at the next
// message from it.
#pragma once

#include "base/fd.hpp"
#include "shm/internal.hpp"
#include "shm/ring.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace tenbin::detail::shm_impl {

using receive_clock = std::chrono::steady_clock;

// What a receiver maps (its links' segments, and those tensors keep after
// their link is gone) and has done: shared by the receiver, its links and
// its mappings, read by any thread.
struct receiver_state {
    receiver_state();
    // Readable once the receiver is interrupted (its connection closing on
    // another thread): a wait for a sender gives up with errc::closed.
    unique_fd interrupted;
    std::atomic<std::size_t> mappings{0};
    std::atomic<std::uint64_t> mapped_bytes{0};
    std::atomic<std::uint64_t> quiet_claims{0};
    std::atomic<std::uint64_t> claim_timeouts{0};
    std::atomic<std::uint64_t> links_broken{0};
};

// One segment mapped read-only, counted in its receiver's state while it lives.
class mapping {
public:
    mapping(const std::byte* base, std::size_t size, std::shared_ptr<receiver_state> state);
    ~mapping();
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    const std::byte* base() const noexcept { return base_; }
    std::size_t size() const noexcept { return size_; }

private:
    const std::byte* base_;
    std::size_t size_;
    std::shared_ptr<receiver_state> state_;
};

class side_link {
public:
    // Says whether one more segment of `bytes` may be mapped (making room
    // if it can); nothing, or why not.
    using room_check = std::function<std::optional<std::string>(std::uint64_t bytes)>;

    // Connects to side channel `name`. Throws error(timeout) when the
    // sender accepts nothing by `deadline` (a full backlog), io_error when
    // nothing listens there.
    side_link(const std::string& name, receive_clock::time_point deadline, std::shared_ptr<receiver_state> state);

    const std::string& name() const noexcept { return name_; }
    // Any thread. Broken: nothing goes through it any more.
    bool broken() const noexcept { return broken_.load(); }
    std::string why() const;
    // Whether the sender closed its end (receiving thread).
    bool hung_up();

    // CLAIMs message `seq`, described by `descs`, answered by `deadline`:
    // true (OK: its segments are in segment()) or false (GONE: the sender
    // gave it up). Quiet (no answer awaited) when every segment is mapped
    // and the sender's clock is surely before `claim_by`. Throws
    // error(timeout) when no answer came in time (the claim stays pending:
    // a later claim takes its answer, and releases it), io_error when the
    // link breaks, limit_exceeded (breaking it) when `room` refuses a
    // segment. Receiving thread only.
    bool claim(std::uint64_t seq, std::uint64_t claim_by, std::span<const shm_descriptor> descs,
               receive_clock::time_point deadline, const room_check& room);
    // Gives message `seq` back. Any thread; never waits.
    void release(std::uint64_t seq) noexcept;
    // Segment `id`'s mapping, or nothing (receiving thread).
    std::shared_ptr<const mapping> segment(std::uint64_t id) const;

private:
    // A claim whose answer has not come yet.
    struct pending {
        std::set<std::uint64_t> segments;  // the only ones its answer may pass along
        std::uint64_t asked = 0;           // our clock when it was sent
    };

    // The next reply (its descriptors in `fds`), or nothing at `deadline`.
    std::optional<reply> next_reply(receive_clock::time_point deadline, std::vector<unique_fd>& fds);
    // Sends request `r`, waiting at most until `deadline` for room.
    void send_request(const request& r, receive_clock::time_point deadline);
    // Tells the sender of a quiet claim or a release (under write_): through
    // the ring once there is one (a packet when it is full), with a KICK
    // when the sender asks for it. False when the link broke.
    bool tell(ring_entry entry, packet type) noexcept;
    // Marks the link broken for `why` (once), under write_.
    void fail(const std::string& why) noexcept;
    [[noreturn]] void lost(const std::string& why);
    void add_segment(std::uint64_t id, int fd, const room_check& room);

    std::string name_;
    std::shared_ptr<receiver_state> state_;
    unique_fd fd_;
    mutable std::mutex write_;  // the ring, the socket's writes, why_: held briefly, never across a wait
    std::atomic<bool> broken_{false};
    std::string why_;
    std::unique_ptr<shm_ring> ring_;  // from the sender's first answer
    // Receiving thread only:
    std::map<std::uint64_t, std::shared_ptr<const mapping>> maps_;
    std::map<std::uint64_t, pending> pending_;
    // Upper bound of the sender's clock minus ours (ns), once answered.
    std::optional<__int128> offset_;
};

}  // namespace tenbin::detail::shm_impl
