// CURVE certificate files, as pyzmq and czmq write them (see security.hpp).
#include <tenbin/error.hpp>
#include <tenbin/security.hpp>

#include "base/atomic_file.hpp"
#include "base/os_error.hpp"
#include "connect/security_detail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string_view>

namespace tenbin {

namespace {

namespace fs = std::filesystem;
using detail::atomic_file;
using detail::in_quotes;
using detail::os_error;
using detail::unique_fd;

// Certificates are a few hundred bytes; anything far larger is no
// certificate, and is not read whole.
constexpr std::size_t max_certificate_bytes = 64 * 1024;

[[noreturn]] void io_failure(const fs::path& file, const std::string& what) {
    throw os_error(file.string() + ": " + what);
}

[[noreturn]] void malformed(const fs::path& file, std::size_t line, const std::string& what) {
    throw error(errc::bad_certificate,
                file.string() + (line ? ":" + std::to_string(line) : std::string()) + ": " + what);
}

[[noreturn]] void not_regular(const fs::path& file, mode_t mode) {
    const std::string_view what = S_ISFIFO(mode)                   ? "is a FIFO"
                                  : S_ISDIR(mode)                  ? "is a directory"
                                  : S_ISCHR(mode) || S_ISBLK(mode) ? "is a device"
                                  : S_ISSOCK(mode)                 ? "is a socket"
                                                                   : "is no regular file";
    std::string text(what);
    text += ", not a regular file: no certificate is read from one";
    malformed(file, 0, text);
}

std::string_view trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

bool is_name(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("$-_@.&+/").find(c) != std::string_view::npos;
    });
}

// The whole of a certificate file and its mode (taken from the open file,
// so it is the mode of what is read).
std::string read_certificate(const fs::path& file, mode_t& mode_out) {
    // Looked at before it is opened, and opened without waiting: opening a
    // FIFO for reading blocks until a writer comes, a device may do anything.
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) io_failure(file, "cannot open the certificate");
    if (!S_ISREG(st.st_mode)) not_regular(file, st.st_mode);
    const unique_fd owned(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    const int fd = owned.get();
    if (fd < 0) io_failure(file, "cannot open the certificate");
    if (::fstat(fd, &st) != 0) io_failure(file, "cannot stat the certificate");
    if (!S_ISREG(st.st_mode)) not_regular(file, st.st_mode);  // replaced meanwhile
    mode_out = st.st_mode;
    if (static_cast<std::uint64_t>(st.st_size) > max_certificate_bytes)
        malformed(file, 0, std::to_string(st.st_size) + " bytes, too large for a certificate (at most " +
                               std::to_string(max_certificate_bytes) + ")");
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) io_failure(file, "cannot read the certificate");
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    return text;
}

// The keys of a certificate's `curve` section (ZPL: a section name at the
// start of a line, its `name = value` properties indented below it).
curve_keys parse_certificate(const fs::path& file, std::string_view text) {
    curve_keys keys;
    std::size_t public_line = 0, secret_line = 0;
    std::string section;
    std::size_t number = 0;
    while (!text.empty()) {
        ++number;
        const auto eol = text.find('\n');
        std::string_view line = text.substr(0, eol);
        text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const std::string_view body = trim(line);
        if (body.empty() || body.front() == '#') continue;
        const bool indented = line.front() == ' ' || line.front() == '\t';
        const auto eq = body.find('=');
        if (eq == std::string_view::npos) {
            if (!is_name(body)) malformed(file, number, "expected a section name or 'name = value'");
            if (!indented) section = body;
            continue;
        }
        const std::string_view key = trim(body.substr(0, eq));
        std::string_view value = trim(body.substr(eq + 1));
        if (!is_name(key)) malformed(file, number, in_quotes(key) + " is no property name");
        if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
            const auto close = value.find(value.front(), 1);
            if (close == std::string_view::npos) malformed(file, number, "a quoted value has no closing quote");
            const std::string_view after = trim(value.substr(close + 1));
            if (!after.empty() && after.front() != '#') malformed(file, number, "text after a quoted value");
            value = value.substr(1, close - 1);
        } else {
            value = trim(value.substr(0, value.find('#')));
        }
        if (section != "curve" || !indented) continue;
        if (key != "public-key" && key != "secret-key") continue;
        const bool is_public = key == "public-key";
        std::size_t& seen = is_public ? public_line : secret_line;
        if (seen)
            malformed(file, number, std::string(key) + " given twice (first on line " + std::to_string(seen) + ")");
        if (std::string problem = detail::key_problem(value); !problem.empty())
            malformed(file, number, std::string(key) + " " + problem);
        seen = number;
        (is_public ? keys.public_key : keys.secret_key) = value;
    }
    if (!public_line) malformed(file, 0, "no public-key in a 'curve' section: not a ZeroMQ certificate");
    return keys;
}

