// tenbin over ZeroMQ, sending: zero-copy frames where the memory allows
// it, a message sent whole or not at all.
#include "transport/zmq_common.hpp"

#include "core/chunk_plan.hpp"
#include "core/codec_detail.hpp"
#include "transport/block_pool.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

namespace tenbin {

namespace {

using detail::inline_list;
using detail::interrupted;
using detail::str;

// Takes the text of the error by callable: the check runs for every frame,
// the text is built only when it fails (perf: building it always cost a
// to_string and an allocation per tensor sent).
template <class What>
void check_frame_size(std::size_t size, What&& what) {
    if (size > max_frame_size)
        throw error(errc::unsupported, what() + " of " + str(size) +
                                           " bytes: libzmq 4.3 cannot carry frames of 2^31 bytes or more");
}

// The zero-copy frames of one message, made before its first frame goes.
using frame_list = inline_list<zmq::message_t, 16>;

// ---- zero-copy sends ----------------------------------------------------------
//
// The keepers of one message's zero-copy frames live in one heap block (perf:
// a heap `buffer` per frame cost an allocation per tensor). Each frame's free
// callback gets its own slot: it drops that slot's keeper at once, so every
// tensor's memory is still released as soon as ZeroMQ is done with its frame,
// and the last frame to go frees the block. The callbacks run on ZeroMQ
// threads, possibly several at once: each touches only its own slot and the
// block's atomic count.

struct send_block;

struct send_slot {
    send_block* block = nullptr;
    buffer::keeper_type keeper;
};

struct send_block {
    // One per slot plus the builder's, set up front (perf: an atomic
    // increment per frame); the builder drops its own and those of the
    // slots it did not hand to ZeroMQ.
    std::atomic<std::size_t> refs{0};
    std::size_t slots = 0;
    detail::block_pool* pool = nullptr;  // where the block goes back, if from one

    send_slot* slot(std::size_t i) noexcept {
        return std::launder(reinterpret_cast<send_slot*>(reinterpret_cast<std::byte*>(this) + slot_offset)) + i;
    }

    static constexpr std::size_t slot_offset =
        (sizeof(std::atomic<std::size_t>) + sizeof(std::size_t) + sizeof(void*) + alignof(send_slot) - 1) /
        alignof(send_slot) * alignof(send_slot);
    static constexpr std::size_t pooled_slots = (detail::block_pool::block_bytes - slot_offset) / sizeof(send_slot);

    static send_block* create(std::size_t n) {
        static_assert(sizeof(send_block) <= slot_offset && pooled_slots >= 4);
        detail::block_pool* pool = n <= pooled_slots ? detail::block_pool::of_this_thread() : nullptr;
        void* p = pool ? pool->take() : ::operator new(slot_offset + n * sizeof(send_slot));
        auto* b = ::new (p) send_block;
        b->refs.store(n + 1, std::memory_order_relaxed);
        b->slots = n;
        b->pool = pool;
        for (std::size_t i = 0; i < n; ++i) ::new (static_cast<void*>(b->slot(i))) send_slot{b, {}};
        return b;
    }
    // Drops `k` references; the last frees the block.
    static void release(send_block* b, std::size_t k = 1) noexcept {
        if (b->refs.fetch_sub(k, std::memory_order_acq_rel) != k) return;
        for (std::size_t i = 0; i < b->slots; ++i) b->slot(i)->~send_slot();
        detail::block_pool* pool = b->pool;
        b->~send_block();
        if (pool)
            detail::block_pool::give_back(pool, b);
        else
            ::operator delete(static_cast<void*>(b));
    }
};

// The free callback of a zero-copy frame: `hint` is the frame's slot.
// Dropping its keeper releases one reference to the tensor's memory; never
// throws (buffer releases must not).
void release_frame(void* /*data*/, void* hint) noexcept {
    auto* s = static_cast<send_slot*>(hint);
    send_block* b = s->block;
    s->keeper.reset();
    send_block::release(b);
}

// Builds a zero-copy frame of `owner`'s bytes whose release drops slot
// `s` (and its reference to the block). When zmq_msg_init_data fails it
// throws and the callback will never run: the slot is emptied and its
// reference stays the builder's to drop.
void zero_copy_frame(frame_list& frames, const buffer& owner, send_slot& s) {
    s.keeper = owner.keeper();
    try {
        // libzmq only reads the data of a message it sends.
        frames.emplace_back(const_cast<std::byte*>(owner.data()), owner.size(), &release_frame,
                            static_cast<void*>(&s));
    } catch (...) {
        s.keeper.reset();
        throw;
    }
}

// Sends the frames of one message in order, each as it is needed (perf:
// copied frames, headers above all, go by zmq_send from where their bytes
// are, one library call where a prepared message object took four). Only
// the first frame may report would-block: libzmq accepts the rest of a
// message once its first frame is queued.
class frame_sender {
public:
    frame_sender(zmq::socket_ref socket, zmq::send_flags flags, std::size_t frames) noexcept
        : socket_(socket.handle()), flags_(static_cast<int>(flags & ~zmq::send_flags::sndmore)), frames_(frames) {}

