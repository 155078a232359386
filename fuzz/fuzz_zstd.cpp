// libFuzzer target: `read` over a `zstd_source` (the path of .ten.zst files
// and compressed streams), over whole and short reads of the compressed
// bytes.
//
// Input: one mode byte, then the compressed stream.
//   bits 0-1  inner source: 0 memory_source; 1 short reads; 2 one byte per
//             read; 3 memory_source
//   bit 2     max_bytes 64 KiB instead of 1 MiB (the other limits small)
//   bit 3     zstd_source's max_window_log 10 instead of 20
// Properties: only documented error classes; what read accepts, libzstd
// decompresses on its own (here) to bytes that decode_buffer decodes to the
// same tensors.
#include "common.hpp"
#include "../tests/piecewise_source.hpp"

#include <tenbin/io.hpp>
#include <tenbin/zstd.hpp>

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace {

// libzstd's own streaming decompression of the whole input (skippable
// frames skipped, frames concatenated) in output blocks of `block_size`,
// input handed over whole or (`byte_by_byte`) one byte a call; nothing when
// it fails or passes `cap` bytes.
std::optional<std::vector<std::byte>> decompress(tenbin::bytes_view in, int window_log, std::size_t cap,
                                                 std::size_t block_size, bool byte_by_byte = false) {
    static ZSTD_DCtx* const d = ZSTD_createDCtx();  // reused: a context per input costs more than the work
    if (!d) return std::nullopt;
    ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
    ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, window_log);
    std::vector<std::byte> out;
    ZSTD_inBuffer src{in.data(), byte_by_byte ? std::min<std::size_t>(1, in.size()) : in.size(), 0};
    std::byte block[4096];
    bool in_frame = false, ok = true;
    while (ok) {
        ZSTD_outBuffer dst{block, block_size, 0};
        const std::size_t before = src.pos;
        const std::size_t r = ZSTD_decompressStream(d, &dst, &src);
        if (ZSTD_isError(r)) {
            ok = false;
            break;
        }
        // 0: a frame ended and all of it is out (a call after that, with
        // nothing left, hints at the next frame's header instead).
        if (src.pos != before || dst.pos != 0) in_frame = r != 0;
        out.insert(out.end(), block, block + dst.pos);
        if (out.size() > cap) ok = false;
        if (src.pos == src.size && src.size < in.size()) {
            ++src.size;
            continue;
        }
        if (src.pos == src.size && dst.pos < block_size) break;
    }
    if (!ok || in_frame) return std::nullopt;  // failed, or the input ends inside a frame
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t mode = data[0];
    const tenbin::bytes_view stream(reinterpret_cast<const std::byte*>(data + 1), size - 1);

    tenbin::memory_source mem(stream);
    test_support::piecewise_source shorts(stream, false,
                                          (mode & 3) == 2 ? std::initializer_list<std::size_t>{1}
                                                          : std::initializer_list<std::size_t>{1, 5, 3, 4096, 2, 13, 64});
    tenbin::source& inner = (mode & 3) == 1 || (mode & 3) == 2 ? static_cast<tenbin::source&>(shorts) : mem;
    const int window_log = (mode & 8) ? 10 : 20;

    tenbin::read_options opt;
    opt.decode.limits = fuzz::small_limits();
    opt.decode.limits.max_bytes = (mode & 4) ? std::uint64_t{1} << 16 : std::uint64_t{1} << 20;

    std::vector<tenbin::tensor> got;
    try {
        tenbin::zstd_source unpacked(inner, window_log);
        got = tenbin::read(unpacked, opt);
        // read stops at end of input only: a second read finds nothing.
        if (!tenbin::read(unpacked, opt).empty()) fuzz::fail("a second read found more tensors");
    } catch (const tenbin::error& e) {
        // zstd's own verdicts on corrupt or cut input, and the decoder's.
        if (e.code() != tenbin::errc::io_error && e.code() != tenbin::errc::truncated) fuzz::check_error(e);
        return 0;
    }
    // libzstd 1.5.4 checks a frame's declared content size on some paths
    // only: when the output block has room for the whole frame (its
    // one-shot path, as the zstd tool) or not; a frame declaring 39 bytes
    // that holds none passes while streaming into small blocks, as
    // zstd_source does for a reader asking for a 16-byte preamble (found by
    // this target), and with the input in pieces, as short reads give it,
    // a frame with an empty compressed block passes too. So the stream must
    // decode on one of those paths, and give the same bytes.
    std::optional<std::vector<std::byte>> plain;
    for (std::size_t block : {64, 16, 4096, 1})
        if ((plain = decompress(stream, window_log, block == 1 ? std::size_t{1} << 20 : std::size_t{2} << 20, block)))
            break;
    if (!plain) plain = decompress(stream, window_log, std::size_t{2} << 20, 16, true);
    if (!plain) fuzz::fail("read accepted a stream that libzstd refuses");
    tenbin::decode_options dopt;
    dopt.limits = opt.decode.limits;
    try {
        if (tenbin::decode_buffer(tenbin::bytes_view(plain->data(), plain->size()), dopt) != got)
            fuzz::fail("read through zstd_source and decode_buffer of the decompressed bytes disagree");
    } catch (const tenbin::error& e) {
        fuzz::fail("decode_buffer refused what read accepted through zstd_source:", e.what());
    }
    return 0;
}
