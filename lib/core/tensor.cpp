#include <tenbin/tensor.hpp>

#include "core/codec_detail.hpp"
#include "core/diagnostics.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>

namespace tenbin {

namespace detail {

void check_info(std::string_view info) {
    if (info.size() > max_info_length)
        throw error(errc::bad_argument, "info '" + std::string(info) + "' has " +
                                            std::to_string(info.size()) +
                                            " characters; the format holds at most 8");
    for (std::size_t i = 0; i < info.size(); ++i)
        if (const auto c = static_cast<unsigned char>(info[i]); c > 127)
            throw error(errc::bad_argument, "info byte " + std::to_string(i) + " is " + std::to_string(c) +
                                                "; infos are ASCII");
    // Decoders strip NULs from both ends (Python's too): such an info would
    // come back changed. NULs inside come back, as Python writes them.
    if (!info.empty() && (info.front() == '\0' || info.back() == '\0'))
        throw error(errc::bad_argument, "info of " + std::to_string(info.size()) +
                                            " bytes starts or ends with NUL, which decoders strip");
}

void check_dtype(tenbin::dtype t) {
    if (!is_valid(t))
        throw error(errc::bad_argument,
                    "dtype value " + std::to_string(static_cast<unsigned>(t)) + " is not one of the format's");
}

void check_rank(std::size_t ndim) {
    if (ndim > max_supported_rank)
        throw error(errc::bad_argument, "rank " + str(ndim) + " exceeds the supported maximum of " +
                                            str(max_supported_rank));
}

void check_data_size(tenbin::dtype t, std::uint64_t count, std::size_t bytes) {
    if (count > UINT64_MAX / itemsize(t) || count * itemsize(t) != bytes)
        throw error(errc::bad_argument, "shape needs " + str(count) + " elements of " + std::string(code(t)) +
                                            " but the data holds " + str(bytes) + " bytes");
}

std::uint64_t element_count(std::span<const std::int64_t> shape) {
    // A zero dimension anywhere makes the count 0 whatever the others say,
    // as decode_header computes it, so that a decoded header such as
    // [2^62, 2^62, 0] makes a tensor rather than overflowing here.
    bool has_zero = false;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] < 0)
            throw error(errc::bad_argument, "dimension " + std::to_string(i) + " is " +
                                                std::to_string(shape[i]) + ", negative");
        has_zero = has_zero || shape[i] == 0;
    }
    if (has_zero) return 0;
    std::uint64_t n = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const auto d = static_cast<std::uint64_t>(shape[i]);
        if (d != 0 && n > UINT64_MAX / d)
            throw error(errc::bad_argument, "shape's element count overflows 64 bits at dimension " +
                                                std::to_string(i));
        n *= d;
    }
    return n;
}

namespace {

std::string hex_address(const void* p) {
    char text[2 + 2 * sizeof(std::uintptr_t) + 1];
    std::snprintf(text, sizeof text, "0x%jx", static_cast<std::uintmax_t>(reinterpret_cast<std::uintptr_t>(p)));
    return text;
}

}  // namespace

void check_typed_access(dtype have, dtype want, const std::byte* data, std::size_t size) {
    if (have != want)
        throw error(errc::bad_argument, "tensor holds " + std::string(code(have)) +
                                            ", not " + std::string(code(want)));
    if (reinterpret_cast<std::uintptr_t>(data) % itemsize(want) != 0)
        throw error(errc::unsupported, "tensor data at address " + hex_address(data) + " is not aligned for " +
                                           std::string(code(want)) + "; use tensor::aligned()");
    if (size % itemsize(want) != 0)
        throw error(errc::data_size_mismatch, std::to_string(size) +
                                                  " bytes are not a whole number of " +
                                                  std::string(code(want)) + " elements");
}

}  // namespace detail

