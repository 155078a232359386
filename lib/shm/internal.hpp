// What the +shm transport's files share (private to lib/shm). How a
// message's bytes stay valid:
//
// - The sender's pool draws every block from a memfd segment of its own
//   (sealed against shrinking and growing), mapped read-write by the sender.
// - ZeroMQ carries the headers and one descriptor per tensor. The receiver
//   then CLAIMs the message's sequence number on the sender's side channel
//   (a Unix seqpacket socket in the abstract namespace, named in the
//   message). The sender answers with the segments this receiver has not
//   had yet (read-only descriptors by SCM_RIGHTS) and OK, or GONE when it
//   has given the message up; tensors are made only after OK.
// - Quiet claims: a round trip per message costs more than the copy of a
//   MiB, so a receiver that already maps every segment a message names
//   claims it without waiting for the answer (the sender sends none) when
//   it is still before the message's claim-by time (first frame): the
//   sender's clock, read by the receiver after the claim was written, as
//   an upper bound learnt from OK answers (they carry the sender's clock:
//   robust to time namespaces). Claim-by is half the lease after the send;
//   0 (claim and wait) while the sender has closed segments to tell
//   receivers of (so their mappings stay bounded) and for a PUB message
//   while no subscriber is on the side channel (the grace rule below). The
//   sender reads every pending request before it gives any message up, so
//   a quiet claim written in time is always seen.
// - Quiet claims and RELEASEs go through a ring in shared memory once the
//   sender's first answer has handed it over (see ring.hpp), not as packets:
//   a packet wakes the side-channel thread, a ring entry waits for the
//   sender's next send (or its thread's next period).
// - The sender keeps a copy of each sent block's buffer (so the pool cannot
//   reuse it) until the message is done with: a PUSH/PAIR message once its
//   claimer RELEASEs it (its last tensor is dropped) or dies; a PUB message
//   once every receiver on the side channel has claimed a later message or
//   claimed and released this one (a receiver not yet on the side channel
//   gets GONE for what was already given up: a late joiner's first
//   messages are skipped, as PUB/SUB may). While no subscriber is on the
//   side channel, a message waits up to a second for the first to claim.
// - Lease: a message not done with `lease` after its send is given up. If a
//   receiver still holds it, its segments are retired: the bytes move to a
//   fresh memfd mapped over the same addresses (the pool keeps its block),
//   the old memfd is closed by the sender, and the holder's own mapping
//   keeps the old pages until it unmaps them. A receiver that claims a
//   given-up message gets GONE and skips it.
#pragma once

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

// Longest abstract socket name (sun_path minus its leading NUL).
inline constexpr std::size_t max_side_name = 100;

#ifdef __linux__

// The side channel's packets: a receiver's requests (type, seq) and the
// sender's replies (type, count, the sender's clock, count u64s; msg_fds
// with descriptors, msg_ring with the ring's). msg_claim_quiet,
// msg_release and msg_kick (see ring.hpp) get no reply.
enum : std::uint32_t {
    msg_claim = 1,
    msg_release = 2,
    msg_claim_quiet = 3,
    msg_kick = 4,
    msg_fds = 10,
    msg_ok = 11,
    msg_gone = 12,
    msg_ring = 13
};
// Descriptors per SCM_RIGHTS packet (the kernel allows 253).
inline constexpr std::size_t fds_per_packet = 64;
// How long a PUB message waits for a first subscriber on the side channel.
inline constexpr std::chrono::milliseconds fan_out_grace{1000};
// Seconds a receiver waits for the sender's answer to a claim.
inline constexpr long claim_timeout_s = 30;
// Closed segment ids per reply; more wait for the next one.
inline constexpr std::size_t closed_per_reply = 256;

// The clock of the claim-by times: CLOCK_MONOTONIC (steady_clock on Linux), ns.
inline std::uint64_t monotonic_ns() {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

sockaddr_un abstract_address(const std::string& name, socklen_t& len);
// One packet, with `fds` (at most fds_per_packet) by SCM_RIGHTS. False on
// an error (errno says which).
bool send_packet(int fd, std::span<const std::byte> bytes, std::span<const int> fds = {});
// A receiver's request packet.
std::array<std::byte, 16> request(std::uint32_t type, std::uint64_t seq);

#endif

}  // namespace tenbin::detail::shm_impl
