// NumPy .npy files (layout at the top of tenbin/formats.hpp).
#include "io/formats_detail.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

namespace tenbin {

namespace {

using detail::in_quotes;
using detail::str;

constexpr char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};


// NumPy's descr of each dtype, little endian ('|' for single bytes).
constexpr std::array<std::string_view, 11> descrs = {"<f2", "<f4", "<f8", "|i1", "<i2", "<i4",
                                                     "<i8", "|u1", "<u2", "<u4", "<u8"};

std::string_view descr(dtype t) { return descrs[static_cast<std::size_t>(t)]; }

// The dtype of a descr and whether its bytes need swapping; throws
// unsupported for everything else.
std::pair<dtype, bool> parse_descr(std::string_view d) {
    if (d.size() == 3) {
        const char order = d[0];
        for (dtype t : all_dtypes) {
            if (d.substr(1) != descr(t).substr(1)) continue;
            if (order == '<' || (order == '|' && itemsize(t) == 1)) return {t, false};
            if (order == '>') {
                // Big-endian data is swapped into a copy (see decode_npy).
                return {t, itemsize(t) > 1};
            }
        }
    }
    std::string known;
    for (dtype t : all_dtypes) {
        if (!known.empty()) known += ' ';
        known += descr(t);
    }
    throw error(errc::unsupported, "dtype " + in_quotes(d) + " is not one tenbin carries (" + known +
                                       ", or '>' for big endian)");
}

// The header dict: a Python literal, parsed strictly (it is not JSON).
//   dict  = '{' (key ':' value ',')* [key ':' value] '}'
//   value = string | True | False | tuple of non-negative integers
// Whitespace may surround every token; anything else is bad_header.
class header_parser {
public:
    explicit header_parser(std::string_view text) : s_(text) {}

    struct result {
        dtype type = dtype::u1;
        bool swap = false;
        bool fortran = false;
        shape_t shape;
    };

    result parse(std::size_t max_rank) {
        max_rank_ = max_rank;
        result r;
        bool have_descr = false, have_fortran = false, have_shape = false;
        std::string descr_text;
        skip_space();
        expect('{');
        for (;;) {
            skip_space();
            if (peek() == '}') break;
            const std::size_t key_at = pos_;
            const std::string key = parse_string();
            skip_space();
            expect(':');
            skip_space();
            if (key == "descr") {
                if (have_descr) fail_at(key_at, "key 'descr' appears twice");
                if (peek() == '[')
                    throw error(errc::unsupported,
                                "structured dtypes (a list as 'descr') are not supported");
                // Checked after the whole dict has parsed, so that a syntax
                // error is reported as one.
                descr_text = parse_string();
                have_descr = true;
            } else if (key == "fortran_order") {
                if (have_fortran) fail_at(key_at, "key 'fortran_order' appears twice");
                r.fortran = parse_bool();
                have_fortran = true;
            } else if (key == "shape") {
                if (have_shape) fail_at(key_at, "key 'shape' appears twice");
                r.shape = parse_shape();
                have_shape = true;
            } else {
                fail_at(key_at, "unexpected key " + in_quotes(key) +
                                    " (a header holds 'descr', 'fortran_order' and 'shape')");
            }
            skip_space();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            skip_space();
            if (peek() != '}') fail("expected ',' or '}'");
        }
        expect('}');
        skip_space();
        if (pos_ != s_.size()) fail("unexpected text after the closing '}'");
        if (!have_descr) fail("the header has no 'descr'");
        if (!have_fortran) fail("the header has no 'fortran_order'");
        if (!have_shape) fail("the header has no 'shape'");
        std::tie(r.type, r.swap) = parse_descr(descr_text);
        return r;
    }

private:
    [[noreturn]] void fail_at(std::size_t at, const std::string& why) const {
        throw error(errc::bad_header, "npy header dict at character " + str(at) + ": " + why);
    }
    [[noreturn]] void fail(const std::string& why) const { fail_at(pos_, why); }

    int peek() const noexcept { return pos_ < s_.size() ? static_cast<unsigned char>(s_[pos_]) : -1; }

    void skip_space() noexcept {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }

    void expect(char c) {
        if (peek() != static_cast<unsigned char>(c)) fail(std::string("expected '") + c + "'");
        ++pos_;
    }

