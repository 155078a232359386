// libFuzzer target: decode_list (the multipart form) over frames cut from
// the input. Framing: each frame is a 2-byte little-endian length, then that
// many bytes; the last frame takes what is left when the input runs short.
// Each frame gets its own exact-size heap block, so ASan sees any read past
// a frame's end.
//
// A trailing position frame is decoded and set aside.
// Properties: headers are canonical (but for leading NULs of an info, which
// decoding strips), so a decoded list re-encodes to the
// very same header frames, and its data frames are the input's own bytes.
#include "common.hpp"

#include <tenbin/position.hpp>

#include <cstring>
#include <memory>

namespace {

tenbin::buffer exact_copy(const std::uint8_t* p, std::size_t n) {
    std::shared_ptr<std::byte[]> block(new std::byte[n]);
    if (n) std::memcpy(block.get(), p, n);
    auto* bytes = block.get();
    return tenbin::buffer::share(std::move(block), {bytes, n});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<tenbin::buffer> frames;
    std::size_t at = 0;
    while (at < size) {
        std::size_t n = data[at];
        if (at + 1 < size) n |= std::size_t{data[at + 1]} << 8;
        at += 2;
        if (at > size) at = size;
        n = std::min(n, size - at);
        frames.push_back(exact_copy(data + at, n));
        at += n;
    }

    for (int round = 0; round < 2; ++round) {
        tenbin::decode_options opt;
        if (round == 1) opt.limits = fuzz::small_limits();
        std::vector<tenbin::tensor> tensors;
        try {
            tensors = tenbin::decode_list(frames, opt);
        } catch (const tenbin::error& e) {
            fuzz::check_error(e);
            continue;
        }
        // A trailing position frame is taken off, not decoded.
        if (frames.size() % 2 == 1 && tenbin::is_position_frame(frames.back().bytes())) frames.pop_back();
        if (tensors.size() * 2 != frames.size()) fuzz::fail("tensor count differs from frames / 2");
        const std::vector<tenbin::buffer> again = tenbin::encode_list(tensors);
        if (again.size() != frames.size()) fuzz::fail("re-encoded frame count differs");
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const auto a = again[i].bytes(), b = frames[i].bytes();
            if (i % 2 == 0) {
                if (!fuzz::same_header(b, a)) fuzz::fail("header is not canonical");
            } else if (a.size() != b.size() || (a.size() && std::memcmp(a.data(), b.data(), a.size()) != 0)) {
                fuzz::fail("data frame differs after re-encoding");
            }
        }
        // The tensors' bytes are the data frames themselves (zero-copy).
        for (std::size_t i = 0; i < tensors.size(); ++i)
            if (tensors[i].nbytes() && tensors[i].data().data() != frames[2 * i + 1].data())
                fuzz::fail("decoded tensor does not view its data frame");
    }
    return 0;
}
