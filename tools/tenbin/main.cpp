// tenbin: inspect, send and receive lists of tensors in the tenbin format
// (.ten files, ZeroMQ messages), compatible with Python tensorcom/webdataset.
#include "common.hpp"

#include <tenbin/config.hpp>

#include <algorithm>
#include <cctype>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <vector>

namespace {

// Each word of `args` (what follows the command) that looks like an option
// the command does not have, with the option closest to it: after any usage
// error, so that a required option mistyped ("--fiel" for --file) is named
// beside CLI11's "--file is required".
void suggest_options(const CLI::App& command, std::span<char* const> args) {
    std::vector<std::string> names;
    for (const CLI::Option* o : command.get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
    }
    for (std::string_view arg : args) {
        if (arg == "--") break;  // operands follow
        if (!arg.starts_with("--")) continue;
        const std::string word(arg.substr(0, arg.find('=')));
        if (std::find(names.begin(), names.end(), word) != names.end()) continue;
        if (const std::string guess = tenbin::cli::closest(word, names); !guess.empty())
            std::cerr << "tenbin " << command.get_name() << ": " << word << ": did you mean " << guess << "?\n";
    }
}

// The commands `word` (which names none) was likely meant to be: itself in
// lowercase, tensorcom's name for one (tensormon), the commands it begins
// ("s": send, serve, stat, show) or begins with ("statistics"), or the
// closest by spelling ("recieve"); none when nothing is close.
std::vector<std::string> commands_meant(std::string_view word, const std::vector<std::string>& names) {
    static const std::pair<std::string_view, std::string_view> aliases[] = {
        {"receive", "recv"}, {"tensormon", "monitor"}, {"tensorstat", "stat"}, {"tensorshow", "show"},
    };
    std::string lower(word);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto has = [&](std::string_view name) { return std::find(names.begin(), names.end(), name) != names.end(); };
    if (has(lower)) return {lower};
    std::vector<std::string> begun, beginning;
    for (const std::string& name : names) {
        if (name.starts_with(lower)) begun.push_back(name);
        if (lower.starts_with(name) && name.size() >= 3) beginning.push_back(name);
    }
    if (!begun.empty()) return begun;
    if (!beginning.empty()) return beginning;
    std::vector<std::string> spellings = names;
    for (const auto& [alias, name] : aliases) spellings.emplace_back(alias);
    const std::string guess = tenbin::cli::closest(lower, spellings);
    for (const auto& [alias, name] : aliases)
        if (guess == alias) return {std::string(name)};
    if (guess.empty()) return {};
    return {guess};
}

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
std::string either(const std::vector<std::string>& words) {
    std::string out;
    for (std::size_t i = 0; i < words.size(); ++i)
        out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + ("'" + words[i] + "'");
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tenbin::cli;

    CLI::App app{
        "tenbin: lists of tensors in the tenbin format of Python tensorcom and webdataset,\n"
        "in .ten files and over ZeroMQ.",
        "tenbin"};
    app.set_version_flag("--version", "tenbin " TENBIN_VERSION);  // the project's, from config.hpp
    app.require_subcommand(1);

    // One line per subcommand; each lives in its own file.
    const std::vector<subcommand> commands = {
        add_info(app),
        add_send(app),
        add_recv(app),
        add_serve(app),
        add_monitor(app),
        add_stat(app),
        add_convert(app),
        add_show(app),
        add_keygen(app),
    };

    // After the subcommands, which would otherwise inherit it.
    app.footer(
        "Run 'tenbin COMMAND --help' for the options of one command.\n"
        "Examples:\n"
        "  tenbin info data.ten\n"
        "  tenbin convert data.ten data.npz\n"
        "  tenbin recv 'tcp://*:5555' --count 10 --json               (PULL binds)\n"
        "  tenbin send tcp://localhost:5555 --file data.ten --count 10   (PUSH connects)\n"
        "Wrong options or arguments: a message on stderr, exit status 64 (EX_USAGE),\n"
        "whatever the command.");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // What stands where a command belongs is named, not "a subcommand
        // is required": an unknown word, or an option before any command.
        const std::string first = argc > 1 ? argv[1] : "";
        if (!first.empty() && app.get_subcommands().empty() && first != "-h" && first != "--help" &&
            first != "--version") {
            if (first[0] != '-') {
                std::vector<std::string> names;
                for (const auto& command : commands) names.push_back(command.app->get_name());
                std::cerr << "tenbin: error: unknown command '" << first << "'";
                if (const std::vector<std::string> meant = commands_meant(first, names); !meant.empty())
                    std::cerr << "; did you mean " << either(meant) << "? The commands are";
                else
                    std::cerr << "; the commands are";
                for (const auto& name : names) std::cerr << ' ' << name;
            } else {
                std::cerr << "tenbin: error: unknown option '" << first << "'; options go after a command";
            }
            std::cerr << " (see tenbin --help)\n";
            return exit_usage;
        }
        // --help and --version exit 0; wrong options or arguments exit with
        // one code scripts can tell from a failed run, not CLI11's several
        // (105 and up).
        const int status = app.exit(e) == 0 ? exit_ok : exit_usage;
        if (const auto chosen = app.get_subcommands(); status != exit_ok && !chosen.empty())
            suggest_options(*chosen.front(), std::span<char* const>(argv, static_cast<std::size_t>(argc)).subspan(2));
        return status;
    }

    for (const auto& command : commands) {
        if (!command.app->parsed()) continue;
        const std::string who = "tenbin " + command.app->get_name();
        int status;
        try {
            status = command.run();
        } catch (...) {
            print_current_error(who);
            status = current_error_status();
        }
        // Output that could not be written (a full disk, a closed pipe) is a
        // failure, not a success with nothing to show.
        std::cout.flush();
        if (!std::cout) {
            std::cerr << who << ": error: io_error: writing to standard output failed\n";
            return exit_failed;
        }
        return status;
    }
    return exit_failed;  // unreachable: CLI11 requires one subcommand
}
