// tenbin tool: progress of long-running commands, readable by a person.
// On a terminal one live line is rewritten in place; otherwise (a pipe, a
// log file) a plain line is printed at each interval.
#pragma once

#include <tenbin/connect.hpp>

#include <chrono>
#include <string>

namespace tenbin::cli {

class progress {
public:
    /// Reports to stderr every `interval_seconds` (never when 0 or less).
    progress(std::string label, double interval_seconds);
    /// Prints `s` (and `extra`) when the interval has passed since the last report.
    void update(const statistics& s, const std::string& extra = {});
    /// Ends the live line with a final report.
    void finish(const statistics& s, const std::string& extra = {});

private:
    void print(const statistics& s, const std::string& extra, bool last);

    std::string label_;
    std::chrono::duration<double> interval_;
    std::chrono::steady_clock::time_point next_;
    bool live_;
    bool printed_live_ = false;
};

}  // namespace tenbin::cli