bool operator==(const tensor_view& a, const tensor_view& b) noexcept {
    return a.dtype == b.dtype && a.info == b.info &&
           std::equal(a.shape.begin(), a.shape.end(), b.shape.begin(), b.shape.end()) &&
           a.data.size() == b.data.size() &&
           (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
}

tensor::tensor(tenbin::dtype t, shape_t shape, buffer data, std::string_view info)
    : shape_(std::move(shape)), data_(std::move(data)), dtype_(t) {
    detail::check_dtype(t);
    detail::check_info(info);
    set_info(info);
    detail::check_rank(shape_.size());
    detail::check_data_size(t, detail::element_count(shape_), data_.size());
}

tensor tensor::zeros(tenbin::dtype t, shape_t shape, std::string_view info) {
    detail::check_dtype(t);
    const std::uint64_t n = detail::element_count(shape);
    if (n > SIZE_MAX / itemsize(t))
        throw error(errc::bad_argument, "tensor too large to allocate");
    buffer b = buffer::allocate(n * itemsize(t));
    if (!b.empty()) std::memset(b.writable_bytes().data(), 0, b.size());
    return tensor(t, std::move(shape), std::move(b), info);
}

tensor tensor::copy(const tensor_view& v) {
    return tensor(v.dtype, shape_t(v.shape.begin(), v.shape.end()), buffer::copy(v.data), v.info);
}

tensor tensor::with_info(std::string_view info) const {
    detail::check_info(info);
    tensor t = *this;
    t.set_info(info);
    return t;
}

tensor tensor::aligned() const {
    if (data_.aligned_to(itemsize(dtype_))) return *this;
    // The copy keeps this tensor's access, so whether writing works never
    // depends on where the bytes happened to lie (received frames, borrowed
    // bytes).
    tensor out = copy(*this);
    if (!data_.writable()) out.data_ = out.data_.read_only();
    return out;
}

std::vector<tensor> with_infos(tensor_span tensors, std::span<const std::string> infos) {
    if (infos.size() != tensors.size())
        throw error(errc::bad_argument, std::to_string(infos.size()) + " infos for " +
                                                    std::to_string(tensors.size()) + " tensors");
    std::vector<tensor> out;
    out.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view v = tensors[i];
        const buffer* owner = tensors.owner(i);
        out.emplace_back(v.dtype, shape_t(v.shape.begin(), v.shape.end()),
                         owner ? *owner : buffer::borrow(v.data), infos[i]);
    }
    return out;
}

std::vector<std::string> infos_of(const std::vector<tensor>& tensors) {
    std::vector<std::string> out;
    out.reserve(tensors.size());
    for (const tensor& t : tensors) out.emplace_back(t.info());
    return out;
}

void check_infos(const std::vector<tensor>& tensors, std::span<const std::string> expected) {
    if (expected.size() != tensors.size())
        throw error(errc::info_mismatch, "expected " + std::to_string(expected.size()) +
                                                     " tensors, found " +
                                                     std::to_string(tensors.size()));
    for (std::size_t i = 0; i < tensors.size(); ++i)
        if (tensors[i].info() != expected[i])
            throw error(errc::info_mismatch, "tensor " + std::to_string(i) + ": expected info '" +
                                                         expected[i] + "', found '" +
                                                         std::string(tensors[i].info()) + "'");
}

std::ostream& operator<<(std::ostream& out, const shape_t& shape) { return out << to_string(shape); }

std::string to_string(const shape_t& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) text += ", ";
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

std::ostream& operator<<(std::ostream& out, const tensor& t) { return out << to_string(t); }

std::string to_string(const tensor& t) {
    // Built as one string: a stream's width or fill must not split it.
    static constexpr char hex[] = "0123456789abcdef";
    std::string text = "tensor(info=\"";
    for (const char c : t.info()) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
            text += c;
        } else {
            text += "\\x";
            text += hex[u >> 4];
            text += hex[u & 15];
        }
    }
    return text + "\", dtype=" + to_string(t.dtype()) + ", shape=" + to_string(t.shape()) +
           ", nbytes=" + std::to_string(t.nbytes()) + ")";
}

void detail::keep_into(tensor_span tensors, std::vector<tensor>& out) {
    out.clear();
    out.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view v = tensors[i];
        const buffer* owner = tensors.owner(i);
        // A borrowed buffer is the caller's memory, free to change after the call.
        out.push_back(owner && owner->owned() ? tensor(v.dtype, shape_t(v.shape.begin(), v.shape.end()), *owner, v.info) : tensor::copy(v));
    }
}

std::vector<tensor> keep(tensor_span tensors) {
    std::vector<tensor> out;
    detail::keep_into(tensors, out);
    return out;
}

}  // namespace tenbin