    // 'text' or "text": printable ASCII, no escapes.
    std::string parse_string() {
        const int q = peek();
        if (q != '\'' && q != '"') fail("expected a quoted string");
        const std::size_t start = ++pos_;
        while (pos_ < s_.size() && s_[pos_] != static_cast<char>(q)) {
            const auto c = static_cast<unsigned char>(s_[pos_]);
            if (c == '\\') fail("escapes in strings are not supported");
            if (c < 0x20 || c > 0x7e) fail("non-printable byte " + str(c) + " in a string");
            ++pos_;
        }
        if (pos_ >= s_.size()) fail_at(start - 1, "unterminated string");
        return std::string(s_.substr(start, pos_++ - start));
    }

    bool parse_bool() {
        if (s_.substr(pos_, 4) == "True") {
            pos_ += 4;
            return true;
        }
        if (s_.substr(pos_, 5) == "False") {
            pos_ += 5;
            return false;
        }
        fail("expected True or False");
    }

    std::int64_t parse_dim() {
        if (peek() == '-') fail("negative dimension");
        if (peek() < '0' || peek() > '9') fail("expected a dimension (a non-negative integer)");
        const std::size_t start = pos_;
        std::uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            const auto d = static_cast<std::uint64_t>(s_[pos_] - '0');
            if (v > (static_cast<std::uint64_t>(INT64_MAX) - d) / 10) fail_at(start, "dimension exceeds int64");
            v = v * 10 + d;
            ++pos_;
        }
        if (s_[start] == '0' && pos_ - start > 1) fail_at(start, "dimension with a leading zero");
        if (peek() == 'L') ++pos_;  // Python 2's long literals, as old NumPy wrote them
        return static_cast<std::int64_t>(v);
    }

    // () | (d,) | (d, d, ...) with an optional trailing comma; (d) is an
    // integer in Python, not a tuple.
    shape_t parse_shape() {
        if (peek() == '[') fail("'shape' must be a tuple, not a list");
        expect('(');
        shape_t shape;
        bool trailing_comma = false;
        for (;;) {
            skip_space();
            if (peek() == ')') break;
            if (shape.size() >= max_rank_)
                throw error(errc::limit_exceeded, "npy header: a shape of more than " + str(max_rank_) +
                                                      " dimensions exceeds limits::max_rank");
            shape.push_back(parse_dim());
            skip_space();
            trailing_comma = peek() == ',';
            if (trailing_comma) {
                ++pos_;
                continue;
            }
            skip_space();
            if (peek() != ')') fail("expected ',' or ')' in 'shape'");
        }
        if (shape.size() == 1 && !trailing_comma) fail("'shape' (n) is an integer; a 1-d shape is (n,)");
        expect(')');
        return shape;
    }

    std::string_view s_;
    std::size_t pos_ = 0;
    std::size_t max_rank_ = 0;
};

// True when C and Fortran order give the same bytes: at most one
// dimension above 1.
bool order_irrelevant(const shape_t& shape) {
    return std::count_if(shape.begin(), shape.end(), [](std::int64_t d) { return d > 1; }) <= 1;
}

}  // namespace

namespace detail {


std::vector<std::byte> npy_header(const tensor_view& t) {
    std::string dict = "{'descr': '" + std::string(descr(t.dtype)) + "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (i) dict += ", ";
        dict += std::to_string(t.shape[i]);
    }
    if (t.shape.size() == 1) dict += ',';
    dict += "), }";
    // NumPy leaves room to grow the first dimension in place.
    if (!t.shape.empty()) dict.append(21 - std::to_string(t.shape[0]).size(), ' ');
    // As NumPy: version 1.0 when the length fits 16 bits, else 2.0; spaces
    // and '\n' up to a multiple of 64 (a whole 64 more when already there).
    const std::size_t hlen = dict.size() + 1;
    std::size_t prefix = 10;
    std::size_t padlen = 64 - (prefix + hlen) % 64;
    const bool v1 = hlen + padlen < 65536;
    if (!v1) {
        prefix = 12;
        padlen = 64 - (prefix + hlen) % 64;
    }
    std::vector<std::byte> out(prefix + hlen + padlen, std::byte{' '});
    std::memcpy(out.data(), npy_magic, 6);
    out[6] = static_cast<std::byte>(v1 ? 1 : 2);
    out[7] = std::byte{0};
    if (v1) detail::store_le(out.data() + 8, static_cast<std::uint16_t>(hlen + padlen));
    else detail::store_le(out.data() + 8, static_cast<std::uint32_t>(hlen + padlen));
    std::memcpy(out.data() + prefix, dict.data(), dict.size());
    out.back() = std::byte{'\n'};  // the spaces between are the padding
    return out;
}

