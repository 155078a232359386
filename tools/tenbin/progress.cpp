#include "progress.hpp"
#include "common.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace tenbin::cli {

progress::progress(std::string label, double interval_seconds)
    : label_(std::move(label)),
      interval_(interval_seconds),
      next_(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_)),
      live_(::isatty(STDERR_FILENO) == 1),
      since_(std::chrono::steady_clock::now()) {}

void progress::update(const statistics& s, const std::string& extra) {
    if (interval_.count() <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    next_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_);
    print(s, extra, false);
}

void progress::finish(const statistics& s, const std::string& extra) {
    if (interval_.count() <= 0 && !printed_live_) return;
    print(s, extra, true);
}

void progress::print(const statistics& s, const std::string& extra, bool last) {
    char text[200];
    std::snprintf(text, sizeof text, "%llu msgs, %.1f msg/s, %.1f MB/s", static_cast<unsigned long long>(s.messages()),
                  s.rate(), s.throughput() / 1e6);
    std::string line = label_ + ": " + text;
    const auto now = std::chrono::steady_clock::now();
    if (!last) {
        const double window = std::chrono::duration<double>(now - since_).count();
        std::snprintf(text, sizeof text, ": %.1f msg/s, %.1f MB/s)",
                      static_cast<double>(s.messages() - messages_) / window,
                      static_cast<double>(s.bytes() - bytes_) / window / 1e6);
        const double shown = window < 1 ? std::round(window * 100) / 100 : std::round(window * 10) / 10;
        line += " (last " + seconds_text(shown) + text;
    }
    since_ = now;
    messages_ = s.messages();
    bytes_ = s.bytes();
    if (!extra.empty()) line += ", " + extra;
    if (live_) {
        // \r and erase-to-end keep one line; the last report ends it.
        std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), last ? "\n" : "");
        printed_live_ = !last;
    } else {
        std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
}

}  // namespace tenbin::cli
