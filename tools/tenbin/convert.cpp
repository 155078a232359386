// tenbin convert: between .ten, .ten.zst, .npy, .npz and .safetensors files.
#include "common.hpp"

#include <tenbin/formats.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace tenbin::cli {
namespace {

struct convert_options {
    std::string in;
    std::string out;
    std::vector<std::string> metadata;  // KEY=VALUE
    bool force = false;
    bool quiet = false;
    std::uint64_t max_bytes = limits{}.max_bytes;
    std::string infos;  // "", "short" or a names file
};

bool is_safetensors(const std::string& path) { return format_of(path) == file_format::safetensors; }

// A safetensors input's metadata, then each --metadata KEY=VALUE (a key
// given again replaces its value in place).
safetensors_metadata merged(safetensors_metadata from_input, const std::vector<std::string>& given) {
    for (const std::string& kv : given) {
        const std::size_t eq = kv.find('=');
        std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
        auto same_key = [&](const auto& p) { return p.first == key; };
        if (auto it = std::find_if(from_input.begin(), from_input.end(), same_key); it != from_input.end())
            it->second = std::move(value);
        else
            from_input.emplace_back(std::move(key), std::move(value));
    }
    return from_input;
}

bool fits_info(const std::string& name) {
    try {
        (void)tensor().with_info(name);  // the library's info check
        return true;
    } catch (const tenbin::error&) {
        return false;
    }
}

// The names file beside a .ten file: OUT.names.json.
std::string names_file_of(const std::string& ten) { return ten + ".names.json"; }

// A names file: {"INFO": "NAME", ...}, in tensor order.
using name_table = std::vector<std::pair<std::string, std::string>>;

name_table read_names(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw tenbin::error(errc::io_error, path + ": cannot open");
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw tenbin::error(errc::bad_argument, path + ": not JSON: " + e.what());
    }
    if (!j.is_object()) throw tenbin::error(errc::bad_argument, path + ": expected {\"INFO\": \"NAME\", ...}");
    name_table out;
    for (const auto& [info, name] : j.items()) {
        if (!name.is_string())
            throw tenbin::error(errc::bad_argument, path + ": the name of '" + info + "' is not a string");
        if (!fits_info(info))
            throw tenbin::error(errc::bad_argument, path + ": '" + info + "' is not a valid info (8 ASCII characters)");
        out.emplace_back(info, name.get<std::string>());
    }
    return out;
}

void write_names(const std::string& path, const name_table& table) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [info, name] : table) j[info] = name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << j.dump(2) << '\n';
    out.close();
    if (!out) throw tenbin::error(errc::io_error, path + ": write failed");
}

// Names that fit an info stay; the others become t<index> (or t<index>_<n>
// should that be taken). Returns the table of every tensor, info -> name.
name_table shorten(std::vector<named_tensor>& tensors) {
    std::set<std::string> used;
    for (const auto& t : tensors)
        if (fits_info(t.name)) used.insert(t.name);
    name_table table;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        std::string info = tensors[i].name;
        if (!fits_info(info)) {
            info = "t" + std::to_string(i);
            for (int n = 1; used.count(info); ++n) info = "t" + std::to_string(i) + "_" + std::to_string(n);
            if (!fits_info(info))
                throw tenbin::error(errc::bad_argument, "too many tensors for short infos (" +
                                                            std::to_string(tensors.size()) + ")");
            used.insert(info);
        } else if (std::count_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name == info; }) > 1) {
            throw tenbin::error(errc::bad_argument, "the name '" + info + "' is there twice");
        }
        table.emplace_back(info, tensors[i].name);
        tensors[i].name = info;
    }
    return table;
}

// Names to infos by a table (inverse lookup); names it lacks stay as they are.
void to_infos(std::vector<named_tensor>& tensors, const name_table& table) {
    for (auto& t : tensors)
        for (const auto& [info, name] : table)
            if (name == t.name) {
                t.name = info;
                break;
            }
}

// Infos back to names by a table; infos it lacks stay as they are.
void to_names(std::vector<named_tensor>& tensors, const name_table& table) {
    for (auto& t : tensors)
        for (const auto& [info, name] : table)
            if (info == t.name) {
                t.name = name;
                break;
            }
}

