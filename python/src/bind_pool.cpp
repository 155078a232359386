// TensorPool: tenbin::tensor_pool handing out writable arrays that are sent
// without a copy.
#include "arrays.hpp"
#include "connection.hpp"

#include <tenbin/pool.hpp>

namespace tenbin_py {

namespace {

struct py_pool {
    tenbin::tensor_pool pool;
    std::optional<std::chrono::milliseconds> wait;

    static tenbin::pool_options options(std::size_t max_bytes, std::size_t max_buffers) {
        tenbin::pool_options o;
        o.max_bytes = max_bytes;
        o.max_buffers = max_buffers;
        o.wait = 0ms;  // acquire() waits, in slices
        return o;
    }
    py_pool(std::size_t max_bytes, std::size_t max_buffers, const py::object& timeout)
        : pool(options(max_bytes, max_buffers)), wait(seconds_arg(timeout, "timeout")) {}

    // A writable array on a pool block. Waits without the GIL, in slices,
    // while the pool is exhausted.
    py::array acquire(const std::vector<std::int64_t>& shape, const py::object& dt, const std::string& info,
                      const py::object& timeout) {
        drain_deferred();
        const tenbin::dtype t = dtype_of(py::dtype::from_args(dt));
        const auto limit = timeout.is_none() ? wait : seconds_arg(timeout, "timeout");
        const auto deadline = deadline_after(limit);
        const tenbin::shape_t dims(shape.begin(), shape.end());
        for (;;) {
            const auto slice = slice_until(deadline);
            auto x = without_gil([&] { return pool.try_acquire(t, dims, info, slice); });
            if (x) return array_of(*x, true);
            check_signals();
            drain_deferred();  // references ZeroMQ let go of may hold pool blocks
            if (clock_type::now() >= deadline) {
                const auto st = pool.stats();
                raise_error(tenbin::errc::timeout, "the tensor pool stayed exhausted for " + seconds_text(limit) + ": " +
                                                       std::to_string(st.in_use) + " blocks (" +
                                                       std::to_string(st.in_use_bytes) +
                                                       " bytes) are still held by arrays or ZeroMQ frames");
            }
        }
    }

};

}  // namespace

py::dict pool_stats_dict(const tenbin::pool_stats& st) {
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

void bind_pool(py::module_& m) {
    py::class_<py_pool>(m, "TensorPool")
        .def(py::init<std::size_t, std::size_t, py::object>())
        .def("acquire", &py_pool::acquire)
        .def("trim", [](py_pool& p) { without_gil([&] { p.pool.trim(); }); })
        .def("stats", [](const py_pool& p) { return pool_stats_dict(p.pool.stats()); });
}

}  // namespace tenbin_py
