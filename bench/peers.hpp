// tenbin-bench: the run's settings, and peers in other processes (this
// program re-executed with the hidden --peer role, or the Python peer).
#pragma once

#include "messages.hpp"

#include <iostream>
#include <map>
#include <string>
#include <vector>

#ifndef TENBIN_BENCH_PYTHON_PEER
#define TENBIN_BENCH_PYTHON_PEER "bench/python_peer.py"
#endif

namespace bench {

struct config {
    bool quick = false;
    int reps = 7;
    double rep_time = 0.25;  // seconds per repetition, roughly
    int min_count = 8;
    std::string filter;
    std::string malloc_mode = "reuse";
    std::string python = "/usr/bin/python3";
    std::string python_peer = TENBIN_BENCH_PYTHON_PEER;
    std::string self;
    tenbin::curve_keys curve;  // for peers with `curve` (made by the curve group)
};

enum class peer_kind { tenbin, raw, python };

struct peer {
    peer_kind kind = peer_kind::tenbin;
    std::string malloc_mode = "default";  // C++ peers only
    bool curve = false;                   // C++ peers only: CURVE on (cfg.curve's keys)
};

// The command line of a peer: `role` send or recv, running `p`'s code
// (with `session`, a process_pair's, told what to run line by line).
std::vector<std::string> peer_argv(const config& cfg, const peer& p, const std::string& role, form f,
                                   const workload& w, int warmup, int count, bool session = false);

// Both ends of a two-process case: child processes over tcp loopback.
struct process_ends {
    child receiver, sender;
    process_ends(std::vector<std::string> ra, std::vector<std::string> sa)
        : receiver(with(std::move(ra), {"--endpoint", "tcp://127.0.0.1:*"})),
          sender(with(std::move(sa), {"--endpoint", bound_endpoint(receiver)})) {}

    // One repetition's exchange once both ends know what to do: the
    // receiver says "ready" after the warmup, the sender is told "go", the
    // receiver reports the seconds of the rest.
    double timed() {
        if (const std::string l = receiver.read_line(); l != "ready") fail("receiver said " + l);
        sender.write_line("go");
        const std::string done = receiver.read_line();
        if (done.rfind("seconds ", 0) != 0) fail("receiver said " + done);
        return std::stod(done.substr(8));
    }
    void wait() {
        receiver.wait();
        sender.wait();
    }

private:
    static std::vector<std::string> with(std::vector<std::string> argv, std::initializer_list<std::string> more) {
        argv.insert(argv.end(), more);
        return argv;
    }
    static std::string bound_endpoint(child& receiver) {
        const std::string line = receiver.read_line();
        if (line.rfind("endpoint ", 0) != 0) fail("receiver said " + line);
        return line.substr(9);
    }
};

// One repetition in two fresh processes: for peers that differ in more
// than the code they run (Python, another malloc mode).
double run_processes(const config& cfg, const peer& receiver, const peer& sender, form f, const workload& w,
                     int warmup, int count);

// A receiving and a sending process kept for all repetitions of a case,
// as socket_pair is for threads: tenbin and raw libzmq take turns on one
// connection between warm processes, and differ only in the code they
// run. (Fresh processes per repetition measured cold heaps and a new
// connection each time: the two-process ratios spread over +-15% from run
// to run.) Each repetition is one "run IMPL WARMUP COUNT" line to both.
class process_pair {
public:
    process_pair(const config& cfg, form f, const workload& w)
        : ends_(peer_argv(cfg, {peer_kind::tenbin, cfg.malloc_mode}, "recv", f, w, 0, 0, true),
                peer_argv(cfg, {peer_kind::tenbin, cfg.malloc_mode}, "send", f, w, 0, 0, true)) {}
    process_pair(const process_pair&) = delete;
    process_pair& operator=(const process_pair&) = delete;
    ~process_pair() {
        try {
            ends_.receiver.write_line("quit");
            ends_.sender.write_line("quit");
            ends_.wait();
        } catch (const std::exception& e) {
            std::cerr << "tenbin-bench: peers did not stop cleanly: " << e.what() << std::endl;
        }
    }

    double run(impl which, int warmup, int count) {
        const std::string line = std::string("run ") + peer_name(which) + " " + std::to_string(warmup) + " " +
                                 std::to_string(count);
        ends_.receiver.write_line(line);
        ends_.sender.write_line(line);
        return ends_.timed();
    }

private:
    process_ends ends_;
};

// The hidden `--peer send|recv` role: one side of run_processes, or with
// `--impl session` of a process_pair; `--peer holder`: a consumer that
// keeps what it takes (the redelivery rows).
int peer_main(const std::map<std::string, std::string>& args);

}  // namespace bench
