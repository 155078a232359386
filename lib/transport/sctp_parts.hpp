// Reading one SCTP message, which the kernel may hand over in parts (only
// the last carries MSG_EOR). Private to sctp.cpp; a header of its own so
// that tests can drive it with scripted parts, as kernels without SCTP
// cannot.
#pragma once

#include <tenbin/buffer.hpp>

#include <cstddef>
#include <functional>

namespace tenbin::detail {

struct message_part {
    std::size_t size = 0;        // bytes placed at the start of the space
    bool end_of_record = false;  // MSG_EOR: the message ends with this part
    bool notification = false;   // MSG_NOTIFICATION: an SCTP event, not data
};

// Reads the next part into `space`, which is never empty. Blocks as the
// socket does and throws on errors; a part of size 0 without end_of_record
// means the peer is gone.
using part_reader = std::function<message_part(mutable_bytes space)>;

// The next user message, skipping notifications. The buffer starts at
// `size_hint` bytes (64 KiB when 0) capped at `max_size`, and doubles while
// parts keep coming; the result is a slice at most twice the message, or an
// exact copy when that would be less. A message over `max_size` is read to
// its end, discarded, and reported as limit_exceeded.
buffer read_message_parts(const part_reader& read, std::size_t size_hint, std::size_t max_size);

}  // namespace tenbin::detail
