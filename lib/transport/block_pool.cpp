#include "transport/block_pool.hpp"

#include <initializer_list>
#include <new>

namespace tenbin::detail {

namespace {

// Past this many blocks (256 KiB) a pool frees one spare block each time it
// hands one out: a burst of messages in flight does not pin its peak memory
// for the rest of the thread's life.
constexpr std::size_t max_kept = 1024;

std::atomic<std::size_t> pools_alive{0};

void* allocate_block() { return ::operator new(block_pool::block_bytes); }
void free_block(void* p) noexcept { ::operator delete(p); }

}  // namespace

std::size_t block_pool::live() noexcept { return pools_alive.load(std::memory_order_relaxed); }

block_pool* block_pool::of_this_thread() {
    // Trivially destructible, so still readable from other thread_local
    // destructors that run after the guard's.
    thread_local block_pool* pool = nullptr;
    thread_local bool exiting = false;
    if (pool || exiting) return pool;
    struct orphan_at_exit {
        ~orphan_at_exit() {
            exiting = true;
            if (pool) pool->orphan();
            pool = nullptr;
        }
    };
    pool = new block_pool;
    pools_alive.fetch_add(1, std::memory_order_relaxed);
    thread_local orphan_at_exit guard;  // its destructor is registered here
    return pool;
}

void* block_pool::take() {
    if (!free_) free_ = returned_.exchange(nullptr, std::memory_order_acquire);
    void* block;
    if (free_) {
        block = free_;
        free_ = free_->next;
        if (owned_ > max_kept && free_) {
            node* spare = free_;
            free_ = spare->next;
            free_block(spare);
            --owned_;
        }
    } else {
        block = allocate_block();
        ++owned_;
    }
    ++handed_out_;
    return block;
}

void block_pool::give_back(block_pool* pool, void* block) noexcept {
    // Pushed before the count drops, so a pool freed by the last count
    // frees this block too.
    node* n = ::new (block) node{pool->returned_.load(std::memory_order_relaxed)};
    while (!pool->returned_.compare_exchange_weak(n->next, n, std::memory_order_release, std::memory_order_relaxed)) {
    }
    if (pool->balance_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(pool);
}

// The owning thread is exiting: what is left of the bias goes, and the
// blocks still out (if any) free the pool as the last of them comes back.
void block_pool::orphan() noexcept {
    const std::int64_t rest = bias - handed_out_;
    if (balance_.fetch_sub(rest, std::memory_order_acq_rel) == rest) destroy(this);
}

// The pool and every block it keeps.
void block_pool::destroy(block_pool* pool) noexcept {
    for (node* list : {pool->returned_.exchange(nullptr, std::memory_order_acquire), pool->free_})
        while (list) {
            node* next = list->next;
            free_block(list);
            list = next;
        }
    delete pool;
    pools_alive.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace tenbin::detail
