// zstd layers over sinks and sources (zstd's streaming API).
#include <tenbin/zstd.hpp>

#include "core/diagnostics.hpp"

#include <zstd.h>
#include <zstd_errors.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tenbin {

namespace {

struct cctx_free {
    void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};
struct dctx_free {
    void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

std::string zstd_reason(std::size_t code) { return ZSTD_getErrorName(code); }

// The frames zstd_source reads: zstd frames and skippable ones (no legacy
// formats).
bool known_frame_magic(const std::byte* p) {
    const std::uint32_t m = std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
                            std::uint32_t(p[3]) << 24;
    constexpr std::uint32_t zstd_magic = 0xFD2FB528, skippable_magic = 0x184D2A50, skippable_mask = 0xFFFFFFF0;
    return m == zstd_magic || (m & skippable_mask) == skippable_magic;
}

}  // namespace

// ---- sink ----------------------------------------------------------------

struct zstd_sink::impl {
    sink& inner;
    std::unique_ptr<ZSTD_CCtx, cctx_free> ctx;
    std::vector<std::byte> out;  // one compressed block at a time
    std::uint64_t in_count = 0;
    std::uint64_t out_count = 0;
    bool frame_open = false;  // bytes were given since the last frame end
    bool any_frame = false;   // a frame was ever ended

    explicit impl(sink& s) : inner(s), ctx(ZSTD_createCCtx()), out(ZSTD_CStreamOutSize()) {
        if (!ctx) throw std::bad_alloc();
    }

    // Runs the compressor over `in` with `mode` until zstd is done with it,
    // passing each filled output block on.
    void pump(ZSTD_inBuffer& in, ZSTD_EndDirective mode) {
        for (;;) {
            ZSTD_outBuffer o{out.data(), out.size(), 0};
            const std::size_t left = ZSTD_compressStream2(ctx.get(), &o, &in, mode);
            if (ZSTD_isError(left)) throw error(errc::io_error, "zstd compression failed: " + zstd_reason(left));
            if (o.pos > 0) {
                const bytes_view piece(out.data(), o.pos);
                inner.write({&piece, 1});
                out_count += o.pos;
            }
            // continue: done once the input is consumed; flush/end: once
            // zstd has nothing left to write.
            const bool done = mode == ZSTD_e_continue ? in.pos == in.size : left == 0;
            if (done) return;
        }
    }
};

zstd_sink::zstd_sink(sink& inner, int level) : impl_(std::make_unique<impl>(inner)) {
    const std::size_t r = ZSTD_CCtx_setParameter(impl_->ctx.get(), ZSTD_c_compressionLevel, level);
    if (ZSTD_isError(r))
        throw error(errc::unsupported, "zstd level " + std::to_string(level) + ": " + zstd_reason(r));
    // A checksum per frame lets readers catch corruption zstd's block
    // format would not (the zstd tool writes one too).
    ZSTD_CCtx_setParameter(impl_->ctx.get(), ZSTD_c_checksumFlag, 1);
}

zstd_sink::~zstd_sink() = default;

void zstd_sink::write(std::span<const bytes_view> pieces) {
    for (const bytes_view& p : pieces) {
        if (p.empty()) continue;
        ZSTD_inBuffer in{p.data(), p.size(), 0};
        impl_->frame_open = true;
        impl_->pump(in, ZSTD_e_continue);
        impl_->in_count += p.size();
    }
}

void zstd_sink::flush() {
    if (impl_->frame_open) {
        ZSTD_inBuffer in{nullptr, 0, 0};
        impl_->pump(in, ZSTD_e_flush);
    }
    impl_->inner.flush();
}

void zstd_sink::finish() {
    if (impl_->frame_open || !impl_->any_frame) {
        ZSTD_inBuffer in{nullptr, 0, 0};
        impl_->pump(in, ZSTD_e_end);
        impl_->frame_open = false;
        impl_->any_frame = true;
    }
    impl_->inner.flush();
}

std::uint64_t zstd_sink::bytes_in() const noexcept { return impl_->in_count; }
std::uint64_t zstd_sink::bytes_out() const noexcept { return impl_->out_count; }

// ---- source --------------------------------------------------------------

struct zstd_source::impl {
    source& inner;
    std::unique_ptr<ZSTD_DCtx, dctx_free> ctx;
    std::vector<std::byte> in;  // one compressed block at a time
    std::size_t in_pos = 0;
    std::size_t in_len = 0;
    bool eof = false;         // inner has ended
    bool in_frame = false;    // the decoder is inside a frame
    std::optional<error> failed;  // the first error, thrown again after
    std::uint64_t in_count = 0;
    std::uint64_t out_count = 0;

