// libFuzzer target: the decoders of the other file formats, .npy, .npz and
// .safetensors, over arbitrary bytes.
//
// Input: one mode byte, then the file.
//   bits 0-1  format: 0 .npy, 1 .npz, 2 and 3 .safetensors
//   bit 2     small limits instead of the defaults
// Property: a decoded file re-encodes to a file that decodes to the same
// tensors, names and metadata. Files with an empty name are not re-encoded:
// the writers name such a tensor "arr_<index>", as NumPy does.
#include "common.hpp"

#include <tenbin/formats.hpp>

#include <algorithm>
#include <optional>

namespace {

using tenbin::named_tensor;

// What `decode` returns, or nothing when it refused the input with a
// documented error (the formats' `unsupported` on top of the decoders').
template <class Decode>
auto decoded(Decode decode) -> std::optional<decltype(decode())> {
    try {
        return decode();
    } catch (const tenbin::error& e) {
        if (e.code() != tenbin::errc::unsupported) fuzz::check_error(e);
        return std::nullopt;
    }
}

bool same(const std::vector<named_tensor>& a, const std::vector<named_tensor>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const named_tensor& x, const named_tensor& y) {
        return x.name == y.name && x.value == y.value;
    });
}

bool has_empty_name(const std::vector<named_tensor>& list) {
    return std::any_of(list.begin(), list.end(), [](const named_tensor& n) { return n.name.empty(); });
}

void npy(const tenbin::buffer& file, const tenbin::format_options& opt) {
    const auto t = decoded([&] { return tenbin::decode_npy(file, opt); });
    if (!t) return;
    const std::vector<std::byte> again = tenbin::encode_npy(*t);
    if (!(tenbin::decode_npy(tenbin::buffer::copy(again), opt) == *t)) fuzz::fail(".npy re-encodes differently");
}

void npz(const tenbin::buffer& file, const tenbin::format_options& opt) {
    const auto list = decoded([&] { return tenbin::decode_npz(file, opt); });
    if (!list || has_empty_name(*list)) return;
    const std::vector<std::byte> again = tenbin::encode_npz(*list);
    if (!same(tenbin::decode_npz(tenbin::buffer::copy(again), opt), *list)) fuzz::fail(".npz re-encodes differently");
}

void safetensors(const tenbin::buffer& file, const tenbin::format_options& opt) {
    const auto got = decoded([&] { return tenbin::decode_safetensors_with_metadata(file, opt); });
    if (!got || has_empty_name(got->tensors)) return;
    const std::vector<std::byte> again = tenbin::encode_safetensors(got->tensors, got->metadata);
    const tenbin::safetensors_contents back = tenbin::decode_safetensors_with_metadata(tenbin::buffer::copy(again), opt);
    if (!same(back.tensors, got->tensors) || back.metadata != got->metadata)
        fuzz::fail(".safetensors re-encodes differently");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const int mode = data[0];
    // A copy, as a loaded file would be: the decoders slice it.
    const tenbin::buffer file = tenbin::buffer::copy({reinterpret_cast<const std::byte*>(data + 1), size - 1});
    tenbin::format_options opt;
    if (mode & 4) {
        opt.limits = fuzz::small_limits();
        opt.max_header_bytes = 4096;
    }
    switch (mode & 3) {
    case 0: npy(file, opt); break;
    case 1: npz(file, opt); break;
    default: safetensors(file, opt); break;
    }
    return 0;
}
