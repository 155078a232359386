// tenbin: other tensor file formats (NumPy .npy and .npz, .safetensors) and
// conversion between them and .ten files.
//
// Byte layouts (all integers little endian):
//
//   .npy          "\x93NUMPY", major, minor (1.0, 2.0 or 3.0), header length
//                 (uint16 for 1.0, uint32 otherwise), the header: a Python
//                 dict literal such as
//                   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }
//                 padded with spaces and a final '\n' so that the data starts
//                 at a multiple of 64; then the data, C order.
//   .npz          a ZIP archive with one member "NAME.npy" per tensor. Only
//                 stored (uncompressed) members are read or written, with
//                 their CRC-32 checked. ZIP64 records are read, and written
//                 (as Python's zipfile writes them) only where a field would
//                 overflow: 65535 members or more, 4 GiB or more.
//   .safetensors  uint64 N, N bytes of JSON header
//                   {"NAME": {"dtype": "F32", "shape": [3, 5],
//                             "data_offsets": [BEGIN, END]}, ...,
//                    "__metadata__": {"key": "value", ...}}
//                 (padded with spaces), then the data section, which the
//                 tensors' [BEGIN, END) ranges cover exactly, without overlap.
//
// These formats name tensors with strings of any length, which a tensor's
// info (at most 8 ASCII characters) cannot hold: their lists are lists of
// `named_tensor`. A name becomes an info only when it fits (`to_tensors`,
// or saving a .ten file), and is refused, never truncated, when it does not.
//
// Loaders map the file: tensors whose data is aligned view the mapping (as
// `load_mmap` does). Savers replace a file as `save` does (a new file renamed
// over it once whole), so a failed save leaves the old file whole, and
// tensors loaded from a file may be saved back to it.
//
// Thread-safety: every function works only on its arguments (and the named
// file): calls from any number of threads are safe for distinct output files.
#pragma once

#include <tenbin/codec.hpp>
#include <tenbin/io.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// A tensor and its name in an .npz or .safetensors file (any UTF-8 string
/// without NUL: every reader and writer refuses a name holding one).
struct named_tensor {
    /// The name: an .npz member without ".npy", a safetensors key, or a
    /// .ten info. Writers use this, not `value.info()`.
    std::string name;
    /// The tensor. Loaders set its info to `name` when the name fits an info
    /// (at most 8 ASCII characters), else leave it empty.
    tensor value;
};

/// What the loaders of this header accept.
struct format_options {
    /// Tensors per file, rank, total data bytes (see `limits`).
    tenbin::limits limits{};
    /// Largest .npy header or safetensors JSON header accepted
    /// (errc::limit_exceeded beyond it).
    std::uint64_t max_header_bytes = std::uint64_t{100} << 20;
};

// ---- .npy -------------------------------------------------------------------

/// Decodes the bytes of an .npy file. The tensor's data is a slice of
/// `bytes` (sharing its keeper) when aligned for the dtype, else a copy;
/// big-endian data ('>f4') is byte-swapped into a copy. Its info is empty.
/// Throws bad_magic, truncated, bad_header (malformed header dict),
/// unsupported (other dtypes, fortran_order True with more than one
/// dimension above 1, other versions), data_size_mismatch, limit_exceeded.
[[nodiscard]] tensor decode_npy(const buffer& bytes, const format_options& opt = {});
/// The .npy bytes of `t`, exactly as NumPy's `np.save` writes them (version
/// 1.0, or 2.0 for a header longer than 64 KiB). Throws bad_argument for an
/// invalid tensor view.
[[nodiscard]] std::vector<std::byte> encode_npy(const tensor_view& t);
/// Maps the file and decodes it (see `decode_npy`: aligned data views the
/// mapping, which lives while the tensor does). Errors name the file;
/// io_error when it cannot be read.
[[nodiscard]] tensor load_npy(const std::filesystem::path& path, const format_options& opt = {});
/// Writes `encode_npy(t)` to `path` (replacing it) with gathered writes.
/// Throws bad_argument with the file untouched, or io_error.
void save_npy(const std::filesystem::path& path, const tensor_view& t);

// ---- .npz -------------------------------------------------------------------

/// Decodes the bytes of an .npz archive: its members in central directory
/// order, names without ".npy". Data is sliced or copied as in `decode_npy`.
/// Throws bad_header for an inconsistent archive (offsets outside the file
/// or the member area, overlapping members, local and central headers that
/// disagree, CRC-32 mismatch, duplicate names), truncated, unsupported for
/// compressed, encrypted or multi-disk members and members not named *.npy,
/// limit_exceeded, and what `decode_npy` throws for a member (message
/// prefixed with the member's name).
[[nodiscard]] std::vector<named_tensor> decode_npz(const buffer& bytes, const format_options& opt = {});
/// The bytes of an uncompressed .npz archive, laid out as `np.savez` lays
/// it out (stored members, each "NAME.npy" holding exactly `np.save`'s
/// bytes) with fixed timestamps; NumPy reads it as its own. It is not
/// byte-identical to NumPy's: NumPy 1.24 gives every member a ZIP64 extra
/// field and other file attributes. An empty name
/// becomes "arr_<index>" (NumPy's name for positional arrays). An archive
/// of 65535 members or more, with a member of 4 GiB or more, or with
/// members or its central directory at 4 GiB or beyond gets the ZIP64
/// records these need, as Python's zipfile writes them; other archives
/// have none. Throws bad_argument for duplicate names, names with NUL or
/// invalid UTF-8, and names too long for a zip member (64 KiB).
[[nodiscard]] std::vector<std::byte> encode_npz(std::span<const named_tensor> tensors);
/// Maps the file and decodes it (see `decode_npz`). Errors name the file.
[[nodiscard]] std::vector<named_tensor> load_npz(const std::filesystem::path& path, const format_options& opt = {});
/// Writes an .npz archive of `tensors` to `path` (replacing it); tensor
/// data is written from where it lies (gathered). Throws as `encode_npz`
/// with the file untouched, or io_error.
void save_npz(const std::filesystem::path& path, std::span<const named_tensor> tensors);

