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
#include "transport/block_pool.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

namespace tenbin {

namespace {

std::string str(std::size_t n) { return std::to_string(n); }
// A blocking send or receive that a signal handler interrupted is begun
// again (the socket's timeout with it), as pyzmq does: the caller's signal
// handlers, a profiler's SIGPROF, must not fail a receive or end a loader.
bool interrupted(int rc) noexcept { return rc < 0 && zmq_errno() == EINTR; }

// "1 frame", "3 frames".
std::string frames_text(std::size_t n) { return str(n) + (n == 1 ? " frame" : " frames"); }

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
        fail(errc::timeout, "frame " + str(i) + " of " + str(frames_) +
                                " could not be queued after the first was; the message is cut short");
    }

    void* socket_;
    int flags_;
    std::size_t frames_;
    std::size_t next_ = 0;
};

// ---- receives -------------------------------------------------------------------
//
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
    received_frames(incoming_list& frames, std::size_t skip, recv_block* block) noexcept
        : frames_(frames), skip_(skip), block_(block) {}

    std::size_t size() const noexcept override { return frames_.size() - skip_; }
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
    recv_block* block_;
};

// Which part of a message a receive accepts.
enum class form { any, single, multipart };

// How many leading frames of `frames` are envelope: all of them when the
// message has nothing after its envelope (the caller refuses it, with the
// envelope, so that a subscriber still sees its topic).
std::size_t envelope_size(const incoming_list& frames, const envelope_spec& spec) {
    const std::size_t n = frames.size();
    switch (spec.how) {
    case envelope_spec::kind::none:
        return 0;
    case envelope_spec::kind::frames:
        return std::min(spec.count, n);
    case envelope_spec::kind::router:
        // [identity, "", body...] from REQ; [identity, body...] from DEALER.
        // A tenbin header is never empty, but an empty list's single-part
        // frame is: a final empty frame is the body.
        return n > 2 && frames[1].size() == 0 ? 2 : 1;
    case envelope_spec::kind::delimited:
        for (std::size_t i = 0; i < n; ++i)
            if (frames[i].size() == 0) return i + 1;
        fail(errc::odd_chunk_count, "message of " + frames_text(n) + " has no empty delimiter frame");
    }
    fail(errc::bad_argument, "unknown envelope_spec kind");
}

// What a message that is all envelope lacks, for its error.
std::string nothing_after(std::size_t n, const envelope_spec& spec) {
    switch (spec.how) {
    case envelope_spec::kind::router:
        return "message of " + frames_text(n) + " has no tenbin frame after a ROUTER identity";
    case envelope_spec::kind::delimited:
        return "message of " + frames_text(n) + " ends with its delimiter (frame " + str(n - 1) +
               "): no tenbin frame after the envelope";
    default:
        return "message of " + frames_text(n) + " has no tenbin frame after an envelope of " + str(spec.count);
    }
}

// Throws `code` and `text`, with the envelope when the message had one.
[[noreturn]] void fail_with_envelope(const std::vector<zmq::message_t>& envelope, errc code, const std::string& text) {
    if (envelope.empty()) throw error(code, text);
    std::vector<std::string> copy;
    for (const zmq::message_t& f : envelope) copy.emplace_back(f.data<char>(), f.size());
    throw malformed_message(code, text, std::move(copy));
}

