// tenbin keygen: a CURVE certificate pair, as pyzmq's create_certificates
// writes it.
#include "common.hpp"

#include <tenbin/security.hpp>

#include <filesystem>
#include <iostream>

namespace tenbin::cli {
namespace {

struct keygen_cli_options {
    std::string name;
    std::string dir = ".";
};

int run_keygen(const keygen_cli_options& opt) {
    namespace fs = std::filesystem;
    if (opt.name.empty() || opt.name.find('/') != std::string::npos)
        throw usage_error("NAME must be a file name without '/' (the files are NAME.key and NAME.key_secret)");
    if (!fs::is_directory(opt.dir)) throw usage_error("--dir " + opt.dir + " is not a directory");
    // A key pair in use is not replaced by accident.
    for (const char* ext : {".key", ".key_secret"}) {
        const fs::path f = fs::path(opt.dir) / (opt.name + ext);
        if (fs::exists(f))
            throw tenbin::error(errc::io_error, f.string() + " exists; remove it first or choose another NAME");
    }
    const certificate_files files = create_certificates(opt.dir, opt.name);
    std::cout << files.public_file.string() << "  public: copy it to the peers that must trust this side\n"
              << files.secret_file.string() << "  secret (mode 0600): keep it here, give it to --curve-cert\n";
    return exit_ok;
}

}  // namespace

subcommand add_keygen(CLI::App& parent) {
    auto opt = std::make_shared<keygen_cli_options>();
    CLI::App* app =
        parent.add_subcommand("keygen", "Write a CURVE certificate pair NAME.key (public) and NAME.key_secret");
    app->add_option("NAME", opt->name, "Base name of the two files")->required();
    app->add_option("--dir", opt->dir, "Folder to write them in")->capture_default_str();
    app->footer(
        "The files are ZeroMQ certificates as pyzmq's zmq.auth.create_certificates and\n"
        "czmq write them; existing files are not replaced.\n"
        "Across two hosts (the side that binds is the CURVE server):\n"
        "  server$ tenbin keygen server            client$ tenbin keygen client\n"
        "  copy server.key to the client, client.key into the server's folder allowed/\n"
        "  server$ tenbin recv 'tcp://*:5555' --curve-cert server.key_secret --curve-allow allowed\n"
        "  client$ tenbin send tcp://server:5555 --file x.ten --curve-cert client.key_secret \\\n"
        "              --curve-server server.key\n"
        "Exit status: 0 written, 1 a file exists or cannot be written, 64 wrong arguments.");
    return {app, [opt] { return run_keygen(*opt); }};
}

}  // namespace tenbin::cli