tensor decode_npy_part(const buffer& bytes, const format_options& opt) {
    const std::byte* p = bytes.data();
    const std::size_t size = bytes.size();
    if (size < 8) {
        // An empty buffer's data() may be null, which memcmp must not get.
        if (size > 0 && std::memcmp(p, npy_magic, std::min<std::size_t>(size, 6)) != 0)
            throw error(errc::bad_magic, "does not start with \\x93NUMPY");
        throw error(errc::truncated, "npy file of " + str(size) + " bytes ends inside its preamble");
    }
    if (std::memcmp(p, npy_magic, 6) != 0) throw error(errc::bad_magic, "does not start with \\x93NUMPY");
    const auto major = static_cast<unsigned>(p[6]), minor = static_cast<unsigned>(p[7]);
    if (major < 1 || major > 3 || minor != 0)
        throw error(errc::unsupported, "npy version " + str(major) + "." + str(minor) +
                                           " (tenbin reads 1.0, 2.0 and 3.0)");
    const std::size_t len_size = major == 1 ? 2 : 4;
    if (size < 8 + len_size)
        throw error(errc::truncated, "npy file of " + str(size) + " bytes ends inside its header length");
    const std::uint64_t hlen = load_le(p + 8, len_size);
    const std::size_t start = 8 + len_size;
    if (hlen > opt.max_header_bytes)
        throw error(errc::limit_exceeded, "npy header of " + str(hlen) +
                                              " bytes exceeds format_options::max_header_bytes = " +
                                              str(opt.max_header_bytes));
    if (hlen > size - start)
        throw error(errc::truncated, "npy header of " + str(hlen) + " bytes runs past the end (" +
                                         str(size - start) + " bytes left)");
    const std::string_view text(reinterpret_cast<const char*>(p + start), static_cast<std::size_t>(hlen));
    const auto h = header_parser(text).parse(opt.limits.max_rank);

    if (h.fortran && !order_irrelevant(h.shape))
        throw error(errc::unsupported, "fortran_order True (column-major data) is not supported; "
                                       "save a C-ordered array (np.ascontiguousarray)");
    const std::uint64_t count = [&] {
        try {
            return element_count(h.shape);
        } catch (const error&) {
            throw error(errc::bad_header, "npy shape's element count overflows 64 bits");
        }
    }();
    if (count > UINT64_MAX / itemsize(h.type))
        throw error(errc::bad_header, "npy shape's byte count overflows 64 bits");
    const std::uint64_t nbytes = count * itemsize(h.type);
    if (nbytes > opt.limits.max_bytes)
        throw error(errc::limit_exceeded, "npy data of " + str(nbytes) + " bytes exceeds limits::max_bytes = " +
                                              str(opt.limits.max_bytes));
    const std::size_t data_at = start + static_cast<std::size_t>(hlen);
    const std::size_t have = size - data_at;
    if (have < nbytes)
        throw error(errc::truncated, "npy data needs " + str(nbytes) + " bytes for shape and dtype " +
                                         std::string(descr(h.type)) + " but the file holds " + str(have));
    if (have > nbytes)
        throw error(errc::data_size_mismatch, "npy data needs " + str(nbytes) + " bytes but " + str(have) +
                                                  " follow the header");

    buffer data;
    if (h.swap) {
        data = buffer::allocate(static_cast<std::size_t>(nbytes));
        std::byte* out = data.writable_bytes().data();
        const std::size_t n = itemsize(h.type);
        for (std::size_t i = 0; i < nbytes; i += n)
            std::reverse_copy(p + data_at + i, p + data_at + i + n, out + i);
    } else {
        data = data_of(bytes, data_at, static_cast<std::size_t>(nbytes), h.type);
    }
    return tensor(h.type, h.shape, std::move(data));
}

}  // namespace detail

namespace {

detail::byte_plan plan_npy(const tensor_view& t) {
    detail::check_rank(t.ndim());
    detail::check_data_size(t.dtype, t.count(), t.data.size());
    detail::byte_plan plan;
    plan.add_owned(detail::npy_header(t));
    plan.add_view(t.data);
    return plan;
}

}  // namespace

tensor decode_npy(const buffer& bytes, const format_options& opt) {
    return detail::decode_npy_part(bytes, opt);
}

std::vector<std::byte> encode_npy(const tensor_view& t) { return plan_npy(t).concat(); }

tensor load_npy(const std::filesystem::path& path, const format_options& opt) {
    const buffer mapped = map_file(path);
    return detail::with_context(in_quotes(path), [&] { return decode_npy(mapped, opt); });
}

void save_npy(const std::filesystem::path& path, const tensor_view& t) {
    const detail::byte_plan plan = detail::with_context(in_quotes(path), [&] { return plan_npy(t); });
    detail::write_plan(path, plan);
}

}  // namespace tenbin
