// tenbin: messages and bytes counted over a connection's life and over a
// recent window, as Python tensorcom's Statistics.
#pragma once

#include <tenbin/config.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

TENBIN_API_BEGIN
namespace tenbin {

/// Messages and bytes over a connection's life and over a recent window,
/// as tensorcom's Statistics. Not synchronised: one thread updates it.
class statistics {
public:
    /// The clock rates are measured with.
    using clock = std::chrono::steady_clock;

    /// Statistics whose recent window covers the last `horizon` messages.
    explicit statistics(std::size_t horizon = 1000) : horizon_(horizon) { reset(); }
    /// Starts over: counts to zero, the clock from now.
    void reset();
    /// Counts one message of `bytes` tensor bytes, now.
    void add(std::uint64_t bytes);

    /// Messages counted since the start (or reset).
    std::uint64_t messages() const noexcept { return messages_; }
    /// Tensor bytes counted since the start (or reset).
    std::uint64_t bytes() const noexcept { return bytes_; }
    /// Messages per second from the start (or reset) to the last message
    /// counted: a stream gone quiet keeps the rate it had (0 before any).
    double rate() const;
    /// Bytes per second over the same span as rate().
    double throughput() const;
    /// Messages per second between the first and last of the last `horizon`
    /// messages (0 until two are counted, so always 0 for a horizon under 2).
    double recent_rate() const;
    /// Bytes per second over the same window as recent_rate().
    double recent_throughput() const;
    /// "120 msgs, 12.5 msg/s, 96.1 MB/s (recent 13.0 msg/s, 99.8 MB/s)".
    std::string summary() const;

private:
    struct sample {
        clock::time_point when;
        std::uint64_t bytes;
    };
    std::size_t horizon_;
    clock::time_point start_{};
    clock::time_point last_{};
    std::uint64_t messages_ = 0;
    std::uint64_t bytes_ = 0;
    std::deque<sample> recent_;
    std::uint64_t recent_bytes_ = 0;
};

}  // namespace tenbin
TENBIN_API_END
