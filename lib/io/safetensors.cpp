// .safetensors files (layout at the top of tenbin/formats.hpp), checked as
// strictly as tenbin chunks: every range inside the data section, sizes
// matching shapes, no overlaps, the section covered exactly.
#include "io/formats_detail.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin {

namespace {

using detail::in_quotes;
using detail::str;

constexpr std::string_view metadata_key = "__metadata__";

constexpr std::string_view st_names[] = {"F16", "F32", "F64", "I8", "I16", "I32",
                                         "I64", "U8",  "U16", "U32", "U64"};

std::string_view st_dtype(dtype t) { return st_names[static_cast<std::size_t>(t)]; }

dtype parse_st_dtype(const std::string& s, const std::string& who) {
    for (dtype t : all_dtypes)
        if (st_dtype(t) == s) return t;
    throw error(errc::unsupported, who + ": dtype " + in_quotes(s) +
                                       " is not one tenbin carries (F16 F32 F64 I8 I16 I32 I64 U8 U16 U32 U64)");
}

struct entry {
    std::string name;
    dtype type = dtype::u1;
    shape_t shape;
    std::uint64_t begin = 0, end = 0;
};

// Reads the header as the parser walks it (nlohmann's SAX interface) into
// entries and metadata, refusing anything out of place at once. Linear in
// the header's length and never deeper than three levels: a tree of the
// whole JSON cost 37 times its size in memory, and its ordered objects
// made each key's insert a search of those before it (a 3 MB header of
// 300,000 keys took hours).
class header_reader final : public nlohmann::json_sax<nlohmann::json> {
public:
    explicit header_reader(const format_options& opt) : opt_(opt) {}

    std::vector<entry> entries;
    safetensors_metadata metadata;

    bool null() override { return misplaced(); }
    bool boolean(bool) override { return misplaced(); }
    bool number_integer(number_integer_t) override { return misplaced(); }
    bool number_float(number_float_t, const string_t&) override { return misplaced(); }
    bool binary(binary_t&) override { return misplaced(); }
    bool number_unsigned(number_unsigned_t n) override {
        if (at_ == where::shape) {
            if (n > static_cast<std::uint64_t>(INT64_MAX))
                throw error(errc::bad_header, who() + ": dimension " + str(current().shape.size()) + " exceeds int64");
            if (current().shape.size() == opt_.limits.max_rank)
                throw error(errc::limit_exceeded, who() + ": rank over limits::max_rank = " +
                                                      str(opt_.limits.max_rank));
            current().shape.push_back(static_cast<std::int64_t>(n));
            return true;
        }
        if (at_ == where::offsets) {
            if (offsets_ == 2) not_two_offsets();
            (offsets_++ == 0 ? current().begin : current().end) = n;
            return true;
        }
        return misplaced();
    }
    bool string(string_t& s) override {
        if (at_ == where::entry_value && field_ == field::dtype) {
            current().type = parse_st_dtype(s, who());
            at_ = where::entry;
            return true;
        }
        if (at_ == where::meta_value) {
            metadata.back().second = std::move(s);
            at_ = where::meta;
            return true;
        }
        return misplaced();
    }
    bool start_object(std::size_t) override {
        if (at_ == where::start) {
            at_ = where::top;
        } else if (at_ == where::top_value && in_metadata_) {
            at_ = where::meta;
            meta_keys_.clear();
        } else if (at_ == where::top_value) {
            at_ = where::entry;
            fields_ = 0;
        } else {
            return misplaced();
        }
        return true;
    }
    bool key(string_t& k) override {
        if (at_ == where::top) {
            if (!top_keys_.insert(k).second) throw error(errc::bad_header, "header names " + in_quotes(k) + " twice");
            in_metadata_ = k == metadata_key;
            if (!in_metadata_) {
                // The rule of every reader and writer: no NUL in a name.
                if (k.find('\0') != std::string::npos)
                    throw error(errc::bad_header, "tensor " + str(entries.size()) + ": name contains a NUL byte");
                if (entries.size() == opt_.limits.max_tensors)
                    throw error(errc::limit_exceeded, "more than " + str(opt_.limits.max_tensors) +
                                                          " tensors exceed limits::max_tensors = " +
                                                          str(opt_.limits.max_tensors));
                entries.emplace_back().name = std::move(k);
            }
            at_ = where::top_value;
        } else if (at_ == where::entry) {
            if (k == "dtype") {
                field_ = field::dtype;
            } else if (k == "shape") {
                field_ = field::shape;
            } else if (k == "data_offsets") {
                field_ = field::offsets;
            } else {
                throw error(errc::bad_header, who() + ": unexpected key " + in_quotes(k));
            }
            const unsigned bit = 1u << static_cast<unsigned>(field_);
            if (fields_ & bit) twice(k);
            fields_ |= bit;
            at_ = where::entry_value;
        } else {  // where::meta
            if (!meta_keys_.insert(k).second) twice(k);
            metadata.emplace_back(std::move(k), std::string());
            at_ = where::meta_value;
        }
        return true;
    }
    bool end_object() override {
        if (at_ == where::entry) {
            if (fields_ != 7) throw error(errc::bad_header, who() + ": entry needs 'dtype', 'shape' and 'data_offsets'");
            if (current().end < current().begin)
                throw error(errc::bad_header, who() + ": data_offsets [" + str(current().begin) + ", " +
                                                  str(current().end) + "] end before they begin");
        }
        at_ = at_ == where::top ? where::done : where::top;
        return true;
    }
    bool start_array(std::size_t) override {
        if (at_ == where::entry_value && field_ == field::shape) {
            at_ = where::shape;
        } else if (at_ == where::entry_value && field_ == field::offsets) {
            at_ = where::offsets;
            offsets_ = 0;
        } else {
            return misplaced();
        }
        return true;
    }
    bool end_array() override {
        if (at_ == where::offsets && offsets_ != 2) not_two_offsets();
        at_ = where::entry;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
        throw error(errc::bad_header, std::string("header is not valid JSON: ") + e.what());
    }

private:
    enum class where { start, top, top_value, entry, entry_value, shape, offsets, meta, meta_value, done };
    enum class field { dtype, shape, offsets };