// `text` as `file`, replacing it at once: written to a temporary file of
// mode 0600 beside it, given `mode`, then renamed.
void write_atomically(const fs::path& file, const std::string& text, mode_t mode) {
    atomic_file out(file, mode);
    if (::fchmod(out.fd(), mode) != 0) io_failure(file, "cannot set the certificate's mode");  // past the umask
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(out.fd(), text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) io_failure(file, "cannot write the certificate");
        done += static_cast<std::size_t>(n);
    }
    out.commit(true);
}

std::string certificate_text(const curve_keys& keys, bool secret) {
    std::string text = secret ? "#   ZeroMQ CURVE secret certificate (written by tenbin)\n"
                                "#   Keep it private: readable by its owner only (mode 0600).\n"
                              : "#   ZeroMQ CURVE public certificate (written by tenbin)\n"
                                "#   Give it to the peers that must trust this key.\n";
    text += "\nmetadata\ncurve\n    public-key = \"" + keys.public_key + "\"\n";
    if (secret) text += "    secret-key = \"" + keys.secret_key + "\"\n";
    return text;
}

}  // namespace

certificate_files write_certificates(const fs::path& dir, const std::string& name, const curve_keys& keys) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
        throw error(errc::bad_argument, "a certificate name must be a file name without '/', not '" + name + "'");
    detail::require_curve();
    detail::check_keys(keys, "the certificate's");
    certificate_files files{dir / (name + ".key"), dir / (name + ".key_secret")};
    write_atomically(files.secret_file, certificate_text(keys, true), 0600);
    write_atomically(files.public_file, certificate_text(keys, false), 0644);
    return files;
}

certificate_files create_certificates(const fs::path& dir, const std::string& name) {
    return write_certificates(dir, name, generate_curve_keys());
}

curve_keys load_secret_certificate(const fs::path& file) {
    detail::require_curve();
    mode_t st_mode = 0;
    curve_keys keys = parse_certificate(file, read_certificate(file, st_mode));
    if (keys.secret_key.empty())
        malformed(file, 0, "holds no secret-key: a public certificate (NAME.key), not a secret one (NAME.key_secret)");
    // Written by others is as bad as read by them: they could put their key
    // in its place.
    if (st_mode & (S_IRWXG | S_IRWXO)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st_mode & 07777));
        const char* who = st_mode & (S_IWGRP | S_IWOTH)   ? "others may write it"
                          : st_mode & (S_IRGRP | S_IROTH) ? "others may read it"
                                                          : "others have rights to it";
        throw error(errc::bad_certificate, file.string() +
                                               ": a secret certificate must be readable and writable by its owner "
                                               "only, but its mode is " +
                                               mode + " (" + who + "); run chmod 600 on it");
    }
    if (!detail::keys_match(keys)) malformed(file, 0, "its secret-key does not belong to its public-key");
    return keys;
}

std::string load_public_certificate(const fs::path& file) {
    mode_t ignored = 0;
    return parse_certificate(file, read_certificate(file, ignored)).public_key;
}

std::vector<std::string> load_public_certificates(const fs::path& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw error(errc::io_error, dir.string() + ": not a directory of public certificates");
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".key") files.push_back(it->path());
    if (ec) throw error(errc::io_error, dir.string() + ": cannot list the directory: " + ec.message());
    if (files.empty())
        throw error(errc::bad_certificate, dir.string() + ": no public certificates (*.key) in it; an empty "
                                                          "allow-list would let any client in");
    std::sort(files.begin(), files.end());
    std::vector<std::string> keys;
    for (const fs::path& f : files) keys.push_back(load_public_certificate(f));
    return keys;
}

}  // namespace tenbin
