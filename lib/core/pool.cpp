#include <tenbin/pool.hpp>

#include <tenbin/error.hpp>

#include "core/diagnostics.hpp"

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>

namespace tenbin {

namespace {

class heap_pool_memory final : public pool_memory {
public:
    mutable_bytes allocate(std::size_t size) override {
        // aligned_alloc wants a multiple of the alignment; the pool rounds up.
        void* p = std::aligned_alloc(buffer_alignment, size == 0 ? buffer_alignment : size);
        if (!p) throw std::bad_alloc();
        return {static_cast<std::byte*>(p), size};
    }
    void deallocate(mutable_bytes block) noexcept override { std::free(block.data()); }
};

// Blocks are whole cache lines, and whole pages from 64 KiB on, so that
// sizes that differ a little share blocks.
std::size_t block_size_for(std::size_t n) {
    const std::size_t unit = n >= (std::size_t{64} << 10) ? 4096 : buffer_alignment;
    if (n > SIZE_MAX - unit) throw error(errc::bad_argument, "tensor of " + std::to_string(n) + " bytes");
    return n == 0 ? unit : (n + unit - 1) / unit * unit;
}

// An idle block of `capacity` may serve `n` bytes if it wastes little.
bool fits(std::size_t capacity, std::size_t n) {
    return capacity >= n && (capacity - n <= n || capacity - n <= (std::size_t{64} << 10));
}

}  // namespace

std::shared_ptr<pool_memory> heap_memory() {
    static const auto heap = std::make_shared<heap_pool_memory>();
    return heap;
}

namespace detail {

struct pool_state {
    pool_state(pool_options o, std::shared_ptr<pool_memory> s) : options(o), source(std::move(s)) {}
    ~pool_state() { drop_idle(); }

    // Gives every idle block back to the source (under the lock).
    void drop_idle() noexcept {
        for (auto& [capacity, data] : idle) {
            source->deallocate({data, capacity});
            stats.bytes -= capacity;
            --stats.buffers;
        }
        idle.clear();
    }

    // Called by a lease's last holder, on any thread.
    void give_back(std::byte* data, std::size_t capacity) noexcept {
        {
            std::lock_guard lock(mutex);
            --stats.in_use;
            stats.in_use_bytes -= capacity;
            if (!closed) {
                // emplace may throw bad_alloc: then the block leaves the pool.
                try {
                    idle.emplace(capacity, data);
                    released.notify_all();
                    return;
                } catch (...) {
                }
            }
            --stats.buffers;
            stats.bytes -= capacity;
        }
        released.notify_all();
        source->deallocate({data, capacity});
    }

    // Gives idle blocks back to the source until `capacity` more bytes and
    // one more block fit the bounds; false when idle blocks are not enough.
    bool make_room(std::size_t capacity) {
        while (stats.bytes + capacity > options.max_bytes || stats.buffers + 1 > options.max_buffers) {
            if (idle.empty()) return false;
            auto largest = std::prev(idle.end());
            source->deallocate({largest->second, largest->first});
            stats.bytes -= largest->first;
            --stats.buffers;
            idle.erase(largest);
        }
        return true;
    }

    std::string exhausted_text(std::size_t n) const {
        return "tensor_pool exhausted: " + std::to_string(n) + " bytes wanted, and all " +
               std::to_string(stats.in_use) + " blocks (" + std::to_string(stats.in_use_bytes) +
               " bytes) are still held, by tensors you keep or by ZeroMQ still sending them (bounds: " +
               std::to_string(options.max_bytes) + " bytes, " + std::to_string(options.max_buffers) +
               " blocks); raise pool_options::max_bytes or max_buffers, or drop tensors sooner";
    }

    const pool_options options;
    const std::shared_ptr<pool_memory> source;
    mutable std::mutex mutex;
    std::condition_variable released;
    std::multimap<std::size_t, std::byte*> idle;  // capacity -> block
    pool_stats stats;
    bool closed = false;  // the pool is gone: blocks coming back leave
};

}  // namespace detail

namespace {

// The keeper of a pool tensor's bytes: its last holder gives the block back.
struct lease {
    lease(std::shared_ptr<detail::pool_state> s, std::byte* d, std::size_t c) noexcept
        : state(std::move(s)), data(d), capacity(c) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { state->give_back(data, capacity); }

