// tenbin: tensors over ZeroMQ sockets the caller owns (cppzmq).
//
// Two wire forms, exactly as Python tensorcom sends them:
//   single-part: one frame holding encode_buffer(tensors)
//   multipart:   frames [header_0, data_0, header_1, data_1, ...]
// Either may be preceded by envelope frames (ROUTER identities, a PUB topic,
// a caller's own prefix); without an envelope the wire is exactly tensorcom's.
// A message with one tenbin frame is single-part; a tenbin header frame is
// never empty, which is how an empty delimiter frame is told apart.
//
// An empty list has no multipart form (a message needs a frame), so
// zsend_multipart sends it as the single-part form of nothing: one empty
// frame, which every receiver decodes as an empty list.
//
// Zero-copy: a multipart send hands ZeroMQ each tensor's own bytes when the
// tensor owns them (see `buffer`); ZeroMQ's release of the frame drops the
// reference, on a ZeroMQ thread; each frame drops its own reference, so a
// tensor's memory goes back as soon as ZeroMQ is done with its frame. A
// received tensor's bytes are the received frame, which it keeps alive
// (after the socket and context are gone, too); see `zrecv` for what else.
//
// Sockets are used as libzmq allows: one thread at a time per socket.
#pragma once

#include <tenbin/core.hpp>
#include <tenbin/position.hpp>

#include <zmq.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// Envelope frames in front of the tenbin frames.
struct envelope_spec {
    /// How the envelope's end is found.
    enum class kind {
        none,    ///< no envelope: the first frame is a tenbin frame
        frames,  ///< exactly `count` frames (e.g. a PUB topic: 1)
        router,  ///< one identity frame, then an empty delimiter if present
                 ///< (a REQ peer sends one, a DEALER peer does not); an
                 ///< empty frame that is the message's last is the body
                 ///< (an empty list), not a delimiter
        delimited,  ///< every frame up to and including the first empty one;
                    ///< the sender must always send the delimiter, since a
                    ///< zero-size tensor's data frame is empty too
        topic,  ///< a subscriber's topic `name` (see `topic(name)`)
    };
    /// Which rule applies.
    kind how = kind::none;
    /// Frames in the envelope, for `kind::frames`.
    std::size_t count = 0;
    /// The subscribed topic, for `kind::topic`.
    std::string name{};

    /// No envelope (Python tensorcom's wire).
    static envelope_spec none() { return {}; }
    /// Exactly `n` envelope frames.
    static envelope_spec frames(std::size_t n) { return {kind::frames, n}; }
    /// One topic frame (PUB/SUB with topics).
    static envelope_spec topic() { return {kind::frames, 1}; }
    /// What a SUB subscribed to `name` receives: the topic frame of a
    /// tenbin publisher, or nothing in front of a plain tenbin message
    /// (Python tensorcom's publishers send no topic frame; its `#topic` is
    /// a ZeroMQ prefix subscription matching a message's first bytes). The
    /// frame in front of a message of a longer topic ("training" for
    /// "train": ZeroMQ's prefix match lets it through) is taken as its
    /// envelope too: compare it with `name` to skip such messages.
    static envelope_spec topic(std::string name) { return {kind::topic, 0, std::move(name)}; }
    /// A ROUTER's identity frame and optional delimiter.
    static envelope_spec router() { return {kind::router, 0}; }
    /// Every frame up to and including the first empty one. Only for
    /// senders that always send the delimiter: without one, the empty data
    /// frame of a zero-size tensor is taken for it, and the frames before
    /// it for an envelope.
    static envelope_spec delimited() { return {kind::delimited, 0}; }
};

/// Data frames smaller than this are copied instead of handed to ZeroMQ.
/// A copied frame is a block libzmq allocates on the sending thread and
/// another thread frees; a zero-copy one costs a small block and a
/// reference to the tensor instead. Zero-copy measured as fast or faster
/// from 512 bytes up (the README's performance notes have the numbers).
inline constexpr std::size_t default_copy_threshold = 512;

/// libzmq 4.3.4 fails on frames of 2^31 bytes or more; senders refuse them
/// (errc::unsupported) before anything is sent.
inline constexpr std::size_t max_frame_size = (std::size_t{1} << 31) - 1;

/// How `zsend_single` and `zsend_multipart` send. The options borrow the
/// envelope frames for the duration of the call only.
struct send_options {
    /// zmq::send_flags::dontwait makes a full queue return false instead of
    /// blocking. sndmore is ignored: the library sets it where needed and
    /// always ends the message.
    zmq::send_flags flags = zmq::send_flags::none;
    /// Frames sent before the tenbin frames (e.g. a ROUTER identity and an
    /// empty delimiter, a topic). Sent as given, copied; see
    /// `message::envelope_buffers` to reply with a received envelope.
    std::span<const zmq::const_buffer> envelope{};
    /// Data frames of at least this many bytes go zero-copy (multipart).
    /// 0 forces zero-copy for every owned tensor with data; SIZE_MAX forces
    /// copies.
    std::size_t copy_threshold = default_copy_threshold;
    /// Where the message stands in its producer's stream: sent as a
    /// position frame after the tenbin frames (see position.hpp), which
    /// Python tensorcom's receivers ignore. Borrowed for the call.
    const stream_position* position = nullptr;
};

