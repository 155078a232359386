// tenbin: streams and .ten files.
//
// A stream carries the chunked form (see codec.hpp) tensor after tensor. The
// codec never sees a stream type: it talks to a byte `sink` or `source`, with
// adapters for iostreams, file descriptors and memory, and layers (counting,
// compression, ...) that wrap any sink or source.
#pragma once

#include <tenbin/codec.hpp>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

// ---- byte sinks and sources ----------------------------------------------

/// Where written bytes go. `write` takes several pieces at once so that a
/// sink able to gather (writev) sends tensor data without concatenating it.
///
/// Thread-safety (all sinks and sources here): one thread at a time per
/// object; distinct objects are independent. After a throw, what reached
/// the destination is unspecified: discard the output.
class sink {
public:
    virtual ~sink() = default;
    /// Writes all pieces, in order, or throws (io_error).
    virtual void write(std::span<const bytes_view> pieces) = 0;
    /// Pushes buffered bytes to their destination (a no-op unless the sink
    /// buffers). Throws io_error.
    virtual void flush() {}
};

/// Where read bytes come from.
class source {
public:
    virtual ~source() = default;
    /// Reads at most out.size() bytes; returns 0 only at end of input. May
    /// return fewer bytes than asked (short reads are normal).
    virtual std::size_t read_some(mutable_bytes out) = 0;
    /// Bytes left before end of input, when the source knows (a file, a
    /// memory buffer); lets readers reject hostile lengths early.
    virtual std::optional<std::uint64_t> remaining() const { return std::nullopt; }
};

/// Writes to a std::ostream (which must outlive the sink).
class ostream_sink final : public sink {
public:
    /// Writes to `os`, which must outlive the sink.
    explicit ostream_sink(std::ostream& os) : os_(os) {}
    void write(std::span<const bytes_view> pieces) override;
    /// Flushes the stream; throws io_error when it fails.
    void flush() override;

private:
    std::ostream& os_;
};

/// Reads from a std::istream (which must outlive the source). For a
/// seekable stream (a file, a string stream) it reports `remaining()`, so
/// a truncated input gets the same error as from `load`.
class istream_source final : public source {
public:
    /// Reads from `is`, which must outlive the source, from its current
    /// position. A stream in a bad or failed state (a file that did not
    /// open) throws io_error; one already at its end reads as empty.
    explicit istream_source(std::istream& is);
    std::size_t read_some(mutable_bytes out) override;
    std::optional<std::uint64_t> remaining() const override { return remaining_; }

private:
    std::istream& is_;
    std::optional<std::uint64_t> remaining_;
};

/// Writes to a POSIX file descriptor with writev (gathered, no copy),
/// retrying short writes and EINTR. Does not close the descriptor.
class fd_sink final : public sink {
public:
    /// Writes to `fd`, which stays the caller's (open while the sink is used).
    /// Writes throw io_error with the system's reason.
    explicit fd_sink(int fd) : fd_(fd) {}
    void write(std::span<const bytes_view> pieces) override;

private:
    int fd_;
};

/// Reads from a POSIX file descriptor, retrying EINTR. Does not close it.
/// For a regular file it reports `remaining()`.
class fd_source final : public source {
public:
    /// Reads from `fd`, which stays the caller's (open while the source is
    /// used). Throws io_error when `fstat` fails.
    explicit fd_source(int fd);
    std::size_t read_some(mutable_bytes out) override;
    std::optional<std::uint64_t> remaining() const override;

private:
    int fd_;
    std::optional<std::uint64_t> remaining_;
};

/// Appends to a byte vector owned by the sink.
class memory_sink final : public sink {
public:
    void write(std::span<const bytes_view> pieces) override;
    /// Everything written so far; valid until the next write or `take`.
    const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
    /// Moves the bytes out, leaving the sink empty.
    std::vector<std::byte> take() noexcept { return std::move(bytes_); }

private:
    std::vector<std::byte> bytes_;
};

/// Reads from bytes the caller keeps alive.
class memory_source final : public source {
public:
    /// Reads `bytes`, which the caller keeps alive while the source is used.
    explicit memory_source(bytes_view bytes) : bytes_(bytes) {}
    std::size_t read_some(mutable_bytes out) override;
    std::optional<std::uint64_t> remaining() const override { return bytes_.size() - pos_; }

private:
    bytes_view bytes_;
    std::size_t pos_ = 0;
};

/// A layer: passes everything to the wrapped sink and counts the bytes.
class counting_sink final : public sink {
public:
    /// Wraps `inner`, which must outlive this sink.
    explicit counting_sink(sink& inner) : inner_(inner) {}
    void write(std::span<const bytes_view> pieces) override;
    /// Flushes `inner`.
    void flush() override { inner_.flush(); }
    /// Bytes written through this sink so far.
    std::uint64_t count() const noexcept { return count_; }

private:
    sink& inner_;
    std::uint64_t count_ = 0;
};

/// A layer: passes reads through from the wrapped source and counts bytes.
class counting_source final : public source {
public:
    /// Wraps `inner`, which must outlive this source.
    explicit counting_source(source& inner) : inner_(inner) {}
    std::size_t read_some(mutable_bytes out) override;
    std::optional<std::uint64_t> remaining() const override { return inner_.remaining(); }
    /// Bytes read through this source so far.
    std::uint64_t count() const noexcept { return count_; }

private:
    source& inner_;
    std::uint64_t count_ = 0;
};

// ---- streams -------------------------------------------------------------

/// Writes `tensors` to `out` in the chunked form. Tensor data goes to the
/// sink as pieces of its own (no copy on gathering sinks).
/// All headers are encoded before the first byte is written, so a list the
/// format cannot carry throws bad_argument with nothing written; a failing
/// sink throws its error (io_error) with part of the list written.
void write(sink& out, tensor_span tensors);

