// libFuzzer target: decode_buffer over arbitrary bytes (the single-part and
// .ten form). A decoded buffer must re-encode to a buffer of the same size
// that decodes to the same tensors.
#include "common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const tenbin::bytes_view input(reinterpret_cast<const std::byte*>(data), size);
    std::vector<tenbin::tensor> tensors;
    bool ok = false;
    try {
        tensors = tenbin::decode_buffer(input);
        ok = true;
    } catch (const tenbin::error& e) {
        fuzz::check_error(e);
    }

    tenbin::decode_options small;
    small.limits = fuzz::small_limits();
    try {
        const auto limited = tenbin::decode_buffer(input, small);
        if (!ok || limited != tensors) fuzz::fail("smaller limits accepted what the defaults refused");
    } catch (const tenbin::error& e) {
        fuzz::check_error(e);
    }
    if (!ok) return 0;

    const tenbin::buffer again = tenbin::encode_buffer(tensors);
    if (again.size() != size) fuzz::fail("re-encoded size differs from the input");
    if (tenbin::decode_buffer(again) != tensors) fuzz::fail("re-encoded buffer decodes differently");
    return 0;
}
