// Connections: tenbin::connection as Connection, and the URL helpers.
//
// A connection is used from one thread at a time, yet Python code may call
// close() from another while a call waits. Every call into the
// tenbin::connection holds `use_`, taken and released without the GIL
// (never the GIL while holding it, so neither waits for the other), and
// blocking calls wait one slice at a time: close() marks the connection
// closed, waits for the slice in progress to end, then closes the socket
// while nobody else uses it; the blocked call raises Closed.
#include "arrays.hpp"
#include "connection.hpp"
#include "metrics.hpp"

#include "connect/connect_detail.hpp"

#include <tenbin/pool.hpp>
#include <tenbin/security.hpp>

#include <atomic>
#include <climits>
#include <filesystem>
#include <mutex>
#include <span>

namespace tenbin_py {

namespace {

bool can_send(tenbin::socket_kind k) {
    return k != tenbin::socket_kind::pull && k != tenbin::socket_kind::sub;
}

// A time as seconds since the Unix epoch (Python's time.time()).
double unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// ---- Connection ------------------------------------------------------------

class py_connection {
public:
    py_connection(const std::vector<std::string>& urls, const py_options& opt, py::object on_notice)
        : where_(urls_text(urls)), on_notice_(std::move(on_notice)) {
        drain_deferred();
        const tenbin::connection_options given = opt.checked();
        recv_timeout_ = given.recv_timeout;
        send_timeout_ = given.send_timeout;
        // The library waits one slice at a time; the timeouts are kept here.
        auto o = tenbin::with_sliced_timeouts(given, wait_slice);
        o.allow64 = true;  // checked per call (tensorcom's send(allow64=))
        multipart_ = o.multipart;
        o.on_notice = notices_.collector();
        without_gil([&] { conn_.emplace(std::span<const std::string>(urls), std::move(o)); });
        shm_ = conn_->endpoints().front().shm;
        hint_ = silence_hint(conn_->endpoints());
        kind_ = conn_->endpoints().front().kind;
    }

    // Closes the socket without the GIL (its linger may last), unless the
    // interpreter is exiting on this thread.
    ~py_connection() {
        closed_ = true;
        if (!conn_) return;
        if (interpreter_finalizing() || !PyGILState_Check()) {
            conn_.reset();
            return;
        }
        PyThreadState* state = PyEval_SaveThread();
        {
            std::lock_guard lock(use_);
            conn_.reset();
        }
        take_gil_back(state);
    }

    void add(const std::vector<std::string>& urls, const std::string& topic) {
        emit_notices();
        without_gil([&] {
            use([&](tenbin::connection& c) {
                if (!topic.empty() && topic != c.options().topic)
                    throw tenbin::error(tenbin::errc::bad_argument, "topic '" + topic + "' differs from this connection's '" +
                                                                        c.options().topic + "': one socket has one topic");
                c.add(std::span<const std::string>(urls));
            });
        });
    }

    void send(const py::object& list, bool allow64) {
        drain_deferred();
        emit_notices();
        input_list in = inputs(list, multipart_ ? hold::send : hold::borrow);
        if (!allow64) tenbin::check_no64(in.tensors);
        const auto deadline = deadline_after(send_timeout_);
        for (;;) {
            if (without_gil([&] { return use([&](tenbin::connection& c) { return c.send(in.tensors); }); })) return;
            check_signals();
            if (clock_type::now() >= deadline) {
                emit_notices();
                raise_error(tenbin::errc::timeout, "the message could not be sent within " + seconds_text(send_timeout_) +
                                                       " on " + where_ + " (no receiver?): send_timeout=None waits for ever" + hint_);
            }
        }
    }

    // One message, or None at the end of an epoch of a numbered stream
    // (epoch_ended() and stream_ended() tell which end).
    py::object recv(const py::object& timeout) {
        drain_deferred();
        emit_notices();
        // A message already waiting is taken with the GIL held: releasing
        // and retaking it costs more than such a receive. Not over +shm,
        // whose receive asks the sender on its side channel and may wait.
        if (!shm_) {
            std::unique_lock lock(use_, std::try_to_lock);
            if (lock && !closed_ && conn_) {
                if (auto m = conn_->try_recv()) return arrays_of(*m);
                if (conn_->epoch_ended() || conn_->stream_ended()) return py::none();
            }
        }
        const auto t = timeout.is_none() ? recv_timeout_ : seconds_arg(timeout, "timeout");
        const auto deadline = deadline_after(t);
        for (;;) {
            bool ended = false;
            auto m = without_gil([&] {
                return use([&](tenbin::connection& c) {
                    auto got = c.recv();
                    ended = !got && (c.epoch_ended() || c.stream_ended());  // an end, not a slice's timeout
                    return got;
                });
            });
            if (m) return arrays_of(*m);
            if (ended) return py::none();
            check_signals();
            if (clock_type::now() >= deadline) {
                emit_notices();
                raise_error(tenbin::errc::timeout, "no message arrived within " + seconds_text(t) + " on " + where_ + hint_);
            }
        }
    }

