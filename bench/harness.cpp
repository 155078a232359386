#include "harness.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace bench {

void fail(const std::string& what) { throw std::runtime_error(what); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> interleave_all(int reps, const std::vector<std::function<double()>>& fns) {
    std::vector<std::vector<double>> v(fns.size());
    for (int r = 0; r < reps; ++r)
        for (std::size_t i = 0; i < fns.size(); ++i) {
            const std::size_t k = (i + static_cast<std::size_t>(r)) % fns.size();
            v[k].push_back(fns[k]());
        }
    std::vector<double> out;
    for (auto& x : v) out.push_back(median(x));
    return out;
}

std::pair<double, double> interleave(int reps, const std::function<double()>& a,
                                     const std::function<double()>& b) {
    const std::vector<double> m = interleave_all(reps, {a, b});
    return {m[0], m[1]};
}

double ns_per_op(const std::function<void()>& op, double min_time) {
    std::uint64_t n = 1;
    for (;;) {
        const auto t0 = clock_type::now();
        for (std::uint64_t i = 0; i < n; ++i) op();
        const double s = seconds_since(t0);
        if (s >= min_time) return s * 1e9 / static_cast<double>(n);
        // Aim a little past min_time on the next try.
        const double scale = s > 0 ? std::min(100.0, 1.2 * min_time / s) : 100.0;
        n = std::max<std::uint64_t>(n + 1, static_cast<std::uint64_t>(static_cast<double>(n) * scale));
    }
}

std::string human_bytes(std::uint64_t n) {
    // Exact binary units for the power-of-two sizes, decimal MB otherwise.
    const char* units[] = {"B", "KiB", "MiB", "GiB"};
    for (int u = 3; u >= 0; --u) {
        const std::uint64_t unit = std::uint64_t{1} << (10 * u);
        if (n % unit == 0 && n / unit < 1024) return std::to_string(n / unit) + " " + units[u];
    }
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << static_cast<double>(n) / 1e6 << " MB";
    return s.str();
}

namespace {

std::string figure(double v) {
    std::ostringstream s;
    if (v >= 1e6)
        s << std::fixed << std::setprecision(2) << v / 1e6 << "M";
    else if (v >= 1e4)
        s << std::fixed << std::setprecision(1) << v / 1e3 << "k";
    else if (v >= 100)
        s << std::fixed << std::setprecision(0) << v;
    else
        s << std::fixed << std::setprecision(2) << v;
    return s.str();
}

std::string json_string(const std::string& in) {
    std::string out = "\"";
    for (char c : in) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

std::string json_number(double v) {
    if (!std::isfinite(v)) return "null";
    std::ostringstream s;
    s << std::setprecision(6) << v;
    return s.str();
}

}  // namespace

void print_header() {
    std::cout << std::left << std::setw(36) << "case" << std::setw(10) << "transport" << std::right
              << std::setw(9) << "size" << std::setw(10) << "tenbin" << std::setw(10) << "baseline"
              << "  " << std::left << std::setw(6) << "unit" << std::right << std::setw(7) << "ratio"
              << "  " << std::left << "baseline is" << std::endl;
}

void print_row(const result& r) {
    std::cout << std::left << std::setw(36) << r.name << std::setw(10) << r.transport << std::right
              << std::setw(9) << (r.bytes ? human_bytes(r.bytes) : "-") << std::setw(10) << figure(r.tenbin)
              << std::setw(10) << figure(r.baseline) << "  " << std::left << std::setw(6) << r.unit
              << std::right << std::setw(7) << std::fixed << std::setprecision(2) << r.ratio() << "  "
              << std::left << r.versus << (r.note.empty() ? "" : " (" + r.note + ")") << std::endl;
    std::cout.unsetf(std::ios::floatfield);
}

void write_json(const std::string& path, const std::vector<result>& results) {
    std::ofstream out(path);
    if (!out) fail("cannot write " + path);
    out << "[\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
        const result& r = results[i];
        out << "  {\"name\": " << json_string(r.name) << ", \"transport\": " << json_string(r.transport)
            << ", \"bytes\": " << r.bytes << ", \"tenbin\": " << json_number(r.tenbin)
            << ", \"baseline\": " << json_number(r.baseline) << ", \"unit\": " << json_string(r.unit)
            << ", \"ratio\": " << json_number(r.ratio()) << ", \"versus\": " << json_string(r.versus)
            << ", \"note\": " << json_string(r.note) << ", \"reps\": " << r.reps << "}"
            << (i + 1 < results.size() ? "," : "") << "\n";
    }
    out << "]\n";
    if (!out.flush()) fail("cannot write " + path);
}

// ---- child processes --------------------------------------------------------

child::child(const std::vector<std::string>& argv) {
    for (const auto& a : argv) what_ += (what_.empty() ? "" : " ") + a;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) fail("pipe: " + std::string(std::strerror(errno)));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ);  // searches PATH
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
    if (rc != 0) {
        pid_ = -1;
        fail("cannot start " + what_ + ": " + std::strerror(rc));
    }
}

child::~child() {
    if (from_) std::fclose(from_);
    if (to_ >= 0) ::close(to_);
    if (pid_ > 0) {  // only after a failure: do not leave it running
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
}

std::string child::read_line() {
    char* line = nullptr;
    std::size_t cap = 0;
    const ssize_t n = getline(&line, &cap, from_);
    std::string s = n > 0 ? std::string(line, static_cast<std::size_t>(n)) : std::string();
    std::free(line);
    if (n <= 0) fail("peer ended early: " + what_);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
}

void child::write_line(const std::string& line) {
    const std::string s = line + "\n";
    if (::write(to_, s.data(), s.size()) != static_cast<ssize_t>(s.size())) fail("cannot write to " + what_);
}

void child::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

void child::stop() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void child::wait() {
    int status = 0;
    if (::waitpid(pid_, &status, 0) < 0) fail("waitpid: " + std::string(std::strerror(errno)));
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("peer failed: " + what_);
}

}  // namespace bench
