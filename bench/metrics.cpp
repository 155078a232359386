// tenbin-bench: what serving a connection's metrics costs. Both ends'
// metrics are served by an exporter that a client scrapes over HTTP every
// 50 ms while the messages flow (Prometheus scrapes every 15 s by default:
// this is the worst case by far), against the same connections while
// nobody scrapes (the counting itself is always on).
#include "suite.hpp"

#include <tenbin/metrics.hpp>

#if __has_include(<httplib.h>)
#include <httplib.h>
#define TENBIN_BENCH_SCRAPES 1
#endif

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace bench {

void suite::exporter() {
#ifdef TENBIN_BENCH_SCRAPES
    const std::string transport = "tcp";
    if (!wanted("metrics exporter scraped vs none", transport)) return;
    const int warmup = 2;
    for (const bool small : {false, true}) {
        const form f = small ? form::small : form::multi;
        const workload w = small ? make_workload("small", 0, false) : make_workload("quad", MiB, false);
        const tenbin::connection_options o = case_options(hwm_for(w.payload));
        connection_pair p(transport, o, o);
        tenbin::metrics_exporter ex("127.0.0.1:0", {p.tx.metrics(), p.rx.metrics()});
        std::atomic<bool> stop{false}, scraping{false};
        std::atomic<std::uint64_t> scraped_bytes{0};
        // Scrapes at once when a scraped repetition begins, then every 50 ms.
        std::thread scraper([&] {
            httplib::Client client("127.0.0.1", ex.port());
            auto last = std::chrono::steady_clock::time_point{};
            while (!stop) {
                if (scraping && std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(50)) {
                    if (auto r = client.Get("/metrics"); r && r->status == 200) scraped_bytes += r->body.size();
                    last = std::chrono::steady_clock::now();
                }
                if (!scraping) last = {};
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
        const int count = calibrate(cfg, [&](int c) { return run_connections(p, w, warmup, c); }, w.payload);
        auto rate = [&](bool scraped) {
            return [&, scraped] {
                const std::uint64_t before = ex.scrapes();
                scraping = scraped;
                // A scraped repetition starts with its first scrape.
                while (scraped && ex.scrapes() == before) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                return throughput(w, f, count, run_connections(p, w, warmup, count));
            };
        };
        const auto m = interleave(cfg.reps, rate(true), rate(false));
        stop = true;
        scraper.join();
        if (ex.scrapes() == 0 || scraped_bytes == 0) fail("the exporter was never scraped");
        add({"metrics exporter scraped vs none", transport, w.payload, m.first, m.second, small ? "msg/s" : "GB/s",
             "the same connections, not scraped",
             std::to_string(ex.scrapes()) + " scrapes; goal: within " + (small ? "5%" : "1%")});
    }
#endif
}

}  // namespace bench