// ---- .safetensors ------------------------------------------------------------

/// The `__metadata__` of a .safetensors file: string keys and values in
/// file order. Hugging Face's loaders want {"format": "pt"} there (or "tf",
/// "flax", "mlx") and refuse a checkpoint without it.
using safetensors_metadata = std::vector<std::pair<std::string, std::string>>;

/// A .safetensors file's tensors and its `__metadata__`.
struct safetensors_contents {
    std::vector<named_tensor> tensors;  ///< as `decode_safetensors` gives them
    safetensors_metadata metadata;      ///< empty when the file has none
};

/// Decodes the bytes of a .safetensors file: the tensors in the order of
/// their data offsets. Data is sliced when aligned, else copied. The
/// `__metadata__` object is checked (strings only) and dropped (see
/// `decode_safetensors_with_metadata`). Throws truncated (under 8 bytes),
/// length_beyond_end (header or data offsets past the end), limit_exceeded
/// (`max_header_bytes`, `limits`), bad_header (invalid JSON, a key twice in
/// one object, a tensor name holding NUL, malformed entries, reversed,
/// overlapping or uncovered ranges), data_size_mismatch (range size differs from shape and dtype),
/// unsupported (BF16, BOOL, F8_* and other dtypes tenbin lacks).
[[nodiscard]] std::vector<named_tensor> decode_safetensors(const buffer& bytes, const format_options& opt = {});
/// `decode_safetensors`, keeping the `__metadata__`.
[[nodiscard]] safetensors_contents decode_safetensors_with_metadata(const buffer& bytes, const format_options& opt = {});
/// The bytes of a .safetensors file holding `tensors` in the given order,
/// with a space-padded header making the data section 8-byte aligned, and
/// `metadata` first in it as `__metadata__` (none when empty). Empty names
/// become "arr_<index>". Throws bad_argument for duplicate names,
/// "__metadata__", names holding NUL, names, metadata keys or values that are not valid UTF-8,
/// and a metadata key given twice.
[[nodiscard]] std::vector<std::byte> encode_safetensors(std::span<const named_tensor> tensors,
                                          const safetensors_metadata& metadata = {});
/// Maps the file and decodes it (see `decode_safetensors`).
[[nodiscard]] std::vector<named_tensor> load_safetensors(const std::filesystem::path& path,
                                           const format_options& opt = {});
/// `load_safetensors`, keeping the `__metadata__`.
[[nodiscard]] safetensors_contents load_safetensors_with_metadata(const std::filesystem::path& path,
                                                    const format_options& opt = {});
/// Writes a .safetensors file of `tensors` (and `metadata`) to `path`
/// (replacing it), data gathered from where it lies. Throws as
/// `encode_safetensors` with the file untouched, or io_error.
void save_safetensors(const std::filesystem::path& path, std::span<const named_tensor> tensors,
                      const safetensors_metadata& metadata = {});

// ---- any of them ----------------------------------------------------------------

/// The file formats `load_any` and `save_any` know.
enum class file_format {
    ten,          ///< .ten or .ten.zst (see `load`/`save`)
    npy,          ///< .npy: one tensor, no name
    npz,          ///< .npz: uncompressed NumPy archive
    safetensors,  ///< .safetensors
};

/// The format a file name's extension names, or nothing for another name.
[[nodiscard]] std::optional<file_format> format_of(const std::filesystem::path& path);

/// Names from infos: one `named_tensor` per tensor, name = info. Shares
/// the tensors' bytes (a view's bytes are copied).
[[nodiscard]] std::vector<named_tensor> named(tensor_span tensors);
/// Tensors whose infos are the names. Throws bad_argument naming the first
/// name that is not a valid info (more than 8 characters, not ASCII, NUL
/// at either end).
[[nodiscard]] std::vector<tensor> to_tensors(std::span<const named_tensor> tensors);

/// Loads any file `format_of` knows: a .ten file is mapped (`load_mmap`;
/// names are its infos), a .npy file gives one tensor with an empty name.
/// Throws bad_extension for an unknown extension, else what the format's
/// loader throws.
[[nodiscard]] std::vector<named_tensor> load_any(const std::filesystem::path& path, const format_options& opt = {});
/// Saves to any file `format_of` knows (replacing it). Throws
/// bad_extension for an unknown extension; bad_argument for a name that
/// is not a valid info in a .ten file (naming it), for other than exactly
/// one tensor in an .npy file; else what the format's writer throws. The
/// file is untouched after bad_argument and bad_extension.
void save_any(const std::filesystem::path& path, std::span<const named_tensor> tensors);

}  // namespace tenbin
TENBIN_API_END
