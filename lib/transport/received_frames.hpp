// A received message's frames, held where they arrived and given up one by
// one to the tensors that view them (see zrecv.cpp).
#pragma once

#include "transport/zmq_common.hpp"

#include "core/block_allocator.hpp"
#include "core/codec_detail.hpp"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tenbin::detail {

// A received message's frames are held on the stack until it is taken
// apart: envelope frames move into the message, header frames are decoded
// where they are and closed, and data frames move into one heap block
// (perf: a shared keeper per frame cost an allocation per tensor). Each data
// frame still gets its own keeper, a shared_ptr whose control block is
// carved out of the same block: the frame is closed (its bytes released)
// when the last tensor using it goes, so a small tensor kept from a message
// never pins a large frame of the same message. The block itself
// (bookkeeping, and the bytes of frames small enough to live inside
// zmq_msg_t) is freed with the last control block.

// One received frame. Its bytes and flags are looked up once, as it
// arrives (perf: zmq_msg_data, zmq_msg_size and zmq_msg_more are library
// calls, and cppzmq's accessors made them again at each use). A data frame
// leaves by `relocate`: its zmq_msg_t is copied bitwise, which is what
// libzmq's own zmq_msg_move and cppzmq's move constructor do, and this copy
// is then never closed (perf: moving through cppzmq re-initialised the
// source, which was closed again later: two library calls a data frame).
class incoming {
public:
    incoming() noexcept { zmq_msg_init(&msg_); }  // cannot fail
    // For the list's spill vector; leaves `o` with nothing to close.
    incoming(incoming&& o) noexcept : size_(o.size_), more_(o.more_), live_(o.live_) {
        data_ = o.relocate(&msg_).data();
    }
    incoming& operator=(incoming&&) = delete;
    ~incoming() {
        if (live_) zmq_msg_close(&msg_);
    }

    // False when nothing came (would block); other failures throw, as
    // cppzmq's receive does.
    bool receive(zmq::socket_ref socket, int flags) {
        int rc;
        do rc = zmq_msg_recv(&msg_, socket.handle(), flags);
        while (interrupted(rc));
        if (rc < 0) {
            if (zmq_errno() == EAGAIN) return false;
            throw zmq::error_t();
        }
        // zmq_msg_recv caps what it returns at INT_MAX.
        size_ = rc < INT_MAX ? static_cast<std::size_t>(rc) : zmq_msg_size(&msg_);
        data_ = static_cast<std::byte*>(zmq_msg_data(&msg_));
        more_ = zmq_msg_more(&msg_) != 0;
        return true;
    }

    std::size_t size() const noexcept { return size_; }
    bool more() const noexcept { return more_; }
    mutable_bytes bytes() const noexcept { return {data_, size_}; }

    // Moves the frame into the uninitialised zmq_msg_t at `to`; returns its
    // bytes there (a small frame's bytes are inside the zmq_msg_t).
    mutable_bytes relocate(zmq_msg_t* to) noexcept {
        std::memcpy(static_cast<void*>(to), &msg_, sizeof msg_);
        live_ = false;
        const auto from = reinterpret_cast<std::uintptr_t>(&msg_);
        const auto at = reinterpret_cast<std::uintptr_t>(data_);
        std::byte* data = at >= from && at < from + sizeof msg_ ? reinterpret_cast<std::byte*>(to) + (at - from)
                                                                 : data_;
        return {data, size_};
    }

    // The frame as a cppzmq message (envelope frames, handed to the caller).
    zmq::message_t take_message() {
        zmq::message_t out;
        zmq_msg_move(out.handle(), &msg_);
        return out;
    }

private:
    zmq_msg_t msg_;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    bool more_ = false;
    bool live_ = true;
};

// Frames of one received message: 8 tensors plus an envelope on the stack.
using incoming_list = inline_list<incoming, 20>;

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

class recv_block {
public:
    // Room for one control block per frame; libstdc++'s shared_ptr with a
    // deleter and this allocator needs 32 bytes. A larger one (another
    // standard library) is allocated on its own, which is only slower.
    static constexpr std::size_t cb_size = 48;
    static constexpr std::size_t cb_align = 16;

