// The prefetching loader as Loader. tenbin::loader is thread-safe (next()
// from several threads, close() from any); what is guarded here is its
// lifetime: each call takes a reference of its own (under `mutex_`, held
// only to copy the pointer), so destroy() while another thread waits in
// next() leaves that thread a valid loader, and the last reference is
// dropped without the GIL (destruction waits for the loader's thread).
#include "arrays.hpp"
#include "connection.hpp"
#include "metrics.hpp"

#include <tenbin/loader.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <span>

namespace tenbin_py {

namespace {

class py_loader {
public:
    py_loader(const std::vector<std::string>& urls, const py_options& opt, std::size_t queue_messages,
              std::uint64_t queue_bytes, bool skip_malformed, bool reuse_allocations, py::object on_notice)
        : where_(urls_text(urls)), on_notice_(std::move(on_notice)) {
        drain_deferred();
        tenbin::loader_options o;
        o.connection = opt.checked();
        timeout_ = o.connection.recv_timeout;
        o.connection.recv_timeout.reset();  // next() waits here, in slices
        o.connection.on_notice = notices_.collector();
        o.queue_messages = queue_messages;
        o.queue_bytes = queue_bytes;
        o.skip_malformed = skip_malformed;
        o.reuse_allocations = reuse_allocations;
        loader_ = without_gil([&] { return std::make_shared<tenbin::loader>(std::span<const std::string>(urls), std::move(o)); });
        hint_ = silence_hint(loader_->endpoints());
    }

    ~py_loader() {
        std::shared_ptr<tenbin::loader> l;
        {
            std::lock_guard lock(mutex_);
            l.swap(loader_);
        }
        if (!l || l.use_count() > 1 || interpreter_finalizing() || !PyGILState_Check()) return;
        PyThreadState* state = PyEval_SaveThread();
        l.reset();
        take_gil_back(state);
    }

    // The next batch, or None at the end of an epoch of a numbered stream
    // (epoch_ended() and stream_ended() tell which end); Timeout after
    // `timeout` seconds (default: the loader's); Closed once closed (or
    // ended by a socket failure) and drained.
    py::object next(const py::object& timeout) {
        drain_deferred();
        emit_notices();
        // A batch already queued is taken with the GIL held (as
        // Connection.recv). Asked first: next(0ms) on an empty queue costs
        // a timed wait that returns at once, a system call.
        auto queued = share();
        std::optional<std::vector<tenbin::tensor>> waiting;
        bool at_end = false;
        if (queued && (queued->queued_messages() > 0 || queued->stream_ended())) {
            waiting = queued->next(0ms);
            at_end = !waiting && (queued->epoch_ended() || queued->stream_ended());
        }
        let_go(queued);
        if (waiting) return arrays_of(*waiting);
        if (at_end) return py::none();
        const auto t = timeout.is_none() ? timeout_ : seconds_arg(timeout, "timeout");
        const auto deadline = deadline_after(t);
        for (;;) {
            const auto slice = slice_until(deadline);
            bool ended = false, epoch_end = false;
            auto m = without_gil([&] {
                auto l = share();
                if (!l) {
                    ended = true;
                    return std::optional<std::vector<tenbin::tensor>>();
                }
                auto batch = l->next(slice);
                // Nothing back: a timeout, unless an end or closed and drained.
                epoch_end = !batch && (l->epoch_ended() || l->stream_ended());
                ended = !batch && l->closed();
                return batch;
            });
            if (m) return arrays_of(*m);
            if (epoch_end) return py::none();
            if (ended) {
                emit_notices();
                raise_error(tenbin::errc::closed,
                            closed_ ? "the loader on " + where_ + " was closed (and its queue is drained)"
                                    : "the loader on " + where_ + " ended: its socket failed (an earlier next() raised why)");
            }
            check_signals();
            if (clock_type::now() >= deadline) {
                emit_notices();
                raise_error(tenbin::errc::timeout, "no batch arrived within " + seconds_text(t) + " on " + where_ + hint_);
            }
        }
    }

    // The batch this thread took last, acknowledged now (a for loop's
    // __next__: the loop still holds it).
    void release_last() {
        auto l = share();
        if (!l) return;
        without_gil([&] { l->release_last(); });
        let_go(l);
    }

    void close() {
        closed_ = true;
        if (auto l = share()) without_gil([&] {
                l->close();
                l.reset();
            });
        emit_notices();
    }

    void destroy() {
        closed_ = true;
        std::shared_ptr<tenbin::loader> l;
        {
            std::lock_guard lock(mutex_);
            if (!loader_) return;
            metrics_->freeze(*loader_->metrics());
            final_stats_ = loader_->stats();
            final_endpoints_ = loader_->endpoints();
            final_malformed_ = loader_->malformed();
            final_state_ = loader_->state();
            final_stream_ended_ = loader_->stream_ended();
            final_stream_stats_ = loader_->stream_stats();
            l.swap(loader_);
        }
        // The last reference destroys it (waiting for its thread), here or
        // in a next() still running on another thread.
        without_gil([&] {
            l->close();
            l.reset();
        });
        emit_notices();
    }

