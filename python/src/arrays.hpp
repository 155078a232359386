// Arrays in and out: lists of arrays become tensors (borrowed, or kept
// alive by a reference), tensors become NumPy arrays viewing their bytes,
// whose base keeps those bytes alive. Every format rule stays in the
// library.
#pragma once

#include "common.hpp"

#include <pybind11/numpy.h>

#include <tenbin/codec.hpp>
#include <tenbin/tensor.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tenbin_py {

// The element type of NumPy dtype `d`; BadArgument ("no tenbin code") for
// what the format cannot carry, its message starting with `who`.
tenbin::dtype dtype_of(const py::dtype& d, const std::string& who = "");

// How an array becomes a tensor.
enum class hold {
    borrow,  // the bytes are used only during the call (encoders copy them)
    send,    // zero-copy when safe: read-only arrays and our own copies are
             // kept alive by a reference; writable arrays are borrowed, which
             // the transports copy (a refilled array is never sent corrupted)
    keep,    // always kept alive by a reference (the result refers to it)
};

// The arrays of one call, converted to tensors; the arrays stay referenced
// here until the call returns.
struct input_list {
    std::vector<tenbin::tensor> tensors;
    std::vector<py::array> arrays;
};

// One array (or anything NumPy makes one of) as a tensor.
tenbin::tensor tensor_of(py::handle obj, hold how, std::vector<py::array>& keep);
// A list (or tuple, or other iterable) of arrays as tensors, with infos.
// A single array, a dict or a string where the list belongs raise
// BadArgument, as does an item NumPy cannot make an array of.
input_list inputs(const py::handle& list, hold how, const py::object& infos = py::none());

// A NumPy array viewing `t`'s bytes; its base keeps them alive. Writable
// only when the tensor's bytes are. `pool`: marks the array as a pool
// block's, which is sent without a copy although writable.
py::array array_of(const tenbin::tensor& t, bool pool = false);
py::list arrays_of(const std::vector<tenbin::tensor>& tensors);

// tensorcom's `infos` argument of the decoders: False or None gives the
// list, True gives (list, infos), a list of infos must match.
py::object decoded(std::vector<tenbin::tensor>&& tensors, const py::object& infos);
tenbin::decode_options decode_opts(const py::object& infos);

// Bytes of any buffer-protocol object, kept alive (its export held) while
// a tensor uses them.
tenbin::buffer buffer_of(py::handle obj);

// An optional list of strings (infos), named `keyword` in errors.
std::optional<std::vector<std::string>> strings_arg(const py::handle& value, const char* keyword);

// Registers the NumPy dtypes of the format; at import.
void init_arrays();

}  // namespace tenbin_py
