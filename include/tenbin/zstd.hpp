// tenbin: zstd-compressed streams, as layers over any sink or source.
//
// The compressed bytes are standard zstd frames (RFC 8878): what the `zstd`
// command-line tool writes and reads. A `.ten.zst` file is a `.ten` file
// compressed as a whole; `save`/`load` choose compression by the file name
// (see `file_options::compression` in io.hpp).
//
// Memory stays bounded whatever the input: a sink holds the compressor's
// state and one output block (~128 KiB); a source holds one input block and
// the decompression window, which the frame declares and `max_window_log`
// caps (2^27 = 128 MiB by default, as the zstd tool's default).
//
// Like every sink and source, these are used by one thread at a time.
#pragma once

#include <tenbin/config.hpp>
#if !TENBIN_HAS_ZSTD
#error "this tenbin was built without zstd (-Dzstd=disabled, or no libzstd found)"
#endif

#include <tenbin/io.hpp>

#include <cstdint>
#include <memory>
#include <optional>

TENBIN_API_BEGIN
namespace tenbin {

/// The compression level `zstd_sink` uses unless told: zstd's default (3).
inline constexpr int default_zstd_level = 3;
/// Largest decompression window `zstd_source` accepts unless told: 2^27.
inline constexpr int default_zstd_window_log = 27;

/// A layer: compresses what is written and writes zstd frames to `inner`,
/// which must outlive it.
///
/// Call `finish()` after the last write: it ends the frame. Without it the
/// output stops mid-frame, which readers report as truncated; the
/// destructor writes nothing (it cannot report a failure).
class zstd_sink final : public sink {
public:
    /// Levels are zstd's (1..22, negative for faster); out-of-range levels
    /// are clamped by zstd. Throws std::bad_alloc, or error(unsupported) if
    /// zstd refuses the parameters.
    explicit zstd_sink(sink& inner, int level = default_zstd_level);
    ~zstd_sink() override;
    zstd_sink(const zstd_sink&) = delete;
    zstd_sink& operator=(const zstd_sink&) = delete;

    /// Compresses the pieces; compressed blocks go to `inner` as they fill.
    /// Throws what `inner` throws (io_error), or error(io_error) for a zstd
    /// failure; after a throw the frame is broken: discard the output.
    void write(std::span<const bytes_view> pieces) override;
    /// Makes everything written so far decodable by a reader (ends the
    /// current zstd block, not the frame), then flushes `inner`.
    void flush() override;
    /// Ends the frame and flushes `inner`. Writing afterwards starts a new
    /// frame (concatenated frames are one valid zstd stream). If nothing was
    /// ever written, writes an empty frame, so that the output is a valid
    /// zstd stream of no bytes. Calling it again without writes in between
    /// does nothing.
    void finish();

    /// Uncompressed bytes written so far.
    std::uint64_t bytes_in() const noexcept;
    /// Compressed bytes passed to `inner` so far.
    std::uint64_t bytes_out() const noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

/// A layer: reads zstd frames from `inner` (which must outlive it) and
/// returns their decompressed bytes. Concatenated frames read as one stream
/// and skippable frames are skipped, as the zstd tool does.
///
/// End of input between frames is the end of the stream. Errors:
/// error(truncated) when `inner` ends inside a frame or before the first
/// (no input at all is no zstd stream: an empty list compresses to a frame);
/// error(io_error) naming zstd's reason for corrupt input (bad magic,
/// checksum mismatch, corrupted block, a window above `max_window_log`, or
/// bytes after a frame that are not a frame); what `inner` throws. After an
/// error the source is broken: every later read throws the same error.
///
/// zstd checks a frame's checksum at its end, and bytes come out before
/// that: a reader of this source (`read`, `load`) may first meet corrupted
/// bytes as bad tenbin (bad_magic, limit_exceeded, ...) rather than as
/// io_error. Compression also multiplies what a small input can claim: a
/// few hundred kilobytes can decompress to gigabytes of zeros, which are
/// real data to the reader, bounded only by `limits::max_bytes` (16 GiB by
/// default). Lower it for compressed input from untrusted sources.
class zstd_source final : public source {
public:
    /// Throws std::bad_alloc, or error(unsupported) if zstd refuses
    /// `max_window_log` (valid: 10..31 on 64-bit hosts).
    explicit zstd_source(source& inner, int max_window_log = default_zstd_window_log);
    ~zstd_source() override;
    zstd_source(const zstd_source&) = delete;
    zstd_source& operator=(const zstd_source&) = delete;

    std::size_t read_some(mutable_bytes out) override;
    /// Unknown (the decompressed size is not known in advance).
    std::optional<std::uint64_t> remaining() const override { return std::nullopt; }

    /// Compressed bytes read from `inner` so far.
    std::uint64_t bytes_in() const noexcept;
    /// Decompressed bytes returned so far.
    std::uint64_t bytes_out() const noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace tenbin
TENBIN_API_END
