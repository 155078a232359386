// DLPack export and import over tensor and buffer; no copy of tensor data.
#include <tenbin/dlpack.hpp>

#include "core/diagnostics.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tenbin {

namespace {

// A DLPack type in words: "float16", "uint8x4", "bool (8 bits)", "type
// code 9 (16 bits)".
std::string describe(DLDataType t) {
    static constexpr const char* numbers[] = {"int", "uint", "float", nullptr, "bfloat", "complex"};
    // Appended, not "code " + std::to_string(...): GCC 12 at -O3 warns
    // (-Wrestrict, wrongly) about a string inserted at the front.
    std::string s;
    if (t.code < std::size(numbers) && numbers[t.code]) {
        s = numbers[t.code];
        s += std::to_string(t.bits);
    } else {
        // Opaque handles, bool (code 6 from DLPack 0.8), codes unknown here.
        if (t.code == kDLOpaqueHandle) {
            s = "opaque handle";
        } else if (t.code == 6) {
            s = "bool";
        } else {
            s = "type code ";
            s += std::to_string(t.code);
        }
        s += " (";
        s += std::to_string(t.bits);
        s += " bits)";
    }
    if (t.lanes != 1) {
        s += 'x';
        s += std::to_string(t.lanes);
    }
    return s;
}

std::string device_name(DLDeviceType d) {
    switch (d) {
    case kDLCUDA: return "CUDA";
    case kDLCUDAManaged: return "CUDA managed memory";
    case kDLOpenCL: return "OpenCL";
    case kDLVulkan: return "Vulkan";
    case kDLMetal: return "Metal";
    case kDLROCM: return "ROCm";
    default: return "device type " + std::to_string(static_cast<int>(d));
    }
}

// What an exported tensor owns: the tensor (so its bytes) and the arrays
// the DLTensor points to. One allocation, freed by the deleter.
struct export_context {
    DLManagedTensor managed{};
    tensor t;
    shape_t shape;    // inline up to rank 6: no allocation of its own
    shape_t strides;
};

void delete_export(DLManagedTensor* self) {
    delete static_cast<export_context*>(self->manager_ctx);
}

// The keeper of an imported tensor's bytes. Armed only once the tensor
// exists, so that a failed import leaves the DLPack tensor to the caller.
struct import_keeper {
    DLManagedTensor* managed = nullptr;
    import_keeper() = default;
    import_keeper(const import_keeper&) = delete;
    import_keeper& operator=(const import_keeper&) = delete;
    ~import_keeper() {
        if (managed && managed->deleter) managed->deleter(managed);
    }
};

}  // namespace

DLDataType to_dlpack_dtype(dtype t) noexcept {
    const auto bits = static_cast<std::uint8_t>(8 * itemsize(t));
    const std::uint8_t code = is_float(t) ? kDLFloat : is_signed(t) ? kDLInt : kDLUInt;
    return DLDataType{code, bits, 1};
}

dtype from_dlpack_dtype(DLDataType t) {
    if (t.lanes != 1)
        throw error(errc::unsupported, "DLPack dtype " + describe(t) + " has " + std::to_string(t.lanes) +
                                           " lanes; tenbin carries only lanes == 1");
    switch (t.code) {
    case kDLFloat:
        if (t.bits == 16) return dtype::f2;
        if (t.bits == 32) return dtype::f4;
        if (t.bits == 64) return dtype::f8;
        break;
    case kDLInt:
        if (t.bits == 8) return dtype::i1;
        if (t.bits == 16) return dtype::i2;
        if (t.bits == 32) return dtype::i4;
        if (t.bits == 64) return dtype::i8;
        break;
    case kDLUInt:
        if (t.bits == 8) return dtype::u1;
        if (t.bits == 16) return dtype::u2;
        if (t.bits == 32) return dtype::u4;
        if (t.bits == 64) return dtype::u8;
        break;
    default:
        break;
    }
    throw error(errc::unsupported, "DLPack dtype " + describe(t) +
                                       " has no tenbin dtype (float 16/32/64, int and uint 8/16/32/64)");
}