    // Numbered streams, sending: an end mark, waiting as send() does.
    void end(bool stream) {
        drain_deferred();
        emit_notices();
        const auto deadline = deadline_after(send_timeout_);
        for (;;) {
            if (without_gil([&] {
                    return use([&](tenbin::connection& c) { return stream ? c.end_stream() : c.end_epoch(); });
                }))
                return;
            check_signals();
            if (clock_type::now() >= deadline)
                raise_error(tenbin::errc::timeout, std::string(stream ? "the stream's" : "the epoch's") +
                                                       " end could not be sent within " + seconds_text(send_timeout_) +
                                                       " on " + where_ + " (no receiver?)" + hint_);
        }
    }

    py::object position() {
        const auto p = without_gil([&] { return use([](tenbin::connection& c) { return c.position(); }); });
        if (!p) return py::none();
        return py::make_tuple(p->producer, p->epoch, p->seq);
    }
    void seek(std::uint64_t epoch, std::uint64_t seq) {
        without_gil([&] { use([&](tenbin::connection& c) { c.seek(epoch, seq); }); });
    }
    std::uint64_t epoch() {
        return inspect([](tenbin::connection& c) { return c.epoch(); }, final_state_.epoch);
    }
    bool epoch_ended() {
        return inspect([](tenbin::connection& c) { return c.epoch_ended(); }, false);
    }
    bool stream_ended() {
        return inspect([](tenbin::connection& c) { return c.stream_ended(); }, final_stream_ended_);
    }
    std::string state() {
        return tenbin::to_json(inspect([](tenbin::connection& c) { return c.state(); }, final_state_));
    }
    void load_state(const std::string& json) {
        const auto s = tenbin::stream_state_from_json(json);
        without_gil([&] { use([&](tenbin::connection& c) { c.load_state(s); }); });
    }
    py::dict stream_stats() {
        return stream_stats_dict(inspect([](tenbin::connection& c) { return c.stream_stats(); }, final_stream_stats_));
    }
    std::size_t subscribers() {
        return inspect([](tenbin::connection& c) { return c.subscribers(); }, std::size_t{0});
    }
    std::vector<std::string> subscriber_names() {
        return inspect([](tenbin::connection& c) { return c.subscriber_names(); }, std::vector<std::string>{});
    }
    py::list consumers() {
        py::list out;
        for (const auto& c : inspect([](tenbin::connection& c) { return c.consumers(); }, std::vector<tenbin::consumer_info>{})) {
            py::dict d;
            d["name"] = c.name;
            d["connected_since"] = unix_seconds(c.connected_since);
            d["last_heard"] = unix_seconds(c.last_heard);
            d["credits"] = c.credits;
            d["in_flight"] = c.in_flight;
            d["acknowledged"] = c.acknowledged;
            d["redelivered"] = c.redelivered;
            out.append(d);
        }
        return out;
    }
    py::dict delivery_stats() {
        const auto n = inspect([](tenbin::connection& c) { return c.delivery_stats(); }, final_delivery_);
        py::dict d;
        d["sent"] = n.sent;
        d["acknowledged"] = n.acknowledged;
        d["redelivered"] = n.redelivered;
        d["skipped"] = n.skipped;
        d["consumers_lost"] = n.consumers_lost;
        d["producers_lost"] = n.producers_lost;
        d["bad_acks"] = n.bad_acks;
        d["bad_messages"] = n.bad_messages;
        return d;
    }

