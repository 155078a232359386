#include "common.hpp"

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>

namespace tenbin_py {

// ---- the GIL ---------------------------------------------------------------

bool interpreter_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

void take_gil_back(PyThreadState* state) {
    // (A thread that gets past this check as the exit begins is still ended
    // by CPython's forced unwind; every frame between here and pybind11's
    // dispatcher lets it through.)
    if (interpreter_finalizing())
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    PyEval_RestoreThread(state);
}

void check_signals() {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// ---- errors ----------------------------------------------------------------

namespace {

py::object& error_classes() {  // errc name -> class (tenbin._errors.ERRC); never destroyed
    static auto* classes = new py::object(py::module_::import("tenbin._errors").attr("ERRC"));
    return *classes;
}

// The library's spellings of its options, and the Python keywords that set
// them, longest first where one contains another.
constexpr std::pair<std::string_view, std::string_view> python_spellings[] = {
    {"connection_options::allow64", "allow64=True"},
    {"(tensorcom_compatible)", "(tensorcom_compatible=True)"},
    {"connection_options::topic", "topic"},
    {"set file_options::nocheck", "pass nocheck=True"},
    {"file_options::nocheck", "nocheck=True"},
    {"limits::max_tensors", "max_tensors"},
    {"limits::max_rank", "max_rank"},
    {"limits::max_bytes", "max_bytes"},
    {"raise pool_options::max_bytes or max_buffers", "raise the pool's max_bytes or max_buffers"},
    {"pool_options::max_bytes", "max_bytes"},
    {"pool_options::wait", "timeout"},
    {"other_topics()", "other_topics"},
    {"recv_timeout", "timeout"},
};

}  // namespace

std::string python_message(std::string message) {
    for (const auto& [cpp, python] : python_spellings)
        for (auto at = message.find(cpp); at != std::string::npos; at = message.find(cpp, at + python.size()))
            message.replace(at, cpp.size(), python);
    return message;
}

void raise_error(tenbin::errc code, const std::string& message) {
    const std::string name(tenbin::name(code));
    py::object cls = error_classes()[py::str(name)];
    PyErr_SetObject(cls.ptr(), cls(message, name).ptr());
    throw py::error_already_set();
}

void register_errors() {
    error_classes();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const tenbin::error& e) {
            raise_error(e.code(), python_message(e.what()));
        } catch (const zmq::error_t& e) {  // from a pyzmq socket's handle
            const bool gone = e.num() == ETERM || e.num() == ENOTSOCK;
            raise_error(gone ? tenbin::errc::closed : tenbin::errc::io_error,
                        std::string(gone ? "the socket or its context was closed meanwhile: " : "ZeroMQ: ") + e.what());
        }
    });
}

// ---- times in seconds ------------------------------------------------------

namespace {
constexpr double forever_seconds = 1e9;  // about 31 years
}

std::optional<std::chrono::milliseconds> seconds_arg(const py::handle& seconds, std::string_view keyword) {
    if (seconds.is_none()) return std::nullopt;
    const auto refuse = [&](const std::string& why) {
        raise_error(tenbin::errc::bad_argument,
                    std::string(keyword) + "=" + py::repr(seconds).cast<std::string>() + ": " + why);
    };
    if (PyBool_Check(seconds.ptr()) || !PyNumber_Check(seconds.ptr()))
        refuse("a time is a number of seconds (None or math.inf: for ever)");
    const double s = PyFloat_AsDouble(seconds.ptr());
    if (s == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    if (std::isnan(s)) refuse("not a number of seconds");
    if (s < 0) refuse("a time must not be negative");
    if (s >= forever_seconds) return std::nullopt;
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(s * 1000.0)));
}

std::chrono::milliseconds seconds_or_forever(const py::handle& seconds, std::string_view keyword) {
    return seconds_arg(seconds, keyword)
        .value_or(std::chrono::milliseconds(static_cast<std::int64_t>(forever_seconds * 1000.0)));
}

std::string silence_hint(const std::vector<tenbin::endpoint>& endpoints) {
    return endpoints.empty() ? std::string() : "; hint: " + tenbin::peer_needed(endpoints);
}

std::string seconds_text(std::optional<std::chrono::milliseconds> t) {
    if (!t) return "for ever";
    char text[32];
    std::snprintf(text, sizeof text, "%g s", static_cast<double>(t->count()) / 1000.0);
    return text;
}

clock_type::time_point deadline_after(std::optional<std::chrono::milliseconds> t) {
    return t ? clock_type::now() + *t : clock_type::time_point::max();
}

std::chrono::milliseconds slice_until(clock_type::time_point deadline) {
    if (deadline == clock_type::time_point::max()) return wait_slice;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now());
    return std::clamp<std::chrono::milliseconds>(left, 0ms, wait_slice);
}

// ---- references dropped by ZeroMQ's threads --------------------------------

namespace {

struct deferred_decrefs {
    std::mutex mutex;
    std::vector<PyObject*> objects;
    std::atomic<bool> any{false};
    std::atomic<bool> finalizing{false};
};

// Never destroyed: ZeroMQ threads may release after static destructors ran.
deferred_decrefs& deferred() {
    static auto* d = new deferred_decrefs;
    return *d;
}

int drain_pending(void*) {
    drain_deferred();
    return 0;
}

void defer_decref(PyObject* o) noexcept {
    auto& d = deferred();
    try {
        // Under the lock: finalize_deferred() sets `finalizing` under it, so
        // no pending call is added once exit began.
        std::lock_guard lock(d.mutex);
        const bool first = d.objects.empty();
        d.objects.push_back(o);
        d.any.store(true, std::memory_order_release);
        if (first && !d.finalizing.load()) Py_AddPendingCall(&drain_pending, nullptr);  // may fail: a later call drains
    } catch (...) {
        // Out of memory: leaking the object is the only safe choice.
    }
}

}  // namespace

tenbin::buffer::keeper_type python_keeper(PyObject* o) {
    Py_INCREF(o);
    return tenbin::buffer::keeper_type(
        o, [](const void* p) { defer_decref(const_cast<PyObject*>(static_cast<const PyObject*>(p))); });
}

void drain_deferred() {
    auto& d = deferred();
    if (!d.any.load(std::memory_order_acquire) || d.finalizing.load()) return;
    std::vector<PyObject*> objects;
    {
        std::lock_guard lock(d.mutex);
        objects.swap(d.objects);
        d.any.store(false, std::memory_order_release);
    }
    for (PyObject* o : objects) Py_DECREF(o);
}

void finalize_deferred() {
    drain_deferred();
    std::lock_guard lock(deferred().mutex);
    deferred().finalizing = true;
}

// ---- notices ---------------------------------------------------------------

std::function<void(const std::string&)> notices::collector() {
    return [q = queue_](const std::string& message) {
        try {
            std::lock_guard lock(q->mutex);
            q->messages.push_back(message);
        } catch (...) {
            // Out of memory: a notice is not worth failing a receive for.
        }
    };
}

void notices::emit(const py::object& to) {
    std::vector<std::string> messages;
    {
        std::lock_guard lock(queue_->mutex);
        messages.swap(queue_->messages);
    }
    for (const auto& m : messages) to(python_message(m));
}

}  // namespace tenbin_py