/// What `read` accepts and how much of the stream it consumes.
struct read_options {
    /// Stop after this many tensors (Python's `n`); the rest stays unread.
    /// 0 is refused (bad_argument): its empty list would read as end of input.
    /// (A count to read, where `decode.limits.max_tensors` refuses input.)
    std::optional<std::size_t> count{};
    /// Bounds on the tensors read by this call (see `limits`), and the
    /// infos they must have when set (errc::info_mismatch; an empty read,
    /// end of input, is returned as it is).
    decode_options decode{};
};

/// Reads tensors until end of input (or `count` of them).
///
/// A stream holds tensors, not lists: nothing marks where one `write`
/// ended and the next began, and an empty list writes nothing. To read
/// back the lists of a recording, read `count` at a time when every
/// list has the same length (as `examples/record_replay.cpp` does), or
/// write each list to a stream of its own. End of input before
/// a header chunk ends the read; anywhere else it throws truncated. Each
/// tensor gets fresh aligned storage, allocated as bytes arrive, so a length
/// field claiming more than the input holds costs no more memory than the
/// input, and a data chunk whose length differs from its header's is
/// refused (data_size_mismatch) before any of it is read: a source that
/// knows its end (`remaining()`) says length_beyond_end first when the
/// length runs past it. Returns an empty list at end of input.
/// Throws the codec's errors (bad_magic, truncated, ...), limit_exceeded,
/// info_mismatch, or what the source throws; the source is then somewhere
/// inside the stream: discard it. The tensors own their storage (nothing
/// refers to the source afterwards).
[[nodiscard]] std::vector<tensor> read(source& in, const read_options& opt = {});

// ---- files ---------------------------------------------------------------

/// How `save`/`load`/`load_mmap` (de)compress a file's bytes.
enum class compression {
    automatic,  ///< by name: zstd when it ends in ".zst" (".ten.zst"), else none
    none,       ///< plain .ten bytes, whatever the name
    zstd,       ///< one zstd stream of the .ten bytes (see zstd.hpp)
};

/// How `save`, `load` and `load_mmap` treat a file.
struct file_options {
    /// Accept a file name not ending in ".ten" or ".ten.zst" (Python's
    /// `nocheck`).
    bool nocheck = false;
    /// Bounds on the tensors a load accepts (see `limits`), and the infos
    /// they must have when set (errc::info_mismatch).
    decode_options decode{};
    /// zstd needs a build with it (`TENBIN_HAS_ZSTD` in tenbin/config.hpp);
    /// without, compressed files throw error(unsupported).
    tenbin::compression compression = tenbin::compression::automatic;
    /// Level `save` compresses at (zstd's levels; 3 is its default).
    int zstd_level = 3;
};

/// Writes `tensors` to a .ten file with gathered writes, or to a .ten.zst
/// file through a `zstd_sink` (see `file_options::compression`).
///
/// An existing regular file is replaced by a new file (same directory, same
/// permissions) renamed over it once it is whole: readers and mappings of
/// the old file keep it as it was, tensors mapped from it may be saved back
/// to it, and a save that fails leaves it untouched. A new file is made the
/// same way, so a save that fails leaves none. A symlink is followed and
/// kept. A file with other hard links, a pipe or a device, a dangling
/// symlink, or a directory where no file can be made beside the path is
/// written in place, except a
/// file this process maps (`load_mmap`, `map_file`): rewriting that in place
/// would change or fault the tensors viewing it, so it is always replaced
/// (its other hard links keep the old bytes), and where no new file can be
/// made beside it, save throws io_error and leaves it untouched.
///
/// Throws bad_extension (unless nocheck), bad_argument for tensors the
/// format cannot carry (nothing is then written), unsupported for zstd in a
/// build without it, or io_error (a file written in place may then be
/// partly written). Thread-safe for distinct files.
void save(const std::filesystem::path& path, tensor_span tensors, const file_options& opt = {});
/// Reads a .ten file with one read into one aligned buffer; the tensors
/// are slices of it, so it lives while any of them does. A compressed file
/// is decompressed as a stream (`read` over a `zstd_source`), each tensor
/// into its own aligned storage; corrupt compressed bytes throw io_error
/// (or, met before zstd's checksum, the codec's error for them; see
/// zstd.hpp) and a file ending inside a zstd frame throws truncated. Also
/// throws what `decode_buffer` throws, bad_extension, unsupported,
/// limit_exceeded.
/// Thread-safe for any files.
[[nodiscard]] std::vector<tensor> load(const std::filesystem::path& path, const file_options& opt = {});
/// Maps the file read-only; the tensors view the mapping, which is unmapped
/// when the last of them is gone. `save` over it is safe: it replaces the
/// file by a new one and never rewrites a mapped file in place. Another
/// writer must not truncate or rewrite it in place meanwhile (`cp` onto it,
/// `truncate`, a program opening it with O_TRUNC): as with any mapping,
/// the tensors then read the new bytes, and reading past a shortened end
/// raises SIGBUS, which no library can turn into an error. Use `load` for
/// files that others may rewrite. A compressed file cannot be viewed in
/// place: it is decompressed into memory exactly as `load` does (no
/// mapping is kept); a pipe or a device is read as `load` reads it. Throws
/// as `load` does.
[[nodiscard]] std::vector<tensor> load_mmap(const std::filesystem::path& path, const file_options& opt = {});
/// The whole file as a read-only mapped buffer (empty files give an empty
/// buffer), with the same caveats as `load_mmap`. Throws io_error, also for
/// anything but a regular file.
[[nodiscard]] buffer map_file(const std::filesystem::path& path);

}  // namespace tenbin
TENBIN_API_END
