// tenbin info: what the tensors of .ten files (or single-part buffers), and
// of .npy, .npz and .safetensors files, are.
#include "common.hpp"
#include "shard.hpp"

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct info_options {
    std::vector<std::string> files;
    bool json = false;
    std::uint64_t max_bytes = limits{}.max_bytes;
};

// What a file holds. Files of the formats that name tensors with strings
// (.npy, .npz, .safetensors, by extension) have names; any other file is
// read as .ten.
struct contents {
    std::vector<tensor> tensors;
    std::optional<std::vector<std::string>> names;
    safetensors_metadata metadata;
};

contents read_contents(const std::string& file, const limits& lim) {
    const std::optional<file_format> format = file == "-" ? std::nullopt : format_of(file);
    if (!format || *format == file_format::ten) return {load_message(file, lim), std::nullopt, {}};
    named_file named = load_named(file, lim);
    contents out;
    out.metadata = std::move(named.metadata);
    out.names.emplace();
    for (named_tensor& n : named.tensors) {
        out.names->push_back(std::move(n.name));
        out.tensors.push_back(std::move(n.value));
    }
    return out;
}

// The metadata as a JSON object, in file order, in linear time: the reader
// refused duplicate keys, and ordered_json's operator[] would search every
// key before each insert (80,000 keys took 24 s).
nlohmann::ordered_json object_of(const safetensors_metadata& pairs) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    auto& items = static_cast<nlohmann::ordered_json::object_t::Container&>(
        m.get_ref<nlohmann::ordered_json::object_t&>());
    items.reserve(pairs.size());
    for (const auto& [key, value] : pairs) items.emplace_back(key, value);
    return m;
}

// Lists a webdataset shard: its messages in order, each as a .ten file.
bool info_shard(const std::string& file, bool json) {
    std::vector<shard_message> messages;
    std::size_t skipped = 0;
    try {
        messages = read_shard(file, &skipped);
    } catch (...) {
        print_current_error(file);
        return false;
    }
    if (json) {
        nlohmann::ordered_json j;
        j["file"] = file;
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (const shard_message& m : messages) list.push_back({{"name", m.name}, {"tensors", describe(m.tensors)}});
        j["messages"] = std::move(list);
        j["skipped"] = skipped;
        std::cout << json_line(j) << '\n';
    } else {
        std::cout << file << ": shard of " << messages.size() << (messages.size() == 1 ? " message" : " messages");
        if (skipped) std::cout << " (" << skipped << " members not .ten skipped)";
        std::cout << '\n';
        for (const shard_message& m : messages) {
            std::uint64_t total = 0;
            for (const auto& t : m.tensors) total += t.nbytes();
            std::cout << "  " << printable(m.name) << ": " << m.tensors.size()
                      << (m.tensors.size() == 1 ? " tensor, " : " tensors, ") << total << " data bytes\n";
            if (!m.tensors.empty()) print_table(std::cout, m.tensors, "    ");
        }
    }
    std::cout.flush();
    return true;
}

// Describes one file; false (after printing the error line) when it failed.
bool info_one(const std::string& file, bool json, const limits& lim) {
    if (is_shard(file)) return info_shard(file, json);
    contents c;
    try {
        c = read_contents(file, lim);
    } catch (...) {
        print_current_error(file);
        return false;
    }
    const std::vector<tensor>& tensors = c.tensors;
    if (json) {
        nlohmann::ordered_json j;
        j["file"] = file;
        j["tensors"] = describe(tensors);
        if (c.names)
            for (std::size_t i = 0; i < tensors.size(); ++i) j["tensors"][i]["name"] = (*c.names)[i];
        if (!c.metadata.empty()) j["metadata"] = object_of(c.metadata);
        std::cout << json_line(j) << '\n';
    } else {
        std::uint64_t total = 0;
        for (const auto& t : tensors) total += t.nbytes();
        std::cout << file << ": " << tensors.size() << (tensors.size() == 1 ? " tensor, " : " tensors, ")
                  << total << " data bytes\n";
        for (const auto& [key, value] : c.metadata)
            std::cout << "  metadata " << one_line(key) << ": " << one_line(value) << '\n';
        if (!tensors.empty()) print_table(std::cout, tensors, "  ", c.names ? &*c.names : nullptr);
    }
    std::cout.flush();
    return true;
}

int run_info(const info_options& opt) {
    bool ok = true;
    limits lim;
    lim.max_bytes = opt.max_bytes;
    for (const auto& file : opt.files) ok = info_one(file, opt.json, lim) && ok;
    return ok ? exit_ok : exit_failed;
}

}  // namespace

subcommand add_info(CLI::App& parent) {
    auto opt = std::make_shared<info_options>();
    auto* app = parent.add_subcommand("info", "List the tensors in .ten, .npy, .npz and .safetensors files");
    app->footer(
        "Lists the tensors of .ten files or single-part message buffers (any file\n"
        "name: the layout is the same): index, info (the tensor's name), dtype code,\n"
        "shape, data bytes and SHA-256 of the data. Files ending in .npy, .npz and\n"
        ".safetensors list a name column instead of the info (and in JSON a \"name\"\n"
        "per tensor), and a .safetensors file's __metadata__ (JSON: \"metadata\").\n"
        "A .tar file is a webdataset shard (tenbin recv --save): each KEY.ten member is\n"
        "listed as a message (JSON: {\"file\", \"messages\": [{\"name\", \"tensors\"}],\n"
        "\"skipped\": members of other extensions}).\n"
        "A file that cannot be read or decoded gives one line on stderr,\n"
        "'FILE: error: CLASS: message' (CLASS such as truncated, bad_magic, io_error),\n"
        "and the exit status is 1 once the other files are done; otherwise 0.\n"
        "Examples:\n"
        "  tenbin info batch.ten\n"
        "  tenbin info --json *.ten > summary.jsonl\n"
        "  tenbin info model.safetensors\n"
        "  tenbin info recorded.tar");
    app->add_option("FILE", opt->files, "Files to describe ('-' reads standard input: .ten bytes, or .ten.zst by its magic)")
        ->required();
    app->add_flag("--json", opt->json,
                  "One JSON line per file: {\"file\": F, \"tensors\": [{\"info\", \"dtype\", "
                  "\"shape\", \"nbytes\", \"sha256\"}, ...]}");
    add_file_max_bytes(*app, opt->max_bytes);
    return {app, [opt] { return run_info(*opt); }};
}

}  // namespace tenbin::cli
