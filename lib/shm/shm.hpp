// The shared-memory transport (`+shm` URLs) behind `connection`: the sender's
// segments, pool and side channel, the receiver's mappings. Linux only.
// The protocol is protocol.hpp's.
#pragma once

#include <tenbin/codec.hpp>
#include <tenbin/pool.hpp>

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tenbin::detail {

class shm_sender;
class shm_receiver;

// Fails with errc::unsupported off Linux.
std::shared_ptr<shm_sender> make_shm_sender(std::size_t pool_bytes, std::chrono::milliseconds lease, bool fan_out);
std::shared_ptr<shm_receiver> make_shm_receiver();

// The sender's pool: tensors from it are sent without a copy.
tensor_pool& shm_pool(shm_sender& s);
// Sends `tensors` (copied into the pool unless they are its own) on
// `socket` after the `envelope` frames. False when `timeout` (or the
// socket's send timeout) expired: nothing was sent.
bool shm_send(shm_sender& s, zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              std::optional<std::chrono::milliseconds> timeout);
// Waits at most `linger` for receivers to claim what was sent, then stops
// the side channel. Received tensors stay valid.
void shm_close(shm_sender& s, std::chrono::milliseconds linger);
// Messages sent and not yet given back by every receiver (for tests).
std::size_t shm_in_flight(shm_sender& s);
// Claims this process sent without waiting for the answer (for tests).
std::uint64_t shm_quiet_claims();

// Tensors of one shm message (frames after the envelope), or nothing when
// the sender had already given the message up (a late subscriber, an
// expired lease): the caller skips it. Throws tenbin::error for a plain
// message or bad descriptors.
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt);

}  // namespace tenbin::detail
