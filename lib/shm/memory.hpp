// The sender's pool memory: each block a memfd segment of its own (Linux).
#pragma once

#include "shm/internal.hpp"

#include <tenbin/pool.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace tenbin::detail::shm_impl {

// A new memfd of `size` bytes named `name`, sealed against shrinking and
// growing (a receiver's mapping can never lose pages under it: SIGBUS).
int new_segment_fd(std::size_t size, const char* name = "tenbin-shm");
// Seals memfd `fd` against writes through any mapping or descriptor made
// from now on (F_SEAL_FUTURE_WRITE): the sender's own mapping still
// writes, a descriptor reopened through /proc/PID/fd cannot. Then no seal
// more. Throws io_error.
void seal_writes(int fd);

class shm_memory final : public pool_memory {
public:
    struct segment {
        std::uint64_t id;
        int fd;
        std::size_t size;
    };

    mutable_bytes allocate(std::size_t size) override;
    void deallocate(mutable_bytes block) noexcept override;
    // Counts the pool's waiters; a wait's start writes the eventfd given.
    void waiting(bool begins) noexcept override;
    bool waited_on() const noexcept { return waiters_.load() > 0; }
    void wake_on_wait(int eventfd);

    // The segment holding [p, p + n) and p's offset in it.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> find(const std::byte* p, std::size_t n);

    // A read-only descriptor of segment `id` (-1 when it is gone).
    int read_only_fd(std::uint64_t id);

    // Moves segment `id`'s bytes to a fresh memfd mapped at the same
    // address and closes the old one; holders' mappings keep the old pages.
    // True when its block no longer shares pages with them (moved now, or
    // before: the id is gone); false when the move failed (no descriptor
    // or memory to spare) and the block still is the holders' pages.
    bool retire(std::uint64_t id) noexcept;
    // Segments moved by retire() so far.
    std::uint64_t retired();

    std::vector<std::uint64_t> take_closed();
    // Whether segments were closed since the last take_closed().
    bool has_closed();

private:
    std::mutex mutex_;
    std::map<std::byte*, segment> segments_;
    std::uint64_t next_id_ = 1;
    std::vector<std::uint64_t> closed_;
    std::uint64_t retired_ = 0;
    std::atomic<int> waiters_{0};
    int wake_fd_ = -1;
};

}  // namespace tenbin::detail::shm_impl