// Reads one whole message into `frames`. Returns false when the first frame
// did not come; otherwise every frame of the message has been consumed,
// whatever it throws.
bool receive_frames(zmq::socket_ref socket, const recv_options& opt, incoming_list& frames) {
    if (!frames.emplace_back().receive(socket, static_cast<int>(opt.flags))) return false;
    bool more = frames[0].more();
    std::size_t count = 1;
    bool over = count > opt.max_frames;
    if (over) frames.clear();
    std::optional<incoming> spare;  // made only when needed (perf)
    while (more) {
        // Frames past max_frames are read into `spare` and dropped.
        incoming& part = over ? (spare ? *spare : spare.emplace()) : frames.emplace_back();
        // Already here (messages arrive whole): never wait for it.
        if (!part.receive(socket, ZMQ_DONTWAIT))
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

// Receives into `out`, reusing its storage; `out` is left empty when
// nothing came and when this throws.
bool receive_into(zmq::socket_ref socket, const recv_options& opt, form want, message& out) try {
    out.tensors.clear();
    out.envelope.clear();
    out.single = false;
    incoming_list frames;
    if (!receive_frames(socket, opt, frames)) return false;

    const std::size_t skip = envelope_size(frames, opt.envelope);
    if (skip) {
        out.envelope.reserve(skip);
        for (std::size_t i = 0; i < skip; ++i) out.envelope.push_back(frames[i].take_message());
    }
    if (skip == frames.size())
        fail_with_envelope(out.envelope, errc::odd_chunk_count, nothing_after(skip, opt.envelope));

    const std::size_t n = frames.size() - skip;
    out.single = n == 1;
    recv_block* block = recv_block::create(n > 1 ? n / 2 : 1);
    struct drop_builder_ref {
        recv_block* b;
        ~drop_builder_ref() { recv_block::builder_done(b); }
    } builder{block};
    received_frames tenbin_frames(frames, skip, block);
    try {
        if (n == 1) {
            const std::size_t size = frames[skip].size();
            if (want == form::multipart && size != 0)
                fail(errc::odd_chunk_count, "not multipart: a header without its data, or a single-part message "
                                            "(zrecv accepts either form)");
            out.tensors = decode_buffer(tenbin_frames.take(0), opt.decode);
        } else {
            if (want == form::single)
                fail(errc::odd_chunk_count, "not single-part, which is one tenbin frame "
                                            "(zrecv accepts either form)");
            detail::decode_list_into(tenbin_frames, opt.decode, out.tensors);
        }
    } catch (const error& e) {
        const std::string where = n == 1 ? "single-part message of " + str(frames[skip].size()) + " bytes"
                                         : "multipart message of " + str(n) + " tenbin frames";
        // Frames an envelope should have taken (a ROUTER's identity, a PUB
        // topic) show as an odd frame count or a first frame too short or
        // ragged to be a header; an envelope taken off messages that carry
        // none leaves the rest broken.
        const std::size_t first = frames[skip].size();
        const bool missing = opt.envelope.how == envelope_spec::kind::none && n > 1 &&
                             (n % 2 == 1 || first < header_size(0) || first % 8 != 0);
        const bool taken = opt.envelope.how == envelope_spec::kind::frames;
        // Behind a proxy or over several hops, each ROUTER on the way adds
        // an identity.
        const bool routed = opt.envelope.how == envelope_spec::kind::router;
        const std::string text =
            where + ": " + e.what() +
            (missing ? " (a ROUTER identity or PUB topic in front? see recv_options::envelope)"
             : taken ? " (recv_options::envelope took " + frames_text(skip) +
                           " off the front: does the sender put them there?)"
             : routed ? " (envelope_spec::router() took " + frames_text(skip) +
                            " off the front; behind a proxy or several ROUTER hops more identities come "
                            "first: envelope_spec::delimited() takes all up to the empty delimiter)"
                      : "");
        fail_with_envelope(out.envelope, e.code(), text);
    }

    // libzmq gives no alignment guarantee; typed access needs one. The
    // copy stays read-only, like every received tensor.
    for (tensor& t : out.tensors)
        if (!t.data().aligned_to(itemsize(t.dtype()))) t = t.aligned();
    return true;
} catch (...) {
    out.tensors.clear();
    out.envelope.clear();
    throw;
}

std::optional<message> receive(zmq::socket_ref socket, const recv_options& opt, form want) {
    std::optional<message> out(std::in_place);
    if (!receive_into(socket, opt, want, *out)) out.reset();
    return out;
}

}  // namespace

malformed_message::malformed_message(errc code, const std::string& message, std::vector<std::string> envelope)
    : error(code, message), envelope_(std::make_shared<const std::vector<std::string>>(std::move(envelope))) {}

bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    const std::size_t size = encoded_size(tensors);
    check_frame_size(size, [] { return std::string("single-part message"); });
    zmq::message_t body(size);
    encode_buffer_into(tensors, {static_cast<std::byte*>(body.data()), size});
    frame_sender out(socket, opt.flags, opt.envelope.size() + 1);
    return out.envelope(opt.envelope) && out.send(body);
}

namespace {

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
        try {
            detail::encode_header_of(tensors, i, {headers.append(size), size});
        } catch (const error& e) {
            throw error(e.code(), "tensor " + str(i) + ": " + e.what());
        }
        check_frame_size(t.data.size(), [&] { return "tensor " + str(i) + ": data frame"; });
        if (const buffer* owner = tensors.owner(i); sends_zero_copy(owner, opt.copy_threshold)) {
            if (!keepers.b) keepers.b = send_block::create(n - i);
            zero_copy_frame(zero_copy, *owner, *keepers.b->slot(keepers.made));
            ++keepers.made;
        }
    }

    // The empty list: no multipart form exists, send the single-part one.
    frame_sender out(socket, opt.flags, opt.envelope.size() + std::max<std::size_t>(2 * n, 1));
    if (!out.envelope(opt.envelope)) return false;
    if (n == 0) return out.copy({});
    const std::byte* at = headers.data();
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
    return true;
}

void limit_message_size(zmq::socket_ref socket, const limits& l) {
    // A single-part message carries its tensors plus chunk preambles,
    // headers and padding; this allowance covers them for any sane tensor
    // count.
    constexpr std::int64_t allowance = std::int64_t{1} << 26;
    const std::int64_t size = l.max_bytes < static_cast<std::uint64_t>(INT64_MAX - allowance)
                                  ? static_cast<std::int64_t>(l.max_bytes) + allowance
                                  : -1;  // libzmq's "no limit"
    const int rc = zmq_setsockopt(socket.handle(), ZMQ_MAXMSGSIZE, &size, sizeof size);
    if (rc != 0) throw zmq::error_t();
}

void bound_receive(zmq::socket_ref socket, const limits& l, int recv_hwm) {
    socket.set(zmq::sockopt::rcvhwm, recv_hwm);
    limit_message_size(socket, l);
}

zmq::socket_t bounded_socket(zmq::context_t& context, zmq::socket_type type, const limits& l, int recv_hwm) {
    zmq::socket_t socket(context, type);
    bound_receive(socket, l, recv_hwm);
    return socket;
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

bool zrecv(zmq::socket_ref socket, message& into, const recv_options& opt) {
    return receive_into(socket, opt, form::any, into);
}

bool zrecv_single(zmq::socket_ref socket, message& into, const recv_options& opt) {
    return receive_into(socket, opt, form::single, into);
}

bool zrecv_multipart(zmq::socket_ref socket, message& into, const recv_options& opt) {
    return receive_into(socket, opt, form::multipart, into);
}

}  // namespace tenbin
