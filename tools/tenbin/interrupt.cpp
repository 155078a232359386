// tenbin tool: stopping at a signal (see interrupt.hpp).
#include "interrupt.hpp"

#include <csignal>
#include <thread>

namespace tenbin::cli {

namespace {

volatile std::sig_atomic_t caught = 0;  // the signal's number
extern "C" void on_signal(int signal) { caught = signal; }

struct sigaction previous[2];
constexpr int signals[2] = {SIGINT, SIGTERM};

}  // namespace

interrupt_catcher::interrupt_catcher() {
    caught = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 2; ++i) ::sigaction(signals[i], &sa, &previous[i]);
}

interrupt_catcher::~interrupt_catcher() {
    for (int i = 0; i < 2; ++i) ::sigaction(signals[i], &previous[i], nullptr);
}

bool interrupted() noexcept { return caught != 0; }

int interrupted_status() noexcept { return caught ? 128 + caught : 0; }

const char* interrupting_signal() noexcept { return caught == SIGTERM ? "SIGTERM" : caught ? "SIGINT" : ""; }

void sleep_unless_interrupted(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                            std::chrono::duration<double>(seconds));
    while (!interrupted()) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= end) return;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(end - now, interrupt_poll));
    }
}

}  // namespace tenbin::cli