DLManagedTensor* to_dlpack(const tensor& t) {
    auto ctx = std::make_unique<export_context>();
    ctx->t = t;
    ctx->shape = t.shape();
    ctx->strides = shape_t(t.ndim(), 1);
    for (std::size_t i = t.ndim(); i-- > 1;) ctx->strides[i - 1] = ctx->strides[i] * ctx->shape[i];

    DLTensor& dl = ctx->managed.dl_tensor;
    // DLPack has no const: read-only bytes are documented as such in the header.
    dl.data = const_cast<std::byte*>(ctx->t.data().data());
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int>(t.ndim());
    dl.dtype = to_dlpack_dtype(t.dtype());
    dl.shape = ctx->shape.data();
    dl.strides = ctx->strides.data();
    dl.byte_offset = 0;
    ctx->managed.manager_ctx = ctx.get();
    ctx->managed.deleter = delete_export;
    return &ctx.release()->managed;
}

tensor from_dlpack(DLManagedTensor* mt, std::string info) {
    if (!mt) throw error(errc::bad_argument, "from_dlpack: null DLManagedTensor");
    const DLTensor& dl = mt->dl_tensor;
    const DLDeviceType dev = dl.device.device_type;
    // Pinned host memory is ordinary CPU memory to read.
    if (dev != kDLCPU && dev != kDLCUDAHost && dev != kDLROCMHost)
        throw error(errc::unsupported, "from_dlpack: tensor on " + device_name(dev) +
                                           "; tenbin reads only CPU memory (copy it to the CPU first)");
    const dtype t = from_dlpack_dtype(dl.dtype);
    if (dl.ndim < 0)
        throw error(errc::bad_argument, "from_dlpack: negative rank " + std::to_string(dl.ndim));
    if (static_cast<std::size_t>(dl.ndim) > max_supported_rank)
        throw error(errc::unsupported, "from_dlpack: rank " + std::to_string(dl.ndim) + " exceeds " +
                                           std::to_string(max_supported_rank));
    if (dl.ndim > 0 && !dl.shape) throw error(errc::bad_argument, "from_dlpack: null shape");
    shape_t shape(dl.shape, dl.shape + dl.ndim);
    // Negative dimensions, overflow.
    const std::uint64_t count = detail::with_context("from_dlpack", [&] { return detail::element_count(shape); });
    // No object is larger than PTRDIFF_MAX bytes; checked before the
    // strides, whose running products then cannot overflow.
    if (count > static_cast<std::uint64_t>(PTRDIFF_MAX) / itemsize(t))
        throw error(errc::bad_argument, "from_dlpack: " + std::to_string(count) + " elements of " +
                                            std::string(code(t)) + " are more bytes than memory can hold");
    const std::uint64_t nbytes = count * itemsize(t);

    // Strides in elements; only what C order gives is accepted. Dimensions
    // of size 1 contribute no step, so their stride is free.
    if (dl.strides && count > 0) {
        std::int64_t expect = 1;
        for (int i = dl.ndim; i-- > 0;) {
            if (shape[i] != 1 && dl.strides[i] != expect)
                throw error(errc::unsupported,
                            "from_dlpack: non-contiguous layout, stride " + std::to_string(dl.strides[i]) +
                                " of dimension " + std::to_string(i) + " should be " + std::to_string(expect) +
                                " for C order (make the tensor contiguous first)");
            expect *= shape[i];
        }
    }
    if (!dl.data && nbytes > 0) throw error(errc::bad_argument, "from_dlpack: null data pointer");
    detail::check_info(info);

    auto* bytes = static_cast<std::byte*>(dl.data);
    if (bytes) bytes += dl.byte_offset;
    // DLPack 0.6 cannot say read-only, but a tensor this library exported
    // can: its bytes stay as writable as they were (a mapping or a received
    // frame must not become writable by a round trip).
    const bool writable =
        mt->deleter != delete_export || static_cast<const export_context*>(mt->manager_ctx)->t.data().writable();
    auto keeper = std::make_shared<import_keeper>();
    buffer data = buffer::share(keeper, {bytes, static_cast<std::size_t>(nbytes)}, writable);
    tensor result(t, std::move(shape), std::move(data), std::move(info));
    // From here on, the last user of the bytes calls the deleter.
    keeper->managed = mt;
    return result;
}

}  // namespace tenbin
