// tenbin over ZeroMQ: the two wire forms of tensorcom, zero-copy where the
// memory allows it.
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
#include <tenbin/zmq.hpp>

#include "core/block_allocator.hpp"
#include "core/codec_detail.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

namespace tenbin {

namespace {

std::string str(std::size_t n) { return std::to_string(n); }

[[noreturn]] void fail(errc code, const std::string& message) { throw error(code, message); }

// Takes the text of the error by callable: the check runs for every frame,
// the text is built only when it fails (perf: building it always cost a
// to_string and an allocation per tensor sent).
template <class What>
void check_frame_size(std::size_t size, What&& what) {
    if (size > max_frame_size)
        fail(errc::unsupported, what() + " of " + str(size) +
                                    " bytes: libzmq 4.3 cannot carry frames of 2^31 bytes or more");
}

// A list that keeps its first N elements inside itself and the rest in a
// vector: a message's frames and buffers without an allocation for the
// common sizes (perf: the frame and body vectors cost two allocations per
// message received and one per message sent).
template <class T, std::size_t N>
class inline_list {
public:
    inline_list() = default;
    inline_list(const inline_list&) = delete;
    inline_list& operator=(const inline_list&) = delete;
    ~inline_list() { clear(); }

    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
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
    // The elements as one span when they all fit inside, else nothing.
    std::span<T> inline_span() noexcept { return size_ <= N ? std::span<T>(first(), size_) : std::span<T>(); }

private:
    T* first() noexcept { return std::launder(reinterpret_cast<T*>(storage_)); }
    const T* first() const noexcept { return std::launder(reinterpret_cast<const T*>(storage_)); }

    alignas(T) std::byte storage_[N * sizeof(T)];
    std::size_t size_ = 0;
    std::vector<T> rest_;
};

// Frames of one message held on the stack: 8 tensors plus an envelope.
using frame_list = inline_list<zmq::message_t, 20>;

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

    send_slot* slot(std::size_t i) noexcept {
        return std::launder(reinterpret_cast<send_slot*>(reinterpret_cast<std::byte*>(this) + slot_offset)) + i;
    }

    static constexpr std::size_t slot_offset =
        (sizeof(std::atomic<std::size_t>) + sizeof(std::size_t) + alignof(send_slot) - 1) / alignof(send_slot) *
        alignof(send_slot);

