// tenbin's Python extension, `tenbin._tenbin`: a thin layer over the public
// C++ API, bound one area per file (bind_*.cpp). The package's Python
// modules add Python's conventions on top.
#include "arrays.hpp"

#include <tenbin/buffer.hpp>
#include <tenbin/config.hpp>

namespace py = pybind11;

PYBIND11_MODULE(_tenbin, m) {
    using namespace tenbin_py;
    m.doc() = "tenbin's C++ core (internal; use the tenbin package)";
    m.attr("__version__") = TENBIN_VERSION;
    register_errors();
    init_arrays();

    m.def("drain", &drain_deferred);
    // References ZeroMQ released are dropped by the next call; the last
    // ones before the interpreter goes, and none after.
    py::module_::import("atexit").attr("register")(py::cpp_function(&finalize_deferred));
    m.def("reuse_large_allocations", [] { return tenbin::reuse_large_allocations(); },
          "Makes glibc keep large freed blocks for reuse instead of returning them to\n"
          "the system, so that receiving large batches does not page-fault every\n"
          "frame in afresh (tenbin::reuse_large_allocations). Process-wide: it\n"
          "changes malloc's settings for the whole interpreter, and works best\n"
          "called early, before threads start. A Loader calls it unless given\n"
          "reuse_allocations=False; importing tenbin does not. Returns False\n"
          "where unsupported.");

    bind_codec(m);
    bind_sockets(m);
    bind_options(m);
    bind_connection(m);
    bind_loader(m);
    bind_pool(m);
    bind_convert(m);
    bind_metrics(m);
}
