// tenbin: tensors. `tensor_view` borrows everything; `tensor` owns its
// shape and info and shares its bytes through a `buffer`.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/dtype.hpp>
#include <tenbin/error.hpp>
#include <tenbin/shape.hpp>

#include <concepts>
#include <cstdint>
#include <iosfwd>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// Longest info (tensor name) the format can carry: 8 ASCII bytes.
inline constexpr std::size_t max_info_length = 8;
/// Highest rank the library handles at all; `limits::max_rank` is the
/// (lower) default for decoding. Python's encoder stops at 9.
inline constexpr std::size_t max_supported_rank = 64;

namespace detail {
// Elements of `shape`; throws bad_argument on a negative dim or overflow.
std::uint64_t element_count(std::span<const std::int64_t> shape);
// Throws unless `bytes` can be read as a span of `t` elements.
void check_typed_access(dtype have, dtype want, const std::byte* data, std::size_t size);
// The library's decoders' way to fill a `tensor` in place (defined in the
// library's sources, not part of the API).
struct tensor_access;
}  // namespace detail

/// A tensor whose shape, info and bytes all belong to someone else. This is
/// what encoders take: it costs nothing to make from a `tensor` or from the
/// caller's own arrays. Valid only while what it points to is.
struct tensor_view {
    /// Element type.
    tenbin::dtype dtype = tenbin::dtype::u1;
    std::span<const std::int64_t> shape;  ///< empty for a rank-0 tensor
    std::string_view info;                ///< at most 8 ASCII characters
    bytes_view data;                      ///< C order, little endian

    /// Rank (0 for a scalar).
    std::size_t ndim() const noexcept { return shape.size(); }
    /// Number of elements (1 for rank 0). Throws on negative dims/overflow.
    std::uint64_t count() const { return detail::element_count(shape); }

    /// The data as T. Throws `error(errc::bad_argument)` when T does not
    /// match the dtype, and `error(errc::unsupported)` when the bytes are
    /// not aligned for T (see `tensor::aligned`).
    template <element T>
    std::span<const T> values() const {
        detail::check_typed_access(dtype, dtype_of<T>, data.data(), data.size());
        return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
    }
};

/// Content equality: dtype, shape, info and data bytes.
bool operator==(const tensor_view& a, const tensor_view& b) noexcept;

/// A tensor that keeps its bytes alive. Copies are cheap: they share the
/// bytes (`tensor::copy` makes a deep copy). A tensor decoded from a received
/// message, a mapped file or a caller's buffer refers to those bytes and keeps
/// them alive as long as it exists.
///
/// Writing: `mutable_values` and `mutable_bytes` write in place only while
/// this tensor is the one holder of writable bytes; otherwise they first
/// give it a private copy (see `buffer::writable_bytes`). So a write never
/// reaches bytes that ZeroMQ is still sending, that a copy of the tensor
/// refers to, or that a receiver or loader holds: the naive producer loop
/// (fill, send, fill again) sends every batch intact, at the price of a
/// copy per batch while the previous send is in flight. A `tensor_pool`
/// hands out fresh exclusive tensors instead, with no copy and no
/// allocation.
///
/// Thread-safety: as for standard value types, const use from many threads
/// is safe, and copies may live and die on different threads (the bytes go
/// with the last one).
class tensor {
public:
    /// An empty u1 tensor of shape {0}.
    tensor() : shape_{0} {}
    /// Takes `data` as the tensor's bytes. Throws `error(errc::bad_argument)`
    /// when its size is not count(shape) * itemsize(t), a dim is negative,
    /// the rank exceeds `max_supported_rank` or the info cannot be encoded.
    tensor(tenbin::dtype t, shape_t shape, buffer data, std::string_view info = {});

    /// Fresh 64-byte-aligned storage, zero-filled.
    static tensor zeros(tenbin::dtype t, shape_t shape, std::string_view info = {});
    /// A deep copy into fresh aligned, writable storage (of a tensor too:
    /// `tensor::copy(t)`), as buffer::copy is of bytes: the one deep copy.
    static tensor copy(const tensor_view& v);
    /// A tensor over `values` taken from the vector without a copy, in
    /// `shape` (whose elements must number `values.size()`).
    template <element T>
    static tensor from_vector(std::vector<T>&& values, shape_t shape, std::string_view info = {}) {
        return tensor(dtype_of<T>, std::move(shape), buffer::adopt(std::move(values)), info);
    }
    template <element T>
    /// A rank-1 tensor over all of `values`, taken without a copy, no info.
    static tensor from_vector(std::vector<T>&& values) {
        shape_t shape{static_cast<std::int64_t>(values.size())};
        return from_vector(std::move(values), std::move(shape));
    }
    /// A tensor over memory it does not own (see `buffer::borrow`): the
    /// caller keeps `values` alive while the tensor or its copies are used.
    template <element T>
    static tensor borrow(std::span<const T> values, shape_t shape, std::string_view info = {}) {
        return tensor(dtype_of<T>, std::move(shape), buffer::borrow(std::as_bytes(values)), info);
    }
    /// The same over a contiguous range the caller keeps (a vector, an
    /// array, a span); a temporary container does not compile, since its
    /// elements would be gone before the tensor.
    template <std::ranges::contiguous_range R>
        requires element<std::ranges::range_value_t<R>> &&
                 (std::is_lvalue_reference_v<R> || std::ranges::borrowed_range<R>) &&
                 (!std::is_same_v<std::remove_cvref_t<R>, std::span<const std::ranges::range_value_t<R>>>)
    static tensor borrow(R&& values, shape_t shape, std::string_view info = {}) {
        using T = std::ranges::range_value_t<R>;
        return borrow(std::span<const T>(std::ranges::data(values), std::ranges::size(values)), std::move(shape), info);
    }
    /// With the element type spelled out (`borrow<float>(make_values(),
    /// ...)`), a temporary container would convert to the span above and
    /// dangle: it does not compile either. (A span or view the caller makes
    /// of a temporary still dangles, as any view of one does.)
    template <element T, std::ranges::contiguous_range R>
        requires(!std::is_lvalue_reference_v<R> && !std::ranges::borrowed_range<R>)
    static tensor borrow(R&& values, shape_t shape, std::string_view info = {}) = delete;

