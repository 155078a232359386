// tenbin's Python extension: a thin layer over the public C++ API. Arrays
// become tensors (borrowed, or kept alive by a reference), tensors become
// NumPy arrays viewing their bytes; every format rule stays in the library.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tenbin/tenbin.hpp>
#if TENBIN_HAS_DLPACK
#include <tenbin/dlpack.hpp>
#endif
#if __has_include(<tenbin/pool.hpp>)
#include <tenbin/pool.hpp>
#include <tenbin/security.hpp>
#define TENBIN_PY_POOL 1
#endif

#include <zmq.h>

#include <netdb.h>
#include <sys/un.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;
// Blocking waits run in slices this long, checking for signals in between,
// so that Ctrl-C raises KeyboardInterrupt within about this time.
constexpr auto wait_slice = 50ms;

// ---- Python references dropped without the GIL ------------------------
//
// A sent array is kept alive by a reference that ZeroMQ drops on its own
// thread. That thread must not touch Python objects: it queues the object
// here and asks the interpreter (Py_AddPendingCall, which needs no GIL) to
// drop the queue on its main thread soon; every call into this module
// drops it too. Once exit began (atexit), queued references are left: a
// leak at exit, never a call into a dying interpreter.
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

void drain_deferred();

int drain_pending(void*) {
    drain_deferred();
    return 0;
}

void defer_decref(PyObject* o) noexcept {
    auto& d = deferred();
    try {
        // Under the lock: finalize() sets `finalizing` under it, so no
        // pending call is added once exit began.
        std::lock_guard lock(d.mutex);
        const bool first = d.objects.empty();
        d.objects.push_back(o);
        d.any.store(true, std::memory_order_release);
        if (first && !d.finalizing.load()) Py_AddPendingCall(&drain_pending, nullptr);  // may fail: a later call drains
    } catch (...) {
        // Out of memory: leaking the object is the only safe choice.
    }
}

// Drops queued references; the GIL is held.
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

// A keeper owning one reference to `o` (taken here), dropped as above.
tenbin::buffer::keeper_type python_keeper(PyObject* o) {
    Py_INCREF(o);
    return tenbin::buffer::keeper_type(o, [](const void* p) { defer_decref(const_cast<PyObject*>(static_cast<const PyObject*>(p))); });
}

// ---- errors --------------------------------------------------------------

py::object& error_classes() {  // errc name -> class, from tenbin._errors
    static auto* m = new py::object();
    return *m;
}

[[noreturn]] void raise_error(const std::string& errc_name, const std::string& message) {
    py::object cls = error_classes().attr("get")(errc_name);
    // A class the Python side does not know yet: still a tenbin.Error.
    if (cls.is_none()) cls = py::module_::import("tenbin._errors").attr("Error");
    py::object e = cls(message, errc_name);
    PyErr_SetObject(cls.ptr(), e.ptr());
    throw py::error_already_set();
}

