// tenbin: inspect, send and receive lists of tensors in the tenbin format
// (.ten files, ZeroMQ messages), compatible with Python tensorcom/webdataset.
#include "common.hpp"

#include <exception>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
    using namespace tenbin::cli;

    CLI::App app{
        "tenbin: lists of tensors in the tenbin format of Python tensorcom and webdataset,\n"
        "in .ten files and over ZeroMQ.",
        "tenbin"};
    app.set_version_flag("--version", "tenbin 0.1.0");
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
    };

    // After the subcommands, which would otherwise inherit it.
    app.footer(
        "Run 'tenbin COMMAND --help' for the options of one command.\n"
        "Examples:\n"
        "  tenbin info data.ten\n"
        "  tenbin convert data.ten data.npz\n"
        "  tenbin recv 'tcp://*:5555' --count 10 --json               (PULL binds)\n"
        "  tenbin send tcp://localhost:5555 --file data.ten --count 10   (PUSH connects)");

    CLI11_PARSE(app, argc, argv);

    for (const auto& command : commands) {
        if (!command.app->parsed()) continue;
        try {
            return command.run();
        } catch (...) {
            print_current_error("tenbin " + command.app->get_name());
            return exit_failed;
        }
    }
    return exit_failed;  // unreachable: CLI11 requires one subcommand
}
