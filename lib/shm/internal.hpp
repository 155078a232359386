// What the +shm transport's files share (private to lib/shm): the side
// channel's sockets and the clock. The protocol itself is protocol.hpp's.
#pragma once

#include "shm/protocol.hpp"
#include "shm/shm.hpp"

#include <tenbin/error.hpp>

#include "base/endian.hpp"
#include "base/fd.hpp"
#include "base/os_error.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#ifdef __linux__
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#endif

namespace tenbin::detail::shm_impl {

#ifdef __linux__

// How long a PUB message waits for a first subscriber on the side channel.
inline constexpr std::chrono::milliseconds fan_out_grace{1000};

// The clock of the claim-by times: CLOCK_MONOTONIC (steady_clock on Linux), ns.
inline std::uint64_t monotonic_ns(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now()) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

sockaddr_un abstract_address(const std::string& name, socklen_t& len);
// One packet, with `fds` (at most fds_per_packet) by SCM_RIGHTS, if the
// socket has room for it now: never a wait on the peer. False on an error
// (errno says which; EAGAIN: the peer is not reading).
bool send_packet(int fd, std::span<const std::byte> bytes, std::span<const int> fds = {});

#endif

}  // namespace tenbin::detail::shm_impl
