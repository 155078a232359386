// tenbin-bench: the measuring harness (timing, medians, the results table,
// JSON, child processes). Nothing here knows about tenbin.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

[[noreturn]] void fail(const std::string& what);

double median(std::vector<double> v);

/// One line of the table and one object of the JSON array.
struct result {
    std::string name;       ///< contains multi, single or small for those cases
    std::string transport;  ///< inproc, ipc, tcp, tcp-2proc, memory, file
    std::uint64_t bytes = 0;
    double tenbin = 0;      ///< median
    double baseline = 0;    ///< median
    std::string unit;       ///< GB/s, msg/s or op/s: higher is better
    std::string versus;     ///< what the baseline is
    std::string note;       ///< extra facts (ns per op, target)
    int reps = 0;
    double ratio() const { return baseline > 0 ? tenbin / baseline : 0; }
};

/// Runs `a` and `b` alternately `reps` times (b first on odd repetitions,
/// so neither always runs on a warmer machine) and returns the medians.
std::pair<double, double> interleave(int reps, const std::function<double()>& a,
                                     const std::function<double()>& b);

/// The same for several contenders, rotating who runs first.
std::vector<double> interleave_all(int reps, const std::vector<std::function<double()>>& fns);

/// Nanoseconds per call of `op`, repeating it until `min_time` has passed.
double ns_per_op(const std::function<void()>& op, double min_time);

void print_header();
void print_row(const result& r);
void write_json(const std::string& path, const std::vector<result>& results);
std::string human_bytes(std::uint64_t n);

/// A child process with pipes to its stdin and from its stdout.
class child {
public:
    explicit child(const std::vector<std::string>& argv);
    child(const child&) = delete;
    child& operator=(const child&) = delete;
    ~child();
    /// The next line of its stdout, without the newline; fails at EOF.
    std::string read_line();
    void write_line(const std::string& line);
    /// Waits for it; fails unless it exited with status 0.
    void wait();
    /// Kills it (SIGKILL) and waits for it.
    void kill();
    /// Stops it (SIGSTOP): it stays, silent, until killed.
    void stop();

private:
    pid_t pid_ = -1;
    int to_ = -1;
    std::FILE* from_ = nullptr;
    std::string what_;
};

}  // namespace bench