/// How `zrecv`, `zrecv_single` and `zrecv_multipart` receive and decode.
struct recv_options {
    /// zmq::recv_flags::dontwait: return nothing instead of blocking.
    zmq::recv_flags flags = zmq::recv_flags::none;
    /// Envelope frames expected in front of the tenbin frames.
    envelope_spec envelope{};
    /// Limits and expected infos for the decoded tensors.
    decode_options decode{};
    /// Frames in one message (envelope included) beyond which the message
    /// is refused with limit_exceeded; the rest of it is still drained.
    std::size_t max_frames = 2 * (std::size_t{1} << 16) + 16;
};

/// What one receive produced. Move-only, as its envelope's ZeroMQ frames
/// are; copying the tensors (`message::tensors`) shares their bytes.
struct message {
    /// The decoded tensors; they keep the received frames alive.
    std::vector<tensor> tensors;
    /// The envelope frames, as received (empty without an envelope).
    std::vector<zmq::message_t> envelope;
    /// True when the message had one tenbin frame (the single-part form).
    bool single = false;
    /// The position frame the producer sent after the tenbin frames, if any
    /// (see position.hpp).
    std::optional<stream_position> position;

    /// Views of the envelope frames, for `send_options::envelope` (a ROUTER
    /// replying to this message's sender). Valid while `envelope` is.
    std::vector<zmq::const_buffer> envelope_buffers() const {
        std::vector<zmq::const_buffer> out;
        out.reserve(envelope.size());
        for (const auto& m : envelope) out.emplace_back(m.data(), m.size());
        return out;
    }
};

/// What zrecv throws for a malformed message whose envelope it could split
/// off: the codec's error (same code, same text), plus the envelope's bytes,
/// so that a ROUTER can still answer the peer that sent it (a REQ peer
/// waits for an answer). Catching `tenbin::error` catches it too.
class malformed_message : public error {
public:
    /// The error `code` with `what()` = `message`, and the envelope's bytes.
    malformed_message(errc code, const std::string& message, std::vector<std::string> envelope);
    /// The envelope frames' bytes, as received.
    const std::vector<std::string>& envelope() const noexcept { return *envelope_; }
    /// Views of them for `send_options::envelope`, valid while this error is.
    std::vector<zmq::const_buffer> envelope_buffers() const {
        std::vector<zmq::const_buffer> out;
        out.reserve(envelope_->size());
        for (const auto& f : *envelope_) out.emplace_back(f.data(), f.size());
        return out;
    }

private:
    // Shared: an exception is copied when thrown and caught.
    std::shared_ptr<const std::vector<std::string>> envelope_;
};

/// Sends `tensors` as one single-part message: the encoding is written
/// straight into the outgoing message (one copy of the data in total).
/// Returns false when `dontwait` was given and the message could not be
/// queued, or the socket's send timeout expired (nothing was sent). Throws
/// `error(bad_argument)` for tensors the format cannot carry,
/// `error(unsupported)` when the encoding reaches 2^31 bytes, and
/// zmq::error_t for socket errors; in each case nothing was sent.
[[nodiscard]] bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt = {});

/// Sends `tensors` as one multipart message [header, data, ...]. Data of
/// owned tensors (`tensor`, not `tensor_view`; not `buffer::borrow`) at or
/// above the copy threshold is handed to ZeroMQ without a copy: ZeroMQ
/// holds a reference to the tensor's buffer until it has sent (or, over
/// inproc, until the receiver has dropped) the frame, then drops it on one
/// of its threads. Meanwhile `tensor::mutable_values` copies rather than
/// write to those bytes (a `tensor_pool` gives fresh ones); only memory
/// written behind the library's back (raw pointers kept from before, a
/// `buffer::adopt` caller's own) can change in flight. Other data is
/// copied. Every frame is built before the first is sent, so a message is
/// sent whole or not at all: returns false as zsend_single does. Throws
/// bad_argument, or unsupported for a data frame of 2^31 bytes or more,
/// before sending anything. A socket error after the first frame was queued
/// throws zmq::error_t; libzmq then drops the partial message.
[[nodiscard]] bool zsend_multipart(zmq::socket_ref socket, tensor_span tensors, const send_options& opt = {});

