// NumPy .npz archives: ZIP files of stored .npy members. Reading walks the
// central directory and checks every member's local header, range and CRC-32
// against it. Writing produces stored members, a central directory and the
// end record, with ZIP64 structures where, and only where, a field would
// overflow (as Python's zipfile writes them): a member of 4 GiB or more, a
// local header or the central directory at 4 GiB or beyond, a central
// directory of 4 GiB or more, 65535 members or more (the largest 16- and
// 32-bit values themselves mean "see ZIP64"). Other archives have no ZIP64
// bytes.
#include "io/formats_detail.hpp"

#include <zlib.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

namespace tenbin {

namespace {

using detail::load_le;
using detail::append_le;
using detail::in_quotes;
using detail::str;

constexpr std::uint32_t local_sig = 0x04034b50;
constexpr std::uint32_t central_sig = 0x02014b50;
constexpr std::uint32_t end_sig = 0x06054b50;
constexpr std::uint32_t zip64_end_sig = 0x06064b50;
constexpr std::uint32_t zip64_locator_sig = 0x07064b50;
constexpr std::size_t local_size = 30, central_size = 46, end_size = 22;
constexpr std::size_t zip64_end_size = 56, zip64_locator_size = 20;
constexpr std::uint16_t flag_encrypted = 0x0001, flag_descriptor = 0x0008, flag_utf8 = 0x0800;
// 1980-01-01 00:00, the earliest DOS date: fixed, so output is reproducible.
constexpr std::uint16_t dos_time = 0, dos_date = (0 << 9) | (1 << 5) | 1;

std::uint32_t crc32_of(std::uint32_t crc, bytes_view b) {
    return static_cast<std::uint32_t>(
        crc32_z(crc, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

std::string method_name(std::uint64_t m) {
    switch (m) {
    case 8: return "deflate";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "lzma";
    case 93: return "zstd";
    default: return "method " + str(m);
    }
}

// A checked view of the archive: every read names what it reads.
class reader {
public:
    explicit reader(const buffer& b) : p_(b.data()), size_(b.size()) {}

    std::uint64_t size() const noexcept { return size_; }
    // `n` bytes at `at` must lie within [0, end).
    void need(std::uint64_t at, std::uint64_t n, std::uint64_t end, const std::string& what) const {
        if (at > end || n > end - at)
            throw error(errc::bad_header, what + " at offset " + str(at) + " (" + str(n) +
                                              " bytes) runs past offset " + str(end));
    }
    std::uint64_t le(std::uint64_t at, std::size_t n) const { return load_le(p_ + at, n); }
    std::string_view text(std::uint64_t at, std::size_t n) const {
        return {reinterpret_cast<const char*>(p_ + at), n};
    }

private:
    const std::byte* p_;
    std::uint64_t size_;
};

// The values a ZIP64 extra field (id 1) holds for the fields set to their
// maximum, in the order the specification gives.
struct zip64_values {
    std::uint64_t usize, csize, offset;
};

void apply_zip64_extra(const reader& r, std::uint64_t at, std::size_t len, zip64_values& v, bool want_usize,
                       bool want_csize, bool want_offset, const std::string& what) {
    const std::uint64_t end = at + len;
    bool found = false;
    while (at < end) {
        r.need(at, 4, end, what + " extra field");
        const auto id = r.le(at, 2), n = r.le(at + 2, 2);
        r.need(at + 4, n, end, what + " extra field");
        if (id == 1) {
            if (found) throw error(errc::bad_header, what + " has two ZIP64 extra fields");
            found = true;
            std::uint64_t q = at + 4;
            const std::uint64_t qend = q + n;
            for (auto [want, field] : {std::pair{want_usize, &v.usize}, std::pair{want_csize, &v.csize},
                                       std::pair{want_offset, &v.offset}}) {
                if (!want) continue;
                r.need(q, 8, qend, what + " ZIP64 extra field");
                *field = r.le(q, 8);
                q += 8;
            }
        }
        at += 4 + n;
    }
    if ((want_usize || want_csize || want_offset) && !found)
        throw error(errc::bad_header, what + " has 32-bit fields set to 0xFFFFFFFF but no ZIP64 extra field");
}

struct member {
    std::string name;
    std::uint32_t crc = 0;
    std::uint64_t size = 0;    // stored: compressed == uncompressed
    std::uint64_t header = 0;  // offset of the local header
    std::uint64_t data = 0;    // offset of the data
};

// The archive's members, every structure checked against the central
// directory (see decode_npz in formats.hpp).
std::vector<member> read_directory(const reader& r, const format_options& opt) {
    const std::uint64_t size = r.size();
    // The end record: the last signature whose comment ends the file exactly.
    std::optional<std::uint64_t> end_at;
    if (size >= end_size) {
        const std::uint64_t lowest = size - end_size > 0xffff ? size - end_size - 0xffff : 0;
        for (std::uint64_t at = size - end_size + 1; at-- > lowest;) {
            if (r.le(at, 4) == end_sig && r.le(at + 20, 2) == size - at - end_size) {
                end_at = at;
                break;
            }
        }
    }
    if (!end_at) {
        if (size >= 4 && r.le(0, 4) == local_sig)
            throw error(errc::truncated, "zip archive of " + str(size) +
                                             " bytes has no end of central directory record (cut short?)");
        if (size < 4 && r.text(0, size) == std::string_view("PK\3\4", size))
            throw error(errc::truncated, "zip archive of " + str(size) + " bytes ends inside its first header");
        throw error(errc::bad_magic, "not a zip archive (no end of central directory record)");
    }
    const std::uint64_t e = *end_at;
    if (r.le(e + 4, 2) != 0 || r.le(e + 6, 2) != 0)
        throw error(errc::unsupported, "multi-disk zip archives are not supported");
    std::uint64_t entries = r.le(e + 10, 2);
    std::uint64_t entries_here = r.le(e + 8, 2);
    std::uint64_t cd_size = r.le(e + 12, 4);
    std::uint64_t cd_offset = r.le(e + 16, 4);
    std::uint64_t cd_end = e;
    // ZIP64: a locator right before the end record points at a larger one.
    if (e >= zip64_locator_size && r.le(e - zip64_locator_size, 4) == zip64_locator_sig) {
        const std::uint64_t loc = e - zip64_locator_size;
        if (r.le(loc + 4, 4) != 0 || r.le(loc + 16, 4) > 1)
            throw error(errc::unsupported, "multi-disk zip archives are not supported");
        const std::uint64_t z = r.le(loc + 8, 8);
        r.need(z, zip64_end_size, loc, "ZIP64 end of central directory record");
        if (r.le(z, 4) != zip64_end_sig)
            throw error(errc::bad_header, "no ZIP64 end of central directory record at offset " + str(z));
        if (r.le(z + 16, 4) != 0 || r.le(z + 20, 4) != 0)
            throw error(errc::unsupported, "multi-disk zip archives are not supported");
        const std::uint64_t record_size = r.le(z + 4, 8);
        if (record_size < zip64_end_size - 12 || record_size > loc - z - 12)
            throw error(errc::bad_header, "ZIP64 end record of " + str(record_size) +
                                              " bytes does not end at the locator");
        entries_here = r.le(z + 24, 8);
        entries = r.le(z + 32, 8);
        cd_size = r.le(z + 40, 8);
        cd_offset = r.le(z + 48, 8);
        cd_end = z;
    }
    if (entries_here != entries)
        throw error(errc::bad_header, "end record counts " + str(entries_here) + " entries on this disk but " +
                                          str(entries) + " in all");
    if (entries > opt.limits.max_tensors)
        throw error(errc::limit_exceeded, "archive of " + str(entries) +
                                              " members exceeds limits::max_tensors = " +
                                              str(opt.limits.max_tensors));
    if (cd_offset > cd_end || cd_size != cd_end - cd_offset)
        throw error(errc::bad_header, "central directory at offset " + str(cd_offset) + " of " + str(cd_size) +
                                          " bytes does not end at the end record (offset " + str(cd_end) + ")");

    std::vector<member> members;
    std::set<std::string> names;
    std::uint64_t at = cd_offset, total = 0;
    for (std::uint64_t i = 0; i < entries; ++i) {
        const std::string what = "central directory entry " + str(i);
        r.need(at, central_size, cd_end, what);
        if (r.le(at, 4) != central_sig)
            throw error(errc::bad_header, what + " at offset " + str(at) + " has no signature");
        const auto flags = r.le(at + 8, 2), method = r.le(at + 10, 2);
        const auto name_len = r.le(at + 28, 2), extra_len = r.le(at + 30, 2), comment_len = r.le(at + 32, 2);
        r.need(at + central_size, name_len + extra_len + comment_len, cd_end, what);
        member m;
        m.name = std::string(r.text(at + central_size, name_len));
        const std::string who = "member " + in_quotes(m.name);
        if (flags & flag_encrypted) throw error(errc::unsupported, who + " is encrypted");
        if (method != 0)
            throw error(errc::unsupported, who + " is compressed (" + method_name(method) +
                                               "); tenbin reads stored members only: use np.savez, "
                                               "not np.savez_compressed");
        if (r.le(at + 34, 2) != 0) throw error(errc::unsupported, who + " lies on another disk");
        if (!(flags & flag_utf8) && std::any_of(m.name.begin(), m.name.end(), [](char c) {
                return static_cast<unsigned char>(c) >= 0x80;
            }))
            throw error(errc::unsupported, "member " + str(i) + " has a non-ASCII name not marked UTF-8");
        if (m.name.find('\0') != std::string::npos)
            throw error(errc::bad_header, "member " + str(i) + ": name contains a NUL byte");
        if (!detail::valid_utf8(m.name))
            throw error(errc::bad_header, "member " + str(i) + " has a name that is not valid UTF-8");
        m.crc = static_cast<std::uint32_t>(r.le(at + 16, 4));
        zip64_values v{r.le(at + 24, 4), r.le(at + 20, 4), r.le(at + 42, 4)};
        apply_zip64_extra(r, at + central_size + name_len, extra_len, v, v.usize == 0xffffffff,
                          v.csize == 0xffffffff, v.offset == 0xffffffff, who);
        if (v.usize != v.csize)
            throw error(errc::bad_header, who + " is stored but its sizes differ (" + str(v.csize) +
                                              " stored, " + str(v.usize) + " uncompressed)");
        if (!m.name.ends_with(".npy"))
            throw error(errc::unsupported, who + " is not an .npy file (an .npz holds NAME.npy members)");
        if (!names.insert(m.name).second) throw error(errc::bad_header, who + " appears twice");
        m.size = v.usize;
        m.header = v.offset;
        total += std::min<std::uint64_t>(m.size, UINT64_MAX - total);
        if (total > opt.limits.max_bytes)
            throw error(errc::limit_exceeded, "members of " + str(total) +
                                                  " bytes or more exceed limits::max_bytes = " +
                                                  str(opt.limits.max_bytes));
        members.push_back(std::move(m));
        at += central_size + name_len + extra_len + comment_len;
    }
    if (at != cd_end)
        throw error(errc::bad_header, "central directory has " + str(cd_end - at) + " bytes after its " +
                                          str(entries) + " entries");

    // Local headers, which must agree with the central directory; members
    // lie before the central directory and do not overlap.
    for (member& m : members) {
        const std::string who = "member " + in_quotes(m.name);
        r.need(m.header, local_size, cd_offset, who + "'s local header");
        if (r.le(m.header, 4) != local_sig)
            throw error(errc::bad_header, who + " has no local header at offset " + str(m.header));
        const auto flags = r.le(m.header + 6, 2), method = r.le(m.header + 8, 2);
        const auto name_len = r.le(m.header + 26, 2), extra_len = r.le(m.header + 28, 2);
        r.need(m.header + local_size, name_len + extra_len, cd_offset, who + "'s local header");
        if (r.text(m.header + local_size, name_len) != m.name)
            throw error(errc::bad_header, who + "'s local header names " +
                                              in_quotes(r.text(m.header + local_size, name_len)));
        if (method != 0 || (flags & flag_encrypted))
            throw error(errc::bad_header, who + "'s local header disagrees with the central directory on "
                                                "method or encryption");
        if (!(flags & flag_descriptor)) {
            // Sizes and CRC are in the local header only without a data
            // descriptor (which streamed writers put after the data).
            zip64_values v{r.le(m.header + 22, 4), r.le(m.header + 18, 4), 0};
            apply_zip64_extra(r, m.header + local_size + name_len, extra_len, v, v.usize == 0xffffffff,
                              v.csize == 0xffffffff, false, who + "'s local header");
            if (r.le(m.header + 14, 4) != m.crc || v.usize != m.size || v.csize != m.size)
                throw error(errc::bad_header, who + "'s local header disagrees with the central directory "
                                                    "on CRC-32 or sizes");
        }
        m.data = m.header + local_size + name_len + extra_len;
        r.need(m.data, m.size, cd_offset, who + "'s data");
    }
    std::vector<const member*> by_offset;
    for (const member& m : members) by_offset.push_back(&m);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->header < b->header; });
    for (std::size_t i = 1; i < by_offset.size(); ++i)
        if (by_offset[i]->header < by_offset[i - 1]->data + by_offset[i - 1]->size)
            throw error(errc::bad_header, "member " + in_quotes(by_offset[i]->name) + " at offset " +
                                              str(by_offset[i]->header) + " overlaps member " +
                                              in_quotes(by_offset[i - 1]->name));
    return members;
}

// A ZIP64 extra field (id 1) holding `values`, or nothing for no values.
std::vector<std::byte> zip64_extra(const std::vector<std::uint64_t>& values) {
    std::vector<std::byte> out;
    if (values.empty()) return out;
    append_le(out, 1, 2);
    append_le(out, 8 * values.size(), 2);
    for (std::uint64_t v : values) append_le(out, v, 8);
    return out;
}

// A 32-bit field holding `v`, or 0xFFFFFFFF when `v` goes to a ZIP64 record.
std::uint64_t field32(std::uint64_t v, bool zip64) { return zip64 ? 0xffffffff : v; }

}  // namespace

std::vector<named_tensor> decode_npz(const buffer& bytes, const format_options& opt) {
    const reader r(bytes);
    const std::vector<member> members = read_directory(r, opt);
    std::vector<named_tensor> out;
    out.reserve(members.size());
    for (const member& m : members) {
        const std::string who = "member " + in_quotes(m.name);
        const buffer part = bytes.slice(static_cast<std::size_t>(m.data), static_cast<std::size_t>(m.size));
        const std::uint32_t crc = crc32_of(0, part.bytes());
        if (crc != m.crc)
            throw error(errc::bad_header, who + ": CRC-32 of the data is " + str(crc) + ", the archive says " +
                                              str(m.crc));
        tensor t = detail::with_context(who, [&] { return detail::decode_npy_part(part, opt); });
        out.push_back(detail::make_named(m.name.substr(0, m.name.size() - 4), std::move(t)));
    }
    return out;
}

namespace detail {

byte_plan plan_npz(std::span<const named_tensor> tensors, const npz_limits& limits) {
    const std::vector<std::string> names = output_names(tensors);
    byte_plan plan;
    std::vector<std::byte> central;
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string file = names[i] + ".npy";
        const tensor_view v = tensors[i].value.view();
        std::vector<std::byte> npy = npy_header(v);
        const std::uint64_t size = npy.size() + v.data.size();
        if (file.size() > 0xffff)
            throw error(errc::bad_argument, "tensor " + str(i) + ": name of " + str(names[i].size()) +
                                                " bytes is too long for a zip member");
        // A size or offset its 32-bit field cannot hold goes to a ZIP64 extra
        // field: both sizes in the local header's; the sizes, the offset or
        // both, in that order, in the central header's.
        const bool big = size >= limits.member_size, far = offset >= limits.offset;
        std::vector<std::uint64_t> wide;
        if (big) wide = {size, size};
        const std::vector<std::byte> local_extra = zip64_extra(wide);
        if (far) wide.push_back(offset);
        const std::vector<std::byte> central_extra = zip64_extra(wide);
        const std::uint32_t crc = crc32_of(crc32_of(0, npy), v.data);
        const bool utf8 = std::any_of(file.begin(), file.end(), [](char c) {
            return static_cast<unsigned char>(c) >= 0x80;
        });
        const std::uint16_t flags = utf8 ? flag_utf8 : 0;
        // Fields shared by the local and the central header, from
        // "version needed" to the extra field's length.
        auto common = [&](std::vector<std::byte>& out, const std::vector<std::byte>& extra) {
            append_le(out, extra.empty() ? 20 : 45, 2);  // version needed: 2.0, or 4.5 for ZIP64
            append_le(out, flags, 2);
            append_le(out, 0, 2);  // stored
            append_le(out, dos_time, 2);
            append_le(out, dos_date, 2);
            append_le(out, crc, 4);
            append_le(out, field32(size, big), 4);
            append_le(out, field32(size, big), 4);
            append_le(out, file.size(), 2);
            append_le(out, extra.size(), 2);
        };
        std::vector<std::byte> local;
        local.reserve(local_size + file.size() + local_extra.size() + npy.size());
        append_le(local, local_sig, 4);
        common(local, local_extra);
        put_text(local, file);
        local.insert(local.end(), local_extra.begin(), local_extra.end());
        local.insert(local.end(), npy.begin(), npy.end());

        append_le(central, central_sig, 4);
        append_le(central, 0x0300 | (central_extra.empty() ? 20 : 45), 2);  // made by: Unix, 2.0 or 4.5
        common(central, central_extra);
        append_le(central, 0, 2);  // comment
        append_le(central, 0, 2);  // disk
        append_le(central, 0, 2);  // internal attributes
        append_le(central, std::uint64_t{0100644} << 16, 4);  // a regular file, rw-r--r--
        append_le(central, field32(offset, far), 4);
        put_text(central, file);
        central.insert(central.end(), central_extra.begin(), central_extra.end());

        offset += local.size() + v.data.size();
        plan.add_owned(std::move(local));
        plan.add_view(v.data);
    }
    const std::uint64_t count = tensors.size(), cd_size = central.size();
    const bool many = count >= limits.members, long_cd = cd_size >= limits.directory_size,
               far_cd = offset >= limits.offset;
    if (many || long_cd || far_cd) {
        // The ZIP64 end record, right after the central directory, and the
        // locator that points at it.
        append_le(central, zip64_end_sig, 4);
        append_le(central, zip64_end_size - 12, 8);  // the bytes after this field
        append_le(central, 45, 2);                   // made by: 4.5
        append_le(central, 45, 2);                   // version needed: 4.5
        append_le(central, 0, 4);                    // this disk
        append_le(central, 0, 4);                    // the central directory's disk
        append_le(central, count, 8);                // entries on this disk
        append_le(central, count, 8);                // entries in all
        append_le(central, cd_size, 8);
        append_le(central, offset, 8);
        append_le(central, zip64_locator_sig, 4);
        append_le(central, 0, 4);  // the ZIP64 end record's disk
        append_le(central, offset + cd_size, 8);
        append_le(central, 1, 4);  // disks in all
    }
    append_le(central, end_sig, 4);
    append_le(central, 0, 2);
    append_le(central, 0, 2);
    append_le(central, many ? 0xffff : count, 2);
    append_le(central, many ? 0xffff : count, 2);
    append_le(central, field32(cd_size, long_cd), 4);
    append_le(central, field32(offset, far_cd), 4);
    append_le(central, 0, 2);  // comment
    plan.add_owned(std::move(central));
    return plan;
}

}  // namespace detail

std::vector<std::byte> encode_npz(std::span<const named_tensor> tensors) {
    return detail::plan_npz(tensors).concat();
}

std::vector<named_tensor> load_npz(const std::filesystem::path& path, const format_options& opt) {
    const buffer mapped = map_file(path);
    return detail::with_context(in_quotes(path), [&] { return decode_npz(mapped, opt); });
}

void save_npz(const std::filesystem::path& path, std::span<const named_tensor> tensors) {
    const detail::byte_plan plan = detail::with_context(in_quotes(path), [&] { return detail::plan_npz(tensors); });
    detail::write_plan(path, plan);
}

}  // namespace tenbin
