// tenbin info: what the tensors of .ten files (or single-part buffers) are.
#include "common.hpp"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct info_options {
    std::vector<std::string> files;
    bool json = false;
};

// Describes one file; false (after printing the error line) when it failed.
bool info_one(const std::string& file, bool json) {
    std::vector<tensor> tensors;
    try {
        tensors = load_any(file);
    } catch (...) {
        print_current_error(file);
        return false;
    }
    if (json) {
        nlohmann::ordered_json j;
        j["file"] = file;
        j["tensors"] = describe(tensors);
        std::cout << json_line(j) << '\n';
    } else {
        std::uint64_t total = 0;
        for (const auto& t : tensors) total += t.nbytes();
        std::cout << file << ": " << tensors.size() << (tensors.size() == 1 ? " tensor, " : " tensors, ")
                  << total << " data bytes\n";
        if (!tensors.empty()) print_table(std::cout, tensors);
    }
    std::cout.flush();
    return true;
}

int run_info(const info_options& opt) {
    bool ok = true;
    for (const auto& file : opt.files) ok = info_one(file, opt.json) && ok;
    return ok ? exit_ok : exit_failed;
}

}  // namespace

subcommand add_info(CLI::App& parent) {
    auto opt = std::make_shared<info_options>();
    auto* app = parent.add_subcommand("info", "List the tensors in .ten files");
    app->footer(
        "Lists the tensors of .ten files or single-part message buffers (any file\n"
        "name: the layout is the same): index, info (the tensor's name), dtype code,\n"
        "shape, data bytes and SHA-256 of the data.\n"
        "A file that cannot be read or decoded gives one line on stderr,\n"
        "'FILE: error: CLASS: message' (CLASS such as truncated, bad_magic, io_error),\n"
        "and the exit status is 1 once the other files are done; otherwise 0.\n"
        "Examples:\n"
        "  tenbin info batch.ten\n"
        "  tenbin info --json *.ten > summary.jsonl");
    app->add_option("FILE", opt->files, "Files to describe ('-' reads standard input)")
        ->required();
    app->add_flag("--json", opt->json,
                  "One JSON line per file: {\"file\": F, \"tensors\": [{\"info\", \"dtype\", "
                  "\"shape\", \"nbytes\", \"sha256\"}, ...]}");
    return {app, [opt] { return run_info(*opt); }};
}

}  // namespace tenbin::cli