    /// Element type.
    tenbin::dtype dtype() const noexcept { return dtype_; }
    /// Dimensions (empty for rank 0); valid while this tensor is.
    const shape_t& shape() const noexcept { return shape_; }
    /// Rank (0 for a scalar).
    std::size_t ndim() const noexcept { return shape_.size(); }
    /// Number of elements (1 for rank 0, 0 with a zero-size dimension).
    std::uint64_t count() const noexcept { return data_.size() / itemsize(dtype_); }
    /// Bytes of data: count() * itemsize(dtype()).
    std::size_t nbytes() const noexcept { return data_.size(); }
    /// The tensor's name (at most 8 ASCII characters, may be empty), valid
    /// while this tensor is unchanged.
    std::string_view info() const noexcept { return {info_, info_size_}; }
    /// The bytes and their keeper; copy the buffer to keep the bytes alive
    /// beyond this tensor.
    const buffer& data() const noexcept { return data_; }

    /// The same bytes under another info. Throws bad_argument for a bad info.
    tensor with_info(std::string_view info) const;
    /// This tensor when its bytes are aligned for its dtype, else a copy
    /// that is, writable only if this tensor is. Received frames are not
    /// always aligned (see zmq.hpp).
    tensor aligned() const;

    /// A view of this tensor, valid while the tensor exists and is unchanged.
    tensor_view view() const noexcept TENBIN_LIFETIMEBOUND { return {dtype_, shape_, info(), data_.bytes()}; }
    /// Same as `view()`.
    operator tensor_view() const noexcept TENBIN_LIFETIMEBOUND { return view(); }

    template <element T>
    /// The data as T, valid while this tensor's buffer is. Throws as
    /// `tensor_view::values` does.
    std::span<const T> values() const { return view().values<T>(); }
    /// Writable bytes of this tensor's own (copied first when shared or
    /// read-only: see the class comment). Fill them before the tensor is
    /// copied or sent: writes through this span after that reach the copy.
    tenbin::mutable_bytes mutable_bytes() { return data_.writable_bytes(); }
    /// Writable typed access, on the same terms as `mutable_bytes`. Throws
    /// as `values` does for a wrong T or misaligned bytes.
    template <element T>
    std::span<T> mutable_values() {
        auto bytes = data_.writable_bytes();
        detail::check_typed_access(dtype_, dtype_of<T>, bytes.data(), bytes.size());
        return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
    }

private:
    friend struct detail::tensor_access;
    // An info already checked (at most 8 bytes).
    void set_info(std::string_view info) noexcept {
        std::char_traits<char>::copy(info_, info.data(), info.size());
        info_size_ = static_cast<std::uint8_t>(info.size());
    }

    shape_t shape_;
    buffer data_;
    tenbin::dtype dtype_ = tenbin::dtype::u1;
    std::uint8_t info_size_ = 0;
    char info_[max_info_length] = {};  // the first info_size_ are the info
};

// perf: a received list of 8 tensors must stay under 1000 bytes, because
// glibc sweeps its fastbins before serving any chunk of 1 KiB or more, and
// over inproc those are full of libzmq's frames freed by the other thread.
static_assert(sizeof(tensor) <= 120);

/// Most elements a braced list given as a `tensor_span` may have; longer
/// lists go in a `std::vector` or `std::array`.
inline constexpr std::size_t max_braced_tensors = 16;

