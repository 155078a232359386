// The exporter in a library built without cpp-httplib: it says so.
#include <tenbin/error.hpp>
#include <tenbin/metrics.hpp>

namespace tenbin {

namespace detail {
struct exporter_state {};
}  // namespace detail

metrics_exporter::metrics_exporter(std::string_view, std::vector<std::shared_ptr<const metrics_source>>) {
    throw error(errc::unsupported, "this tenbin was built without cpp-httplib, so it has no metrics exporter "
                                   "(Debian: libcpp-httplib-dev); read the metrics with to_prometheus_text()");
}
metrics_exporter::~metrics_exporter() = default;
metrics_exporter::metrics_exporter(metrics_exporter&&) noexcept = default;
metrics_exporter& metrics_exporter::operator=(metrics_exporter&&) noexcept = default;
void metrics_exporter::add(std::shared_ptr<const metrics_source>) {}
std::string metrics_exporter::address() const { return {}; }
int metrics_exporter::port() const { return 0; }
std::uint64_t metrics_exporter::scrapes() const { return 0; }
std::uint64_t metrics_exporter::scrapes_begun() const { return 0; }
bool metrics_exporter::wait_for_scrape(std::chrono::milliseconds, std::optional<std::uint64_t>) const { return false; }
std::string metrics_exporter::text() const { return {}; }
void metrics_exporter::close() {}

}  // namespace tenbin
