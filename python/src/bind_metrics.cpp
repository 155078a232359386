// Metrics: what connections and loaders count, read as plain Python data or
// as Prometheus' text, and tenbin::metrics_exporter as MetricsExporter. A
// scrape runs on the exporter's threads and reads only C++ counts: it never
// takes the GIL.
#include "metrics.hpp"

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace tenbin_py {

void python_metrics::attach(std::shared_ptr<const tenbin::metrics_source> live) {
    const std::lock_guard lock(mutex_);
    if (!last_) live_ = std::move(live);
}

void python_metrics::freeze(const tenbin::metrics_source& live) {
    tenbin::metric_set now;
    live.collect(now);
    const std::lock_guard lock(mutex_);
    last_ = std::move(now);
    live_.reset();
}

void python_metrics::collect(tenbin::metric_set& out) const {
    const std::lock_guard lock(mutex_);
    if (live_) return live_->collect(out);
    if (!last_) return;
    for (const tenbin::metric_family& f : last_->families()) {
        out.family(f.name, f.type, f.help, f.bounds);  // listed even without series
        for (const tenbin::metric_sample& s : f.samples) {
            if (f.type == tenbin::metric_type::histogram)
                out.add_histogram(f.name, f.help, f.bounds, s.labels, s.buckets, s.sum);
            else
                out.add(f.name, f.type, f.help, s.labels, s.value);
        }
    }
}

namespace {

using source_list = std::vector<std::shared_ptr<python_metrics>>;

std::vector<std::shared_ptr<const tenbin::metrics_source>> sources_of(const source_list& sources) {
    return {sources.begin(), sources.end()};
}

const char* type_name(tenbin::metric_type t) {
    switch (t) {
    case tenbin::metric_type::counter: return "counter";
    case tenbin::metric_type::gauge: return "gauge";
    case tenbin::metric_type::histogram: return "histogram";
    }
    return "untyped";
}

py::dict labels_dict(const tenbin::metric_labels& labels) {
    py::dict d;
    for (const auto& [name, value] : labels) d[py::str(name)] = value;
    return d;
}

// A family as tenbin.Connection.metrics() gives it: name, type, help and
// its samples; a histogram's as (upper bound, cumulative count) buckets,
// the last one's bound infinite, with their sum and count.
py::dict family_dict(const tenbin::metric_family& f) {
    py::list samples;
    for (const tenbin::metric_sample& s : f.samples) {
        py::dict d;
        d["labels"] = labels_dict(s.labels);
        if (f.type == tenbin::metric_type::histogram) {
            py::list buckets;
            for (std::size_t i = 0; i < s.buckets.size(); ++i)
                buckets.append(py::make_tuple(i < f.bounds.size() ? f.bounds[i] : std::numeric_limits<double>::infinity(),
                                              s.buckets[i]));
            d["buckets"] = buckets;
            d["sum"] = s.sum;
            d["count"] = s.buckets.empty() ? 0 : s.buckets.back();
        } else {
            d["value"] = s.value;
        }
        samples.append(d);
    }
    py::dict d;
    d["name"] = f.name;
    d["type"] = type_name(f.type);
    d["help"] = f.help;
    d["samples"] = samples;
    return d;
}

// Every series of `sources`, gathered (BadArgument when two have the same
// name and labels), without the GIL: a loader's reading takes its lock.
tenbin::metric_set gathered(const source_list& sources) {
    const auto s = sources_of(sources);
    return without_gil([&] { return tenbin::collect(s); });
}

// ---- MetricsExporter -------------------------------------------------------

class py_exporter {
public:
    py_exporter(const std::string& address, const source_list& sources) {
        auto s = sources_of(sources);
        without_gil([&] { exporter_.emplace(address, std::move(s)); });
    }

    void add(const std::shared_ptr<python_metrics>& source) {
        without_gil([&] { exporter_->add(source); });
    }
    std::string address() const { return exporter_->address(); }
    int port() const { return exporter_->port(); }
    std::uint64_t scrapes() const { return exporter_->scrapes(); }
    std::string text() {
        return without_gil([&] { return exporter_->text(); });
    }

    // In slices, for Ctrl-C; a scrape begun between two slices counts too.
    bool wait_for_scrape(const py::object& timeout) {
        const auto t = seconds_arg(timeout, "timeout");
        const auto deadline = deadline_after(t);
        const std::uint64_t begun = exporter_->scrapes_begun();
        for (;;) {
            const auto slice = slice_until(deadline);
            if (without_gil([&] { return exporter_->wait_for_scrape(slice, begun); })) return true;
            check_signals();
            if (clock_type::now() >= deadline) return false;
        }
    }

    void close() {
        without_gil([&] { exporter_->close(); });
    }

private:
    std::optional<tenbin::metrics_exporter> exporter_;
};

}  // namespace

void bind_metrics(py::module_& m) {
    py::class_<python_metrics, std::shared_ptr<python_metrics>>(m, "MetricsSource");

    m.def("read_metrics", [](const source_list& sources) {
        const tenbin::metric_set set = gathered(sources);
        py::dict out;
        for (const tenbin::metric_family& f : set.families()) out[py::str(f.name)] = family_dict(f);
        return out;
    });
    m.def("metrics_text", [](const source_list& sources) { return tenbin::to_prometheus_text(gathered(sources)); });
    m.attr("prometheus_content_type") = std::string(tenbin::prometheus_content_type);

    py::class_<py_exporter>(m, "MetricsExporter")
        .def(py::init<std::string, source_list>())
        .def("add", &py_exporter::add)
        .def("address", &py_exporter::address)
        .def("port", &py_exporter::port)
        .def("scrapes", &py_exporter::scrapes)
        .def("text", &py_exporter::text)
        .def("wait_for_scrape", &py_exporter::wait_for_scrape)
        .def("close", &py_exporter::close);
}

}  // namespace tenbin_py
