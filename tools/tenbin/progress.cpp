#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace tenbin::cli {

progress::progress(std::string label, double interval_seconds)
    : label_(std::move(label)),
      interval_(interval_seconds),
      next_(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_)),
      live_(::isatty(STDERR_FILENO) == 1) {}

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
    const std::string text = label_ + ": " + s.summary() + (extra.empty() ? "" : ", " + extra);
    if (live_) {
        // \r and erase-to-end keep one line; the last report ends it.
        std::fprintf(stderr, "\r%s\x1b[K%s", text.c_str(), last ? "\n" : "");
        printed_live_ = !last;
    } else {
        std::fprintf(stderr, "%s\n", text.c_str());
    }
    std::fflush(stderr);
}

}  // namespace tenbin::cli
