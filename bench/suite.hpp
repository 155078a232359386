// tenbin-bench: the cases, grouped as the files that define them
// (streams.cpp, loader.cpp, numbered.cpp, delivery.cpp, processes.cpp,
// shm.cpp, codec.cpp, files.cpp), and what they share.
#pragma once

#include "harness.hpp"
#include "messages.hpp"
#include "peers.hpp"
#include "sockets.hpp"

#include <functional>
#include <string>
#include <vector>

namespace bench {

// Messages per repetition: enough for about cfg.rep_time, from one trial
// run of `seconds_for(count)`.
int calibrate(const config& cfg, const std::function<double(int)>& seconds_for, std::uint64_t payload);

struct suite {
    config cfg;
    std::vector<result> results;

    bool wanted(const std::string& name, const std::string& transport) const {
        return cfg.filter.empty() || (name + " " + transport).find(cfg.filter) != std::string::npos;
    }
    void add(result r) {
        if (r.reps == 0) r.reps = cfg.reps;
        print_row(r);
        results.push_back(std::move(r));
    }

    // streams.cpp: tenbin against raw libzmq, where its time goes, producers.
    void streams(form f, const std::vector<std::uint64_t>& sizes, const std::vector<std::string>& transports,
                 impl contender = impl::tenbin);
    void anatomy(std::uint64_t size);
    void producers();
    // loader.cpp: the loader's thread.
    void loader(const std::vector<std::uint64_t>& sizes);
    // numbered.cpp: numbered streams.
    void numbered();
    void resume();
    // metrics.cpp: the metrics exporter, scraped.
    void exporter();
    // delivery.cpp: acked delivery.
    void acked();
    void redelivery();
    // processes.cpp: two-process cases against Python, on the 77 MB batch, with CURVE.
    void python(form f, const std::vector<std::uint64_t>& sizes);
    void batch();
    void curve();
    // shm.cpp
    void shm();
    // codec.cpp, files.cpp
    void codec();
    void files();
};

}  // namespace bench