    static recv_block* create(std::size_t frames) {
        static_assert(sizeof(recv_block) <= frame_offset);
        void* p = std::malloc(cb_offset(frames) + frames * cb_size);
        if (!p) throw std::bad_alloc();
        auto* b = ::new (p) recv_block;
        b->refs_.store(frames + 1, std::memory_order_relaxed);
        b->frames_ = frames;
        return b;
    }
    // Drops `k` references; the last frees the block.
    static void release(recv_block* b, std::size_t k = 1) noexcept {
        if (b->refs_.fetch_sub(k, std::memory_order_acq_rel) != k) return;
        b->~recv_block();
        std::free(b);
    }

    // The next frame's slot, raw storage. Frame i's keeper is the i-th: a
    // frame whose keeper could not be made was closed, and its slot goes
    // to the next.
    zmq_msg_t* next_frame_slot() noexcept {
        return reinterpret_cast<zmq_msg_t*>(base() + frame_offset + keepers_ * sizeof(zmq_msg_t));
    }

    // Where a frame keeper's control block goes (block_allocator's hooks):
    // a slot of this block, or the heap if it does not fit one. Each keeper
    // holds a reference to the block.
    void* control_space(std::size_t size, std::size_t align) {
        // Every keeper's control block has the same type: all fit a slot
        // (slot i for keeper i) or none does.
        void* p = size <= cb_size && align <= cb_align && keepers_ < frames_
                      ? base() + cb_offset(frames_) + keepers_ * cb_size
                      : ::operator new(size);
        ++keepers_;  // at most once per frame
        return p;
    }
    void control_released(void* p) noexcept {
        if (!holds(p)) ::operator delete(p);
        release(this);
    }
    // The builder is done: drops its reference and those of frames that
    // got no keeper.
    static void builder_done(recv_block* b) noexcept { release(b, 1 + b->frames_ - b->keepers_); }

private:
    bool holds(const void* p) const noexcept {
        const auto* q = static_cast<const std::byte*>(p);
        const auto* b = reinterpret_cast<const std::byte*>(this);
        return q >= b && q < b + cb_offset(frames_) + frames_ * cb_size;
    }
    std::byte* base() noexcept { return reinterpret_cast<std::byte*>(this); }
    static constexpr std::size_t frame_offset =
        round_up(sizeof(std::atomic<std::size_t>) + 2 * sizeof(std::size_t), alignof(zmq_msg_t));
    static constexpr std::size_t cb_offset(std::size_t frames) {
        return round_up(frame_offset + frames * sizeof(zmq_msg_t), cb_align);
    }

    // One per frame's keeper plus the builder's, set up front (perf: an
    // atomic increment per frame).
    std::atomic<std::size_t> refs_{0};
    std::size_t frames_ = 0;
    std::size_t keepers_ = 0;
};

static_assert(alignof(zmq_msg_t) <= recv_block::cb_align && alignof(std::max_align_t) >= recv_block::cb_align);

// A frame keeper's deleter: closes the frame (releases its bytes; over
// inproc, runs the sender's free callback). The frame's storage is the
// block's, freed with it.
struct close_frame {
    void operator()(zmq_msg_t* m) const noexcept { zmq_msg_close(m); }
};

// The tenbin frames of a received message (those after `skip`), given up
// one by one to their tensors: each taken frame moves into the block and
// is kept alive by its own keeper. The caller keeps both alive while this is used.
class received_frames final : public detail::list_source {
public:
    received_frames(incoming_list& frames, std::size_t skip, std::size_t count, recv_block* block) noexcept
        : frames_(frames), skip_(skip), count_(count), block_(block) {}

    std::size_t size() const noexcept override { return count_; }
    bytes_view bytes(std::size_t i) const noexcept override { return frames_[skip_ + i].bytes(); }
    buffer take(std::size_t i) override {
        zmq_msg_t* m = block_->next_frame_slot();
        const mutable_bytes bytes = frames_[skip_ + i].relocate(m);
        // If allocating the control block throws, close_frame has closed m.
        buffer::keeper_type keeper(
            std::shared_ptr<zmq_msg_t>(m, close_frame{}, detail::block_allocator<zmq_msg_t, recv_block>(block_)));
        // Read-only: over inproc the bytes may be the sender's memory.
        return buffer::share(std::move(keeper), bytes, false);
    }

private:
    incoming_list& frames_;
    std::size_t skip_;
    std::size_t count_;
    recv_block* block_;
};

}  // namespace tenbin::detail
