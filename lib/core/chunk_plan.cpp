#include "core/chunk_plan.hpp"
#include "core/codec_detail.hpp"
#include "core/diagnostics.hpp"

#include <tenbin/codec.hpp>

#include <cstring>

namespace tenbin::detail {

void write_preamble(std::byte* out, std::uint64_t payload_size) noexcept {
    std::memcpy(out, chunk_magic, sizeof chunk_magic);
    std::memcpy(out + 8, &payload_size, 8);  // little-endian hosts only (codec.cpp)
}

bytes_view padding_for(std::uint64_t n) noexcept {
    static constexpr std::byte zeros[chunk_padding] = {};
    return {zeros, static_cast<std::size_t>(chunk_size(n) - chunk_preamble - n)};
}

void chunk_plan::assign(tensor_span tensors, const stream_position* position) {
    pieces_.clear();
    size_ = 0;
    // Per tensor, the scratch holds the whole header chunk followed by the
    // data chunk's preamble, so each tensor is at most three pieces:
    // [header chunk + data preamble] [data] [data padding].
    std::size_t scratch_size = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i)
        scratch_size += chunk_size(header_size(tensors[i].ndim())) + chunk_preamble;
    const std::size_t position_size = position ? position_frame_size(*position) : 0;
    if (position) scratch_size += chunk_size(position_size);
    scratch_.assign(scratch_size, std::byte{0});  // header padding
    pieces_.reserve(3 * tensors.size() + 1);

    std::byte* at = scratch_.data();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view t = tensors[i];
        const std::size_t hsize = header_size(t.ndim());
        const std::size_t hchunk = chunk_size(hsize);
        write_preamble(at, hsize);
        encode_header_of(tensors, i, {at + chunk_preamble, hsize});  // validates views
        // The length field is signed (Python's "<q"); only a buffer that
        // lies about its size gets here.
        if (t.data.size() > static_cast<std::uint64_t>(INT64_MAX))
            throw error(errc::bad_argument, "tensor " + std::to_string(i) + " of " + std::to_string(t.data.size()) +
                                                " bytes: a chunk's length field holds at most 2^63-1");
        write_preamble(at + hchunk, t.data.size());
        pieces_.emplace_back(at, hchunk + chunk_preamble);
        at += hchunk + chunk_preamble;
        if (!t.data.empty()) {
            pieces_.push_back(t.data);
            if (bytes_view pad = padding_for(t.data.size()); !pad.empty()) pieces_.push_back(pad);
        }
        size_ += hchunk + chunk_size(t.data.size());
    }
    if (position) {
        write_preamble(at, position_size);
        encode_position_into(*position, {at + chunk_preamble, position_size});
        pieces_.emplace_back(at, chunk_size(position_size));
        size_ += chunk_size(position_size);
    }
}

void chunk_plan::copy_to(mutable_bytes out) const {
    std::byte* at = out.data();
    for (bytes_view p : pieces_) {
        std::memcpy(at, p.data(), p.size());
        at += p.size();
    }
}

}  // namespace tenbin::detail
