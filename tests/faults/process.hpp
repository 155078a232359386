// A child process for the fault tests: started with posix_spawn, its stdout
// read line by line with a deadline, killed with SIGKILL, always reaped.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace faults {

class process {
public:
    explicit process(const std::vector<std::string>& argv) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        const int rc = ::posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        ::close(fds[1]);
        out_ = fds[0];
        if (rc != 0) {
            ::close(out_);
            throw std::runtime_error("cannot start " + argv[0]);
        }
    }
    process(const process&) = delete;
    process& operator=(const process&) = delete;
    ~process() {
        kill();
        ::close(out_);
    }

    pid_t pid() const { return pid_; }

    // The next line of its stdout, or nothing at the deadline or at EOF.
    std::optional<std::string> read_line(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
                std::string line = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                return line;
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            pollfd p{out_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char buf[4096];
            const ssize_t n = ::read(out_, buf, sizeof buf);
            if (n <= 0) return std::nullopt;
            pending_.append(buf, static_cast<std::size_t>(n));
        }
    }
    // Drops what it has written so far: the next line read is one it
    // writes from now on.
    void skip_written() {
        pending_.clear();
        char buf[4096];
        for (pollfd p{out_, POLLIN, 0}; ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);)
            if (::read(out_, buf, sizeof buf) <= 0) break;
    }
    // Reads lines until one starts with `prefix`; returns it or nothing.
    std::optional<std::string> expect(const std::string& prefix, std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (auto line = read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - std::chrono::steady_clock::now()))) {
            if (line->rfind(prefix, 0) == 0) return line;
        }
        return std::nullopt;
    }

    // Waits for the exit status (SIGKILL at the deadline: then -1).
    int wait(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!reaped_) {
            int status = 0;
            rusage ru{};
            const pid_t r = ::wait4(pid_, &status, WNOHANG, &ru);
            if (r == pid_) {
                reaped_ = true;
                status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                max_rss_ = static_cast<long>(ru.ru_maxrss) * 1024;
                break;
            }
            if (std::chrono::steady_clock::now() > deadline) {
                kill();
                return -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return status_;
    }
    // Sends `sig` (SIGSTOP freezes it: a hung peer whose host still
    // answers TCP; SIGCONT wakes it).
    void signal(int sig) {
        if (!reaped_) ::kill(pid_, sig);
    }
    // SIGKILL and reap.
    void kill() {
        if (reaped_) return;
        ::kill(pid_, SIGKILL);
        int status = 0;
        rusage ru{};
        ::wait4(pid_, &status, 0, &ru);
        reaped_ = true;
        status_ = -1;
        max_rss_ = static_cast<long>(ru.ru_maxrss) * 1024;
    }
    // Peak resident bytes of the process, once reaped.
    long max_rss() const { return max_rss_; }

private:
    pid_t pid_ = -1;
    int out_ = -1;
    std::string pending_;
    bool reaped_ = false;
    int status_ = -1;
    long max_rss_ = 0;
};

// The helper peer's path, from the environment meson test sets.
inline std::string peer_path() {
    const char* p = std::getenv("TENBIN_FAULT_PEER");
    if (!p) throw std::runtime_error("TENBIN_FAULT_PEER is not set; run the tests with meson test");
    return p;
}

}  // namespace faults
