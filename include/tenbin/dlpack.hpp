// tenbin: DLPack exchange (DLPack 0.6, `dlpack/dlpack.h`), both ways
// without copying tensor data.
//
// DLPack is how NumPy, PyTorch, JAX, CuPy and others hand each other arrays:
// a `DLManagedTensor` carries a pointer, shape, strides and dtype, plus a
// deleter its consumer calls once when done. Here a tenbin `tensor` maps to
// a compact (C-contiguous), CPU, single-lane tensor of one of the format's
// dtypes; anything else is refused with `error(errc::unsupported)`.
//
// The tensor's info (its name) has no place in DLPack: `to_dlpack` drops it
// and `from_dlpack` takes it as an argument.
#pragma once

#include <tenbin/config.hpp>
#if !TENBIN_HAS_DLPACK
#error "this tenbin was built without DLPack (-Ddlpack=disabled, or no dlpack/dlpack.h found)"
#endif

#include <tenbin/tensor.hpp>

#include <dlpack/dlpack.h>

#include <memory>
#include <string>

TENBIN_API_BEGIN
namespace tenbin {

/// The DLPack type of a dtype: f2 -> {kDLFloat, 16, 1}, i4 -> {kDLInt, 32,
/// 1}, u4 -> {kDLUInt, 32, 1}, ... Never throws.
[[nodiscard]] DLDataType to_dlpack_dtype(dtype t) noexcept;

/// The dtype of a DLPack type. Throws `error(errc::unsupported)` naming the
/// type for what the format cannot carry: bfloat16, complex, opaque
/// handles, bool (code 6 of later DLPack versions), bit sizes other than
/// the format's (float 16/32/64, int and uint 8/16/32/64), lanes != 1.
[[nodiscard]] dtype from_dlpack_dtype(DLDataType t);

/// Exports `t` as a DLPack tensor without copying its bytes.
///
/// Lifetimes: the returned object holds a copy of `t` (and so a reference
/// to its bytes: a received frame, a file mapping, a heap block) plus the
/// shape and strides arrays it points to. The consumer calls its `deleter`
/// exactly once, from any thread, which drops that reference; until then
/// the bytes stay valid even if every other copy of `t` is gone. Strides are
/// given explicitly (C order, in elements), the device is {kDLCPU, 0}, and
/// `byte_offset` is 0.
///
/// DLPack 0.6 has no read-only flag: a consumer must not write to tensors
/// whose bytes are read-only (`!t.data().writable()`: received frames,
/// mappings, borrowed memory; writing to a mapping faults) or shared
/// (`!t.data().exclusive()`: ZeroMQ may still be sending them). Export a
/// `tensor::copy(t)`, or a tensor after `t.mutable_bytes()`, to hand out memory
/// the consumer may write.
///
/// Throws std::bad_alloc only; `t` is unchanged either way. Thread-safe:
/// it only copies `t`.
[[nodiscard]] DLManagedTensor* to_dlpack(const tensor& t);

/// Imports a DLPack tensor without copying its bytes: the result's buffer
/// is the DLPack memory (`data + byte_offset`), and `mt->deleter(mt)` runs
/// exactly once when the last tensor or buffer referring to it is dropped,
/// on whichever thread drops it: possibly a ZeroMQ I/O thread after a
/// zero-copy `zsend_multipart`. The deleter must therefore be callable
/// from any thread and must not throw. A null `deleter` is allowed (the
/// producer then keeps the memory alive by other means).
///
/// Accepted: device kDLCPU (or kDLCUDAHost / kDLROCMHost pinned host
/// memory), the format's dtypes with lanes == 1, and C-contiguous layout:
/// `strides` null, or equal to the C-order strides in elements except on
/// dimensions of size 1 (whose stride does not matter); any strides for a
/// tensor with no elements. `info` becomes the tensor's info.
///
/// Errors: `error(errc::unsupported)` for another device, dtype, a
/// non-contiguous layout or a rank over `max_supported_rank`;
/// `error(errc::bad_argument)` for a null `mt`, a negative rank or
/// dimension, a shape of more bytes than memory can hold, a null shape or
/// data pointer where one is needed, or an info the format cannot carry.
/// On every error (and on
/// std::bad_alloc) the caller keeps ownership of `mt`: its deleter has not
/// been called, and the caller must still call it.
///
/// The bytes count as writable (DLPack 0.6 cannot say otherwise), so
/// `mutable_values` writes them in place while this tensor is their only
/// holder. The exception is a tensor `to_dlpack` made, whose bytes stay as
/// writable as they were (read-only for a mapping or a received frame:
/// `mutable_values` then copies).
[[nodiscard]] tensor from_dlpack(DLManagedTensor* mt, std::string info = {});

/// Calls a DLPack tensor's deleter on destruction, for holding one that
/// has not been handed on yet (e.g. `dlpack_ptr p(to_dlpack(t))`).
struct dlpack_deleter {
    /// Calls `mt->deleter(mt)` unless `mt` or its deleter is null.
    void operator()(DLManagedTensor* mt) const noexcept {
        if (mt && mt->deleter) mt->deleter(mt);
    }
};
/// An owning pointer to a DLPack tensor; `release()` it to hand it on.
using dlpack_ptr = std::unique_ptr<DLManagedTensor, dlpack_deleter>;

}  // namespace tenbin
TENBIN_API_END
