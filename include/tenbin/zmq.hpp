// tenbin: tensors over ZeroMQ sockets the caller owns (cppzmq).
//
// Two wire forms, exactly as Python tensorcom sends them:
//   single-part: one frame holding encode_buffer(tensors)
//   multipart:   frames [header_0, data_0, header_1, data_1, ...]
// Either may be preceded by envelope frames (ROUTER identities, a PUB topic,
// a caller's own prefix); without an envelope the wire is exactly tensorcom's.
//
// Zero-copy: a multipart send hands ZeroMQ each tensor's own bytes when the
// tensor owns them (see `buffer`); ZeroMQ's release of the frame drops the
// reference, on a ZeroMQ thread. A received tensor's bytes are the received
// frame, which it keeps alive.
#pragma once

#include <tenbin/core.hpp>

#include <zmq.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

namespace tenbin {

/// Envelope frames in front of the tenbin frames.
struct envelope_spec {
    enum class kind {
        none,    ///< no envelope: the first frame is a tenbin frame
        frames,  ///< exactly `count` frames (e.g. a PUB topic: 1)
        router,  ///< one identity frame, then an empty delimiter if present
                 ///< (a REQ peer sends one, a DEALER peer does not)
        delimited,  ///< every frame up to and including the first empty one
    };
    kind how = kind::none;
    std::size_t count = 0;

    static envelope_spec none() { return {}; }
    static envelope_spec frames(std::size_t n) { return {kind::frames, n}; }
    static envelope_spec topic() { return {kind::frames, 1}; }
    static envelope_spec router() { return {kind::router, 0}; }
    static envelope_spec delimited() { return {kind::delimited, 0}; }
};

/// Data frames smaller than this are copied instead of handed to ZeroMQ:
/// a copy beats the free-callback bookkeeping for tiny tensors. Measured
/// with tenbin-bench (see README, "Performance").
inline constexpr std::size_t default_copy_threshold = 1024;

struct send_options {
    /// zmq::send_flags::dontwait makes a full queue return false instead of
    /// blocking. sndmore is added by the library where needed.
    zmq::send_flags flags = zmq::send_flags::none;
    /// Frames sent before the tenbin frames (e.g. a ROUTER identity and an
    /// empty delimiter, a topic). Sent as given, copied.
    std::span<const zmq::const_buffer> envelope{};
    /// Data frames of at least this many bytes go zero-copy (multipart).
    /// 0 forces zero-copy for every owned tensor; SIZE_MAX forces copies.
    std::size_t copy_threshold = default_copy_threshold;
};

struct recv_options {
    /// zmq::recv_flags::dontwait: return nothing instead of blocking.
    zmq::recv_flags flags = zmq::recv_flags::none;
    envelope_spec envelope{};
    decode_options decode{};
    /// Frames in one message (envelope included) beyond which the message
    /// is refused with limit_exceeded; the rest of it is still drained.
    std::size_t max_frames = 2 * (std::size_t{1} << 16) + 16;
};

/// What one receive produced.
struct message {
    std::vector<tensor> tensors;
    /// The envelope frames, as received (empty without an envelope).
    std::vector<zmq::message_t> envelope;
    /// True when the message came in the single-part form.
    bool single = false;
};

/// Sends `tensors` as one single-part message: the encoding is written
/// straight into the outgoing message (one copy of the data in total).
/// Returns false when `dontwait` was given and the message could not be
/// queued, or the socket's send timeout expired (nothing was sent). Throws
/// bad_argument for tensors the format cannot carry and zmq::error_t for
/// socket errors.
bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt = {});

/// Sends `tensors` as one multipart message [header, data, ...]. Data of
/// owned tensors at or above the copy threshold is handed to ZeroMQ without
/// a copy; the tensor's buffer stays alive until ZeroMQ releases the frame.
/// Views' bytes (owned by nobody here) are copied. Returns false as
/// zsend_single does; a message is sent whole or not at all.
bool zsend_multipart(zmq::socket_ref socket, tensor_span tensors, const send_options& opt = {});

/// Receives one message in either form (one tenbin frame = single-part).
/// Returns nothing when `dontwait` was given and no message was waiting, or
/// the socket's receive timeout (ZMQ_RCVTIMEO) expired. On malformed input
/// throws the typed error after draining the rest of the message, so the
/// next receive starts at a message boundary. Tensors view the received
/// frames (zero-copy) and keep them alive; a frame whose address is not
/// aligned for its dtype is copied into aligned storage, so `values<T>()`
/// always works on received tensors.
std::optional<message> zrecv(zmq::socket_ref socket, const recv_options& opt = {});

/// Receives one single-part message (errors with odd_chunk_count... when it is
/// multipart: use `zrecv` to accept either). Same contract as `zrecv`.
std::optional<message> zrecv_single(zmq::socket_ref socket, const recv_options& opt = {});

/// Receives one multipart message. Same contract as `zrecv`.
std::optional<message> zrecv_multipart(zmq::socket_ref socket, const recv_options& opt = {});

}  // namespace tenbin
