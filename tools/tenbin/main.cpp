// tenbin: inspect, send and receive lists of tensors in the tenbin format
// (.ten files, ZeroMQ messages), compatible with Python tensorcom/webdataset.
#include "common.hpp"

#include <tenbin/config.hpp>

#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// After CLI11's "The following arguments were not expected: --cont": the
// option of the chosen command closest to each unexpected one.
void suggest_options(CLI::App& app, const CLI::ParseError& e) {
    const auto chosen = app.get_subcommands();
    if (chosen.empty() || !dynamic_cast<const CLI::ExtrasError*>(&e)) return;
    const CLI::App* command = chosen.front();
    std::vector<std::string> names;
    for (const CLI::Option* o : command->get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
    }
    std::string text = e.what();
    const std::size_t colon = text.find(": ");
    std::istringstream words(colon == std::string::npos ? std::string() : text.substr(colon + 2));
    for (std::string word; words >> word;) {
        if (!word.starts_with("--")) continue;
        word = word.substr(0, word.find('='));
        if (const std::string guess = tenbin::cli::closest(word, names); !guess.empty())
            std::cerr << "tenbin " << command->get_name() << ": " << word << ": did you mean " << guess << "?\n";
    }
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
                if (const std::string guess = closest(first, names); !guess.empty())
                    std::cerr << "; did you mean '" << guess << "'? The commands are";
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
        if (status != exit_ok) suggest_options(app, e);
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
