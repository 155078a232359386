// The HTTP exporter: cpp-httplib's server answering GET /metrics with the
// text format of its sources. Nothing else of the library calls it.
#include <tenbin/error.hpp>
#include <tenbin/metrics.hpp>

#include "exporter/address.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace tenbin {

namespace detail {

struct exporter_state {
    httplib::Server server;
    std::thread thread;
    std::atomic<bool> ended{false};  // the server's loop returned
    std::string host;
    int port = 0;
    mutable std::mutex mutex;
    mutable std::condition_variable scraped;
    std::vector<std::weak_ptr<const metrics_source>> sources;
    std::uint64_t scrapes = 0;  // answered
    // Each scrape takes a ticket before it reads the counts; the highest
    // ticket answered tells a waiter whether those counts were read after
    // it began waiting (a scrape answered then may have read them before).
    std::uint64_t tickets = 0;
    std::uint64_t newest_answered = 0;

    // The sources still alive (the others are forgotten).
    std::vector<std::shared_ptr<const metrics_source>> live() {
        std::vector<std::shared_ptr<const metrics_source>> out;
        const std::lock_guard lock(mutex);
        std::erase_if(sources, [&](const std::weak_ptr<const metrics_source>& w) {
            auto s = w.lock();
            if (!s) return true;
            out.push_back(std::move(s));
            return false;
        });
        return out;
    }
    std::string text() {
        const auto sources = live();
        return to_prometheus_text(collect(sources));
    }
    void stop() {
        if (!thread.joinable()) return;
        server.stop();
        thread.join();
    }
};

}  // namespace detail

metrics_exporter::metrics_exporter(std::string_view address, std::vector<std::shared_ptr<const metrics_source>> sources)
    : s_(std::make_unique<detail::exporter_state>()) {
    const detail::listen_address where = detail::parse_listen_address(address);
    detail::exporter_state& s = *s_;
    for (auto& src : sources) add(std::move(src));
    // A scrape is one short request now and then: two threads answer
    // (Prometheus keeps its connection open on one), none reads a body.
    s.server.new_task_queue = [] { return new httplib::ThreadPool(2); };
    s.server.set_payload_max_length(0);
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets
    // a second exporter (or another process of the user) take the same port
    // and answer half of the scrapes.
    s.server.set_socket_options([](int sock) {
        const int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    s.server.set_read_timeout(std::chrono::seconds(5));
    s.server.set_write_timeout(std::chrono::seconds(5));
    detail::exporter_state* st = s_.get();
    s.server.Get("/metrics", [st](const httplib::Request&, httplib::Response& res) {
        std::uint64_t ticket = 0;
        {
            const std::lock_guard lock(st->mutex);
            ticket = ++st->tickets;
        }
        res.set_content(st->text(), std::string(prometheus_content_type));
        {
            const std::lock_guard lock(st->mutex);
            ++st->scrapes;
            st->newest_answered = std::max(st->newest_answered, ticket);
        }
        st->scraped.notify_all();
    });
    s.server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
        if (res.status == 404) res.set_content("tenbin metrics are at /metrics\n", "text/plain");
    });
    s.host = where.host;
    errno = 0;
    s.port = where.port == 0 ? s.server.bind_to_any_port(where.host) : s.server.bind_to_port(where.host, where.port) ? where.port : -1;
    if (s.port < 0) {
        const int e = errno;
        throw error(errc::io_error, "cannot serve metrics on " + detail::format_address(where.host, where.port) +
                                        (e ? std::string(": ") + std::strerror(e) : std::string(": cannot bind there")));
    }
    s.thread = std::thread([st] {
        st->server.listen_after_bind();
        st->ended = true;
    });
    // stop() does nothing to a server not running yet: wait for it (the
    // socket is bound already, so no scrape is lost meanwhile).
    while (!s.server.is_running() && !s.ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

metrics_exporter::~metrics_exporter() { close(); }
metrics_exporter::metrics_exporter(metrics_exporter&&) noexcept = default;
metrics_exporter& metrics_exporter::operator=(metrics_exporter&& o) noexcept {
    if (this != &o) {
        close();
        s_ = std::move(o.s_);
    }
    return *this;
}

void metrics_exporter::add(std::shared_ptr<const metrics_source> source) {
    if (!s_) throw error(errc::bad_argument, "cannot add to a metrics exporter moved from");
    if (!source) throw error(errc::bad_argument, "a metrics exporter needs a source, not null");
    // Refused now, not at each scrape: the series must not clash.
    auto sources = s_->live();
    sources.push_back(source);
    (void)collect(sources);
    const std::lock_guard lock(s_->mutex);
    s_->sources.push_back(std::move(source));
}

std::string metrics_exporter::address() const {
    return s_ ? detail::format_address(s_->host, s_->port) : std::string();
}
int metrics_exporter::port() const { return s_ ? s_->port : 0; }

std::uint64_t metrics_exporter::scrapes() const {
    if (!s_) return 0;
    const std::lock_guard lock(s_->mutex);
    return s_->scrapes;
}

std::uint64_t metrics_exporter::scrapes_begun() const {
    if (!s_) return 0;
    const std::lock_guard lock(s_->mutex);
    return s_->tickets;
}

bool metrics_exporter::wait_for_scrape(std::chrono::milliseconds timeout, std::optional<std::uint64_t> begun) const {
    if (!s_) return false;
    std::unique_lock lock(s_->mutex);
    const std::uint64_t after = begun.value_or(s_->tickets);
    return s_->scraped.wait_for(lock, timeout, [&] { return s_->newest_answered > after; });
}

std::string metrics_exporter::text() const { return s_ ? s_->text() : std::string(); }

void metrics_exporter::close() {
    if (s_) s_->stop();
}

}  // namespace tenbin
