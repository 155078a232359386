// tenbin tool: stopping a command at Ctrl-C (SIGINT) or SIGTERM with what it
// did kept: what was received printed, saved or drawn, queued messages given
// their linger. ZeroMQ waits do not end at a signal (libzmq retries on
// EINTR), so commands wait in slices of interrupt_poll and look between them.
#pragma once

#include <chrono>

namespace tenbin::cli {

/// How often a waiting command looks for a signal.
inline constexpr std::chrono::milliseconds interrupt_poll{100};

/// Catches SIGINT and SIGTERM while alive (one at a time); the previous
/// actions come back after.
class interrupt_catcher {
public:
    interrupt_catcher();
    ~interrupt_catcher();
    interrupt_catcher(const interrupt_catcher&) = delete;
    interrupt_catcher& operator=(const interrupt_catcher&) = delete;
};

/// Whether SIGINT or SIGTERM came while a catcher was alive.
bool interrupted() noexcept;
/// The exit status for it, as shells report a death by that signal: 130
/// for SIGINT, 143 for SIGTERM (0 when none came).
int interrupted_status() noexcept;
/// "SIGINT" or "SIGTERM", for messages.
const char* interrupting_signal() noexcept;

/// Sleeps `seconds`, or less when a signal comes.
void sleep_unless_interrupted(double seconds);

}  // namespace tenbin::cli
