// Private helpers of the conversion formats (npy.cpp, npz.cpp,
// safetensors.cpp, formats.cpp).
#pragma once

#include "base/endian.hpp"

#include <tenbin/formats.hpp>

#include "core/diagnostics.hpp"
#include "io/io_detail.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin::detail {

// A file's bytes as pieces: headers made here (owned) and tensor data
// viewed where it lies, so that writing gathers without copying.
class byte_plan {
public:
    void add_owned(std::vector<std::byte> bytes);
    void add_view(bytes_view bytes);
    std::span<const bytes_view> pieces() const noexcept { return pieces_; }
    std::uint64_t size() const noexcept { return size_; }
    std::vector<std::byte> concat() const;

private:
    // Moving an inner vector keeps its heap block, so views stay valid when
    // the outer vector grows.
    std::vector<std::vector<std::byte>> owned_;
    std::vector<bytes_view> pieces_;
    std::uint64_t size_ = 0;
};

// The .npy header (magic to final '\n') NumPy writes for `t`.
std::vector<std::byte> npy_header(const tensor_view& t);
// The npy decoder over a part of a larger buffer (an npz member).
tensor decode_npy_part(const buffer& bytes, const format_options& opt);

// The values from which an .npz writer needs ZIP64: a member count, or a
// member size, local header or central directory offset, or central
// directory size, that is at least its limit. The defaults are the ZIP
// format's (16- and 32-bit fields, whose largest value means "see ZIP64");
// tests lower them to write every ZIP64 structure into small archives.
struct npz_limits {
    std::uint64_t members = 0xffff;
    std::uint64_t member_size = 0xffffffff;
    std::uint64_t offset = 0xffffffff;
    std::uint64_t directory_size = 0xffffffff;
};

byte_plan plan_npz(std::span<const named_tensor> tensors, const npz_limits& limits = {});
byte_plan plan_safetensors(std::span<const named_tensor> tensors, const safetensors_metadata& metadata);

// Writes the plan to `path` (created or truncated), then closes it, checking.
void write_plan(const std::filesystem::path& path, const byte_plan& plan);

// Names as written to npz and safetensors: empty ones become "arr_<i>";
// throws bad_argument for duplicates, NUL or invalid UTF-8.
std::vector<std::string> output_names(std::span<const named_tensor> tensors);

bool valid_utf8(std::string_view s) noexcept;
bool fits_info(std::string_view name) noexcept;
// A named_tensor whose tensor's info is its name when that fits.
named_tensor make_named(std::string name, tensor t);

inline void put_text(std::vector<std::byte>& out, std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
}

// Data of `nbytes` at `offset` in `whole` as a tensor's buffer: a slice
// when aligned for `t`, else a copy into aligned storage.
buffer data_of(const buffer& whole, std::size_t offset, std::size_t nbytes, dtype t);

}  // namespace tenbin::detail