/// A borrowed list of tensors or tensor views: the one parameter type of
/// every encoder and sender, so each accepts `std::vector<tensor>`,
/// `std::vector<tensor_view>`, a span of either, a single tensor or a braced
/// list `{a, b}`. It refers to the caller's tensors, never to copies: a
/// named `tensor_span batch = {x, y};` refers to `x` and `y` themselves and
/// stays valid as long as they do. Temporaries passed to it live only until
/// the end of the full expression (fine for a call's argument; clang warns
/// when a variable keeps referring to them).
class tensor_span {
public:
    /// The empty list (also what `{}` gives).
    tensor_span() noexcept = default;
    /// Borrows a span of tensors.
    tensor_span(std::span<const tensor> t) noexcept : items_(t.data()), size_(t.size()), form_(form::tensors) {}
    /// Borrows a span of views.
    tensor_span(std::span<const tensor_view> v) noexcept : items_(v.data()), size_(v.size()), form_(form::views) {}
    /// Borrows a contiguous container (`std::vector`, `std::array`) of
    /// tensors or views.
    template <std::ranges::contiguous_range R>
        requires(std::same_as<std::ranges::range_value_t<R>, tensor> ||
                 std::same_as<std::ranges::range_value_t<R>, tensor_view>)
    tensor_span(const R& r TENBIN_LIFETIMEBOUND) noexcept
        : tensor_span(std::span(std::ranges::data(r), std::ranges::size(r))) {}
    /// Borrows one tensor as a list of one.
    tensor_span(const tensor& one TENBIN_LIFETIMEBOUND) noexcept : items_(&one), size_(1), form_(form::tensors) {}
    /// Borrows one view as a list of one.
    tensor_span(const tensor_view& one TENBIN_LIFETIMEBOUND) noexcept
        : items_(&one), size_(1), form_(form::views) {}
    /// Borrows a braced list of tensors `{a, b, ...}` (or of views), element
    /// by element: each braced element is a constructor argument, so the
    /// list points at the caller's objects, not at an initializer_list's
    /// array that would die with the statement.
    template <class... T>
        requires(sizeof...(T) >= 2 && sizeof...(T) <= max_braced_tensors &&
                 ((std::same_as<T, tensor> && ...) || (std::same_as<T, tensor_view> && ...)))
    tensor_span(const T&... items TENBIN_LIFETIMEBOUND) noexcept
        : list_{static_cast<const void*>(&items)...},
          size_(sizeof...(T)),
          form_((std::same_as<T, tensor> && ...) ? form::tensor_list : form::view_list) {}

    /// Number of tensors.
    std::size_t size() const noexcept { return size_; }
    /// True for an empty list.
    bool empty() const noexcept { return size_ == 0; }
    /// Tensor i (unchecked, i < size()), as a view valid while the list is.
    tensor_view operator[](std::size_t i) const noexcept {
        if (const tensor* t = tensor_at(i)) return t->view();
        return form_ == form::views ? static_cast<const tensor_view*>(items_)[i]
                                    : *static_cast<const tensor_view*>(list_[i]);
    }
    /// The buffer holding tensor i's bytes, or null when the list holds
    /// views (whose bytes nobody here owns).
    const buffer* owner(std::size_t i) const noexcept {
        const tensor* t = tensor_at(i);
        return t ? &t->data() : nullptr;
    }

private:
    enum class form : std::uint8_t { tensors, views, tensor_list, view_list };
    const tensor* tensor_at(std::size_t i) const noexcept {
        if (form_ == form::tensors) return static_cast<const tensor*>(items_) + i;
        return form_ == form::tensor_list ? static_cast<const tensor*>(list_[i]) : nullptr;
    }

    // One or the other, as form_ says (perf: a list made from a vector
    // writes one pointer, not the braced form's whole array).
    union {
        const void* items_ = nullptr;                 // forms tensors, views: the array
        const void* list_[max_braced_tensors];        // forms *_list: each element
    };
    std::size_t size_ = 0;
    form form_ = form::tensors;
};

/// Copies of `tensors` under the given infos, one per tensor (Python's
/// `infos=` argument of the encoders). Bytes are shared with tensors that
/// own them and borrowed from views. Throws bad_argument when the counts
/// differ or an info cannot be encoded.
std::vector<tensor> with_infos(tensor_span tensors, std::span<const std::string> infos);

/// `tensors` as tensors that keep their bytes alive past the call: bytes
/// shared with tensors that own them, views copied (the only copy). For
/// what is kept after a send returns (a replay, a batch awaiting its ack).
std::vector<tensor> keep(tensor_span tensors);

/// The infos of `tensors`, in order (Python's `infos=True` on decode).
std::vector<std::string> infos_of(const std::vector<tensor>& tensors);

/// Throws `error(errc::info_mismatch)` naming the first differing index
/// unless the tensors' infos are exactly `expected` (Python's decode with a
/// list of infos).
void check_infos(const std::vector<tensor>& tensors, std::span<const std::string> expected);

/// Writes a one-line summary without the data:
/// `tensor(info="images", dtype=f2, shape=[256, 3, 224, 224], nbytes=77070336)`.
/// Characters of the info outside printable ASCII are written as `\xNN`.
std::ostream& operator<<(std::ostream& out, const tensor& t);
/// The same, as a string.
std::string to_string(const tensor& t);

}  // namespace tenbin
TENBIN_API_END
