// The ring a receiver's quiet claims and releases go through instead of a
// packet each: a packet wakes the sender's side-channel thread, twice a
// message, and on two cores those wake-ups cost more than the copy of a
// MiB. The sender makes one per receiver (a sealed memfd) and hands it
// over, read-write, with its first answer. The receiver appends; the
// sender takes what was appended when it sends, before it gives a message
// up, while a pool waits for a release and periodically. While
// the sender asks to be told (a pool waits, a close lingers), the receiver
// sends a KICK packet after appending; once the sender has cut it off (it
// closed, or dropped the receiver), the receiver's claims fail. A full
// ring's entries go as packets (the sender reads a receiver's ring before
// its packets, so the order holds). Each end checks what the other wrote:
// a corrupt ring cuts the link, and nobody ever waits on it.
#pragma once

#include "base/fd.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tenbin::detail::shm_impl {

class shm_ring {
public:
    static constexpr std::size_t entries = 4096;
    static constexpr std::size_t bytes = 192 + 8 * entries;

    // What the sender asks of the receiver after each entry.
    enum request : std::uint64_t { nothing = 0, kick = 1, cut_off = 2 };

    // A new ring (the sender's) and its memfd, to hand over.
    static std::unique_ptr<shm_ring> create(unique_fd& fd);
    // The ring in memfd `fd` (the receiver's), after checking it is one:
    // sealed, and of the ring's size. Throws errc::io_error.
    static std::unique_ptr<shm_ring> open(int fd);
    // A ring over `bytes` bytes at `base` that the caller keeps (tests, fuzzing).
    static std::unique_ptr<shm_ring> over(std::byte* base) {
        return std::unique_ptr<shm_ring>(new shm_ring(base, false));
    }

    ~shm_ring();
    shm_ring(const shm_ring&) = delete;
    shm_ring& operator=(const shm_ring&) = delete;

    enum class pushed { ok, full, corrupt };
    // Receiver (one thread at a time): appends `entry`, unless the ring is
    // full (the sender is behind) or corrupt (the sender's count is ahead
    // of what was appended, or further behind than the ring holds): never
    // a wait.
    pushed push(std::uint64_t entry) noexcept {
        const std::uint64_t tail = word(tail_at).load(std::memory_order_acquire);
        if (tail > pushed_ || pushed_ - tail > entries) return pushed::corrupt;
        if (pushed_ - tail == entries) return pushed::full;
        word(entries_at + 8 * (pushed_ % entries)).store(entry, std::memory_order_relaxed);
        word(head_at).store(++pushed_, std::memory_order_release);
        return pushed::ok;
    }
    // Receiver, after a push: what the sender asks. The fence also orders
    // the push before whatever the receiver reads next (the clock, for a
    // quiet claim).
    request asked() noexcept {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const std::uint64_t r = word(ask_at).load(std::memory_order_relaxed);
        return r <= cut_off ? static_cast<request>(r) : cut_off;
    }

    // Sender: what receivers do after a push from now on. Asked before the
    // ring is next read (a fence between): a push the read misses sees it.
    void ask(request r) noexcept {
        word(ask_at).store(r, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    // Sender (one thread at a time): `f(entry)` for each entry appended
    // since the last take; false when the ring is corrupt.
    template <class F>
    bool take(F&& f) {
        const std::uint64_t head = word(head_at).load(std::memory_order_acquire);
        if (head - taken_ > entries) return false;  // also a head behind what was taken
        for (; taken_ != head; ++taken_) f(word(entries_at + 8 * (taken_ % entries)).load(std::memory_order_relaxed));
        word(tail_at).store(taken_, std::memory_order_release);
        return true;
    }

private:
    // Each side's words on their own cache lines.
    static constexpr std::size_t head_at = 0, tail_at = 64, ask_at = 128, entries_at = 192;

    shm_ring(std::byte* base, bool mapped) : base_(base), mapped_(mapped) {}
    std::atomic_ref<std::uint64_t> word(std::size_t at) const noexcept {
        return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(base_ + at));
    }

    std::byte* base_;
    bool mapped_;  // unmapped on destruction
    std::uint64_t pushed_ = 0;  // the receiver's count of entries
    std::uint64_t taken_ = 0;   // the sender's
};

}  // namespace tenbin::detail::shm_impl