void check_signals() {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// ---- dtypes --------------------------------------------------------------

std::vector<py::dtype>& numpy_dtypes() {  // by tenbin::dtype, little endian
    static auto* v = new std::vector<py::dtype>();
    return *v;
}

tenbin::dtype dtype_of(const py::dtype& d) {
    const char kind = d.kind();
    if (kind == 'f' || kind == 'i' || kind == 'u') {
        const std::string c = std::string(1, kind) + std::to_string(d.itemsize());
        if (auto t = tenbin::parse_dtype(c)) return *t;
    }
    raise_error("bad_argument", "dtype " + py::str(static_cast<py::handle>(d)).cast<std::string>() +
                                    " has no tenbin code (the format carries f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8)");
}

// ---- arrays in -----------------------------------------------------------

// The name of the capsules that hold the buffer of an array this module made
// (the array's base).
constexpr const char* buffer_capsule = "tenbin.buffer";
// The same for a TensorPool's arrays: writable, and yet sent without a copy
// (a pool hands out a block again only once every holder released it).
constexpr const char* pool_capsule = "tenbin.pool";

// The tenbin buffer `a` views whole, when this module made `a` (received,
// decoded, mapped, or from a TensorPool); null otherwise. `sendable`: the
// buffer may go zero-copy (nobody refills it: read-only, or a pool's).
const tenbin::buffer* own_buffer(const py::array& a, bool& sendable, bool& pool_block) {
    PyObject* base = py::detail::array_proxy(a.ptr())->base;
    if (!base) return nullptr;
    const bool pool = PyCapsule_IsValid(base, pool_capsule);
    if (!pool && !PyCapsule_IsValid(base, buffer_capsule)) return nullptr;
    auto* b = static_cast<const tenbin::buffer*>(PyCapsule_GetPointer(base, pool ? pool_capsule : buffer_capsule));
    sendable = pool || !b->writable();
    pool_block = pool;
    if (static_cast<const void*>(b->data()) != a.data() || static_cast<std::size_t>(a.nbytes()) != b->size() ||
        !(a.flags() & py::array::c_style))
        return nullptr;
    return b;
}

// How an array becomes a tensor.
enum class hold {
    borrow,  // the bytes are used only during the call (encoders copy them)
    send,    // zero-copy when safe: read-only arrays and our own copies are
             // kept alive by a reference; writable arrays are borrowed, which
             // the transports copy (a refilled array is never sent corrupted)
    keep,    // always kept alive by a reference (the result refers to it)
};

// The arrays of one call, converted to tensors. The converted arrays stay
// referenced here until the call returns.
struct input_list {
    std::vector<tenbin::tensor> tensors;
    std::vector<py::array> arrays;
};

// True when nobody can write to `a`'s bytes through NumPy: it and every
// array it views are read-only. (A read-only view of a writable array is
// not: its owner may refill it while ZeroMQ still sends it.)
bool unchangeable(const py::array& a) {
    if (a.writeable()) return false;
    for (PyObject* o = py::detail::array_proxy(a.ptr())->base; o && py::isinstance<py::array>(py::handle(o));
         o = py::detail::array_proxy(o)->base)
        if (py::detail::array_proxy(o)->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_) return false;
    return true;
}

py::module_& numpy() {
    static auto* m = new py::module_(py::module_::import("numpy"));
    return *m;
}

tenbin::tensor tensor_of(py::handle obj, hold how, std::vector<py::array>& keep) {
    py::array a = py::array::ensure(obj);
    if (!a) throw py::error_already_set();
    const tenbin::dtype t = dtype_of(a.dtype());
    bool ours = false;
    // Logical C order, little endian: what the format carries.
    const bool little = py::detail::array_descriptor_proxy(a.dtype().ptr())->byteorder != '>';
    if (!little || !(a.flags() & py::array::c_style)) {
        a = numpy().attr("ascontiguousarray")(a, numpy_dtypes()[static_cast<int>(t)]).cast<py::array>();
        ours = true;
    }
    tenbin::shape_t shape(a.shape(), a.shape() + a.ndim());
    const auto size = static_cast<std::size_t>(a.nbytes());
    auto* data = static_cast<std::byte*>(const_cast<void*>(a.data()));
    bool sendable = false, pool_block = false;
    const tenbin::buffer* own = ours ? nullptr : own_buffer(a, sendable, pool_block);
    tenbin::buffer b;
    if (size == 0) {
        b = tenbin::buffer();
    } else if (own && (how != hold::send || sendable)) {
        b = *own;  // shares the frame, mapping or pool block: sent without a copy
        // A pool array sent without a copy becomes read-only: refilling it
        // for the next message (which would change bytes ZeroMQ still
        // sends) fails at once instead. Acquire a new one.
        if (pool_block && how == hold::send)
            py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    } else if (how == hold::keep || (how == hold::send && (ours || unchangeable(a)))) {
        b = tenbin::buffer::share(python_keeper(a.ptr()), {data, size}, false);
    } else {
        b = tenbin::buffer::borrow({data, size});
    }
    keep.push_back(std::move(a));
    return tenbin::tensor(t, std::move(shape), std::move(b));
}

std::optional<std::vector<std::string>> infos_arg(const py::object& infos) {
    if (infos.is_none()) return std::nullopt;
    return infos.cast<std::vector<std::string>>();
}

input_list inputs(const py::iterable& list, hold how, const py::object& infos = py::none()) {
    input_list in;
    for (py::handle h : list) in.tensors.push_back(tensor_of(h, how, in.arrays));
    if (auto i = infos_arg(infos)) in.tensors = tenbin::with_infos(in.tensors, *i);
    return in;
}

// ---- tensors out ---------------------------------------------------------

// A NumPy array viewing `t`'s bytes; its base keeps them alive. Read-only
// unless the tensor's bytes are writable (e.g. the pool's). Made with
// NumPy's C API directly: pybind11's generic array path (shape and stride
// vectors, flag fix-ups) shows per small message.
py::array array_of(const tenbin::tensor& t, bool pool = false) {
    const py::dtype& dt = numpy_dtypes()[static_cast<int>(t.dtype())];
    const auto& shape = t.shape();
    // NumPy's arrays have at most 32 dimensions (64 from NumPy 2 on); the
    // limits may let more through (max_rank raised).
    const auto too_many = [&] {
        raise_error("limit_exceeded", "a tensor of rank " + std::to_string(shape.size()) +
                                          ": more dimensions than NumPy's arrays can have");
    };
    std::array<Py_intptr_t, 64> dims{};
    if (shape.size() > dims.size()) too_many();
    std::copy(shape.begin(), shape.end(), dims.begin());
    if (t.nbytes() == 0) return py::array(dt, std::vector<py::ssize_t>(shape.begin(), shape.end()));
    auto* keep = new tenbin::buffer(t.data());
    py::capsule base(keep, pool ? pool_capsule : buffer_capsule, [](PyObject* cap) {
        delete static_cast<tenbin::buffer*>(PyCapsule_GetPointer(cap, PyCapsule_GetName(cap)));
    });
    auto& api = py::detail::npy_api::get();
    // Null strides: C order. The flags: writable or not; NumPy works out
    // contiguity and alignment.
    const int flags = t.data().writable() ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0;
    auto a = py::reinterpret_steal<py::array>(api.PyArray_NewFromDescr_(
        api.PyArray_Type_, dt.inc_ref().ptr(), static_cast<int>(shape.size()), dims.data(), nullptr,
        const_cast<std::byte*>(keep->data()), flags, nullptr));
    if (!a) {
        if (shape.size() > 32 && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            too_many();
        }
        throw py::error_already_set();
    }
    // Steals the reference, also when it fails.
    if (api.PyArray_SetBaseObject_(a.ptr(), base.release().ptr()) != 0) throw py::error_already_set();
    return a;
}

py::list arrays_of(const std::vector<tenbin::tensor>& tensors) {
    py::list out(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i)
        PyList_SET_ITEM(out.ptr(), static_cast<py::ssize_t>(i), array_of(tensors[i]).release().ptr());
    return out;
}

// Python tenbin's `infos` argument of the decoders: False or None gives the
// list, True gives (list, infos), a list of infos must match.
py::object decoded(std::vector<tenbin::tensor>&& tensors, const py::object& infos) {
    py::list arrays = arrays_of(tensors);
    if (py::isinstance<py::bool_>(infos) && infos.cast<bool>())
        return py::make_tuple(arrays, py::cast(tenbin::infos_of(tensors)));
    return arrays;
}

tenbin::decode_options decode_opts(const py::object& infos) {
    tenbin::decode_options o;
    if (!infos.is_none() && !py::isinstance<py::bool_>(infos))
        o.expect_infos = infos.cast<std::vector<std::string>>();
    return o;
}

// Bytes of any buffer-protocol object, kept alive (and its export held) by
// a memoryview for as long as a tensor uses them.
tenbin::buffer buffer_of(py::handle obj) {
    py::object view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
    if (!view) throw py::error_already_set();
    Py_buffer* pb = PyMemoryView_GET_BUFFER(view.ptr());
    if (!PyBuffer_IsContiguous(pb, 'C')) raise_error("bad_argument", "the bytes must be contiguous");
    const bool writable = !pb->readonly;
    if (pb->len == 0) return tenbin::buffer();
    return tenbin::buffer::share(python_keeper(view.ptr()), {static_cast<std::byte*>(pb->buf), static_cast<std::size_t>(pb->len)},
                                 writable);
}

// ---- pyzmq sockets -------------------------------------------------------

zmq::socket_ref socket_of(std::uintptr_t handle) {
    if (handle == 0) raise_error("bad_argument", "the socket is closed");
    return zmq::socket_ref(zmq::from_handle, reinterpret_cast<void*>(handle));
}

int timeout_of(zmq::socket_ref s, int option) {
    int ms = -1;
    std::size_t len = sizeof ms;
    if (zmq_getsockopt(s.handle(), option, &ms, &len) != 0) throw zmq::error_t();
    return ms;
}

// Waits, without the GIL, until `s` has `events` or the socket's own timeout
// (`option`: ZMQ_RCVTIMEO or ZMQ_SNDTIMEO, -1 = forever) passed; checks for
// signals between slices. False on timeout.
bool wait_for(zmq::socket_ref s, short events, int option, clock_type::time_point& deadline, bool& started) {
    if (!started) {
        const int ms = timeout_of(s, option);
        deadline = ms < 0 ? clock_type::time_point::max() : clock_type::now() + std::chrono::milliseconds(ms);
        started = true;
    }
    for (;;) {
        const auto left = deadline == clock_type::time_point::max()
                              ? wait_slice
                              : std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now());
        if (left.count() < 0) return false;
        int rc;
        {
            py::gil_scoped_release nogil;
            zmq_pollitem_t item{s.handle(), 0, events, 0};
            rc = zmq_poll(&item, 1, static_cast<long>(std::min(left, std::chrono::milliseconds(wait_slice)).count()));
        }
        if (rc > 0) return true;
        if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
        check_signals();
        if (left.count() == 0) return false;
    }
}