    py::dict stats() { return stats_dict(read([](auto& l) { return l.stats(); }, final_stats_)); }
    // Its metrics (the first call turns its connection's timings on).
    std::shared_ptr<python_metrics> metrics() {
        read([&](tenbin::loader& l) { return (metrics_->attach(l.metrics()), true); }, false);
        return metrics_;
    }
    std::size_t queued_messages() { return read([](auto& l) { return l.queued_messages(); }, std::size_t{0}); }
    std::uint64_t queued_bytes() { return read([](auto& l) { return l.queued_bytes(); }, std::uint64_t{0}); }
    std::uint64_t malformed() { return read([](auto& l) { return l.malformed(); }, final_malformed_); }
    std::uint64_t refused_handshakes() { return read([](auto& l) { return l.refused_handshakes(); }, std::uint64_t{0}); }
    py::list endpoints() { return endpoints_list(read([](auto& l) { return l.endpoints(); }, final_endpoints_)); }
    bool closed() const { return closed_; }
    std::uint64_t epoch() { return read([](auto& l) { return l.epoch(); }, final_state_.epoch); }
    bool epoch_ended() { return read([](auto& l) { return l.epoch_ended(); }, false); }
    bool stream_ended() { return read([](auto& l) { return l.stream_ended(); }, final_stream_ended_); }
    std::string state() { return tenbin::to_json(read([](auto& l) { return l.state(); }, final_state_)); }
    void load_state(const std::string& json) {
        const auto s = tenbin::stream_state_from_json(json);
        auto l = share();
        if (!l) raise_error(tenbin::errc::closed, "the loader on " + where_ + " was closed: it cannot load a state");
        without_gil([&] {
            l->load_state(s);
            l.reset();
        });
    }
    py::dict stream_stats() {
        return stream_stats_dict(read([](auto& l) { return l.stream_stats(); }, final_stream_stats_));
    }

private:
    std::shared_ptr<tenbin::loader> share() {
        std::lock_guard lock(mutex_);
        return loader_;
    }
    // Drops a reference taken with the GIL held: the last one destroys the
    // loader, which waits for its thread, so without the GIL.
    void let_go(std::shared_ptr<tenbin::loader>& l) {
        if (l && l.use_count() == 1) without_gil([&] { l.reset(); });
        l.reset();
    }
    // What f reads of the loader (quick, thread-safe calls), or
    // `after_destroy` once it is destroyed.
    template <class F, class T>
    T read(F&& f, const T& after_destroy) {
        auto l = share();
        if (!l) return after_destroy;
        T value = f(*l);
        let_go(l);
        return value;
    }
    void emit_notices() { notices_.emit(on_notice_); }

    std::string where_;
    std::string hint_;  // silence_hint of the endpoints
    py::object on_notice_;
    notices notices_;
    std::mutex mutex_;
    std::shared_ptr<tenbin::loader> loader_;
    std::optional<std::chrono::milliseconds> timeout_;
    std::atomic<bool> closed_{false};
    std::shared_ptr<python_metrics> metrics_ = std::make_shared<python_metrics>();
    tenbin::statistics final_stats_;
    std::vector<tenbin::endpoint> final_endpoints_;
    std::uint64_t final_malformed_ = 0;
    tenbin::stream_state final_state_;
    bool final_stream_ended_ = false;
    tenbin::stream_counters final_stream_stats_;
};

}  // namespace

void bind_loader(py::module_& m) {
    py::class_<py_loader>(m, "Loader")
        .def(py::init<std::vector<std::string>, const py_options&, std::size_t, std::uint64_t, bool, bool, py::object>())
        .def("next", &py_loader::next)
        .def("release_last", &py_loader::release_last)
        .def("close", &py_loader::close)
        .def("destroy", &py_loader::destroy)
        .def("closed", &py_loader::closed)
        .def("stats", &py_loader::stats)
        .def("metrics", &py_loader::metrics)
        .def("queued_messages", &py_loader::queued_messages)
        .def("queued_bytes", &py_loader::queued_bytes)
        .def("malformed", &py_loader::malformed)
        .def("refused_handshakes", &py_loader::refused_handshakes)
        .def("endpoints", &py_loader::endpoints)
        .def("epoch", &py_loader::epoch)
        .def("epoch_ended", &py_loader::epoch_ended)
        .def("stream_ended", &py_loader::stream_ended)
        .def("state", &py_loader::state)
        .def("load_state", &py_loader::load_state)
        .def("stream_stats", &py_loader::stream_stats);
}

}  // namespace tenbin_py
