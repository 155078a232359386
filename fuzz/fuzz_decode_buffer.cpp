// libFuzzer target: decode_buffer over arbitrary bytes (the single-part and
// .ten form). A decoded buffer must re-encode to a buffer of the input's
// size (less a trailing position chunk) that decodes to the same tensors.
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
    // The same size, less a trailing position chunk (a numbered message's),
    // which decode_buffer sets aside: the input without it decodes alike.
    if (again.size() != size) {
        bool same = false;
        try {
            same = again.size() < size && tenbin::decode_buffer(input.first(again.size())) == tensors;
        } catch (const tenbin::error&) {
        }
        if (!same) fuzz::fail("re-encoded size differs from the input, by more than a position chunk");
    }
    if (tenbin::decode_buffer(again) != tensors) fuzz::fail("re-encoded buffer decodes differently");
    return 0;
}