void zsend(std::uintptr_t handle, const py::iterable& list, const py::object& infos, bool multipart) {
    drain_deferred();
    auto s = socket_of(handle);
    input_list in = inputs(list, multipart ? hold::send : hold::borrow, infos);
    clock_type::time_point deadline;
    bool started = false;
    for (;;) {
        bool sent;
        {
            py::gil_scoped_release nogil;
            tenbin::send_options o;
            o.flags = zmq::send_flags::dontwait;
            sent = multipart ? tenbin::zsend_multipart(s, in.tensors, o) : tenbin::zsend_single(s, in.tensors, o);
        }
        if (sent) return;
        if (!wait_for(s, ZMQ_POLLOUT, ZMQ_SNDTIMEO, deadline, started))
            raise_error("timeout", "the message could not be sent within the socket's send timeout");
    }
}

enum class form { any, single, multipart };

py::object zrecv(std::uintptr_t handle, const py::object& infos, form f) {
    drain_deferred();
    auto s = socket_of(handle);
    tenbin::recv_options o;
    o.flags = zmq::recv_flags::dontwait;
    o.decode = decode_opts(infos);
    clock_type::time_point deadline;
    bool started = false;
    for (;;) {
        std::optional<tenbin::message> m;
        {
            py::gil_scoped_release nogil;
            m = f == form::single ? tenbin::zrecv_single(s, o)
                : f == form::multipart ? tenbin::zrecv_multipart(s, o)
                                       : tenbin::zrecv(s, o);
        }
        if (m) return decoded(std::move(m->tensors), infos);
        if (!wait_for(s, ZMQ_POLLIN, ZMQ_RCVTIMEO, deadline, started))
            raise_error("timeout", "no message arrived within the socket's receive timeout");
    }
}