    entry& current() { return entries.back(); }
    std::string who() { return "tensor " + in_quotes(current().name); }

    // A value where the header's layout has no place for it: the error
    // says what was expected there.
    [[noreturn]] bool misplaced() {
        switch (at_) {
        case where::top_value:
            if (in_metadata_) throw error(errc::bad_header, "'__metadata__' is not an object");
            throw error(errc::bad_header, who() + ": entry is not an object");
        case where::entry_value:
            if (field_ == field::dtype) throw error(errc::bad_header, who() + ": 'dtype' is not a string");
            if (field_ == field::shape) throw error(errc::bad_header, who() + ": 'shape' is not an array");
            not_two_offsets();
        case where::shape:
            throw error(errc::bad_header, who() + ": dimension " + str(current().shape.size()) +
                                              " is not a non-negative integer");
        case where::offsets:
            if (offsets_ == 2) not_two_offsets();
            throw error(errc::bad_header, who() + (offsets_ == 0 ? ": begin" : ": end") +
                                              " offset is not a non-negative integer");
        case where::meta_value:
            throw error(errc::bad_header, "'__metadata__' value of " + in_quotes(metadata.back().first) +
                                              " is not a string");
        default:
            throw error(errc::bad_header, "header is not a JSON object");
        }
    }
    [[noreturn]] void not_two_offsets() {
        throw error(errc::bad_header, who() + ": 'data_offsets' is not an array of two offsets");
    }
    [[noreturn]] void twice(const std::string& k) {
        throw error(errc::bad_header, "an object in the header names " + in_quotes(k) + " twice");
    }

    const format_options& opt_;
    where at_ = where::start;
    field field_ = field::dtype;
    unsigned fields_ = 0;  // a bit per field seen in the current entry
    unsigned offsets_ = 0;
    bool in_metadata_ = false;
    std::unordered_set<std::string> top_keys_;
    std::unordered_set<std::string> meta_keys_;
};

}  // namespace

std::vector<named_tensor> decode_safetensors(const buffer& bytes, const format_options& opt) {
    return decode_safetensors_with_metadata(bytes, opt).tensors;
}

