// What every part of tenbin's Python extension shares: the GIL, errors,
// times in seconds, references dropped by ZeroMQ's threads, and notices.
// Arrays in and out are in arrays.hpp; each bind_*.cpp binds one area.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tenbin/error.hpp>
#include <tenbin/buffer.hpp>
#include <tenbin/url.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tenbin_py {

namespace py = pybind11;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// Blocking calls wait in slices this long, taking the GIL back in between
// to check for signals (Ctrl-C raises KeyboardInterrupt within about this
// time) and for a close() from another thread.
inline constexpr auto wait_slice = 50ms;

// ---- the GIL ---------------------------------------------------------------

// Whether the interpreter is exiting (Py_FinalizeEx has begun).
bool interpreter_finalizing() noexcept;

// Takes the GIL back after PyEval_SaveThread. When the interpreter began to
// exit meanwhile on another thread, CPython (before 3.14) would end this
// thread by a forced unwind that aborts the process when it meets a
// noexcept frame; the exiting interpreter does not wait for this thread,
// so it stays here until the process ends instead (what CPython 3.14
// itself does).
void take_gil_back(PyThreadState* state);

// Runs `f` without the GIL, and takes the GIL back outside any destructor
// (see take_gil_back). On the thread that runs the interpreter's exit,
// `f` runs with the GIL held: nothing else may run Python code then.
template <class F>
auto without_gil(F&& f) -> decltype(f()) {
    if (interpreter_finalizing()) return f();
    PyThreadState* state = PyEval_SaveThread();
    if constexpr (std::is_void_v<decltype(f())>) {
        try {
            f();
        } catch (...) {
            take_gil_back(state);
            throw;
        }
        take_gil_back(state);
    } else {
        std::optional<decltype(f())> result;
        try {
            result.emplace(f());
        } catch (...) {
            take_gil_back(state);
            throw;
        }
        take_gil_back(state);
        return std::move(*result);
    }
}

// Raises KeyboardInterrupt (or what a signal handler raised).
void check_signals();

// ---- errors ----------------------------------------------------------------

// Raises the tenbin.Error subclass of `code` (tenbin._errors.ERRC).
[[noreturn]] void raise_error(tenbin::errc code, const std::string& message);
// The message of a library error as a Python user reads it: C++ option
// names become the Python keywords that set them.
std::string python_message(std::string message);
// Registers the translation of tenbin::error into tenbin.Error subclasses.
void register_errors();

// ---- times in seconds ------------------------------------------------------

// A time in seconds from Python: None and infinity mean for ever (nothing);
// NaN, a negative value or a non-number raise BadArgument naming `keyword`.
// Times beyond about 31 years count as for ever: deadlines stay within the
// clock's range.
std::optional<std::chrono::milliseconds> seconds_arg(const py::handle& seconds, std::string_view keyword);
// The same where "for ever" must be a duration (linger, lease): ~31 years.
std::chrono::milliseconds seconds_or_forever(const py::handle& seconds, std::string_view keyword);
// "3 s", "0.25 s", "for ever".
std::string seconds_text(std::optional<std::chrono::milliseconds> t);
// For a timeout's message: what the socket needs at the other end
// (tenbin::peer_needed), "; hint: ..."; "" for none.
std::string silence_hint(const std::vector<tenbin::endpoint>& endpoints);
// The end of a wait of `t` (nothing: no end).
clock_type::time_point deadline_after(std::optional<std::chrono::milliseconds> t);
// The next slice of a wait that ends at `deadline` (at most wait_slice).
std::chrono::milliseconds slice_until(clock_type::time_point deadline);

// ---- references dropped by ZeroMQ's threads --------------------------------

// A keeper owning one reference to `o` (taken here). ZeroMQ releases it on
// its own thread, which must not touch Python objects: the reference is
// queued and dropped by the interpreter's main thread soon after (a
// pending call) or by the next call into this module.
tenbin::buffer::keeper_type python_keeper(PyObject* o);
// Drops the queued references; the GIL is held.
void drain_deferred();
// At exit: drops the queued references, and leaves those released later
// (never a call into a dying interpreter).
void finalize_deferred();

// ---- notices ---------------------------------------------------------------

// What a connection says once (connection_options::on_notice), from any
// thread, kept until a call holding the GIL hands it to Python.
class notices {
public:
    // The callback for connection_options::on_notice.
    std::function<void(const std::string&)> collector();
    // Calls `to(message)` for each notice kept; the GIL is held.
    void emit(const py::object& to);

private:
    struct queue {
        std::mutex mutex;
        std::vector<std::string> messages;
    };
    std::shared_ptr<queue> queue_ = std::make_shared<queue>();
};

// ---- areas -----------------------------------------------------------------

void bind_codec(py::module_& m);
void bind_sockets(py::module_& m);
void bind_options(py::module_& m);
void bind_connection(py::module_& m);
void bind_loader(py::module_& m);
void bind_pool(py::module_& m);
void bind_convert(py::module_& m);
void bind_metrics(py::module_& m);

}  // namespace tenbin_py
