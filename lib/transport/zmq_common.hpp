// What the sending (zsend.cpp) and receiving (zrecv.cpp) halves of tenbin
// over ZeroMQ share.
//
// Facts about libzmq 4.3.4 this file relies on:
// - The frames of a multipart message become visible to the receiver
//   together (the pipe flushes at message ends), so after the first frame
//   the rest can be read without waiting.
// - High-water marks count whole messages: once the first frame is queued
//   the others cannot hit the mark; a peer lost mid-message makes libzmq
//   drop the partial message (EFAULT) rather than deliver it.
// - Frames of at most 33 bytes live inside the zmq_msg_t itself, so a
//   frame's address changes when the message object moves.
// - A free callback runs on whichever thread drops the last reference: an
//   I/O thread after a tcp/ipc send, the receiver's thread over inproc.
#pragma once

#include <tenbin/zmq.hpp>

#include "core/diagnostics.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace tenbin::detail {

// A blocking send or receive that a signal handler interrupted is begun
// again (the socket's timeout with it), as pyzmq does: the caller's signal
// handlers, a profiler's SIGPROF, must not fail a receive or end a loader.
inline bool interrupted(int rc) noexcept { return rc < 0 && zmq_errno() == EINTR; }

// A list that keeps its first N elements inside itself and the rest in a
// vector: a message's frames without an allocation for the common sizes
// (perf: vectors of frames and buffers cost two allocations per message
// received and one per message sent).
template <class T, std::size_t N>
class inline_list {
public:
    inline_list() = default;
    inline_list(const inline_list&) = delete;
    inline_list& operator=(const inline_list&) = delete;
    ~inline_list() { clear(); }

    std::size_t size() const noexcept { return size_; }
    T& operator[](std::size_t i) noexcept { return i < N ? first()[i] : rest_[i - N]; }
    const T& operator[](std::size_t i) const noexcept { return i < N ? first()[i] : rest_[i - N]; }

    template <class... A>
    T& emplace_back(A&&... a) {
        T* p = size_ < N ? ::new (static_cast<void*>(first() + size_)) T(std::forward<A>(a)...)
                         : &rest_.emplace_back(std::forward<A>(a)...);
        ++size_;
        return *p;
    }
    void clear() noexcept {
        for (std::size_t i = 0; i < std::min(size_, N); ++i) first()[i].~T();
        rest_.clear();
        size_ = 0;
    }
    // Drops the inline elements without running their destructors: for
    // elements left with nothing to release.
    void forget() noexcept {
        rest_.clear();
        size_ = 0;
    }

private:
    T* first() noexcept { return std::launder(reinterpret_cast<T*>(storage_)); }
    const T* first() const noexcept { return std::launder(reinterpret_cast<const T*>(storage_)); }

    alignas(T) std::byte storage_[N * sizeof(T)];
    std::size_t size_ = 0;
    std::vector<T> rest_;
};


}  // namespace tenbin::detail