    explicit impl(source& s) : inner(s), ctx(ZSTD_createDCtx()), in(ZSTD_DStreamInSize()) {
        if (!ctx) throw std::bad_alloc();
    }

    // Reads until 4 bytes of the next frame are buffered (or input ends).
    void gather_magic() {
        if (in_len - in_pos >= 4 || eof) return;
        std::memmove(in.data(), in.data() + in_pos, in_len - in_pos);
        in_len -= in_pos;
        in_pos = 0;
        while (in_len < 4 && !eof) {
            const std::size_t n = inner.read_some(mutable_bytes(in).subspan(in_len));
            in_count += n;
            in_len += n;
            eof = n == 0;
        }
    }

    [[noreturn]] void fail(errc code, const std::string& message) {
        failed.emplace(code, message);
        throw *failed;
    }

    std::size_t read_some(mutable_bytes out) {
        if (failed) throw *failed;
        if (out.empty()) return 0;
        for (;;) {
            if (in_pos == in_len && !eof) {
                in_pos = 0;
                in_len = inner.read_some(in);
                in_count += in_len;
                eof = in_len == 0;
            }
            // A frame's magic number is checked here, whole: libzstd 1.5
            // given one split across reads takes garbage for a legacy frame
            // and ends it empty (found by fuzz-zstd).
            if (!in_frame && in_pos < in_len) {
                gather_magic();
                if (in_len - in_pos >= 4 && !known_frame_magic(in.data() + in_pos))
                    fail(errc::io_error, "corrupt zstd input after " + std::to_string(in_count - (in_len - in_pos)) +
                                             " compressed bytes: " +
                                             ZSTD_getErrorString(ZSTD_error_prefix_unknown));
            }
            ZSTD_inBuffer ib{in.data(), in_len, in_pos};
            ZSTD_outBuffer ob{out.data(), out.size(), 0};
            const std::size_t r = ZSTD_decompressStream(ctx.get(), &ob, &ib);
            if (ZSTD_isError(r))
                fail(errc::io_error, "corrupt zstd input after " + std::to_string(in_count - (in_len - ib.pos)) +
                                         " compressed bytes: " + zstd_reason(r));
            const bool progress = ib.pos != in_pos || ob.pos != 0;
            in_pos = ib.pos;
            // r == 0: a frame ended and all of it was returned.
            if (progress) in_frame = r != 0;
            if (ob.pos > 0) {
                out_count += ob.pos;
                return ob.pos;
            }
            if (eof && in_pos == in_len) {
                // Not even a frame header: what zstd -d refuses too. An
                // empty list compresses to a frame of its own.
                if (in_count == 0) fail(errc::truncated, "zstd input is empty: not one frame");
                if (in_frame)
                    fail(errc::truncated, "zstd input ends inside a frame after " + std::to_string(in_count) +
                                              " compressed bytes (" + std::to_string(out_count) +
                                              " bytes decompressed)");
                return 0;
            }
            // zstd always moves when it has input and room for output.
            if (!progress && in_pos < in_len)
                fail(errc::io_error, "zstd decompression made no progress");
        }
    }
};

zstd_source::zstd_source(source& inner, int max_window_log) : impl_(std::make_unique<impl>(inner)) {
    const std::size_t r = ZSTD_DCtx_setParameter(impl_->ctx.get(), ZSTD_d_windowLogMax, max_window_log);
    if (ZSTD_isError(r))
        throw error(errc::unsupported, "zstd max_window_log " + std::to_string(max_window_log) + ": " +
                                           zstd_reason(r));
}

zstd_source::~zstd_source() = default;

std::size_t zstd_source::read_some(mutable_bytes out) { return impl_->read_some(out); }

std::uint64_t zstd_source::bytes_in() const noexcept { return impl_->in_count; }
std::uint64_t zstd_source::bytes_out() const noexcept { return impl_->out_count; }

}  // namespace tenbin
