// A message's frames as they came, for transports that decode their own
// body (+shm): the envelope and the position frame split off as zrecv does.
#pragma once

#include <tenbin/zmq.hpp>

#include <vector>

namespace tenbin::detail {

// Receives one message: its envelope (by `opt.envelope`) and position into
// `out` (whose tensors are cleared), the frames between into `body`.
// Returns false when nothing came, as zrecv does; throws as zrecv does for
// the frame count and the envelope, after draining the message.
bool zrecv_frames(zmq::socket_ref socket, const recv_options& opt, message& out, std::vector<zmq::message_t>& body);

}  // namespace tenbin::detail