    std::shared_ptr<detail::pool_state> state;
    std::byte* data;
    std::size_t capacity;
};

}  // namespace

tensor_pool::tensor_pool(pool_options options, std::shared_ptr<pool_memory> source) {
    if (!source) throw error(errc::bad_argument, "tensor_pool: no memory source");
    if (options.max_buffers == 0) throw error(errc::bad_argument, "tensor_pool: max_buffers is 0");
    state_ = std::make_shared<detail::pool_state>(options, std::move(source));
}

tensor_pool::~tensor_pool() {
    if (!state_) return;  // moved from
    std::lock_guard lock(state_->mutex);
    state_->closed = true;
    state_->drop_idle();
}

tensor_pool::tensor_pool(tensor_pool&&) noexcept = default;

tensor_pool& tensor_pool::operator=(tensor_pool&& other) noexcept {
    if (this != &other) {
        tensor_pool gone(std::move(*this));
        state_ = std::move(other.state_);
    }
    return *this;
}

tensor tensor_pool::acquire(tenbin::dtype t, shape_t shape, std::string_view info) {
    const auto wait = state_->options.wait;
    if (auto got = try_acquire(t, shape, info, wait ? *wait : std::chrono::milliseconds::max())) return *got;
    std::lock_guard lock(state_->mutex);
    const std::uint64_t n = detail::element_count(shape) * itemsize(t);
    throw error(errc::timeout, state_->exhausted_text(n));
}

std::optional<tensor> tensor_pool::try_acquire(tenbin::dtype t, shape_t shape, std::string_view info,
                                               std::chrono::milliseconds wait) {
    detail::check_dtype(t);
    detail::check_info(info);
    const std::uint64_t count = detail::element_count(shape);
    if (count > SIZE_MAX / itemsize(t)) throw error(errc::bad_argument, "tensor too large to allocate");
    const std::size_t n = count * itemsize(t);
    detail::pool_state& s = *state_;
    const std::size_t capacity = block_size_for(n);
    if (capacity > s.options.max_bytes)
        throw error(errc::bad_argument, "tensor of " + std::to_string(n) + " bytes is larger than the pool (" +
                                                    std::to_string(s.options.max_bytes) + " bytes)");
    // A deadline past what the clock holds is no deadline.
    const auto now = std::chrono::steady_clock::now();
    const bool forever = wait >= std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::time_point::max() - now);
    const auto deadline = forever ? std::chrono::steady_clock::time_point::max() : now + wait;

    std::byte* block = nullptr;
    std::size_t block_capacity = 0;
    {
        std::unique_lock lock(s.mutex);
        bool waited = false;
        // Tells the source when a wait is over, however it ends (before the lock goes).
        struct wait_end {
            detail::pool_state& s;
            const bool& waited;
            ~wait_end() {
                if (waited) s.source->waiting(false);
            }
        } end{s, waited};
        for (;;) {
            if (auto it = s.idle.lower_bound(n); it != s.idle.end() && fits(it->first, n)) {
                // Of the blocks of that size, the one given back last: its
                // pages are the likeliest to be in cache (equal keys keep
                // their insertion order).
                it = std::prev(s.idle.upper_bound(it->first));
                block_capacity = it->first;
                block = it->second;
                s.idle.erase(it);
                ++s.stats.reuses;
                break;
            }
            if (s.make_room(capacity)) {
                block = s.source->allocate(capacity).data();
                block_capacity = capacity;
                ++s.stats.allocations;
                ++s.stats.buffers;
                s.stats.bytes += capacity;
                break;
            }
            if (!waited) {
                ++s.stats.waits;
                s.source->waiting(true);
            }
            waited = true;
            if (forever)
                s.released.wait(lock);
            else if (s.released.wait_until(lock, deadline) == std::cv_status::timeout &&
                     std::chrono::steady_clock::now() >= deadline)
                return std::nullopt;
        }
        ++s.stats.in_use;
        s.stats.in_use_bytes += block_capacity;
    }

    std::shared_ptr<lease> keeper;
    try {
        keeper = std::make_shared<lease>(state_, block, block_capacity);
    } catch (...) {
        s.give_back(block, block_capacity);
        throw;
    }
    return tensor(t, std::move(shape), buffer::share(std::move(keeper), {block, n}), info);
}

void tensor_pool::trim() {
    std::lock_guard lock(state_->mutex);
    state_->drop_idle();
}

pool_stats tensor_pool::stats() const {
    std::lock_guard lock(state_->mutex);
    return state_->stats;
}

const pool_options& tensor_pool::options() const noexcept { return state_->options; }

}  // namespace tenbin
