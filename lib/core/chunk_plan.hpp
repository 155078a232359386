// The chunked form of a tensor list as a list of pieces, for gathered output
// (writev, sendmsg) and for the single copy of encode_buffer_into.
#pragma once

#include <tenbin/position.hpp>
#include <tenbin/tensor.hpp>

#include <vector>

namespace tenbin::detail {

// Preambles, headers, padding and the position chunk (when given) live in
// the plan's own scratch memory; data pieces point at the tensors' bytes,
// which must outlive the plan.
class chunk_plan {
public:
    chunk_plan() = default;
    explicit chunk_plan(tensor_span tensors, const stream_position* position = nullptr) { assign(tensors, position); }
    // Plans `tensors` anew in this plan's memory (perf: a pack plans each
    // of its small batches with one plan). When it throws, plan again
    // before use.
    void assign(tensor_span tensors, const stream_position* position = nullptr);

    std::span<const bytes_view> pieces() const noexcept { return pieces_; }
    std::size_t size() const noexcept { return size_; }
    void copy_to(mutable_bytes out) const;

private:
    std::vector<std::byte> scratch_;
    std::vector<bytes_view> pieces_;
    std::size_t size_ = 0;
};

// Writes magic and length, the 16 bytes in front of a chunk's payload.
void write_preamble(std::byte* out, std::uint64_t payload_size) noexcept;
// Zero bytes to pad a payload of `n` bytes to a multiple of 64.
bytes_view padding_for(std::uint64_t n) noexcept;

}  // namespace tenbin::detail
