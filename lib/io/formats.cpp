// What the conversion formats share, and load_any/save_any.
#include "io/formats_detail.hpp"
#include "io/io_detail.hpp"

#include <algorithm>
#include <set>
#include <string_view>

namespace tenbin {

namespace detail {

void byte_plan::add_owned(std::vector<std::byte> bytes) {
    size_ += bytes.size();
    owned_.push_back(std::move(bytes));
    pieces_.emplace_back(owned_.back().data(), owned_.back().size());
}

void byte_plan::add_view(bytes_view bytes) {
    size_ += bytes.size();
    pieces_.push_back(bytes);
}

std::vector<std::byte> byte_plan::concat() const {
    std::vector<std::byte> out;
    out.reserve(static_cast<std::size_t>(size_));
    for (const bytes_view& p : pieces_) out.insert(out.end(), p.begin(), p.end());
    return out;
}

void write_plan(const std::filesystem::path& path, const byte_plan& plan) {
    write_file(path, [&](int fd) {
        with_context([&] { return in_quotes(path); }, [&] {
            fd_sink out(fd);
            // writev takes at most IOV_MAX pieces at a time; fd_sink handles
            // any number, but hand it bounded batches all the same.
            const auto pieces = plan.pieces();
            for (std::size_t i = 0; i < pieces.size(); i += 512)
                out.write(pieces.subspan(i, std::min<std::size_t>(512, pieces.size() - i)));
        });
    });
}

bool valid_utf8(std::string_view s) noexcept {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n;
        std::uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (s.size() - i - 1 < n) return false;
        for (std::size_t k = 1; k <= n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        // Overlong forms, surrogates, beyond U+10FFFF.
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

bool fits_info(std::string_view name) noexcept {
    if (name.size() > max_info_length) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u != 0 && u < 128;
    });
}

named_tensor make_named(std::string name, tensor t) {
    if (fits_info(name)) t = t.with_info(name);
    return {std::move(name), std::move(t)};
}

std::vector<std::string> output_names(std::span<const named_tensor> tensors) {
    std::vector<std::string> names;
    names.reserve(tensors.size());
    std::set<std::string_view> seen;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string& n = tensors[i].name;
        names.push_back(n.empty() ? "arr_" + std::to_string(i) : n);
        if (names.back().find('\0') != std::string::npos)
            throw error(errc::bad_argument, "tensor " + std::to_string(i) + ": name contains a NUL byte");
        if (!valid_utf8(names.back()))
            throw error(errc::bad_argument,
                        "tensor " + std::to_string(i) + ": name " + in_quotes(names.back()) + " is not valid UTF-8");
    }
    for (std::size_t i = 0; i < names.size(); ++i)
        if (!seen.insert(names[i]).second)
            throw error(errc::bad_argument, "tensor " + std::to_string(i) + ": name " + in_quotes(names[i]) +
                                                " is used twice; names must be unique");
    return names;
}

buffer data_of(const buffer& whole, std::size_t offset, std::size_t nbytes, dtype t) {
    buffer part = whole.slice(offset, nbytes);
    // Copied: a typed view of unaligned bytes would be undefined behaviour.
    if (!part.aligned_to(itemsize(t))) return buffer::copy(part.bytes());
    return part;
}

}  // namespace detail

using detail::in_quotes;

std::optional<file_format> format_of(const std::filesystem::path& path) {
    const std::string name = path.filename().string();
    const std::string_view n = name;
    if (n.ends_with(".ten") || n.ends_with(".ten.zst")) return file_format::ten;
    if (n.ends_with(".npy")) return file_format::npy;
    if (n.ends_with(".npz")) return file_format::npz;
    if (n.ends_with(".safetensors")) return file_format::safetensors;
    return std::nullopt;
}

std::vector<named_tensor> named(tensor_span tensors) {
    std::vector<named_tensor> out;
    out.reserve(tensors.size());
    for (tensor& t : keep(tensors)) {
        std::string name(t.info());
        out.push_back({std::move(name), std::move(t)});
    }
    return out;
}

std::vector<tensor> to_tensors(std::span<const named_tensor> tensors) {
    std::vector<tensor> out;
    out.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string& n = tensors[i].name;
        if (!detail::fits_info(n))
            throw error(errc::bad_argument,
                        "tensor " + std::to_string(i) + ": name " + in_quotes(n) +
                            " cannot be a .ten info (at most 8 ASCII characters, no NUL); rename it");
        out.push_back(tensors[i].value.with_info(n));
    }
    return out;
}

namespace {

file_format known_format(const std::filesystem::path& path) {
    const auto f = format_of(path);
    if (!f)
        throw error(errc::bad_extension,
                    in_quotes(path) + ": unknown extension; expected .ten, .ten.zst, .npy, .npz or .safetensors");
    return *f;
}

}  // namespace

std::vector<named_tensor> load_any(const std::filesystem::path& path, const format_options& opt) {
    switch (known_format(path)) {
    case file_format::ten: {
        file_options fo;
        fo.decode.limits = opt.limits;
        return named(load_mmap(path, fo));
    }
    case file_format::npy: {
        std::vector<named_tensor> out;
        out.push_back({std::string(), load_npy(path, opt)});
        return out;
    }
    case file_format::npz: return load_npz(path, opt);
    case file_format::safetensors: return load_safetensors(path, opt);
    }
    return {};  // unreachable
}

void save_any(const std::filesystem::path& path, std::span<const named_tensor> tensors) {
    switch (known_format(path)) {
    case file_format::ten:
        save(path, detail::with_context(in_quotes(path), [&] { return to_tensors(tensors); }));
        return;
    case file_format::npy:
        if (tensors.size() != 1)
            throw error(errc::bad_argument, in_quotes(path) + ": an .npy file holds exactly one tensor, not " +
                                                std::to_string(tensors.size()));
        save_npy(path, tensors[0].value);
        return;
    case file_format::npz: save_npz(path, tensors); return;
    case file_format::safetensors: save_safetensors(path, tensors); return;
    }
}

}  // namespace tenbin
