// Internal to the library: the codec steps shared by the codec and the
// transports, without the copies and re-checks the public API makes.
#pragma once

#include <tenbin/codec.hpp>
#include <tenbin/position.hpp>

#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace tenbin::detail {

// keep(), into `out` (cleared first; its storage reused: no allocation a
// batch for a caller that recycles it).
void keep_into(tensor_span tensors, std::vector<tensor>& out);

struct tensor_access {
    struct parts_of {
        tenbin::dtype& dtype;
        shape_t& shape;
        buffer& data;
    };
    // The members of `t`, for decoders that fill a tensor in place. They
    // must leave it as the public constructor would have: info encodable,
    // rank supported, data of count(shape) * itemsize(dtype) bytes.
    static parts_of parts(tensor& t) noexcept { return {t.dtype_, t.shape_, t.data_}; }
    // Sets an info already checked, read from a header's 8-byte info field:
    // the whole field is copied (perf: a fixed-size copy is one store).
    static void set_info_field(tensor& t, std::string_view info) noexcept {
        std::memcpy(t.info_, info.data(), sizeof t.info_);
        t.info_size_ = static_cast<std::uint8_t>(info.size());
    }
};

// The rank checks of a header of `header_bytes` bytes whose ndim field
// reads `ndim`: the field matches the size, and the rank is within
// `lim.max_rank` and max_supported_rank. Returns the rank.
std::size_t check_header_rank(std::int64_t ndim, std::uint64_t header_bytes, const limits& lim);

// Writes tensor i's header into `out` (header_size(ndim) bytes). A
// `tensor` was checked when it was made (info, rank, size), so only views
// are checked again (perf: re-checking cost about 150 instructions a
// tensor on every send). Throws as encode_header_into for a bad view.
void encode_header_of(tensor_span tensors, std::size_t i, mutable_bytes out);

// The frames of a list-form message ([header, data] pairs) for a decoder
// that takes them apart: headers are read where they are, and each data
// frame is given up to its tensor by `take`, called at most once per data
// frame, in order (a transport hands over a received frame without first
// wrapping every frame in a buffer).
class list_source {
public:
    virtual std::size_t size() const noexcept = 0;
    virtual bytes_view bytes(std::size_t i) const noexcept = 0;
    virtual buffer take(std::size_t i) = 0;

protected:
    ~list_source() = default;
};

// decode_list over a list_source into `out`, whose storage it reuses (a
// receive loop allocates no list per message): same checks and errors. The
// source holds no position frame (the transport splits it off).
// Frames not taken when it throws stay the source's; `out` is then left
// with the tensors decoded so far.
void decode_list_into(list_source& frames, const decode_options& opt, std::vector<tensor>& out);

// decode_buffer into `out`; a trailing position chunk is parsed into
// `*position` when given (left unset when there is none).
void decode_buffer_into(const buffer& chunked, const decode_options& opt, std::vector<tensor>& out,
                        std::optional<stream_position>* position);

// Received tensors made fit for typed access: libzmq gives a frame no
// alignment, so a tensor whose bytes are not aligned for its dtype is
// copied (read-only still, like every received tensor); the rest stay views.
void align_received(std::vector<tensor>& tensors);

}  // namespace tenbin::detail
