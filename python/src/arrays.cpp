#include "arrays.hpp"

#include <tenbin/dtype.hpp>

#include <array>
#include <cstring>
#include <limits>

namespace tenbin_py {

namespace {

std::vector<py::dtype>& numpy_dtypes() {  // by tenbin::dtype, little endian; never destroyed
    static auto* v = new std::vector<py::dtype>();
    return *v;
}

py::module_& numpy() {
    static auto* m = new py::module_(py::module_::import("numpy"));
    return *m;
}

constexpr std::size_t no_index = std::numeric_limits<std::size_t>::max();
constexpr const char* format_dtypes = "the format carries f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8";

std::string item_name(std::size_t index) {
    return index == no_index ? std::string("the array") : "item " + std::to_string(index);
}

std::string a_or_an(const std::string& noun) {
    return (noun.find_first_of("aeiouAEIOU") == 0 ? "an " : "a ") + noun;
}

// "int", "numpy.ndarray", "torch.Tensor": the type of `obj` (or `obj` if a type).
std::string type_name(py::handle obj) {
    const py::handle type = PyType_Check(obj.ptr()) ? obj : py::type::handle_of(obj);
    const std::string module = py::str(type.attr("__module__"));
    const std::string name = py::str(type.attr("__qualname__"));
    return module == "builtins" ? name : module + "." + name;
}

// `obj` as a NumPy array, or BadArgument saying why it cannot be one.
py::array as_array(py::handle obj, std::size_t index) {
    try {
        return numpy().attr("asarray")(obj);
    } catch (py::error_already_set& e) {
        const std::string numpy_said = type_name(e.type()) + ": " + py::str(e.value()).cast<std::string>();
        if (py::hasattr(obj, "dtype"))  // a torch.bfloat16 tensor, say
            raise_error(tenbin::errc::bad_argument,
                        item_name(index) + ": dtype " + py::str(obj.attr("dtype")).cast<std::string>() +
                            " has no tenbin code (" + format_dtypes + "; convert it first, e.g. .float()); "
                            "NumPy cannot hold it: " + numpy_said);
        if (e.matches(PyExc_ValueError) && numpy_said.find("inhomogeneous") != std::string::npos)
            raise_error(tenbin::errc::bad_argument,
                        item_name(index) + ": a ragged nested list (rows of different lengths) is not an array");
        raise_error(tenbin::errc::bad_argument,
                    item_name(index) + ": " + a_or_an(type_name(obj)) + " is not an array: " + numpy_said);
    }
}

// The tenbin buffer `a` views whole, when this module made `a` (received,
// decoded, mapped, or from a pool); null otherwise. `sendable`: the buffer
// may go zero-copy (nobody refills it: read-only, or a pool's).
constexpr const char* buffer_capsule = "tenbin.buffer";
constexpr const char* pool_capsule = "tenbin.pool";

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

tenbin::tensor tensor_at(py::handle obj, hold how, std::vector<py::array>& keep, std::size_t index) {
    py::array a = py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj) : as_array(obj, index);
    const tenbin::dtype t = dtype_of(a.dtype(), index == no_index ? "" : item_name(index) + ": ");
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

// What a list of arrays must not be: one array (iterating it would send its
// rows as tensors), a dict (its keys), a string (its characters).
void check_list(const py::handle& list) {
    if (PyList_CheckExact(list.ptr()) || PyTuple_CheckExact(list.ptr())) return;
    const auto refuse = [&](const std::string& what, const std::string& instead) {
        raise_error(tenbin::errc::bad_argument, "expected a list of arrays, got " + a_or_an(what) + ": " + instead);
    };
    if (py::isinstance<py::array>(list) || py::hasattr(list, "__array_interface__") || py::hasattr(list, "__dlpack__")) {
        std::string shape = py::hasattr(list, "shape") ? " of shape " + py::str(list.attr("shape")).cast<std::string>() : "";
        refuse("single " + type_name(list) + shape, "to send one tensor, send [array]");
    }
    static auto* mapping = new py::object(py::module_::import("collections.abc").attr("Mapping"));
    if (py::isinstance(list, *mapping))
        refuse(type_name(list),
               "a message carries a list of tensors, not keys (send list(sample.values()), and name the tensors "
               "with infos if need be)");
    if (PyUnicode_Check(list.ptr()) || PyBytes_Check(list.ptr()) || PyByteArray_Check(list.ptr()))
        refuse(type_name(list), "send a list of arrays");
    if (!py::isinstance<py::iterable>(list)) refuse(type_name(list), "send a list of arrays");
}

}  // namespace

void init_arrays() {
    for (tenbin::dtype t : tenbin::all_dtypes)
        numpy_dtypes().push_back(py::dtype(std::string("<") + std::string(tenbin::code(t))));
}

tenbin::dtype dtype_of(const py::dtype& d, const std::string& who) {
    const char kind = d.kind();
    if (kind == 'f' || kind == 'i' || kind == 'u') {
        const std::string c = std::string(1, kind) + std::to_string(d.itemsize());
        if (auto t = tenbin::parse_dtype(c)) return *t;
    }
    const std::string hint = kind == 'O'   ? "; this is an array of Python objects: a ragged nested list, or lists of tensors"
                             : kind == 'b' ? "; send booleans as u1"
                                           : "";
    raise_error(tenbin::errc::bad_argument, who + "dtype " + py::str(static_cast<py::handle>(d)).cast<std::string>() +
                                                " has no tenbin code (" + format_dtypes + hint + ")");
}

tenbin::tensor tensor_of(py::handle obj, hold how, std::vector<py::array>& keep) {
    return tensor_at(obj, how, keep, no_index);
}

std::optional<std::vector<std::string>> strings_arg(const py::handle& value, const char* keyword) {
    if (value.is_none()) return std::nullopt;
    if (py::isinstance<py::str>(value) || !py::isinstance<py::iterable>(value))
        raise_error(tenbin::errc::bad_argument, std::string(keyword) + " must be a list of strings, one per tensor");
    std::vector<std::string> out;
    for (py::handle h : value) {
        if (!py::isinstance<py::str>(h))
            raise_error(tenbin::errc::bad_argument, std::string(keyword) + " must be a list of strings, not of " +
                                                        type_name(h));
        out.push_back(h.cast<std::string>());
    }
    return out;
}

input_list inputs(const py::handle& list, hold how, const py::object& infos) {
    check_list(list);
    input_list in;
    std::size_t i = 0;
    for (py::handle h : list) in.tensors.push_back(tensor_at(h, how, in.arrays, i++));
    if (auto names = strings_arg(infos, "infos")) in.tensors = tenbin::with_infos(in.tensors, *names);
    return in;
}

// Made with NumPy's C API directly: pybind11's generic array path (shape
// and stride vectors, flag fix-ups) shows per small message.
py::array array_of(const tenbin::tensor& t, bool pool) {
    const py::dtype& dt = numpy_dtypes()[static_cast<int>(t.dtype())];
    const auto& shape = t.shape();
    // NumPy's arrays have at most 32 dimensions (64 from NumPy 2 on); the
    // limits may let more through (max_rank raised).
    const auto too_many = [&] {
        raise_error(tenbin::errc::limit_exceeded, "a tensor of rank " + std::to_string(shape.size()) +
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

py::object decoded(std::vector<tenbin::tensor>&& tensors, const py::object& infos) {
    py::list arrays = arrays_of(tensors);
    if (py::isinstance<py::bool_>(infos) && infos.cast<bool>())
        return py::make_tuple(arrays, py::cast(tenbin::infos_of(tensors)));
    return arrays;
}

tenbin::decode_options decode_opts(const py::object& infos) {
    tenbin::decode_options o;
    if (!infos.is_none() && !py::isinstance<py::bool_>(infos)) o.expect_infos = strings_arg(infos, "infos");
    return o;
}

tenbin::buffer buffer_of(py::handle obj) {
    py::object view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
    if (!view) throw py::error_already_set();
    Py_buffer* pb = PyMemoryView_GET_BUFFER(view.ptr());
    if (!PyBuffer_IsContiguous(pb, 'C')) raise_error(tenbin::errc::bad_argument, "the bytes must be contiguous");
    const bool writable = !pb->readonly;
    if (pb->len == 0) return tenbin::buffer();
    return tenbin::buffer::share(python_keeper(view.ptr()),
                                 {static_cast<std::byte*>(pb->buf), static_cast<std::size_t>(pb->len)}, writable);
}

}  // namespace tenbin_py