// ---- streams over Python file objects ------------------------------------

class python_sink final : public tenbin::sink {
public:
    explicit python_sink(py::object stream) : write_(stream.attr("write")) {}
    void write(std::span<const tenbin::bytes_view> pieces) override {
        for (auto p : pieces) {
            if (p.empty()) continue;
            write_(py::memoryview::from_memory(p.data(), static_cast<py::ssize_t>(p.size())));
        }
    }

private:
    py::object write_;
};

class python_source final : public tenbin::source {
public:
    explicit python_source(py::object stream) : stream_(std::move(stream)) {
        if (py::hasattr(stream_, "readinto")) readinto_ = stream_.attr("readinto");
        read_ = stream_.attr("read");
    }
    std::size_t read_some(tenbin::mutable_bytes out) override {
        if (out.empty()) return 0;
        if (readinto_) {
            py::object n = readinto_(py::memoryview::from_memory(out.data(), static_cast<py::ssize_t>(out.size())));
            if (!n.is_none()) return n.cast<std::size_t>();
        }
        py::bytes b = read_(out.size());
        const std::string_view v = b;
        std::memcpy(out.data(), v.data(), std::min(v.size(), out.size()));
        return std::min(v.size(), out.size());
    }

private:
    py::object stream_;
    py::object readinto_;
    py::object read_;
};

// ---- connections and loaders ---------------------------------------------

std::optional<std::chrono::milliseconds> ms_of(const py::object& seconds) {
    if (seconds.is_none()) return std::nullopt;
    const double s = seconds.cast<double>();
    if (s < 0) raise_error("bad_argument", "a timeout must not be negative");
    return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0 + 0.5));
}

// CURVE settings from certificate files, as the tool's --curve-* options.
tenbin::curve_options& curve_of(tenbin::connection_options& o) {
    if (!o.curve) o.curve.emplace();
    return *o.curve;
}

tenbin::connection_options connection_opts(const py::kwargs& kw) {
    tenbin::connection_options o;
    for (auto [k, v] : kw) {
        const std::string key = py::str(k);
        py::object value = py::reinterpret_borrow<py::object>(v);
        if (value.is_none() && key != "expect_infos") continue;
        if (key == "multipart") o.multipart = value.cast<bool>();
        else if (key == "infos") o.infos = value.cast<std::vector<std::string>>();
        else if (key == "expect_infos") { if (!value.is_none()) o.decode.expect_infos = value.cast<std::vector<std::string>>(); }
        else if (key == "allow64") o.allow64 = value.cast<bool>();
        else if (key == "kind") {
            auto k2 = tenbin::parse_socket_kind(value.cast<std::string>());
            if (!k2) raise_error("bad_argument", "unknown socket kind " + value.cast<std::string>());
            o.kind = *k2;
        } else if (key == "bind") o.bind = value.cast<bool>();
        else if (key == "topic") o.topic = value.cast<std::string>();
        else if (key == "max_tensors") o.decode.limits.max_tensors = value.cast<std::size_t>();
        else if (key == "max_rank") o.decode.limits.max_rank = value.cast<std::size_t>();
        else if (key == "max_bytes") o.decode.limits.max_bytes = value.cast<std::uint64_t>();
        else if (key == "send_hwm") o.send_hwm = value.cast<int>();
        else if (key == "recv_hwm") o.recv_hwm = value.cast<int>();
        else if (key == "linger") o.linger = *ms_of(value);
        else if (key == "recv_timeout") o.recv_timeout = ms_of(value);
        else if (key == "send_timeout") o.send_timeout = ms_of(value);
        else if (key == "pub_nodrop") o.pub_nodrop = value.cast<bool>();
        else if (key == "immediate") o.immediate = value.cast<bool>();
        else if (key == "heartbeat") o.heartbeat = ms_of(value);
        else if (key == "stats_horizon") o.stats_horizon = value.cast<std::size_t>();
        else if (key == "curve_cert") curve_of(o).keys = tenbin::load_secret_certificate(py::str(value).cast<std::string>());
        else if (key == "curve_server")
            curve_of(o).server_key = tenbin::load_public_certificate(py::str(value).cast<std::string>());
        else if (key == "curve_allow")
            curve_of(o).allowed_clients = tenbin::load_public_certificates(py::str(value).cast<std::string>());
        else throw py::type_error("unknown connection option '" + key + "'");
    }
    return o;
}

