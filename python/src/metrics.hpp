// What a Connection or Loader hands the metrics bindings (bind_metrics.cpp):
// the source of its metrics, which outlives it being closed.
#pragma once

#include "common.hpp"

#include <tenbin/metrics.hpp>

#include <memory>
#include <mutex>
#include <optional>

namespace tenbin_py {

// The metrics of one connection or loader as Python reads them: its own
// while it is open, its last counts once it is closed. Those are a copy,
// so that nothing of a closed one is kept alive (a loader's queued
// batches, +shm mappings). Each Connection and Loader has one for its
// life; an exporter serves it as long as that lives. Thread-safe.
class python_metrics final : public tenbin::metrics_source {
public:
    // Reads `live` from now on (unless it is frozen: nothing changes).
    void attach(std::shared_ptr<const tenbin::metrics_source> live);
    // Keeps the counts of `live` as they are now, for good.
    void freeze(const tenbin::metrics_source& live);
    void collect(tenbin::metric_set& out) const override;

private:
    mutable std::mutex mutex_;
    std::shared_ptr<const tenbin::metrics_source> live_;
    std::optional<tenbin::metric_set> last_;
};

}  // namespace tenbin_py
