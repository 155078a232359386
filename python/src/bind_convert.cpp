// Conversion for other array libraries: DLPack capsules (torch reads them
// in tenbin/_convert.py).
#include "arrays.hpp"

#if TENBIN_HAS_DLPACK
#include <tenbin/dlpack.hpp>
#endif

namespace tenbin_py {

namespace {

py::object dlpack_of(const py::object& a) {
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
    raise_error(tenbin::errc::unsupported, "this tenbin was built without DLPack");
#endif
}

}  // namespace

void bind_convert(py::module_& m) {
    m.def("to_dlpack", &dlpack_of);
}

}  // namespace tenbin_py
