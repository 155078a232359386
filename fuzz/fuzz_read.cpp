// libFuzzer target: the stream reader, `tenbin::read`, over a memory_source
// and over sources that return short reads and may not know their size.
//
// Input: one mode byte, then the stream.
//   bits 0-1  source: 0 memory_source; 1 short reads, size unknown;
//             2 short reads, size known; 3 one byte per read, size unknown
//   bit 2     small limits instead of the defaults
//   bit 3     read in calls of at most 3 tensors (read_options::count)
// Property: without count, one read succeeds exactly when
// decode_buffer accepts the same bytes, and gives the same tensors.
#include "common.hpp"
#include "../tests/piecewise_source.hpp"

#include <tenbin/io.hpp>

#include <algorithm>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t mode = data[0];
    const tenbin::bytes_view stream(reinterpret_cast<const std::byte*>(data + 1), size - 1);

    tenbin::memory_source mem(stream);
    // In short, irregular pieces, or one byte at a time; knowing its size or not.
    test_support::piecewise_source shorts(stream, (mode & 3) == 2,
                                          (mode & 3) == 3 ? std::initializer_list<std::size_t>{1}
                                                          : std::initializer_list<std::size_t>{1, 3, 7, 64, 5, 4096, 2, 17});
    tenbin::source& src = (mode & 3) == 0 ? static_cast<tenbin::source&>(mem) : shorts;

    tenbin::read_options opt;
    if (mode & 4) opt.decode.limits = fuzz::small_limits();
    const bool batched = (mode & 8) != 0;
    if (batched) opt.count = 3;

    std::vector<tenbin::tensor> all;
    bool ok = true;
    try {
        // Bounded: each call but the last consumes at least one chunk.
        for (std::size_t calls = 0; calls <= size; ++calls) {
            auto part = tenbin::read(src, opt);
            if (part.empty()) break;
            if (part.size() > (batched ? 3u : opt.decode.limits.max_tensors)) fuzz::fail("read returned too many tensors");
            all.insert(all.end(), part.begin(), part.end());
            if (!batched) {
                // A read without max_tensors reads to the end.
                if (!tenbin::read(src, opt).empty()) fuzz::fail("a second read found more tensors");
                break;
            }
        }
    } catch (const tenbin::error& e) {
        fuzz::check_error(e);
        ok = false;
    }
    for (const auto& t : all)
        if (!t.data().aligned_to(tenbin::buffer_alignment)) fuzz::fail("read storage is not 64-byte aligned");
    if (batched) return 0;

    tenbin::decode_options dopt;
    dopt.limits = opt.decode.limits;
    try {
        const auto decoded = tenbin::decode_buffer(stream, dopt);
        if (!ok) fuzz::fail("read refused what decode_buffer accepts");
        if (decoded != all) fuzz::fail("read and decode_buffer disagree");
    } catch (const tenbin::error& e) {
        fuzz::check_error(e);
        if (ok) fuzz::fail("read accepted what decode_buffer refuses:", e.what());
    }
    return 0;
}