// The user's timeouts are enforced here in slices; the library waits one
// slice at a time.
struct py_connection {
    std::optional<tenbin::connection> conn;
    std::optional<std::chrono::milliseconds> recv_timeout, send_timeout;

    py_connection(std::vector<std::string> urls, const py::kwargs& kw) {
        drain_deferred();
        auto o = connection_opts(kw);
        recv_timeout = o.recv_timeout;
        send_timeout = o.send_timeout;
        o.recv_timeout = wait_slice;
        o.send_timeout = wait_slice;
        o.allow64 = true;  // checked per call (tensorcom's send(allow64=))
        py::gil_scoped_release nogil;
        conn.emplace(std::span<const std::string>(urls), std::move(o));
    }
    tenbin::connection& get() {
        if (!conn) raise_error("bad_argument", "the connection is closed");
        return *conn;
    }
    // More endpoints on the same socket (tensorcom's connect() after the first).
    // The URLs' #topic is parsed by the library; it must be the socket's.
    void add(std::vector<std::string> urls, const std::string& topic) {
        auto& c = get();
        tenbin::url_options uo{c.options().kind, c.options().bind};
        auto eps = tenbin::parse_urls(urls, uo);
        for (const std::string* t : {&topic, static_cast<const std::string*>(&eps.front().topic)})
            if (!t->empty() && *t != c.options().topic)
                raise_error(t == &topic ? "bad_argument" : "bad_url",
                            "the topic '" + *t + "' differs from this connection's '" + c.options().topic +
                                "': one socket has one topic");
        for (const auto& ep : eps) {
            if (ep.kind != c.endpoints().front().kind)
                raise_error("bad_url", ep.address + " is a " + std::string(tenbin::name(ep.kind)) +
                                           " endpoint, but this connection's socket is a " +
                                           std::string(tenbin::name(c.endpoints().front().kind)) + " socket");
            if (ep.bind) c.socket().bind(ep.address);
            else c.socket().connect(ep.address);
        }
    }
    void send(const py::iterable& list, bool allow64) {
        drain_deferred();
        auto& c = get();
        input_list in = inputs(list, c.options().multipart ? hold::send : hold::borrow);
        if (!allow64) tenbin::check_no64(in.tensors);
        const auto deadline = send_timeout ? clock_type::now() + *send_timeout : clock_type::time_point::max();
        for (;;) {
            bool sent;
            {
                py::gil_scoped_release nogil;
                sent = c.send(in.tensors);
            }
            if (sent) return;
            check_signals();
            if (clock_type::now() >= deadline) raise_error("timeout", "the message could not be sent within send_timeout");
        }
    }
    py::list recv(const py::object& timeout) {
        drain_deferred();
        auto& c = get();
        // A message already waiting is taken with the GIL held: releasing
        // and retaking it costs more than such a receive. Not over +shm,
        // whose receive asks the sender on its side channel and waits.
        if (!c.endpoints().front().shm)
            if (auto m = c.try_recv()) return arrays_of(*m);
        const auto t = timeout.is_none() ? recv_timeout : ms_of(timeout);
        const auto deadline = t ? clock_type::now() + *t : clock_type::time_point::max();
        for (;;) {
            std::optional<std::vector<tenbin::tensor>> m;
            {
                py::gil_scoped_release nogil;
                m = c.recv();  // waits one slice at most
            }
            if (m) return arrays_of(*m);
            check_signals();
            if (clock_type::now() >= deadline) raise_error("timeout", "no message arrived within the receive timeout");
        }
    }
    void close() {
        drain_deferred();
        if (!conn) return;
        py::gil_scoped_release nogil;
        conn->close();
        conn.reset();
    }
};

struct py_loader {
    std::optional<tenbin::loader> ld;
    std::optional<std::chrono::milliseconds> timeout;