safetensors_contents decode_safetensors_with_metadata(const buffer& bytes, const format_options& opt) {
    const std::byte* p = bytes.data();
    const std::uint64_t size = bytes.size();
    if (size < 8)
        throw error(errc::truncated, "safetensors file of " + str(size) + " bytes ends inside its header length");
    const std::uint64_t n = detail::load_le(p, 8);
    if (n > size - 8)
        throw error(errc::length_beyond_end, "header length " + str(n) + " runs past the end of the file (" +
                                                 str(size - 8) + " bytes follow the length)");
    if (n > opt.max_header_bytes)
        throw error(errc::limit_exceeded, "header of " + str(n) +
                                              " bytes exceeds format_options::max_header_bytes = " +
                                              str(opt.max_header_bytes));
    const std::string_view text(reinterpret_cast<const char*>(p + 8), static_cast<std::size_t>(n));
    if (text.empty() || text[0] != '{')
        throw error(errc::bad_header, "header does not start with '{'");

    header_reader header(opt);
    nlohmann::json::sax_parse(text.begin(), text.end(), &header);

    const std::uint64_t data_at = 8 + n;
    const std::uint64_t data_size = size - data_at;
    safetensors_contents out;
    out.metadata = std::move(header.metadata);
    std::vector<entry>& entries = header.entries;
    std::uint64_t total = 0;
    for (const entry& e : entries) {
        const std::string who = "tensor " + in_quotes(e.name);
        if (e.end > data_size)
            throw error(errc::length_beyond_end, who + ": data_offsets [" + str(e.begin) + ", " + str(e.end) +
                                                     "] run past the data section of " + str(data_size) +
                                                     " bytes");
        std::uint64_t elements = 0;
        try {
            elements = detail::element_count(e.shape);
        } catch (const error&) {
            throw error(errc::bad_header, who + ": the shape's element count overflows 64 bits");
        }
        const std::uint64_t item = itemsize(e.type);
        if (elements > UINT64_MAX / item || elements * item != e.end - e.begin)
            throw error(errc::data_size_mismatch,
                        who + ": data_offsets [" + str(e.begin) + ", " + str(e.end) + "] hold " +
                            str(e.end - e.begin) + " bytes but shape and dtype " + std::string(st_dtype(e.type)) +
                            " need " + (elements > UINT64_MAX / item ? std::string("more than 2^64") :
                                                                       str(elements * item)));
        total += e.end - e.begin;  // within data_size, which is within size_t
        if (total > opt.limits.max_bytes)
            throw error(errc::limit_exceeded, "tensor data of " + str(total) +
                                                  " bytes or more exceeds limits::max_bytes = " +
                                                  str(opt.limits.max_bytes));
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
            throw error(errc::bad_header, "tensor " + in_quotes(e.name) + ": data_offsets [" + str(e.begin) + ", " +
                                              str(e.end) + "] overlap tensor " + in_quotes(last->name));
        if (e.begin > covered)
            throw error(errc::bad_header, "data section bytes [" + str(covered) + ", " + str(e.begin) +
                                              ") belong to no tensor");
        covered = e.end;
        last = &e;
    }
    if (covered != data_size)
        throw error(errc::bad_header, "data section bytes [" + str(covered) + ", " + str(data_size) +
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

// Appends `s` as a JSON string, as nlohmann's dump writes it.
static void put_json_string(std::string& out, const std::string& s) { out += nlohmann::json(s).dump(); }

byte_plan plan_safetensors(std::span<const named_tensor> tensors, const safetensors_metadata& metadata) {
    const std::vector<std::string> names = output_names(tensors);
    // Written as text, in nlohmann's compact form: its ordered object
    // searched its keys on every insert (80,000 keys took 45 s).
    std::string text = "{";
    // First, as the safetensors library itself writes it.
    if (!metadata.empty()) {
        std::unordered_set<std::string_view> keys;
        keys.reserve(metadata.size());
        put_json_string(text, std::string(metadata_key));
        text += ":{";
        for (const auto& [key, value] : metadata) {
            if (!valid_utf8(key)) throw error(errc::bad_argument, "a metadata key is not valid UTF-8");
            if (!valid_utf8(value))
                throw error(errc::bad_argument, "metadata value of " + in_quotes(key) + " is not valid UTF-8");
            if (!keys.insert(key).second)
                throw error(errc::bad_argument, "metadata key " + in_quotes(key) + " given twice");
            if (keys.size() > 1) text += ',';
            put_json_string(text, key);
            text += ':';
            put_json_string(text, value);
        }
        text += '}';
    }
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (names[i] == metadata_key)
            throw error(errc::bad_argument, "tensor " + str(i) + ": the name '__metadata__' is reserved");
        const tensor& t = tensors[i].value;
        if (text.size() > 1) text += ',';
        put_json_string(text, names[i]);
        text += ":{\"dtype\":\"";
        text += st_dtype(t.dtype());
        text += "\",\"shape\":[";
        // Appended piece by piece: g++ 12 -O3 warns (-Wrestrict) on "literal" + std::string here.
        for (std::size_t d = 0; d < t.shape().size(); ++d) {
            if (d) text += ',';
            text += std::to_string(t.shape()[d]);
        }
        text += "],\"data_offsets\":[";
        text += str(offset);
        text += ',';
        text += str(offset + t.nbytes());
        text += "]}";
        offset += t.nbytes();
    }
    text += '}';
    // Spaces up to a multiple of 8, so that the data section is aligned.
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<std::byte> head;
    head.reserve(8 + text.size());
    append_le(head, text.size(), 8);
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
