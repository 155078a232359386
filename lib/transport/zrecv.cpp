// tenbin over ZeroMQ, receiving: the frames of a message kept where they
// arrived, envelopes taken off, receive limits set on sockets.
#include "transport/zmq_common.hpp"
#include "transport/frames.hpp"
#include "transport/received_frames.hpp"

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

using detail::incoming;
using detail::incoming_list;
using detail::recv_block;
using detail::received_frames;

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

    detail::align_received(out.tensors);
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