    py_loader(std::vector<std::string> urls, std::size_t queue_messages, std::uint64_t queue_bytes, bool skip_malformed,
              bool reuse_allocations, const py::kwargs& kw) {
        drain_deferred();
        tenbin::loader_options o;
        o.connection = connection_opts(kw);
        timeout = o.connection.recv_timeout;
        o.connection.recv_timeout.reset();
        o.queue_messages = queue_messages;
        o.queue_bytes = queue_bytes;
        o.skip_malformed = skip_malformed;
        o.reuse_allocations = reuse_allocations;
        py::gil_scoped_release nogil;
        ld.emplace(std::span<const std::string>(urls), std::move(o));
    }
    tenbin::loader& get() {
        if (!ld) raise_error("bad_argument", "the loader is closed");
        return *ld;
    }
    // The next batch, or None once closed and drained.
    py::object next(const py::object& t) {
        drain_deferred();
        auto& l = get();
        // A batch already queued is taken with the GIL held (as
        // Connection.recv). Asked first: next(0ms) on an empty queue costs
        // a timed wait that returns at once, a system call.
        if (l.queued_messages() > 0)
            if (auto m = l.next(0ms)) return arrays_of(*m);
        const auto limit = t.is_none() ? timeout : ms_of(t);
        const auto deadline = limit ? clock_type::now() + *limit : clock_type::time_point::max();
        for (;;) {
            const auto left = deadline == clock_type::time_point::max()
                                  ? wait_slice
                                  : std::max(0ms, std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now()));
            std::optional<std::vector<tenbin::tensor>> m;
            bool timed_out = false;
            {
                py::gil_scoped_release nogil;
                // Nothing back: a timeout, unless the loader is closed and drained.
                m = l.next(std::min<std::chrono::milliseconds>(left, wait_slice));
                timed_out = !m && !l.closed();
            }
            if (!timed_out) {
                if (!m) return py::none();
                return arrays_of(*m);
            }
            check_signals();
            if (clock_type::now() >= deadline) raise_error("timeout", "no batch arrived within the timeout");
        }
    }
    void close() {
        if (!ld) return;
        py::gil_scoped_release nogil;
        ld->close();
    }
    void destroy() {
        if (!ld) return;
        py::gil_scoped_release nogil;
        ld.reset();
    }
};

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

py::list endpoints_list(const std::vector<tenbin::endpoint>& eps) {
    py::list out;
    for (const auto& e : eps) out.append(py::make_tuple(std::string(tenbin::name(e.kind)), e.bind, e.address));
    return out;
}

// ---- the tensor pool -----------------------------------------------------

#ifdef TENBIN_PY_POOL
struct py_pool {
    tenbin::tensor_pool pool;
    std::optional<std::chrono::milliseconds> wait;

    static tenbin::pool_options options(std::size_t max_bytes, std::size_t max_buffers) {
        tenbin::pool_options o;
        o.max_bytes = max_bytes;
        o.max_buffers = max_buffers;
        o.wait = 0ms;  // waits here, in slices
        return o;
    }
    py_pool(std::size_t max_bytes, std::size_t max_buffers, const py::object& timeout)
        : pool(options(max_bytes, max_buffers)), wait(ms_of(timeout)) {}

    // A writable array on a pool block. Waits (without the GIL, in slices
    // that let Ctrl-C through) while the pool is exhausted.
    py::array acquire(const std::vector<std::int64_t>& shape, const py::object& dt, const std::string& info,
                      const py::object& timeout) {
        drain_deferred();
        const tenbin::dtype t = dtype_of(py::dtype::from_args(dt));
        const auto limit = timeout.is_none() ? wait : ms_of(timeout);
        const auto deadline = limit ? clock_type::now() + *limit : clock_type::time_point::max();
        for (;;) {
            const auto left = deadline == clock_type::time_point::max()
                                  ? wait_slice
                                  : std::max(0ms, std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now()));
            std::optional<tenbin::tensor> x;
            {
                py::gil_scoped_release nogil;
                x = pool.try_acquire(t, tenbin::shape_t(shape.begin(), shape.end()), info, std::min(left, std::chrono::milliseconds(wait_slice)));
            }
            if (x) return array_of(*x, true);
            check_signals();
            drain_deferred();  // references ZeroMQ let go of may hold pool blocks
            if (clock_type::now() >= deadline) {
                const auto st = pool.stats();
                raise_error("timeout", "the tensor pool stayed exhausted: " + std::to_string(st.in_use) +
                                           " blocks (" + std::to_string(st.in_use_bytes) +
                                           " bytes) are still held by arrays or ZeroMQ frames");
            }
        }
    }
    py::dict stats() const {
        const auto st = pool.stats();
        py::dict d;
        d["buffers"] = st.buffers;
        d["bytes"] = st.bytes;
        d["in_use"] = st.in_use;
        d["in_use_bytes"] = st.in_use_bytes;
        d["allocations"] = st.allocations;
        d["reuses"] = st.reuses;
        d["waits"] = st.waits;
        return d;
    }
};
#endif

// ---- sctp ----------------------------------------------------------------

struct socket_address {
    sockaddr_storage storage{};
    socklen_t length = 0;
};