    // A copy of `bytes` as the next frame. False: this was the first frame
    // and it would block; nothing was sent.
    bool copy(bytes_view bytes) {
        int rc;
        do rc = zmq_send(socket_, bytes.data(), bytes.size(), next_flags());
        while (interrupted(rc));
        return sent(rc, rc < 0 ? zmq_errno() : 0);
    }
    // `m` as the next frame. A sent frame is left empty, and needs no
    // zmq_msg_close (libzmq's manual says so; the caller may forget it); an
    // unsent one stays the caller's to close.
    bool send(zmq::message_t& m) {
        int rc;
        do rc = zmq_msg_send(m.handle(), socket_, next_flags());
        while (interrupted(rc));
        return sent(rc, rc < 0 ? zmq_errno() : 0);
    }
    // The envelope's frames, copied.
    bool envelope(std::span<const zmq::const_buffer> frames) {
        for (const zmq::const_buffer& e : frames)
            if (!copy({static_cast<const std::byte*>(e.data()), e.size()})) return false;
        return true;
    }

private:
    int next_flags() const noexcept { return next_ + 1 < frames_ ? flags_ | ZMQ_SNDMORE : flags_; }
    bool sent(int rc, int err) {
        const std::size_t i = next_++;
        if (rc >= 0) return true;
        if (err != EAGAIN) throw zmq::error_t(err);
        if (i == 0) return false;
        throw error(errc::timeout, "frame " + str(i) + " of " + str(frames_) +
                                       " could not be queued after the first was; the message is cut short");
    }

    void* socket_;
    int flags_;
    std::size_t frames_;
    std::size_t next_ = 0;
};


// True when tensor i's data goes to ZeroMQ as it is (see zsend_multipart).
// A tensor's view covers exactly its buffer, so owning the buffer is
// owning the data; views have no owner and are copied.
bool sends_zero_copy(const buffer* owner, std::size_t threshold) noexcept {
    return owner && owner->owned() && owner->size() != 0 && owner->size() >= threshold;
}

// The header frames of one message, back to back: on the stack up to 1 KiB
// (a 4-tensor message of rank 4 takes 224 bytes), on the heap past that.
class header_area {
public:
    // `size` bytes at the end, valid until the next call.
    std::byte* append(std::size_t size) {
        if (!on_heap_ && used_ + size > here_.size()) {
            heap_.assign(here_.data(), here_.data() + used_);
            on_heap_ = true;
        }
        if (on_heap_) heap_.resize(used_ + size);
        std::byte* at = (on_heap_ ? heap_.data() : here_.data()) + used_;
        used_ += size;
        return at;
    }
    const std::byte* data() const noexcept { return on_heap_ ? heap_.data() : here_.data(); }

private:
    std::array<std::byte, 1024> here_;
    std::vector<std::byte> heap_;
    std::size_t used_ = 0;
    bool on_heap_ = false;
};


}  // namespace

bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    const detail::chunk_plan plan(tensors, opt.position);
    const std::size_t size = plan.size();
    check_frame_size(size, [] { return std::string("single-part message"); });
    zmq::message_t body(size);
    plan.copy_to({static_cast<std::byte*>(body.data()), size});
    frame_sender out(socket, opt.flags, opt.envelope.size() + 1);
    return out.envelope(opt.envelope) && out.send(body);
}

bool zsend_multipart(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    const std::size_t n = tensors.size();
    // All that can fail is done before the first frame goes, so a message
    // is sent whole or not at all: headers encoded, sizes checked, zero-copy
    // frames made, in one pass over the list (perf: a pass to count first
    // cost about 40 instructions a tensor).
    header_area headers;
    // The keepers of the zero-copy frames, in one block made at the first
    // such tensor with a slot for it and each one after it.
    struct drop_builder_refs {
        send_block* b = nullptr;
        std::size_t made = 0;  // frames made: each holds its slot's reference
        ~drop_builder_refs() {
            if (b) send_block::release(b, 1 + b->slots - made);
        }
    } keepers;
    frame_list zero_copy;
    for (std::size_t i = 0; i < n; ++i) {
        const tensor_view t = tensors[i];
        const std::size_t size = header_size(t.ndim());
        detail::with_context([&] { return "tensor " + str(i); },
                             [&] { detail::encode_header_of(tensors, i, {headers.append(size), size}); });
        check_frame_size(t.data.size(), [&] { return "tensor " + str(i) + ": data frame"; });
        if (const buffer* owner = tensors.owner(i); sends_zero_copy(owner, opt.copy_threshold)) {
            if (!keepers.b) keepers.b = send_block::create(n - i);
            zero_copy_frame(zero_copy, *owner, *keepers.b->slot(keepers.made));
            ++keepers.made;
        }
    }

    // The position frame beside the headers (perf: no allocation of its
    // own); the last append, so its bytes stay where they are.
    bytes_view position;
    if (opt.position) {
        const std::size_t size = position_frame_size(*opt.position);
        std::byte* p = headers.append(size);
        encode_position_into(*opt.position, {p, size});
        position = {p, size};
    }
    const std::byte* at = headers.data();

    // The empty list: no multipart form exists, send the single-part one.
    frame_sender out(socket, opt.flags,
                     opt.envelope.size() + std::max<std::size_t>(2 * n, 1) + (opt.position ? 1 : 0));
    if (!out.envelope(opt.envelope)) return false;
    if (n == 0) return out.copy({}) && (!opt.position || out.copy(position));
    std::size_t next_zero_copy = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const tensor_view t = tensors[i];
        const std::size_t size = header_size(t.ndim());
        if (!out.copy({at, size})) return false;
        at += size;
        const bool sent = sends_zero_copy(tensors.owner(i), opt.copy_threshold) ? out.send(zero_copy[next_zero_copy++])
                                                                               : out.copy(t.data);
        if (!sent) return false;
    }
    // Every zero-copy frame was sent, which left it empty (perf: closing
    // them cost a library call each).
    zero_copy.forget();
    if (opt.position) out.copy(position);  // never the first frame: queued once the first was
    return true;
}

}  // namespace tenbin
