// tenbin: tensors over message-oriented sockets (SCTP, SOCK_SEQPACKET).
//
// One tensor list travels as one socket message holding exactly
// `encode_buffer(tensors)` (the chunked form of codec.hpp), which is what
// Python tensorcom's `sctp_send` / `sctp_recv` put on the wire. The socket
// belongs to the caller: these functions neither open, configure nor close
// it. Any socket that keeps message boundaries works:
//   - SCTP, one-to-many (`SOCK_SEQPACKET`) or one-to-one (`SOCK_STREAM`);
//   - `AF_UNIX` `SOCK_SEQPACKET` or `SOCK_DGRAM`, UDP (small lists only).
// A byte-stream socket (TCP, AF_UNIX SOCK_STREAM) is refused: use
// `tenbin::write` / `tenbin::read` from io.hpp there. SCTP itself needs the
// kernel's support (the `sctp` module on Linux); where it is missing,
// `socket(..., IPPROTO_SCTP)` fails in the caller's code, before tenbin.
// The tensors `sctp_recv` returns own their bytes (read into memory of
// their own), so unlike received ZeroMQ frames they are writable.
#pragma once

#include <tenbin/core.hpp>

#include <sys/socket.h>

#include <cstddef>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// Largest message `sctp_recv` accepts by default (Python tensorcom's
/// `maxsize` default).
inline constexpr std::size_t default_sctp_max_size = 100000000;

/// Sends `tensors` as one message holding `encode_buffer(tensors)`.
///
/// The message is gathered with one `sendmsg` straight from the tensors'
/// bytes (headers and padding come from a small scratch block): tensor data
/// is not copied in user space. A list needing more than IOV_MAX pieces
/// (about 340 tensors on Linux) is first encoded into one buffer instead,
/// which costs one copy of the data.
///
/// `dest` and `dest_len` name the receiver on an unconnected socket (an SCTP
/// one-to-many socket sets up the association on the first send); pass null
/// and 0 on a connected socket. `MSG_NOSIGNAL` is used: a closed peer gives
/// an error, not SIGPIPE.
///
/// Throws `error` with
///   - bad_argument: a tensor the format cannot carry, an empty list (it
///     would be a zero-length message, which SCTP refuses and a
///     SOCK_SEQPACKET reader cannot tell from end of stream), or a
///     `dest`/`dest_len` pair that does not match;
///   - timeout: the socket's SO_SNDTIMEO expired, or it is non-blocking and
///     its send buffer is full (nothing was sent);
///   - io_error: any other refusal by the system (message too long for the
///     socket, peer gone, ...), with its strerror text, or a partial send,
///     which a message socket should never do.
/// The message is sent whole or not at all, except after a partial send.
void sctp_send(int fd, const sockaddr* dest, socklen_t dest_len, tensor_span tensors);

/// `sctp_send` on a connected socket.
inline void sctp_send(int fd, tensor_span tensors) { sctp_send(fd, nullptr, 0, tensors); }

/// Receives one message and decodes it.
///
/// The returned tensors view one buffer holding the message (no copy after
/// the receive) and keep it alive. The buffer is as large as the message,
/// not `max_size`: on SOCK_SEQPACKET and SOCK_DGRAM sockets the message's
/// size is peeked first (MSG_PEEK | MSG_TRUNC); on SCTP, which cannot
/// report it, the queued size (SIOCINQ) sizes the buffer, which grows
/// geometrically while the kernel delivers a large message in parts, so it
/// ends up at most twice the message.
///
/// Use one receiving thread per socket: the peek and the read that follows
/// must see the same message. SCTP notifications (`MSG_NOTIFICATION`, only
/// delivered when the caller subscribed to events) are skipped. Do not
/// enable SCTP_FRAGMENT_INTERLEAVE on the socket.
///
/// Throws `error` with
///   - timeout: SO_RCVTIMEO expired, or the socket is non-blocking and
///     nothing was waiting (nothing was consumed; but should the timeout
///     strike between the parts of an SCTP message, the rest stays queued);
///   - io_error: the peer closed the connection (a zero-length read: on
///     SOCK_SEQPACKET this is also what an empty message looks like, which
///     is why `sctp_send` refuses empty lists), or the system refused the
///     read, with its strerror text;
///   - limit_exceeded: the message is larger than `max_size`. The whole
///     message is consumed and discarded first, so the next call starts at
///     the next message;
///   - bad_argument: `fd` is a byte-stream socket (no message boundaries);
///   - the decoding errors of `decode_buffer` (bad_magic, truncated, ...,
///     limit_exceeded, info_mismatch) for a malformed message, which is
///     consumed.
std::vector<tensor> sctp_recv(int fd, std::size_t max_size = default_sctp_max_size,
                              const decode_options& opt = {});

}  // namespace tenbin
TENBIN_API_END