socket_address address_of(const py::object& dest, int family) {
    socket_address a;
    if (py::isinstance<py::str>(dest) || py::isinstance<py::bytes>(dest)) {
        const std::string path = py::isinstance<py::str>(dest) ? dest.cast<std::string>() : std::string(dest.cast<py::bytes>());
        sockaddr_un un{};
        if (path.size() >= sizeof un.sun_path) raise_error("bad_argument", "unix socket path too long");
        un.sun_family = AF_UNIX;
        std::memcpy(un.sun_path, path.data(), path.size());
        std::memcpy(&a.storage, &un, sizeof un);
        a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
        return a;
    }
    auto t = dest.cast<py::tuple>();
    const std::string host = t[0].cast<std::string>();
    const std::string port = py::str(t[1]);
    addrinfo hints{};
    hints.ai_family = family;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
        raise_error("bad_argument", "cannot resolve " + host + ": " + gai_strerror(rc));
    std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
    a.length = res->ai_addrlen;
    freeaddrinfo(res);
    return a;
}

// ---- DLPack --------------------------------------------------------------

py::object dlpack_of(const py::array& a) {
#if TENBIN_HAS_DLPACK
    // An array this module made exports its tenbin buffer; any other is
    // exported kept alive by a reference.
    std::vector<py::array> keep;
    tenbin::tensor t = tensor_of(a, hold::keep, keep);
    DLManagedTensor* mt = tenbin::to_dlpack(t);
    return py::capsule(mt, "dltensor", [](PyObject* cap) {
        // Unconsumed: still named "dltensor", so ours to delete.
        if (PyCapsule_IsValid(cap, "dltensor")) {
            auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
            if (m && m->deleter) m->deleter(m);
        } else {
            PyErr_Clear();
        }
    });
#else
    (void)a;
    raise_error("unsupported", "this tenbin was built without DLPack");
#endif
}

}  // namespace