    static send_block* create(std::size_t n) {
        static_assert(sizeof(send_block) <= slot_offset);
        void* p = ::operator new(slot_offset + n * sizeof(send_slot));
        auto* b = ::new (p) send_block;
        b->refs.store(n + 1, std::memory_order_relaxed);
        b->slots = n;
        for (std::size_t i = 0; i < n; ++i) ::new (static_cast<void*>(b->slot(i))) send_slot{b, {}};
        return b;
    }
    // Drops `k` references; the last frees the block.
    static void release(send_block* b, std::size_t k = 1) noexcept {
        if (b->refs.fetch_sub(k, std::memory_order_acq_rel) != k) return;
        for (std::size_t i = 0; i < b->slots; ++i) b->slot(i)->~send_slot();
        b->~send_block();
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

mutable_bytes bytes_of(zmq::message_t& m) noexcept {
    return {static_cast<std::byte*>(m.data()), m.size()};
}

void add_envelope(frame_list& frames, std::span<const zmq::const_buffer> envelope) {
    for (const zmq::const_buffer& e : envelope) frames.emplace_back(e.data(), e.size());
}

// Sends prepared frames as one message. Only the first send may report
// would-block: libzmq accepts the rest of a message once its first frame
// is queued.
bool send_frames(zmq::socket_ref socket, frame_list& frames, zmq::send_flags flags) {
    flags = flags & ~zmq::send_flags::sndmore;
    const std::size_t n = frames.size();
    for (std::size_t i = 0; i < n; ++i) {
        const zmq::send_flags f = i + 1 < n ? flags | zmq::send_flags::sndmore : flags;
        if (!socket.send(frames[i], f)) {
            if (i == 0) return false;
            fail(errc::timeout, "frame " + str(i) + " of " + str(n) +
                                    " could not be queued after the first was; the message is cut short");
        }
    }
    // A sent frame is left empty and needs no zmq_msg_close (libzmq's
    // manual says so); perf: the closes cost a library call per frame.
    frames.forget();
    return true;
}

// ---- receives -------------------------------------------------------------------
//
// The data frames of one received message move into one heap block (perf: a
// shared keeper per frame cost an allocation per tensor). Each frame still
// gets its own keeper, a shared_ptr whose control block is carved out of the
// same block: the frame is closed (its bytes released) when the last tensor
// using it goes, so a small tensor kept from a message never pins a large
// frame of the same message. The block itself (bookkeeping, and the bytes of
// frames small enough to live inside zmq_msg_t) is freed with the last
// control block.

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

    // Slot i for a frame, raw storage.
    void* frame_slot(std::size_t i) noexcept { return base() + frame_offset + i * sizeof(zmq::message_t); }

    // Where a frame keeper's control block goes (block_allocator's hooks):
    // a slot of this block, or the heap if it does not fit one. Each keeper
    // holds a reference to the block.
    void* control_space(std::size_t size, std::size_t align) {
        void* p = size <= cb_size && align <= cb_align && cbs_used_ < frames_
                      ? base() + cb_offset(frames_) + cbs_used_++ * cb_size
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
    static constexpr std::size_t frame_offset = round_up(sizeof(std::atomic<std::size_t>) + 3 * sizeof(std::size_t),
                                                         alignof(zmq::message_t));
    static constexpr std::size_t cb_offset(std::size_t frames) {
        return round_up(frame_offset + frames * sizeof(zmq::message_t), cb_align);
    }

    // One per frame's keeper plus the builder's, set up front (perf: an
    // atomic increment per frame).
    std::atomic<std::size_t> refs_{0};
    std::size_t frames_ = 0;
    std::size_t cbs_used_ = 0;
    std::size_t keepers_ = 0;
};

static_assert(alignof(zmq::message_t) <= recv_block::cb_align && alignof(std::max_align_t) >= recv_block::cb_align);

// A frame keeper's deleter: closes the frame (releases its bytes; over
// inproc, runs the sender's free callback). The frame's storage is the
// block's, freed with it.
struct close_frame {
    void operator()(zmq::message_t* m) const noexcept { std::destroy_at(m); }
};

// Which part of a message a receive accepts.
enum class form { any, single, multipart };

// How many leading frames of `frames` are envelope.
std::size_t envelope_size(const frame_list& frames, const envelope_spec& spec) {
    const std::size_t n = frames.size();
    switch (spec.how) {
    case envelope_spec::kind::none:
        return 0;
    case envelope_spec::kind::frames:
        if (spec.count >= n)
            fail(errc::odd_chunk_count, "message of " + str(n) + " frames has no tenbin frame after an envelope of " +
                                            str(spec.count));
        return spec.count;
    case envelope_spec::kind::router:
        // [identity, "", body...] from REQ; [identity, body...] from DEALER.
        // A tenbin header is never empty, but an empty list's single-part
        // frame is: a final empty frame is the body.
        if (n < 2) fail(errc::odd_chunk_count, "message of 1 frame has no tenbin frame after a ROUTER identity");
        return n > 2 && frames[1].size() == 0 ? 2 : 1;
    case envelope_spec::kind::delimited:
        for (std::size_t i = 0; i < n; ++i) {
            if (frames[i].size() != 0) continue;
            if (i + 1 == n)
                fail(errc::odd_chunk_count, "message of " + str(n) + " frames ends with its delimiter (frame " +
                                                str(i) + "): no tenbin frame after the envelope");
            return i + 1;
        }
        fail(errc::odd_chunk_count, "message of " + str(n) + " frames has no empty delimiter frame");
    }
    fail(errc::bad_argument, "unknown envelope_spec kind");
}

// Reads one whole message into `frames`. Returns false when the first frame
// did not come; otherwise every frame of the message has been consumed,
// whatever it throws.
bool receive_frames(zmq::socket_ref socket, const recv_options& opt, frame_list& frames) {
    zmq::message_t& first = frames.emplace_back();
    if (!socket.recv(first, opt.flags)) return false;
    bool more = first.more();
    std::size_t count = 1;
    bool over = count > opt.max_frames;
    if (over) frames.clear();
    std::optional<zmq::message_t> spare;  // made only when needed (perf)
    while (more) {
        // Frames past max_frames are read into `spare` and dropped.
        zmq::message_t& part = over ? (spare ? *spare : spare.emplace()) : frames.emplace_back();
        // Already here (messages arrive whole): never wait for it.
        if (!socket.recv(part, zmq::recv_flags::dontwait))
            fail(errc::truncated, "frame " + str(count) + " of a multipart message was not there after frame " +
                                      str(count - 1));
        more = part.more();
        ++count;
        if (!over && count > opt.max_frames) {
            over = true;
            frames.clear();
        }
    }
    if (over)
        fail(errc::limit_exceeded, "message of " + str(count) + " frames exceeds recv_options::max_frames = " +
                                       str(opt.max_frames));
    return true;
}

std::optional<message> receive(zmq::socket_ref socket, const recv_options& opt, form want) {
    frame_list frames;
    if (!receive_frames(socket, opt, frames)) return std::nullopt;

    message out;
    const std::size_t skip = envelope_size(frames, opt.envelope);
    if (skip) {
        out.envelope.reserve(skip);
        for (std::size_t i = 0; i < skip; ++i) out.envelope.push_back(std::move(frames[i]));
    }

    const std::size_t n = frames.size() - skip;
    // Header frames of the multipart form are only read while decoding, so
    // they are borrowed from `frames` (alive and unmoved until the end of
    // this function); data frames (every other one, or the one frame of the
    // single-part form) move into the message's block.
    const bool multipart = n > 1;
    const std::size_t data_frames = multipart ? n / 2 : 1;
    inline_list<buffer, 16> body;
    {
        recv_block* block = recv_block::create(data_frames);
        struct drop_builder_ref {
            recv_block* b;
            ~drop_builder_ref() { recv_block::builder_done(b); }
        } builder{block};
        std::size_t slot = 0;
        for (std::size_t i = 0; i < n; ++i) {
            zmq::message_t& f = frames[skip + i];
            if (multipart && i % 2 == 0) {
                body.emplace_back(buffer::borrow(bytes_of(f)));
                continue;
            }
            // Moved before data() is taken: a small frame's bytes are
            // inside the message object.
            auto* m = ::new (block->frame_slot(slot++)) zmq::message_t(std::move(f));
            const mutable_bytes bytes = bytes_of(*m);
            // If allocating the control block throws, close_frame has closed m.
            buffer::keeper_type keeper(std::shared_ptr<zmq::message_t>(m, close_frame{},
                                                                       detail::block_allocator<zmq::message_t, recv_block>(block)));
            // Read-only: over inproc the bytes may be the sender's memory.
            body.emplace_back(buffer::share(std::move(keeper), bytes, false));
        }
    }

    out.single = n == 1;
    try {
        if (n == 1) {
            if (want == form::multipart && !body[0].empty())
                fail(errc::odd_chunk_count, "1 tenbin frame of " + str(body[0].size()) +
                                                " bytes: a header without data, or a single-part message "
                                                "(zrecv accepts either form)");
            out.tensors = decode_buffer(body[0], opt.decode);
        } else {
            if (want == form::single)
                fail(errc::odd_chunk_count, str(n) + " tenbin frames: a single-part message has one "
                                                     "(zrecv accepts either form)");
            if (std::span<buffer> all = body.inline_span(); all.size() == n) {
                out.tensors = detail::decode_list_taking(all, opt.decode);
            } else {
                std::vector<buffer> spilled;
                spilled.reserve(n);
                for (std::size_t i = 0; i < n; ++i) spilled.push_back(std::move(body[i]));
                body.clear();
                out.tensors = detail::decode_list_taking(spilled, opt.decode);
            }
        }
    } catch (const error& e) {
        const std::string where = n == 1 ? "single-part message of " + str(body[0].size()) + " bytes"
                                         : "multipart message of " + str(n) + " tenbin frames";
        throw error(e.code(), where + ": " + e.what());
    }

    // libzmq gives no alignment guarantee; typed access needs one.
    for (tensor& t : out.tensors)
        if (!t.data().aligned_to(itemsize(t.dtype()))) t = t.aligned();
    return out;
}

}  // namespace

bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    const std::size_t size = encoded_size(tensors);
    check_frame_size(size, [] { return std::string("single-part message"); });
    frame_list frames;
    add_envelope(frames, opt.envelope);
    zmq::message_t& body = frames.emplace_back(size);
    encode_buffer_into(tensors, bytes_of(body));
    return send_frames(socket, frames, opt.flags);
}

namespace {

// True when tensor i's data goes to ZeroMQ as it is (see zsend_multipart).
bool sends_zero_copy(const buffer* owner, bytes_view data, std::size_t threshold) noexcept {
    return owner && owner->owned() && !data.empty() && data.size() >= threshold && owner->data() == data.data() &&
           owner->size() == data.size();
}

}  // namespace

bool zsend_multipart(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    frame_list frames;
    add_envelope(frames, opt.envelope);
    // The empty list: no multipart form exists, send the single-part one.
    if (tensors.empty()) frames.emplace_back();

    // One block for the keepers of all zero-copy frames, if any.
    std::size_t zero_copy_count = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const buffer* owner = tensors.owner(i);
        if (owner && sends_zero_copy(owner, owner->bytes(), opt.copy_threshold)) ++zero_copy_count;
    }
    send_block* keepers = zero_copy_count ? send_block::create(zero_copy_count) : nullptr;
    std::size_t used = 0;  // slots handed to ZeroMQ
    struct drop_builder_refs {
        send_block* b;
        const std::size_t& used;
        ~drop_builder_refs() {
            if (b) send_block::release(b, 1 + b->slots - used);
        }
    } builder{keepers, used};

    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view t = tensors[i];
        zmq::message_t& header = frames.emplace_back(header_size(t.ndim()));
        try {
            detail::encode_header_of(tensors, i, bytes_of(header));
        } catch (const error& e) {
            throw error(e.code(), "tensor " + str(i) + ": " + e.what());
        }
        check_frame_size(t.data.size(), [&] { return "tensor " + str(i) + ": data frame"; });

        const buffer* owner = tensors.owner(i);
        if (sends_zero_copy(owner, t.data, opt.copy_threshold) && used < zero_copy_count) {
            zero_copy_frame(frames, *owner, *keepers->slot(used));
            ++used;
        } else {
            frames.emplace_back(t.data.data(), t.data.size());
        }
    }
    return send_frames(socket, frames, opt.flags);
}

std::optional<message> zrecv(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::any);
}

std::optional<message> zrecv_single(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::single);
}

std::optional<message> zrecv_multipart(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::multipart);
}

}  // namespace tenbin