    // A writable array on a block of the connection's pool: its +shm pool
    // on a +shm connection that sends (no copy into shared memory), a heap
    // pool of its own otherwise.
    py::array acquire(const std::vector<std::int64_t>& shape, const py::object& dt, const std::string& info,
                      const py::object& timeout) {
        drain_deferred();
        if (!can_send(kind_))
            raise_error(tenbin::errc::bad_argument, "Connection.acquire: this connection's socket (" + where_ +
                                                        ") is a " + std::string(tenbin::name(kind_)) +
                                                        " socket, which cannot send");
        const tenbin::dtype t = dtype_of(py::dtype::from_args(dt));
        const auto limit = timeout.is_none() ? send_timeout_ : seconds_arg(timeout, "timeout");
        const auto deadline = deadline_after(limit);
        const tenbin::shape_t dims(shape.begin(), shape.end());
        for (;;) {
            const auto slice = slice_until(deadline);
            auto x = without_gil([&] {
                return use([&](tenbin::connection& c) { return pool_of(c).try_acquire(t, dims, info, slice); });
            });
            if (x) return array_of(*x, true);
            check_signals();
            drain_deferred();  // references ZeroMQ let go of may hold pool blocks
            if (clock_type::now() >= deadline) {
                const auto st = without_gil([&] { return use([&](tenbin::connection& c) { return pool_of(c).stats(); }); });
                raise_error(tenbin::errc::timeout,
                            "the connection's pool stayed exhausted for " + seconds_text(limit) + ": " +
                                std::to_string(st.in_use) + " blocks (" + std::to_string(st.in_use_bytes) +
                                " bytes) are still held by arrays, ZeroMQ or receivers" + (shm_ ? " (shm_pool_bytes)" : ""));
            }
        }
    }

    py::dict pool_stats() {
        return pool_stats_dict(without_gil([&] { return use([&](tenbin::connection& c) { return pool_of(c).stats(); }); }));
    }

    void close() {
        // A receive waiting for a silent +shm sender gives up now (Closed),
        // not at its claim timeout: the slice in progress ends at once.
        if (!closed_.exchange(true) && conn_) tenbin::detail::connection_access::interrupt(*conn_);
        without_gil([&] {
            std::lock_guard lock(use_);
            if (!conn_) return;
            metrics_->freeze(*conn_->metrics());
            final_stats_ = conn_->stats();
            final_endpoints_ = conn_->endpoints();
            final_other_topics_ = conn_->other_topics();
            final_state_ = conn_->state();
            final_stream_ended_ = conn_->stream_ended();
            final_stream_stats_ = conn_->stream_stats();
            final_delivery_ = conn_->delivery_stats();
            conn_->close();
            conn_.reset();
            heap_pool_.reset();
        });
        drain_deferred();
        emit_notices();
    }

    bool closed() const { return closed_; }

    py::dict stats() {
        return stats_dict(inspect([](tenbin::connection& c) { return c.stats(); }, final_stats_));
    }
    void reset_stats() {
        without_gil([&] { use([](tenbin::connection& c) { c.stats().reset(); }); });
    }
    py::list endpoints() {
        return endpoints_list(inspect([](tenbin::connection& c) { return c.endpoints(); }, final_endpoints_));
    }
    std::uint64_t other_topics() {
        return inspect([](tenbin::connection& c) { return c.other_topics(); }, final_other_topics_);
    }
    std::uint64_t refused_handshakes() {
        return inspect([](tenbin::connection& c) { return c.refused_handshakes(); }, std::uint64_t{0});
    }
    // Its metrics (the first call turns the connection's timings on).
    std::shared_ptr<python_metrics> metrics() {
        inspect([&](tenbin::connection& c) { return (metrics_->attach(c.metrics()), true); }, false);
        return metrics_;
    }

private:
    // Runs f(connection) while holding `use_`; the GIL is not held. Raises
    // Closed once close() was called.
    template <class F>
    auto use(F&& f) -> decltype(f(std::declval<tenbin::connection&>())) {
        std::lock_guard lock(use_);
        if (closed_ || !conn_) throw tenbin::error(tenbin::errc::closed, "the connection on " + where_ + " was closed");
        return f(*conn_);
    }
    // What f reads of the connection, or `after_close` once it is closed.
    template <class F, class T>
    T inspect(F&& f, const T& after_close) {
        return without_gil([&]() -> T {
            std::lock_guard lock(use_);
            return conn_ ? T(f(*conn_)) : after_close;
        });
    }
    tenbin::tensor_pool& pool_of(tenbin::connection& c) {
        if (shm_) return c.pool();
        if (!heap_pool_) {
            tenbin::pool_options o;
            o.wait = 0ms;  // acquire() waits, in slices
            heap_pool_.emplace(o);
        }
        return *heap_pool_;
    }
    void emit_notices() { notices_.emit(on_notice_); }

