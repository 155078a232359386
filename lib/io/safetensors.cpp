// .safetensors files (layout at the top of tenbin/formats.hpp), checked as
// strictly as tenbin chunks: every range inside the data section, sizes
// matching shapes, no overlaps, the section covered exactly.
#include "io/formats_detail.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin {

namespace {

using detail::in_quotes;
using detail::throw_error;
// Ordered: tensors at one offset (zero-size ones) keep the header's order.
using json = nlohmann::ordered_json;

std::string str(std::uint64_t n) { return std::to_string(n); }

constexpr std::string_view metadata_key = "__metadata__";

constexpr std::string_view st_names[] = {"F16", "F32", "F64", "I8", "I16", "I32",
                                         "I64", "U8",  "U16", "U32", "U64"};

std::string_view st_dtype(dtype t) { return st_names[static_cast<std::size_t>(t)]; }

dtype parse_st_dtype(const std::string& s, const std::string& who) {
    for (dtype t : all_dtypes)
        if (st_dtype(t) == s) return t;
    throw_error(errc::unsupported, who + ": dtype " + in_quotes(s) +
                                       " is not one tenbin carries (F16 F32 F64 I8 I16 I32 I64 U8 U16 U32 U64)");
}

struct entry {
    std::string name;
    dtype type = dtype::u1;
    shape_t shape;
    std::uint64_t begin = 0, end = 0;
};

std::uint64_t unsigned_of(const json& j, const std::string& what) {
    if (!j.is_number_unsigned()) throw_error(errc::bad_header, what + " is not a non-negative integer");
    return j.get<std::uint64_t>();
}

entry parse_entry(const std::string& name, const json& j, const format_options& opt) {
    const std::string who = "tensor " + in_quotes(name);
    if (!j.is_object()) throw_error(errc::bad_header, who + ": entry is not an object");
    for (const auto& [key, value] : j.items())
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            throw_error(errc::bad_header, who + ": unexpected key " + in_quotes(key));
    if (!j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
        throw_error(errc::bad_header, who + ": entry needs 'dtype', 'shape' and 'data_offsets'");
    entry e;
    e.name = name;
    const json& d = j["dtype"];
    if (!d.is_string()) throw_error(errc::bad_header, who + ": 'dtype' is not a string");
    e.type = parse_st_dtype(d.get<std::string>(), who);
    const json& s = j["shape"];
    if (!s.is_array()) throw_error(errc::bad_header, who + ": 'shape' is not an array");
    if (s.size() > opt.limits.max_rank)
        throw_error(errc::limit_exceeded, who + ": rank " + str(s.size()) + " exceeds limits::max_rank = " +
                                              str(opt.limits.max_rank));
    for (std::size_t i = 0; i < s.size(); ++i) {
        const std::uint64_t dim = unsigned_of(s[i], who + ": dimension " + str(i));
        if (dim > static_cast<std::uint64_t>(INT64_MAX))
            throw_error(errc::bad_header, who + ": dimension " + str(i) + " exceeds int64");
        e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const json& o = j["data_offsets"];
    if (!o.is_array() || o.size() != 2)
        throw_error(errc::bad_header, who + ": 'data_offsets' is not an array of two offsets");
    e.begin = unsigned_of(o[0], who + ": begin offset");
    e.end = unsigned_of(o[1], who + ": end offset");
    if (e.end < e.begin)
        throw_error(errc::bad_header, who + ": data_offsets [" + str(e.begin) + ", " + str(e.end) +
                                          "] end before they begin");
    return e;
}

safetensors_metadata metadata_of(const json& j) {
    if (!j.is_object()) throw_error(errc::bad_header, "'__metadata__' is not an object");
    safetensors_metadata out;
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string())
            throw_error(errc::bad_header, "'__metadata__' value of " + in_quotes(key) + " is not a string");
        out.emplace_back(key, value.get<std::string>());
    }
    return out;
}

// Parses the header text, refusing a key given twice in one object: it
// would let one name hide another's range, or one field another's value
// (nlohmann keeps only one of them).
json parse_header(std::string_view text) {
    std::optional<std::string> duplicate;
    bool at_top = false;
    std::vector<std::set<std::string>> open;  // the keys of each object being parsed
    const json::parser_callback_t note_keys = [&](int, json::parse_event_t event, json& parsed) {
        if (duplicate) return true;
        if (event == json::parse_event_t::object_start) {
            open.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            open.pop_back();
        } else if (event == json::parse_event_t::key && !open.empty()) {
            std::string k = parsed.get<std::string>();
            if (!open.back().insert(k).second) {
                at_top = open.size() == 1;
                duplicate = std::move(k);
            }
        }
        return true;
    };
    json header;
    try {
        header = json::parse(text, note_keys);
    } catch (const json::exception& e) {
        throw_error(errc::bad_header, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) throw_error(errc::bad_header, "header is not a JSON object");
    if (duplicate)
        throw_error(errc::bad_header,
                    (at_top ? "header names " : "an object in the header names ") + in_quotes(*duplicate) + " twice");
    return header;
}

}  // namespace

std::vector<named_tensor> decode_safetensors(const buffer& bytes, const format_options& opt) {
    return decode_safetensors_with_metadata(bytes, opt).tensors;
}

safetensors_contents decode_safetensors_with_metadata(const buffer& bytes, const format_options& opt) {
    const std::byte* p = bytes.data();
    const std::uint64_t size = bytes.size();
    if (size < 8)
        throw_error(errc::truncated, "safetensors file of " + str(size) + " bytes ends inside its header length");
    const std::uint64_t n = detail::get_le(p, 8);
    if (n > size - 8)
        throw_error(errc::length_beyond_end, "header length " + str(n) + " runs past the end of the file (" +
                                                 str(size - 8) + " bytes follow the length)");
    if (n > opt.max_header_bytes)
        throw_error(errc::limit_exceeded, "header of " + str(n) +
                                              " bytes exceeds format_options::max_header_bytes = " +
                                              str(opt.max_header_bytes));
    const std::string_view text(reinterpret_cast<const char*>(p + 8), static_cast<std::size_t>(n));
    if (text.empty() || text[0] != '{')
        throw_error(errc::bad_header, "header does not start with '{'");

    const json header = parse_header(text);
    const std::size_t count = header.size() - (header.contains(metadata_key) ? 1 : 0);
    if (count > opt.limits.max_tensors)
        throw_error(errc::limit_exceeded, str(count) + " tensors exceed limits::max_tensors = " +
                                              str(opt.limits.max_tensors));

    const std::uint64_t data_at = 8 + n;
    const std::uint64_t data_size = size - data_at;
    safetensors_contents out;
    std::vector<entry> entries;
    entries.reserve(count);
    std::uint64_t total = 0;
    for (const auto& [key, value] : header.items()) {
        if (key == metadata_key) {
            out.metadata = metadata_of(value);
            continue;
        }
        entry e = parse_entry(key, value, opt);
        const std::string who = "tensor " + in_quotes(e.name);
        if (e.end > data_size)
            throw_error(errc::length_beyond_end, who + ": data_offsets [" + str(e.begin) + ", " + str(e.end) +
                                                     "] run past the data section of " + str(data_size) +
                                                     " bytes");
        std::uint64_t elements = 0;
        try {
            elements = detail::element_count(e.shape);
        } catch (const error&) {
            throw_error(errc::bad_header, who + ": the shape's element count overflows 64 bits");
        }
        const std::uint64_t item = itemsize(e.type);
        if (elements > UINT64_MAX / item || elements * item != e.end - e.begin)
            throw_error(errc::data_size_mismatch,
                        who + ": data_offsets [" + str(e.begin) + ", " + str(e.end) + "] hold " +
                            str(e.end - e.begin) + " bytes but shape and dtype " + std::string(st_dtype(e.type)) +
                            " need " + (elements > UINT64_MAX / item ? std::string("more than 2^64") :
                                                                       str(elements * item)));
        total += e.end - e.begin;  // within data_size, which is within size_t
        if (total > opt.limits.max_bytes)
            throw_error(errc::limit_exceeded, "tensor data of " + str(total) +
                                                  " bytes or more exceeds limits::max_bytes = " +
                                                  str(opt.limits.max_bytes));
        entries.push_back(std::move(e));
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const entry& a, const entry& b) { return a.begin < b.begin; });
    // The non-empty ranges lie back to back from offset 0 to the end of the
    // data section; empty ones may sit at any offset within it.
    std::uint64_t covered = 0;
    const entry* last = nullptr;
    for (const entry& e : entries) {
        if (e.begin == e.end) continue;
        if (e.begin < covered)
            throw_error(errc::bad_header, "tensor " + in_quotes(e.name) + ": data_offsets [" + str(e.begin) + ", " +
                                              str(e.end) + "] overlap tensor " + in_quotes(last->name));
        if (e.begin > covered)
            throw_error(errc::bad_header, "data section bytes [" + str(covered) + ", " + str(e.begin) +
                                              ") belong to no tensor");
        covered = e.end;
        last = &e;
    }
    if (covered != data_size)
        throw_error(errc::bad_header, "data section bytes [" + str(covered) + ", " + str(data_size) +
                                          ") belong to no tensor");

