// Internal to the library: small fixed-size blocks that one thread makes
// and any thread gives back.
//
// A zero-copy send's bookkeeping is allocated on the sending thread and
// freed by whichever thread releases the message's last frame (the
// receiver's over inproc, an I/O thread over tcp and ipc). Through malloc
// that is glibc's slow path on both threads, since neither thread's cache
// ever holds what the other frees, a large share of a small message's
// cost. A pool per sending thread hands the same blocks round instead.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tenbin::detail {

class block_pool {
public:
    static constexpr std::size_t block_bytes = 256;

    // The calling thread's pool, made on first use; null once the thread
    // has begun to exit (callers then allocate for themselves). Throws
    // std::bad_alloc.
    static block_pool* of_this_thread();

    // A block of block_bytes, aligned for any scalar type. Only the thread
    // the pool belongs to may call this. Throws std::bad_alloc.
    void* take();

    // Returns a block taken from `pool`, from any thread. Each block goes
    // back exactly once; a pool whose thread has exited is freed with the
    // last of its blocks.
    static void give_back(block_pool* pool, void* block) noexcept;

    // Blocks this pool allocated and has not freed (owner's thread only).
    std::size_t owned() const noexcept { return owned_; }
    // Pools in existence, those of exited threads with blocks still out
    // included.
    static std::size_t live() noexcept;

    block_pool(const block_pool&) = delete;
    block_pool& operator=(const block_pool&) = delete;

private:
    block_pool() = default;
    ~block_pool() = default;

    struct node {
        node* next;
    };

    void orphan() noexcept;
    static void destroy(block_pool* pool) noexcept;

    // Blocks given back, pushed by any thread and taken all at once by the
    // owner (so no pop ever races another: no ABA).
    std::atomic<node*> returned_{nullptr};
    // `bias` minus the blocks given back; the owner subtracts what is left
    // of the bias as it exits, and whoever brings it to zero frees the pool.
    static constexpr std::int64_t bias = std::int64_t{1} << 62;
    std::atomic<std::int64_t> balance_{bias};

    // The owner's alone.
    node* free_ = nullptr;
    std::int64_t handed_out_ = 0;
    std::size_t owned_ = 0;  // blocks this pool allocated and has not freed
};

}  // namespace tenbin::detail