/// Receives one message in either form (one tenbin frame = single-part).
/// Returns nothing when `dontwait` was given and no message was waiting, or
/// the socket's receive timeout (ZMQ_RCVTIMEO) expired; a wait a signal
/// interrupted is begun again. Call it between messages: frames of your own
/// in front of the tenbin ones are taken by `opt.envelope`.
///
/// Malformed input throws the typed error (the codec's, limit_exceeded for
/// `max_frames`, odd_chunk_count when the frames do not fit the envelope or
/// the form; a `malformed_message` carrying the envelope when one was split
/// off) after draining the message, so the next receive starts at a message
/// boundary. Socket errors throw zmq::error_t.
///
/// The tensors view the received frames and keep them alive, read-only
/// (over inproc they may be the sender's memory; `tensor::copy` to write).
/// Each keeps only its own frame, so a kept small tensor never pins a large
/// one; a single-part message is one frame that all its tensors share.
/// Bytes not aligned for their dtype are copied (read-only too), so
/// `values<T>()` always works. ZMQ_CONFLATE suits the single-part form only.
[[nodiscard]] std::optional<message> zrecv(zmq::socket_ref socket, const recv_options& opt = {});

/// Receives one single-part message: a message with more than one tenbin
/// frame is drained and refused with odd_chunk_count (use `zrecv` to accept
/// either form). Otherwise the same contract as `zrecv`.
[[nodiscard]] std::optional<message> zrecv_single(zmq::socket_ref socket, const recv_options& opt = {});

/// Receives one multipart message: a single non-empty tenbin frame is
/// refused with odd_chunk_count (a header with no data, or a single-part
/// message: use `zrecv` to accept either). One empty frame is the empty
/// list, as zsend_multipart sends it. Otherwise the same contract as `zrecv`.
[[nodiscard]] std::optional<message> zrecv_multipart(zmq::socket_ref socket, const recv_options& opt = {});

/// The same three receives into a message the caller keeps, as libzmq's
/// zmq_msg_recv reuses a zmq_msg_t: `into`'s tensors and envelope are
/// dropped first (releasing their frames, unless copies of the tensors
/// live on elsewhere), then the message is received into it. A multipart
/// message's tensors go into the list's existing storage, so a loop that
/// receives them into one `message` allocates no list per message (for a
/// one-tensor message about 200 instructions, a tenth of the receiving
/// thread's). Returns false where the others return nothing; `into` is
/// then empty, and it is empty after an exception too. Otherwise the same
/// contract as the form's function above.
[[nodiscard]] bool zrecv(zmq::socket_ref socket, message& into, const recv_options& opt = {});
/// `zrecv_single` into a message the caller keeps (see `zrecv(socket, into)`).
[[nodiscard]] bool zrecv_single(zmq::socket_ref socket, message& into, const recv_options& opt = {});
/// `zrecv_multipart` into a message the caller keeps (see `zrecv(socket, into)`).
[[nodiscard]] bool zrecv_multipart(zmq::socket_ref socket, message& into, const recv_options& opt = {});

/// Bounds what a peer can make `socket` allocate, as a `connection` does:
/// sets ZMQ_MAXMSGSIZE to `l.max_bytes` plus 64 MiB (room for a single-part
/// message's headers and padding), so that libzmq disconnects a peer sending
/// a larger frame before it allocates the frame. The decoder's own limits
/// come after the allocation: pass the same `l` in `recv_options::decode`.
/// libzmq applies the option to connections made after it is set: call this
/// before `bind` and `connect`. A `max_bytes` within 64 MiB of 2^63 leaves
/// the socket unbounded. Throws zmq::error_t for socket errors.
void limit_message_size(zmq::socket_ref socket, const limits& l = {});

/// Receive high-water mark, in messages per peer, of the sockets tenbin
/// makes (`connection_options::recv_hwm`, `bounded_socket`). libzmq's own
/// default of 1000 lets a flooding peer queue 1000 messages in the receiver.
inline constexpr int default_recv_hwm = 16;

/// Bounds what peers can make `socket` hold, as a `connection` does: sets
/// ZMQ_RCVHWM to `recv_hwm` (a full queue makes libzmq stop reading from
/// the peer) and calls `limit_message_size(socket, l)`. A receiver then
/// holds at most `recv_hwm` messages of at most `l.max_bytes` + 64 MiB per
/// connected peer, whatever they send. Call it before `bind` and `connect`.
/// Throws zmq::error_t for socket errors.
void bound_receive(zmq::socket_ref socket, const limits& l = {}, int recv_hwm = default_recv_hwm);

/// A new socket of `type` in `context` with `bound_receive(socket, l,
/// recv_hwm)` applied: the way to make a socket that receives tensors from
/// peers you do not control.
zmq::socket_t bounded_socket(zmq::context_t& context, zmq::socket_type type, const limits& l = {},
                             int recv_hwm = default_recv_hwm);

}  // namespace tenbin
TENBIN_API_END
