// tenbin tool: progress of long-running commands, readable by a person.
// On a terminal one live line is rewritten in place; otherwise (a pipe, a
// log file) a plain line is printed at each interval.
#pragma once

#include <tenbin/statistics.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace tenbin::cli {

class progress {
public:
    /// Reports to stderr every `interval_seconds` (never when 0 or less).
    progress(std::string label, double interval_seconds);
    /// Prints `s` (and `extra`) when the interval has passed since the last
    /// report: the counts, the rates since the start, and the rates over the
    /// time since the last report ("last 5 s"), counted, never read off the
    /// spacing of a few messages.
    void update(const statistics& s, const std::string& extra = {});
    /// Ends the live line with a final report: the counts and the rates since
    /// the start (the time since the last report may be too short to say more).
    void finish(const statistics& s, const std::string& extra = {});

private:
    void print(const statistics& s, const std::string& extra, bool last);

    std::string label_;
    std::chrono::duration<double> interval_;
    std::chrono::steady_clock::time_point next_;
    bool live_;
    bool printed_live_ = false;
    // Where the last report left the counts.
    std::chrono::steady_clock::time_point since_;
    std::uint64_t messages_ = 0, bytes_ = 0;
};

}  // namespace tenbin::cli
