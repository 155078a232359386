// What an ipc sender's receivers have not read yet, from the kernel.
//
// libzmq 4.3.4 drops the unread tail of an ipc connection whose receiver
// sits at its high-water mark when the sender closes: the receiving engine
// has stopped reading, and it takes the hang-up of a unix socket (which
// tcp does not raise for a peer's close) as an error, leaving the rest of
// its socket buffer unread (libzmq issue 4660). A closing ipc sender
// therefore waits, within its linger, until its receivers have read
// everything it wrote.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

namespace tenbin::detail {

// Waits until the peers of this process's unix stream sockets on the ipc
// ones of `addresses` ("ipc://path", "ipc://@abstract"; others are passed
// over) have read every byte written to them, as the kernel counts
// (SIOCOUTQ), and go on having read it a few milliseconds (what ZeroMQ
// still held meanwhile went out and was read too); or until `linger`
// passed. True when everything was read, or there is no ipc address.
bool await_ipc_readers(std::span<const std::string> addresses, std::chrono::milliseconds linger);

}  // namespace tenbin::detail
