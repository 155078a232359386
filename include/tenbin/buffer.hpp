// tenbin: bytes plus whatever keeps them alive.
//
// Every zero-copy path of the library goes through `buffer`: a span of bytes
// and a shared "keeper" that owns the memory. The keeper can be a heap block,
// a received ZeroMQ message, a file mapping or a caller's memory with a
// release callback. Copying a buffer or slicing it shares the keeper, so the
// memory lives as long as any buffer (and so any tensor) refers to it.
#pragma once

#include <tenbin/config.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

using bytes_view = std::span<const std::byte>;
using mutable_bytes = std::span<std::byte>;

/// Alignment of memory the library allocates: enough for any dtype and for
/// SIMD loads, and the format's own padding unit.
inline constexpr std::size_t buffer_alignment = 64;

/// Bytes plus whatever keeps them alive (see the top of this header).
///
/// Copying, slicing and destroying buffers is thread-safe (the keeper is a
/// `shared_ptr`): copies of one buffer may live on different threads, and
/// the last one to go releases the memory on its thread. Writing to the
/// bytes while another thread reads them is the caller's to synchronise.
class buffer {
public:
    /// The keeper: any shared object whose lifetime pins the bytes.
    using keeper_type = std::shared_ptr<const void>;

    buffer() = default;

    /// A new heap block of `size` bytes, 64-byte aligned, uninitialised.
    static buffer allocate(std::size_t size);
    /// A new heap block holding a copy of `bytes`.
    static buffer copy(bytes_view bytes);
    /// Refers to `bytes` without owning them. The caller keeps the memory
    /// alive and unchanged for as long as this buffer or any copy is used.
    /// Transports copy borrowed buffers rather than hand them to ZeroMQ,
    /// whose release comes at an unknown later time.
    static buffer borrow(bytes_view bytes);
    /// Adopts memory the caller allocated: `release` runs exactly once, when
    /// the last buffer referring to it is gone, on whichever thread drops it
    /// (possibly a ZeroMQ I/O thread). That is the only "done" signal: once
    /// sent zero-copy, the memory is ZeroMQ's to read until `release` runs,
    /// which can be as late as the ZeroMQ context's teardown. So the memory
    /// and whatever `release` touches (a pool, an arena) must outlive the
    /// context, or be kept alive by `release` itself (`tensor_pool` does).
    /// `release` must not throw; it may be empty (nothing to release).
    /// Throws bad_argument for null `data` with a non-zero `size`.
    static buffer adopt(void* data, std::size_t size, std::function<void()> release);
    /// Shares bytes already pinned by `keeper` (which must keep them alive).
    static buffer share(keeper_type keeper, mutable_bytes bytes, bool writable = true);
    /// Takes a vector over: its storage becomes the buffer's, without a copy.
    template <class T>
    static buffer adopt(std::vector<T>&& v) {
        auto owner = std::make_shared<std::vector<T>>(std::move(v));
        // Both read before `owner` is moved: argument order is unspecified.
        const mutable_bytes bytes{reinterpret_cast<std::byte*>(owner->data()), owner->size() * sizeof(T)};
        return share(std::move(owner), bytes);
    }

    /// First byte (null for an empty default buffer). Valid while this buffer
    /// or any copy of it exists (for `borrow`: while the caller's memory does).
    const std::byte* data() const noexcept { return data_; }
    /// Number of bytes.
    std::size_t size() const noexcept { return size_; }
    /// True when there are no bytes.
    bool empty() const noexcept { return size_ == 0; }
    /// The bytes as a span, valid as long as `data()` is.
    bytes_view bytes() const noexcept { return {data_, size_}; }

    /// Writable access to bytes this buffer alone holds. The one rule for
    /// writing, here and in `tensor::mutable_values`: bytes someone else may
    /// still read are never handed out for writing. When the bytes are
    /// read-only (borrowed, mapped, received) or shared with another holder
    /// (a copy of this buffer or of a tensor over it, ZeroMQ still sending
    /// them, a loader's queue), this buffer first moves to a private heap
    /// copy of them (O(size), once) and returns that; the other holders keep
    /// the old bytes unchanged. Memory from a `tensor_pool`, `allocate`,
    /// `adopt` or a vector is written in place while nobody else holds it.
    /// The span is valid until this buffer is next copied or assigned.
    mutable_bytes writable_bytes();
    /// True when `writable_bytes` would write in place: the bytes are
    /// writable and this buffer is their only holder.
    bool exclusive() const noexcept;
    /// False for read-only memory (borrowed bytes, file mappings, received
    /// frames): `writable_bytes` then copies first.
    bool writable() const noexcept { return writable_; }
    /// The same bytes and keeper, read-only: for handing out memory that
    /// must not change.
    buffer read_only() const& {
        buffer b = *this;
        b.writable_ = false;
        return b;
    }

    /// True when the buffer owns (or shares) its memory; false for `borrow`.
    bool owned() const noexcept { return keeper_ != nullptr; }
    /// The shared owner of the bytes (null for borrowed ones).
    const keeper_type& keeper() const noexcept { return keeper_; }
    /// How many buffers share this one's keeper (0 for borrowed).
    long use_count() const noexcept { return keeper_.use_count(); }

    /// Bytes [offset, offset + length) sharing this buffer's keeper.
    /// Throws `error(errc::bad_argument)` when the range is out of bounds.
    buffer slice(std::size_t offset, std::size_t length) const;

    /// True when data() is a multiple of `alignment` (a power of two).
    bool aligned_to(std::size_t alignment) const noexcept {
        return reinterpret_cast<std::uintptr_t>(data_) % alignment == 0;
    }

private:
    buffer(std::byte* data, std::size_t size, keeper_type keeper, bool writable) noexcept
        : data_(data), size_(size), keeper_(std::move(keeper)), writable_(writable) {}

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    keeper_type keeper_;
    bool writable_ = false;
};

/// Makes glibc keep large freed blocks for reuse instead of returning them to
/// the system. libzmq allocates every received frame anew (on its I/O
/// thread), and glibc serves blocks over 32 MiB with a fresh mmap whose every
/// page then faults: a 77 MB batch then costs more in page faults than on the
/// wire. After this call such blocks come from the main heap and are
/// recycled: no mmap-backed blocks (M_MMAP_MAX 0), no trimming below 1 GiB of
/// free heap (M_TRIM_THRESHOLD), and one malloc arena shared by all threads
/// (M_ARENA_MAX 1; a thread arena mmaps blocks over 64 MiB regardless).
/// Call it early, before threads start: a thread that already has its own
/// arena keeps it. Process-wide (it changes malloc's settings for everyone,
/// and one arena means threads that allocate heavily at once contend for its
/// lock), idempotent, thread-safe; the loader calls it unless told not to.
/// Returns false where unsupported.
bool reuse_large_allocations() noexcept;

}  // namespace tenbin
TENBIN_API_END
