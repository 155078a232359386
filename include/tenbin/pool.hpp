// tenbin: a pool of tensor memory for producers that send in a loop.
//
// Sending zero-copy hands ZeroMQ a tensor's bytes until it lets go, at a time
// only ZeroMQ knows. A producer that refills one tensor would write into
// bytes still being sent (tensor::mutable_values copies instead, see
// tensor.hpp); one that allocates a fresh tensor per batch pays the
// allocator and a page fault per page. A pool hands out fresh writable
// tensors whose memory comes back to it, not to the allocator, once every
// holder (the caller's copies, ZeroMQ's frames, a receiver over inproc) has
// released it: the same pages every iteration, written by nobody else.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/dtype.hpp>
#include <tenbin/shape.hpp>
#include <tenbin/tensor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

TENBIN_API_BEGIN
namespace tenbin {

/// Where a pool's memory comes from: the heap (`heap_memory()`), or the
/// caller's own (an arena, a shared-memory segment). Called by the pool
/// only, under its lock, from any thread; the pool and its tensors keep
/// the source alive until the last block is given back.
class pool_memory {
public:
    virtual ~pool_memory() = default;
    /// At least `size` bytes aligned to `buffer_alignment`; throws
    /// (std::bad_alloc, or a tenbin::error) when none can be had.
    virtual mutable_bytes allocate(std::size_t size) = 0;
    /// Takes back a block `allocate` returned, whole. Must not throw; may
    /// run on a ZeroMQ I/O thread.
    virtual void deallocate(mutable_bytes block) noexcept = 0;
    /// Told when an acquire starts waiting for a release (`true`) and when
    /// that acquire is over (`false`), under the pool's lock: it must not
    /// call the pool. A source whose blocks come back through a channel it
    /// polls can hurry them. Does nothing unless overridden.
    virtual void waiting(bool begins) noexcept { (void)begins; }
};

/// The heap as a memory source (64-byte-aligned blocks).
std::shared_ptr<pool_memory> heap_memory();

/// Bounds and waiting of a `tensor_pool`.
struct pool_options {
    /// Bytes the pool may hold at once, in use and idle together.
    std::size_t max_bytes = std::size_t{1} << 30;
    /// Blocks the pool may hold at once, in use and idle together.
    std::size_t max_buffers = 1024;
    /// How long `acquire` waits for a release when a bound is reached and
    /// no idle block can be given up to make room: unset waits as long as
    /// it takes; zero fails at once.
    std::optional<std::chrono::milliseconds> wait;
};

/// What a pool holds and has done (a snapshot).
struct pool_stats {
    std::size_t buffers = 0;        ///< blocks held, in use and idle
    std::size_t bytes = 0;          ///< their bytes
    std::size_t in_use = 0;         ///< blocks some tensor, copy or ZeroMQ frame still holds
    std::size_t in_use_bytes = 0;   ///< their bytes
    std::uint64_t allocations = 0;  ///< blocks taken from the memory source
    std::uint64_t reuses = 0;       ///< acquires served by an idle block
    std::uint64_t waits = 0;        ///< acquires that had to wait for a release
};

namespace detail {
struct pool_state;
}

/// Hands out writable tensors whose memory returns to the pool once every
/// holder has released it. Thread-safe: any thread may acquire, and the
/// tensors may be released on any thread (ZeroMQ's I/O threads included).
///
/// A block is reused only when it is big enough and not much bigger (at
/// most twice the size, or 64 KiB more), so a producer's steady shapes
/// settle on the same blocks. At a bound, idle blocks that do not fit are
/// given back to the source to make room; if that is not enough, `acquire`
/// waits for a release (`pool_options::wait`).
///
/// Lifetimes: the pool may be destroyed at any time, before the ZeroMQ
/// context too. Idle blocks go back to the source at once; blocks still
/// held go back when their last holder lets go, whenever that is.
class tensor_pool {
public:
    /// A pool over `memory` (the heap unless given).
    explicit tensor_pool(pool_options options = {}, std::shared_ptr<pool_memory> source = heap_memory());
    ~tensor_pool();
    /// Takes over the other's blocks; the other may only be destroyed.
    tensor_pool(tensor_pool&&) noexcept;
    /// Closes this pool (as the destructor does) and takes over the other's.
    tensor_pool& operator=(tensor_pool&&) noexcept;
    tensor_pool(const tensor_pool&) = delete;
    tensor_pool& operator=(const tensor_pool&) = delete;

    /// A tensor of `shape` on a block nobody else holds: writable in place
    /// (`mutable_values` makes no copy), 64-byte aligned. Its bytes are not
    /// cleared: a reused block holds what its last user wrote, so fill all
    /// of it. Throws `error(errc::timeout)` when the pool stays exhausted
    /// for `pool_options::wait` (naming what holds the memory),
    /// `error(errc::bad_argument)` for a tensor larger than `max_bytes`, a
    /// bad shape or info, and whatever the memory source throws.
    tensor acquire(tenbin::dtype t, shape_t shape, std::string_view info = {});
    /// The same, waiting at most `wait` instead of the pool's setting;
    /// nothing when the pool stays exhausted that long.
    std::optional<tensor> try_acquire(tenbin::dtype t, shape_t shape, std::string_view info,
                                      std::chrono::milliseconds wait);
    /// Gives every idle block back to the memory source.
    void trim();
    /// A snapshot of the pool's counts.
    pool_stats stats() const;
    /// The options the pool was made with.
    const pool_options& options() const noexcept;

private:
    std::shared_ptr<detail::pool_state> state_;
};

}  // namespace tenbin
TENBIN_API_END
