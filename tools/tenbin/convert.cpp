// tenbin convert: between .ten, .ten.zst, .npy, .npz and .safetensors files.
#include "common.hpp"

#include <tenbin/formats.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
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
    } catch (...) {
        print_current_error(opt.out);
        return exit_failed;
    }
    if (!opt.quiet) {
        std::uint64_t total = 0;
        for (const auto& t : tensors) total += t.value.nbytes();
        std::cout << opt.in << " -> " << opt.out << ": " << tensors.size()
                  << (tensors.size() == 1 ? " tensor, " : " tensors, ") << total << " data bytes\n";
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
    app->footer(
        "Formats go by extension: .ten and .ten.zst (tenbin), .npy (one tensor, no\n"
        "name), .npz (NumPy archive, uncompressed members only), .safetensors\n"
        "(F16 F32 F64 I8..I64 U8..U64). Names carry over; a name that a .ten info\n"
        "cannot hold (over 8 characters, not ASCII) is refused, never truncated;\n"
        "unnamed tensors become arr_0, arr_1, ... in .npz and .safetensors.\n"
        "A .safetensors file's __metadata__ carries over to a .safetensors OUT;\n"
        "--metadata adds or replaces entries (Hugging Face loaders want format=pt).\n"
        "An existing OUT is never replaced without --force (running the same\n"
        "conversion twice fails the second time), and never when it is IN.\n"
        "On failure: one line 'FILE: error: CLASS: message' on stderr, exit status 1.\n"
        "Examples:\n"
        "  tenbin convert batch.ten batch.npz\n"
        "  tenbin convert model.safetensors model.ten --force\n"
        "  tenbin convert model.ten model.safetensors --metadata format=pt");
    return {app, [opt] { return run_convert(*opt); }};
}

}  // namespace tenbin::cli