    out.tensors.reserve(entries.size());
    for (entry& e : entries) {
        buffer data = detail::data_of(bytes, static_cast<std::size_t>(data_at + e.begin),
                                      static_cast<std::size_t>(e.end - e.begin), e.type);
        tensor t(e.type, std::move(e.shape), std::move(data));
        out.tensors.push_back(detail::make_named(std::move(e.name), std::move(t)));
    }
    return out;
}

namespace detail {

byte_plan plan_safetensors(std::span<const named_tensor> tensors, const safetensors_metadata& metadata) {
    const std::vector<std::string> names = output_names(tensors);
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    // First, as the safetensors library itself writes it.
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [key, value] : metadata) {
            if (!valid_utf8(key)) throw_error(errc::bad_argument, "a metadata key is not valid UTF-8");
            if (!valid_utf8(value))
                throw_error(errc::bad_argument, "metadata value of " + in_quotes(key) + " is not valid UTF-8");
            if (m.contains(key)) throw_error(errc::bad_argument, "metadata key " + in_quotes(key) + " given twice");
            m[key] = value;
        }
        header[metadata_key] = std::move(m);
    }
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (names[i] == metadata_key)
            throw_error(errc::bad_argument, "tensor " + str(i) + ": the name '__metadata__' is reserved");
        const tensor& t = tensors[i].value;
        nlohmann::ordered_json e;
        e["dtype"] = st_dtype(t.dtype());
        e["shape"] = t.shape();
        e["data_offsets"] = {offset, offset + t.nbytes()};
        header[names[i]] = std::move(e);
        offset += t.nbytes();
    }
    std::string text = header.dump();
    // Spaces up to a multiple of 8, so that the data section is aligned.
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<std::byte> head;
    head.reserve(8 + text.size());
    put_le(head, text.size(), 8);
    put_text(head, text);
    byte_plan plan;
    plan.add_owned(std::move(head));
    for (const named_tensor& t : tensors) plan.add_view(t.value.data().bytes());
    return plan;
}

}  // namespace detail

std::vector<std::byte> encode_safetensors(std::span<const named_tensor> tensors,
                                          const safetensors_metadata& metadata) {
    return detail::plan_safetensors(tensors, metadata).concat();
}

std::vector<named_tensor> load_safetensors(const std::filesystem::path& path, const format_options& opt) {
    return load_safetensors_with_metadata(path, opt).tensors;
}

safetensors_contents load_safetensors_with_metadata(const std::filesystem::path& path, const format_options& opt) {
    const buffer mapped = map_file(path);
    return detail::with_context(in_quotes(path), [&] { return decode_safetensors_with_metadata(mapped, opt); });
}

void save_safetensors(const std::filesystem::path& path, std::span<const named_tensor> tensors,
                      const safetensors_metadata& metadata) {
    const detail::byte_plan plan =
        detail::with_context(in_quotes(path), [&] { return detail::plan_safetensors(tensors, metadata); });
    detail::write_plan(path, plan);
}

}  // namespace tenbin