PYBIND11_MODULE(_tenbin, m) {
    m.doc() = "tenbin's C++ core (internal; use the tenbin package)";
    // Before NumPy starts its BLAS threads: glibc fixes its arena limit
    // when the first thread needs an arena, and with a thread arena of its
    // own, libzmq's I/O thread gets every large frame from a fresh mmap
    // (page faults that halve the throughput of 77 MB batches).
    tenbin::reuse_large_allocations();
    error_classes() = py::module_::import("tenbin._errors").attr("_classes");
    for (tenbin::dtype t : tenbin::all_dtypes)
        numpy_dtypes().push_back(py::dtype(std::string("<") + std::string(tenbin::code(t))));

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const tenbin::error& e) {
            raise_error(std::string(tenbin::name(e.code())), e.what());
        } catch (const zmq::error_t& e) {
            raise_error("io_error", std::string("ZeroMQ: ") + e.what());
        }
    });

    m.def("drain", &drain_deferred);
    m.def("finalize", [] {
        drain_deferred();
        std::lock_guard lock(deferred().mutex);
        deferred().finalizing = true;
    });
    m.def("zmq_version", [] {
        int a, b, c;
        zmq_version(&a, &b, &c);
        return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
    });
    m.def("zmq_version_address", [] { return reinterpret_cast<std::uintptr_t>(&zmq_version); });
    m.def("has_dlpack", [] { return bool(TENBIN_HAS_DLPACK); });

    m.def("encode_buffer", [](const py::iterable& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        const std::size_t n = tenbin::encoded_size(in.tensors);
        py::bytearray out(nullptr, 0);
        if (PyByteArray_Resize(out.ptr(), static_cast<py::ssize_t>(n)) != 0) throw py::error_already_set();
        {
            py::gil_scoped_release nogil;
            tenbin::encode_buffer_into(in.tensors, {reinterpret_cast<std::byte*>(PyByteArray_AsString(out.ptr())), n});
        }
        return out;
    });
    m.def("decode_buffer", [](const py::object& buf, const py::object& infos) {
        drain_deferred();
        return decoded(tenbin::decode_buffer(buffer_of(buf), decode_opts(infos)), infos);
    });
    m.def("encode_list", [](const py::iterable& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::keep, infos);
        auto frames = tenbin::encode_list(in.tensors);
        py::list out;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            if (i % 2 == 0) {
                out.append(py::bytes(reinterpret_cast<const char*>(frames[i].data()), frames[i].size()));
            } else {
                const auto& t = in.tensors[i / 2];
                out.append(array_of(tenbin::tensor(tenbin::dtype::u1, {static_cast<std::int64_t>(t.nbytes())}, t.data())));
            }
        }
        return out;
    });
    m.def("decode_list", [](const py::iterable& frames, const py::object& infos) {
        drain_deferred();
        std::vector<tenbin::buffer> bufs;
        for (py::handle h : frames) {
            py::object o = py::reinterpret_borrow<py::object>(h);
            if (py::hasattr(o, "buffer") && !PyObject_CheckBuffer(o.ptr())) o = o.attr("buffer");  // zmq.Frame
            bufs.push_back(buffer_of(o));
        }
        return decoded(tenbin::decode_list(bufs, decode_opts(infos)), infos);
    });
    m.def("write", [](const py::object& stream, const py::iterable& l, const py::object& infos) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        python_sink sink(stream);
        tenbin::write(sink, in.tensors);
    });
    m.def("read", [](const py::object& stream, std::size_t n, const py::object& infos) {
        drain_deferred();
        python_source source(stream);
        tenbin::read_options o;
        o.count = n;
        return decoded(tenbin::read(source, o), infos);
    });
    m.def("save", [](const std::string& path, const py::iterable& l, const py::object& infos, bool nocheck) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        tenbin::file_options o;
        o.nocheck = nocheck;
        py::gil_scoped_release nogil;
        tenbin::save(path, in.tensors, o);
    });
    m.def("load", [](const std::string& path, const py::object& infos, bool nocheck, bool mmap) {
        drain_deferred();
        tenbin::file_options o;
        o.nocheck = nocheck;
        o.decode.expect_infos = decode_opts(infos).expect_infos;
        std::vector<tenbin::tensor> t;
        {
            py::gil_scoped_release nogil;
            t = mmap ? tenbin::load_mmap(path, o) : tenbin::load(path, o);
        }
        return decoded(std::move(t), infos);
    });

    m.def("zsend", &zsend);
    m.def("zrecv", [](std::uintptr_t h, const py::object& infos, const std::string& f) {
        return zrecv(h, infos, f == "single" ? form::single : f == "multipart" ? form::multipart : form::any);
    });

    m.def("sctp_send", [](int fd, const py::object& dest, const py::iterable& l, const py::object& infos, int family) {
        drain_deferred();
        input_list in = inputs(l, hold::borrow, infos);
        std::optional<socket_address> a;
        if (!dest.is_none()) a = address_of(dest, family);
        py::gil_scoped_release nogil;
        if (a) tenbin::sctp_send(fd, reinterpret_cast<const sockaddr*>(&a->storage), a->length, in.tensors);
        else tenbin::sctp_send(fd, in.tensors);
    });
    m.def("sctp_recv", [](int fd, const py::object& infos, std::size_t maxsize) {
        drain_deferred();
        auto opt = decode_opts(infos);
        std::vector<tenbin::tensor> t;
        {
            py::gil_scoped_release nogil;
            t = tenbin::sctp_recv(fd, maxsize, opt);
        }
        return decoded(std::move(t), infos);
    });

    m.def("parse_urls", [](std::vector<std::string> urls, const py::object& kind, const py::object& bind) {
        tenbin::url_options o;
        if (!kind.is_none()) o.kind = tenbin::parse_socket_kind(kind.cast<std::string>());
        if (!bind.is_none()) o.bind = bind.cast<bool>();
        return endpoints_list(tenbin::parse_urls(urls, o));
    });
    m.def("brace_expand", [](const std::string& p) { return tenbin::brace_expand(p); });
    m.def("to_dlpack", &dlpack_of);

    py::class_<py_connection>(m, "Connection")
        .def(py::init<std::vector<std::string>, py::kwargs>())
        .def("add", &py_connection::add)
        .def("send", &py_connection::send)
        .def("recv", &py_connection::recv, py::arg("timeout") = py::none())
        .def("close", &py_connection::close)
        .def("stats", [](py_connection& c) { return stats_dict(c.get().stats()); })
        .def("reset_stats", [](py_connection& c) { c.get().stats().reset(); })
        .def("endpoints", [](py_connection& c) { return endpoints_list(c.get().endpoints()); })
        .def("handle", [](py_connection& c) { return reinterpret_cast<std::uintptr_t>(c.get().socket().handle()); });

#ifdef TENBIN_PY_POOL
    py::class_<py_pool>(m, "TensorPool")
        .def(py::init<std::size_t, std::size_t, py::object>())
        .def("acquire", &py_pool::acquire)
        .def("trim", [](py_pool& p) {
            py::gil_scoped_release nogil;
            p.pool.trim();
        })
        .def("stats", &py_pool::stats);
#endif

    py::class_<py_loader>(m, "Loader")
        .def(py::init<std::vector<std::string>, std::size_t, std::uint64_t, bool, bool, py::kwargs>())
        .def("next", &py_loader::next, py::arg("timeout") = py::none())
        .def("close", &py_loader::close)
        .def("destroy", &py_loader::destroy)
        .def("stats", [](py_loader& l) { return stats_dict(l.get().stats()); })
        .def("queued_messages", [](py_loader& l) { return l.get().queued_messages(); })
        .def("queued_bytes", [](py_loader& l) { return l.get().queued_bytes(); })
        .def("malformed", [](py_loader& l) { return l.get().malformed(); })
        .def("endpoints", [](py_loader& l) { return endpoints_list(l.get().endpoints()); });
}