    std::string where_;
    py::object on_notice_;
    notices notices_;
    std::mutex use_;
    std::optional<tenbin::connection> conn_;
    std::string hint_;  // silence_hint of the endpoints
    std::atomic<bool> closed_{false};
    std::optional<std::chrono::milliseconds> recv_timeout_, send_timeout_;
    bool shm_ = false;
    bool multipart_ = true;
    tenbin::socket_kind kind_{};
    std::optional<tenbin::tensor_pool> heap_pool_;
    std::shared_ptr<python_metrics> metrics_ = std::make_shared<python_metrics>();
    tenbin::statistics final_stats_;
    std::vector<tenbin::endpoint> final_endpoints_;
    std::uint64_t final_other_topics_ = 0;
    tenbin::stream_state final_state_;
    bool final_stream_ended_ = false;
    tenbin::stream_counters final_stream_stats_;
    tenbin::delivery_counters final_delivery_;
};

}  // namespace

std::string urls_text(const std::vector<std::string>& urls) {
    if (urls.empty()) return "no URL";
    return urls.size() == 1 ? urls.front() : urls.front() + " and " + std::to_string(urls.size() - 1) + " more";
}

py::list endpoints_list(const std::vector<tenbin::endpoint>& eps) {
    py::list out;
    for (const auto& e : eps) out.append(py::make_tuple(std::string(tenbin::name(e.kind)), e.bind, e.address));
    return out;
}

py::dict stream_stats_dict(const tenbin::stream_counters& n) {
    py::dict d;
    d["gaps"] = n.gaps;
    d["duplicates"] = n.duplicates;
    d["late"] = n.late;
    d["epochs"] = n.epochs;
    d["producers_timed_out"] = n.producers_timed_out;
    d["dropped_remainder"] = n.dropped_remainder;
    d["padded"] = n.padded;
    d["after_end"] = n.after_end;
    return d;
}

py::dict stats_dict(const tenbin::statistics& s) {
    py::dict d;
    d["count"] = s.messages();
    d["total"] = s.bytes();
    d["rate"] = s.rate();
    d["throughput"] = s.throughput();
    d["recent_rate"] = s.recent_rate();
    d["recent_throughput"] = s.recent_throughput();
    d["summary"] = s.summary();
    return d;
}

void bind_connection(py::module_& m) {
    py::class_<py_connection>(m, "Connection")
        .def(py::init<std::vector<std::string>, const py_options&, py::object>())
        .def("add", &py_connection::add)
        .def("send", &py_connection::send)
        .def("recv", &py_connection::recv)
        .def("acquire", &py_connection::acquire)
        .def("pool_stats", &py_connection::pool_stats)
        .def("close", &py_connection::close)
        .def("closed", &py_connection::closed)
        .def("stats", &py_connection::stats)
        .def("metrics", &py_connection::metrics)
        .def("reset_stats", &py_connection::reset_stats)
        .def("endpoints", &py_connection::endpoints)
        .def("other_topics", &py_connection::other_topics)
        .def("refused_handshakes", &py_connection::refused_handshakes)
        .def("end_epoch", [](py_connection& c) { c.end(false); })
        .def("end_stream", [](py_connection& c) { c.end(true); })
        .def("position", &py_connection::position)
        .def("seek", &py_connection::seek)
        .def("epoch", &py_connection::epoch)
        .def("epoch_ended", &py_connection::epoch_ended)
        .def("stream_ended", &py_connection::stream_ended)
        .def("state", &py_connection::state)
        .def("load_state", &py_connection::load_state)
        .def("stream_stats", &py_connection::stream_stats)
        .def("subscribers", &py_connection::subscribers)
        .def("subscriber_names", &py_connection::subscriber_names)
        .def("consumers", &py_connection::consumers)
        .def("delivery_stats", &py_connection::delivery_stats);

    m.def("parse_urls", [](const std::vector<std::string>& urls, const py::object& kind, const py::object& bind) {
        tenbin::url_options u{kind_arg(kind), bind.is_none() ? std::nullopt : std::optional<bool>(truth(bind))};
        return endpoints_list(tenbin::parse_urls(urls, u));
    });
    m.def("brace_expand", [](const std::string& p) { return tenbin::brace_expand(p); });
}

}  // namespace tenbin_py
