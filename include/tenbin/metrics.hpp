// tenbin: metrics of connections and loaders (counters, gauges, histograms),
// read from any thread while the connection works, in Prometheus' text
// format, and an HTTP exporter that serves them.
//
// A connection or loader counts as its events happen: messages and bytes,
// errors, stream gaps, its queue (see the table in the docs' Metrics page).
// The counts cost a relaxed atomic increment each. Timings (histograms of
// receive waits, send times and delivery latency) cost two clock reads per
// call, so they are kept from the first call of `metrics()` on: asking for
// the metrics turns them on, for the life of the connection or loader.
//
// Names follow Prometheus' conventions: `tenbin_` in front, base units
// (seconds, bytes), counters ending in `_total`. Every series carries the
// labels `connection` (connection_options::name) and `endpoint` (the
// endpoints it was opened on).
#pragma once

#include <tenbin/config.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// What a family's samples measure, as Prometheus types them.
enum class metric_type {
    counter,    ///< a count that only grows (reset when its process restarts)
    gauge,      ///< a value that goes up and down
    histogram,  ///< observations counted in buckets, with their sum
};

/// A series' labels: (name, value) pairs in the order they are written.
using metric_labels = std::vector<std::pair<std::string, std::string>>;

/// One series of a family.
struct metric_sample {
    /// The series' labels (a histogram's `le` is not among them).
    metric_labels labels{};
    /// A counter's or gauge's value.
    double value = 0;
    /// A histogram: the observations at or below each of the family's
    /// bounds (cumulative), then all of them (the `+Inf` bucket, the count).
    std::vector<std::uint64_t> buckets{};
    /// A histogram: the sum of the observations.
    double sum = 0;
};

/// Series of one name and type.
struct metric_family {
    std::string name;  ///< `tenbin_...`
    std::string help;  ///< one line saying what is measured, in what unit
    metric_type type = metric_type::counter;  ///< what its samples measure
    /// A histogram's bucket bounds, ascending (`+Inf` implied).
    std::vector<double> bounds{};
    std::vector<metric_sample> samples{};  ///< its series, in the order added
};

/// Families by name, as a scrape gathers them from one or more sources.
class metric_set {
public:
    /// The family `name`, made on first use (empty). Throws bad_argument
    /// for a name Prometheus would refuse, or when the family exists with
    /// another type, help or bounds.
    metric_family& family(std::string_view name, metric_type type, std::string_view help,
                          std::span<const double> bounds = {});
    /// Adds a counter's or gauge's series. Throws bad_argument as family()
    /// does, for a label name Prometheus would refuse, and for a series
    /// the family has already (the same labels).
    void add(std::string_view name, metric_type type, std::string_view help, metric_labels labels, double value);
    /// Adds a histogram's series (`buckets` as metric_sample's). Throws as
    /// add() does, and when `buckets` does not have one count per bound
    /// and one more, or is not cumulative.
    void add_histogram(std::string_view name, std::string_view help, std::span<const double> bounds,
                       metric_labels labels, std::vector<std::uint64_t> buckets, double sum);
    /// Every family, in the order they were first added.
    const std::vector<metric_family>& families() const noexcept { return families_; }
    /// The family `name`; null when there is none.
    const metric_family* find(std::string_view name) const noexcept;
    /// The value of the first counter or gauge series of `name` whose labels
    /// include every one of `labels`; nothing when there is none.
    std::optional<double> value(std::string_view name, const metric_labels& labels = {}) const;
    /// The same for a histogram series.
    const metric_sample* histogram(std::string_view name, const metric_labels& labels = {}) const;

private:
    std::vector<metric_family> families_;
};

/// What a scrape reads: the metrics of a connection or loader
/// (connection::metrics(), loader::metrics()), or of the caller's own
/// making. collect() must be safe to call from any thread.
class metrics_source {
public:
    virtual ~metrics_source() = default;
    /// Adds this source's series to `out`.
    virtual void collect(metric_set& out) const = 0;
};

/// Every series of `sources`, gathered into one set. Throws bad_argument
/// when two sources have a series of the same name and labels (give their
/// connections different `connection_options::name`s).
metric_set collect(std::span<const std::shared_ptr<const metrics_source>> sources);

/// `set` in Prometheus' text exposition format (version 0.0.4): a `# HELP`
/// and a `# TYPE` line per family, then its series; histograms as
/// `_bucket{le=...}`, `_sum` and `_count`.
std::string to_prometheus_text(const metric_set& set);

/// The content type of to_prometheus_text()'s text.
inline constexpr std::string_view prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

namespace detail {
struct exporter_state;
}  // namespace detail

/// An HTTP server of the text format at `GET /metrics` (any other path is
/// a 404): what Prometheus scrapes. It runs on threads of its own and
/// reads its sources only while it answers a scrape. It keeps no source
/// alive: the series of a connection or loader that is gone leave the
/// scrape with it. Requests other than GET and HEAD are refused, and so is
/// a request body.
class metrics_exporter {
public:
    /// Listens on `address`: "HOST:PORT" (a name, an IPv4 address, or an
    /// IPv6 one in brackets: "[::1]:9464"), or ":PORT" or "PORT" for the
    /// loopback address 127.0.0.1. Port 0 takes a free one (see address()).
    /// Anyone who can reach the address reads the metrics: bind to an
    /// address other than loopback only where that is wanted.
    /// Throws bad_argument for an address it cannot read, io_error when it
    /// cannot listen there (naming the address), and unsupported when the
    /// library was built without its HTTP library (cpp-httplib).
    explicit metrics_exporter(std::string_view address,
                              std::vector<std::shared_ptr<const metrics_source>> sources = {});
    /// Stops serving (as close()).
    ~metrics_exporter();
    /// Takes over the other's server; the other serves nothing.
    metrics_exporter(metrics_exporter&&) noexcept;
    /// Stops this one's server (as close()) and takes over the other's.
    metrics_exporter& operator=(metrics_exporter&&) noexcept;
    metrics_exporter(const metrics_exporter&) = delete;
    metrics_exporter& operator=(const metrics_exporter&) = delete;

    /// Serves `source`'s series too, from the next scrape on. Throws
    /// bad_argument when one of its series has the name and labels of one
    /// already served.
    void add(std::shared_ptr<const metrics_source> source);
    /// Where it listens, as "HOST:PORT" with the port it took.
    std::string address() const;
    /// The port it listens on.
    int port() const;
    /// Scrapes answered so far.
    std::uint64_t scrapes() const;
    /// Scrapes begun so far (each reads the counts after it begins).
    std::uint64_t scrapes_begun() const;
    /// Waits at most `timeout` until a scrape that began after the first
    /// `begun` scrapes (by default: one that begins after this call) has been
    /// answered; false when none was. For a command that ends: its last
    /// counts are read before it goes. Waiting in slices, pass the same
    /// `begun` (scrapes_begun() once the counts were final) to each.
    bool wait_for_scrape(std::chrono::milliseconds timeout, std::optional<std::uint64_t> begun = {}) const;
    /// The text a scrape gets now.
    std::string text() const;
    /// Stops listening and waits for a scrape being answered to end.
    void close();

private:
    std::unique_ptr<detail::exporter_state> s_;
};

}  // namespace tenbin
TENBIN_API_END
