#include <tenbin/connect.hpp>

#include <cstdio>

namespace tenbin {

namespace {
double seconds(statistics::clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void statistics::reset() {
    start_ = last_ = clock::now();
    messages_ = bytes_ = recent_bytes_ = 0;
    recent_.clear();
}

void statistics::add(std::uint64_t bytes) {
    last_ = clock::now();
    ++messages_;
    bytes_ += bytes;
    recent_.push_back({last_, bytes});
    recent_bytes_ += bytes;
    if (recent_.size() > horizon_) {
        recent_bytes_ -= recent_.front().bytes;
        recent_.pop_front();
    }
}

double statistics::rate() const {
    const double s = seconds(last_ - start_);
    return messages_ && s > 0 ? static_cast<double>(messages_) / s : 0.0;
}

double statistics::throughput() const {
    const double s = seconds(last_ - start_);
    return messages_ && s > 0 ? static_cast<double>(bytes_) / s : 0.0;
}

// Over the window, n samples span n - 1 intervals: the first sample's bytes
// arrived before the window opened.
double statistics::recent_rate() const {
    if (recent_.size() < 2) return 0.0;
    const double s = seconds(recent_.back().when - recent_.front().when);
    return s > 0 ? static_cast<double>(recent_.size() - 1) / s : 0.0;
}

double statistics::recent_throughput() const {
    if (recent_.size() < 2) return 0.0;
    const double s = seconds(recent_.back().when - recent_.front().when);
    return s > 0 ? static_cast<double>(recent_bytes_ - recent_.front().bytes) / s : 0.0;
}

std::string statistics::summary() const {
    char text[160];
    std::snprintf(text, sizeof text, "%llu msgs, %.1f msg/s, %.1f MB/s (recent %.1f msg/s, %.1f MB/s)",
                  static_cast<unsigned long long>(messages_), rate(), throughput() / 1e6, recent_rate(),
                  recent_throughput() / 1e6);
    return text;
}

}  // namespace tenbin
