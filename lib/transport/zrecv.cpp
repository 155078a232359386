// tenbin over ZeroMQ, receiving: the frames of a message kept where they
// arrived, envelopes taken off, receive limits set on sockets.
#include "transport/zmq_common.hpp"
#include "transport/frames.hpp"

#include "core/block_allocator.hpp"
#include "core/codec_detail.hpp"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

namespace tenbin {

namespace {

using detail::inline_list;
using detail::interrupted;
using detail::str;

// "1 frame", "3 frames".
std::string frames_text(std::size_t n) { return str(n) + (n == 1 ? " frame" : " frames"); }

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

// Which part of a message a receive accepts.
enum class form { any, single, multipart };

// Whether `frames` start as a plain tenbin message does: one frame that is
// empty or a chunk, or a first frame that reads as a tensor header. Read
// only for a subscriber's message whose first frame is not its topic.
bool plain_tenbin(const incoming_list& frames) {
    const bytes_view first = frames[0].bytes();
    if (frames.size() == 1)
        return first.empty() || (first.size() >= sizeof chunk_magic &&
                                 std::memcmp(first.data(), chunk_magic, sizeof chunk_magic) == 0);
    try {
        (void)decode_header(first);
        return true;
    } catch (const error&) {
        return false;
    }
}

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
        // frame is: a final empty frame is the body, and so is one followed
        // only by its position frame.
        return n > 2 && frames[1].size() == 0 && !(n == 3 && is_position_frame(frames[2].bytes())) ? 2 : 1;
    case envelope_spec::kind::delimited:
        for (std::size_t i = 0; i < n; ++i)
            if (frames[i].size() == 0) return i + 1;
        throw error(errc::odd_chunk_count, "message of " + frames_text(n) + " has no empty delimiter frame");
    case envelope_spec::kind::topic: {
        const bytes_view first = frames[0].bytes();
        const bool named = first.size() == spec.name.size() &&
                           std::memcmp(first.data(), spec.name.data(), first.size()) == 0;
        return named || !plain_tenbin(frames) ? 1 : 0;
    }
    }
    throw error(errc::bad_argument, "unknown envelope_spec kind");
}

// What a message that is all envelope lacks, for its error.
std::string nothing_after(std::size_t n, const envelope_spec& spec) {
    switch (spec.how) {
    case envelope_spec::kind::router:
        return "message of " + frames_text(n) + " has no tenbin frame after a ROUTER identity";
    case envelope_spec::kind::delimited:
        return "message of " + frames_text(n) + " ends with its delimiter (frame " + str(n - 1) +
               "): no tenbin frame after the envelope";
    case envelope_spec::kind::topic:
        return "message of " + frames_text(n) + " has no tenbin frame after its topic frame";
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
            throw error(errc::truncated, "frame " + str(count) +
                                             " of a multipart message was not there after frame " + str(count - 1));
        more = part.more();
        ++count;
        if (!over && count > opt.max_frames) {
            over = true;
            frames.clear();
        }
    }
    if (over)
        throw error(errc::limit_exceeded, "message of " + str(count) +
                                              " frames exceeds recv_options::max_frames = " + str(opt.max_frames));
    return true;
}

// Splits off the envelope of `frames` into `out.envelope` and returns how
// many frames it took; refuses a message with nothing after it.
std::size_t take_envelope(incoming_list& frames, const envelope_spec& spec, message& out) {
    const std::size_t skip = envelope_size(frames, spec);
    if (skip) {
        out.envelope.reserve(skip);
        for (std::size_t i = 0; i < skip; ++i) out.envelope.push_back(frames[i].take_message());
    }
    if (skip == frames.size()) fail_with_envelope(out.envelope, errc::odd_chunk_count, nothing_after(skip, spec));
    return skip;
}

// Parses a producer's position frame, which comes last (see position.hpp),
// into `out.position`; returns how many frames after the `skip` envelope
// frames are the message's body.
std::size_t take_position(const incoming_list& frames, std::size_t skip, message& out) {
    std::size_t n = frames.size() - skip;
    if (n >= 2 && is_position_frame(frames[frames.size() - 1].bytes())) {
        try {
            out.position = decode_position(frames[frames.size() - 1].bytes());
        } catch (const error& e) {
            fail_with_envelope(out.envelope, e.code(), std::string("the message's last frame: ") + e.what());
        }
        --n;
    }
    return n;
}

// Receives into `out`, reusing its storage; `out` is left empty when
// nothing came and when this throws.
bool receive_into(zmq::socket_ref socket, const recv_options& opt, form want, message& out) try {
    out.tensors.clear();
    out.envelope.clear();
    out.single = false;
    out.position.reset();
    incoming_list frames;
    if (!receive_frames(socket, opt, frames)) return false;

    const std::size_t skip = take_envelope(frames, opt.envelope, out);

    const std::size_t n = take_position(frames, skip, out);
    out.single = n == 1;
    recv_block* block = recv_block::create(n > 1 ? n / 2 : 1);
    struct drop_builder_ref {
        recv_block* b;
        ~drop_builder_ref() { recv_block::builder_done(b); }
    } builder{block};
    // A +shm message's first frame is a header of its own kind (the codec
    // names it): no missing envelope to hint at. Read before decoding
    // hands the frames over.
    const bool shm = frames[skip].size() >= sizeof shm_magic &&
                     std::memcmp(frames[skip].bytes().data(), shm_magic, sizeof shm_magic) == 0;
    received_frames tenbin_frames(frames, skip, n, block);
    try {
        if (n == 1) {
            const std::size_t size = frames[skip].size();
            if (want == form::multipart && size != 0)
                throw error(errc::odd_chunk_count,
                            "not multipart: a header without its data, or a single-part message "
                            "(zrecv accepts either form)");
            detail::decode_buffer_into(tenbin_frames.take(0), opt.decode, out.tensors,
                                       out.position ? nullptr : &out.position);
        } else {
            if (want == form::single)
                throw error(errc::odd_chunk_count, "not single-part, which is one tenbin frame "
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
        const bool missing = opt.envelope.how == envelope_spec::kind::none && n > 1 && !shm &&
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
    out.position.reset();
    throw;
}

std::optional<message> receive(zmq::socket_ref socket, const recv_options& opt, form want) {
    std::optional<message> out(std::in_place);
    if (!receive_into(socket, opt, want, *out)) out.reset();
    return out;
}

}  // namespace

bool detail::zrecv_frames(zmq::socket_ref socket, const recv_options& opt, message& out,
                          std::vector<zmq::message_t>& body) try {
    out.tensors.clear();
    out.envelope.clear();
    out.position.reset();
    body.clear();
    incoming_list frames;
    if (!receive_frames(socket, opt, frames)) return false;
    const std::size_t skip = take_envelope(frames, opt.envelope, out);
    const std::size_t n = take_position(frames, skip, out);
    body.reserve(n);
    for (std::size_t i = 0; i < n; ++i) body.push_back(frames[skip + i].take_message());
    return true;
} catch (...) {
    out.envelope.clear();
    out.position.reset();
    body.clear();
    throw;
}

malformed_message::malformed_message(errc code, const std::string& message, std::vector<std::string> envelope)
    : error(code, message), envelope_(std::make_shared<const std::vector<std::string>>(std::move(envelope))) {}

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
