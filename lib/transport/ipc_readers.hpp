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

// Bytes written and not yet read by the peer on this process's unix
// stream sockets connected to, or accepted on, the ipc `addresses`
// ("ipc://path", "ipc://@abstract").
[[nodiscard]] std::uint64_t ipc_unread_bytes(std::span<const std::string> addresses);

// Waits until ipc_unread_bytes() stays 0 a few milliseconds (what ZeroMQ
// still held meanwhile has gone out and been read too), or `linger` passed.
// True when everything was read.
bool await_ipc_readers(std::span<const std::string> addresses, std::chrono::milliseconds linger);

}  // namespace tenbin::detail