int run_convert(const convert_options& opt) {
    namespace fs = std::filesystem;
    std::vector<named_tensor> tensors;
    safetensors_metadata metadata;
    try {
        // The output first: a wrong output must not cost a load.
        if (!format_of(opt.out))
            throw tenbin::error(errc::bad_extension,
                                "'" + opt.out + "': unknown extension; expected .ten, .ten.zst, .npy, .npz "
                                "or .safetensors");
        if (!opt.metadata.empty() && !is_safetensors(opt.out))
            throw tenbin::error(errc::bad_argument, "--metadata needs a .safetensors output");
    } catch (...) {
        print_current_error(opt.out);
        return exit_usage;  // wrong arguments, found before anything is read
    }
    try {
        limits lim;
        lim.max_bytes = opt.max_bytes;
        named_file in = load_named(opt.in, lim);
        tensors = std::move(in.tensors);
        if (is_safetensors(opt.out)) metadata = merged(std::move(in.metadata), opt.metadata);
    } catch (...) {
        print_current_error(opt.in);
        return exit_failed;
    }
    // Names in and out of the 8-byte infos of a .ten file.
    const bool ten_in = format_of(opt.in) == file_format::ten, ten_out = format_of(opt.out) == file_format::ten;
    name_table short_table;  // written beside the output once it is saved
    try {
        std::string table_file = opt.infos == "short" ? std::string() : opt.infos;
        // The table saved beside a .ten input brings its names back by itself.
        if (table_file.empty() && opt.infos.empty() && ten_in && !ten_out &&
            std::filesystem::exists(names_file_of(opt.in)))
            table_file = names_file_of(opt.in);
        if (!table_file.empty()) {
            const name_table table = read_names(table_file);
            if (ten_out && !ten_in) to_infos(tensors, table);
            else if (ten_in && !ten_out) to_names(tensors, table);
        } else if (opt.infos == "short" && ten_out && !ten_in) {
            short_table = shorten(tensors);
        }
        if (ten_out)
            for (const auto& t : tensors)
                if (!fits_info(t.name))
                    throw tenbin::error(errc::bad_argument,
                                        "the name '" + printable(t.name) +
                                            "' does not fit a .ten info (8 ASCII characters); give --infos short "
                                            "(short infos, the names saved in OUT.names.json) or --infos FILE");
    } catch (...) {
        print_current_error(opt.in);
        return current_error_status() == exit_usage ? exit_usage : exit_failed;
    }
    try {
        std::error_code ec;
        if (fs::exists(opt.out, ec)) {
            // The input may be mapped: writing over it would pull the bytes
            // from under the tensors.
            if (fs::equivalent(opt.in, opt.out, ec))
                throw tenbin::error(errc::bad_argument, "'" + opt.out + "' is the input file");
            if (!opt.force)
                throw tenbin::error(errc::bad_argument,
                                    "'" + opt.out + "' exists; use --force to replace it");
        }
        if (is_safetensors(opt.out))
            save_safetensors(opt.out, tensors, metadata);
        else
            tenbin::save_any(opt.out, tensors);
        if (!short_table.empty()) write_names(names_file_of(opt.out), short_table);
    } catch (...) {
        print_current_error(opt.out);
        return exit_failed;
    }
    if (!opt.quiet) {
        std::uint64_t total = 0;
        for (const auto& t : tensors) total += t.value.nbytes();
        std::cout << opt.in << " -> " << opt.out << ": " << tensors.size()
                  << (tensors.size() == 1 ? " tensor, " : " tensors, ") << total << " data bytes\n";
        // The renamed ones, and where the whole table went.
        if (!short_table.empty()) {
            for (const auto& [info, name] : short_table)
                if (info != name) std::cout << "  " << info << " = " << printable(name) << '\n';
            std::cout << "names saved in " << names_file_of(opt.out) << '\n';
        }
    }
    return exit_ok;
}

}  // namespace

subcommand add_convert(CLI::App& parent) {
    auto opt = std::make_shared<convert_options>();
    auto* app = parent.add_subcommand("convert", "Convert between .ten, .npy, .npz and .safetensors files");
    app->add_option("IN", opt->in, "Input file")->required();
    app->add_option("OUT", opt->out, "Output file; one that exists is replaced only with --force")->required();
    app->add_option("-m,--metadata", opt->metadata,
                    "KEY=VALUE for a .safetensors OUT's __metadata__ (repeatable), e.g. format=pt")
        ->type_name("KEY=VALUE")
        ->check(CLI::Validator([](std::string& s) { return s.find('=') == std::string::npos ? "expected KEY=VALUE"
                                                                                            : std::string(); },
                               "", "key_value"))
        ->allow_extra_args(false);
    app->add_flag("-f,--force", opt->force, "Replace OUT when it exists (without it, an existing OUT is kept and\n"
                                            "convert fails with status 1)");
    app->add_flag("-q,--quiet", opt->quiet, "Print nothing on success");
    add_file_max_bytes(*app, opt->max_bytes);
    app->add_option("--infos", opt->infos,
                    "Names that do not fit a .ten info (8 ASCII characters): 'short' gives them\n"
                    "unique short infos (t0, t17, ...) and saves the table INFO -> NAME as\n"
                    "OUT.names.json; FILE, such a table, maps names to infos (into .ten) or infos\n"
                    "back to names (out of .ten)")
        ->type_name("short|FILE");
    app->footer(
        "Formats go by extension: .ten and .ten.zst (tenbin), .npy (one tensor, no\n"
        "name), .npz (NumPy archive, uncompressed members only), .safetensors\n"
        "(F16 F32 F64 I8..I64 U8..U64). Names carry over; a name that a .ten info\n"
        "cannot hold (over 8 characters, not ASCII) is refused, never truncated,\n"
        "unless --infos maps it (real checkpoints: --infos short). Out of a .ten file,\n"
        "the table IN.names.json beside it (or --infos FILE) brings the names back;\n"
        "unnamed tensors become arr_0, arr_1, ... in .npz and .safetensors.\n"
        "A .safetensors file's __metadata__ carries over to a .safetensors OUT;\n"
        "--metadata adds or replaces entries (Hugging Face loaders want format=pt).\n"
        "An existing OUT is never replaced without --force (running the same\n"
        "conversion twice fails the second time), and never when it is IN.\n"
        "On failure: one line 'FILE: error: CLASS: message' on stderr, exit status 1.\n"
        "Examples:\n"
        "  tenbin convert batch.ten batch.npz\n"
        "  tenbin convert model.safetensors model.ten --infos short   (and model.ten.names.json)\n"
        "  tenbin convert model.ten model.safetensors --metadata format=pt   (names back)");
    return {app, [opt] { return run_convert(*opt); }};
}

}  // namespace tenbin::cli
