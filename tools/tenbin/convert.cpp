// tenbin convert: between .ten, .ten.zst, .npy, .npz and .safetensors files.
#include "common.hpp"

#include <tenbin/formats.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

namespace tenbin::cli {
namespace {

struct convert_options {
    std::string in;
    std::string out;
    bool force = false;
    bool quiet = false;
};

int run_convert(const convert_options& opt) {
    namespace fs = std::filesystem;
    std::vector<named_tensor> tensors;
    try {
        // Both names first: a wrong output name must not cost a load.
        if (!format_of(opt.out))
            throw tenbin::error(errc::bad_extension,
                                "'" + opt.out + "': unknown extension; expected .ten, .ten.zst, .npy, .npz "
                                "or .safetensors");
        tensors = tenbin::load_any(opt.in);
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
    app->add_option("OUT", opt->out, "Output file")->required();
    app->add_flag("-f,--force", opt->force, "Replace OUT when it exists");
    app->add_flag("-q,--quiet", opt->quiet, "Print nothing on success");
    app->footer(
        "Formats go by extension: .ten and .ten.zst (tenbin), .npy (one tensor, no\n"
        "name), .npz (NumPy archive, uncompressed members only), .safetensors\n"
        "(F16 F32 F64 I8..I64 U8..U64). Names carry over; a name that a .ten info\n"
        "cannot hold (over 8 characters, not ASCII) is refused, never truncated;\n"
        "unnamed tensors become arr_0, arr_1, ... in .npz and .safetensors.\n"
        "OUT is not replaced without --force, and never when it is IN.\n"
        "On failure: one line 'FILE: error: CLASS: message' on stderr, exit status 1.\n"
        "Examples:\n"
        "  tenbin convert batch.ten batch.npz\n"
        "  tenbin convert model.safetensors model.ten --force");
    return {app, [opt] { return run_convert(*opt); }};
}

}  // namespace tenbin::cli
