#include <tenbin/buffer.hpp>
#include <tenbin/error.hpp>

#include "core/block_allocator.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace tenbin {

namespace {

// buffer::allocate puts the keeper's control block and the bytes in one
// malloc block: a heap_block head, the control block after it, the bytes
// at the next 64-byte boundary after `control_room`. One plain malloc instead of
// aligned_alloc plus a control block (perf: glibc's aligned_alloc takes
// the arena lock, which threads contend for under reuse_large_allocations;
// plain small mallocs come from the thread's cache).
constexpr std::size_t control_room = 64;

// The head of such a block (block_allocator's hooks).
struct alignas(std::max_align_t) heap_block {
    std::byte* control() noexcept { return reinterpret_cast<std::byte*>(this) + sizeof(heap_block); }
    void* control_space(std::size_t size, std::size_t align) {
        return sizeof(heap_block) + size <= control_room && align <= alignof(heap_block) ? control()
                                                                                        : ::operator new(size);
    }
    // The control block goes last: the whole block with it.
    void control_released(void* p) noexcept {
        if (p != control()) ::operator delete(p);
        std::free(this);
    }
};

// The bytes need no releasing of their own: they go with the block.
struct no_delete {
    void operator()(void* /*p*/) const noexcept {}
};

}  // namespace

buffer buffer::allocate(std::size_t size) {
    if (size > SIZE_MAX - control_room - buffer_alignment) throw std::bad_alloc();
    void* p = std::malloc(control_room + buffer_alignment + size);
    if (!p) throw std::bad_alloc();
    auto* block = ::new (p) heap_block;
    const auto start = reinterpret_cast<std::uintptr_t>(p) + control_room;
    auto* bytes = reinterpret_cast<std::byte*>((start + buffer_alignment - 1) / buffer_alignment * buffer_alignment);
    try {
        keeper_type keeper(static_cast<void*>(bytes), no_delete{}, detail::block_allocator<std::byte, heap_block>(block));
        return buffer(bytes, size, std::move(keeper), true);
    } catch (...) {  // a control block too big for its room, and no memory for it
        std::free(p);
        throw;
    }
}

buffer buffer::copy(bytes_view bytes) {
    buffer b = allocate(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data_, bytes.data(), bytes.size());
    return b;
}

buffer buffer::borrow(bytes_view bytes) {
    return buffer(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr, false);
}

buffer buffer::adopt(void* data, std::size_t size, std::function<void()> release) {
    if (!data && size != 0)
        throw error(errc::bad_argument, "adopt: null data of " + std::to_string(size) + " bytes");
    struct releaser {
        explicit releaser(std::function<void()> r) : release(std::move(r)) {}
        releaser(const releaser&) = delete;
        releaser& operator=(const releaser&) = delete;
        std::function<void()> release;
        ~releaser() {
            if (release) release();
        }
    };
    auto keeper = std::make_shared<releaser>(std::move(release));
    return buffer(static_cast<std::byte*>(data), size, std::move(keeper), true);
}

buffer buffer::share(keeper_type keeper, mutable_bytes bytes, bool writable) {
    return buffer(bytes.data(), bytes.size(), std::move(keeper), writable);
}

bool buffer::exclusive() const noexcept {
    if (!writable_ || !keeper_) return false;
    // Copying the keeper is a read-modify-write of its count (acq_rel): it
    // reads the current count, and synchronises with every other holder's
    // release, so their reads (ZeroMQ's included) come before our writes.
    // (A plain load and a fence would do too, but ThreadSanitizer does not
    // model fences.) A count of 1 cannot grow behind our back: only this
    // buffer could copy itself.
    const keeper_type probe = keeper_;
    return probe.use_count() == 2;
}

mutable_bytes buffer::writable_bytes() {
    // No bytes, nothing to protect (a default tensor's buffer, say).
    if (size_ != 0 && !exclusive()) *this = copy(bytes());
    return {data_, size_};
}

buffer buffer::slice(std::size_t offset, std::size_t length) const {
    if (offset > size_ || length > size_ - offset)
        throw error(errc::bad_argument, "slice [" + std::to_string(offset) + ", +" +
                                            std::to_string(length) + ") of a buffer of " +
                                            std::to_string(size_) + " bytes");
    return buffer(data_ + offset, length, keeper_, writable_);
}

bool reuse_large_allocations() noexcept {
    static std::atomic<int> done{0};
    if (done.load()) return done.load() > 0;
    // No mmap-backed blocks: large blocks come from the heap and freed ones
    // stay there (no trimming below 1 GiB of free top), so the next frame of
    // the same size reuses pages that are already mapped.
    //
    // One arena: libzmq allocates received frames on its I/O thread, and
    // glibc gives such threads arenas whose heaps hold at most 64 MiB; a
    // larger block there is mmap-ed whatever M_MMAP_MAX says. glibc honours
    // the arena limit for threads that get an arena after this call.
    const bool ok = mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
                    mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
    done.store(ok ? 1 : -1);
    return ok;
}

}  // namespace tenbin
