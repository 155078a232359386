// Internal to the library: shared_ptr control blocks placed inside a block
// that was allocated anyway (a received message's bookkeeping, a heap
// buffer's bytes), saving an allocation per keeper.
#pragma once

#include <cstddef>
#include <new>

namespace tenbin::detail {

// The allocator to give shared_ptr's constructor. `Block` decides where the
// control block goes and what releasing it means:
//   void* control_space(std::size_t size, std::size_t align);  // never null
//   void control_released(void* p) noexcept;
template <class T, class Block>
struct block_allocator {
    using value_type = T;
    Block* block;

    explicit block_allocator(Block* b) noexcept : block(b) {}
    template <class U>
    block_allocator(const block_allocator<U, Block>& o) noexcept : block(o.block) {}

    T* allocate(std::size_t n) {
        // shared_ptr asks for one control block; anything else is a misuse.
        if (n != 1) throw std::bad_array_new_length();
        return static_cast<T*>(block->control_space(sizeof(T), alignof(T)));
    }
    void deallocate(T* p, std::size_t /*n*/) noexcept { block->control_released(p); }
    template <class U>
    bool operator==(const block_allocator<U, Block>& o) const noexcept {
        return block == o.block;
    }
};

}  // namespace tenbin::detail
