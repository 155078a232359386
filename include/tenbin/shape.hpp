// tenbin: a tensor's dimensions.
//
// `shape_t` keeps up to six dimensions inside itself and only larger ranks
// on the heap: decoding a received tensor then allocates nothing for its
// shape (perf: one std::vector per tensor was the largest cost per small
// message left on the receive path). It behaves as a vector of int64 for
// what shapes need, and converts to `std::span<const std::int64_t>` like one.
#pragma once

#include <tenbin/config.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

TENBIN_API_BEGIN
namespace tenbin {

/// Dimensions of a tensor: a small vector of int64, empty for rank 0.
class shape_t {
public:
    using value_type = std::int64_t;  ///< a dimension
    using size_type = std::size_t;  ///< a rank
    using difference_type = std::ptrdiff_t;  ///< iterator distance
    using reference = std::int64_t&;  ///< a dimension, writable
    using const_reference = const std::int64_t&;  ///< a dimension
    using pointer = std::int64_t*;  ///< to a dimension, writable
    using const_pointer = const std::int64_t*;  ///< to a dimension
    using iterator = std::int64_t*;  ///< contiguous, writable
    using const_iterator = const std::int64_t*;  ///< contiguous

    /// Ranks up to this are stored without a heap allocation.
    static constexpr std::size_t inline_capacity = 6;

    /// Rank 0.
    shape_t() noexcept = default;
    /// The given dimensions: `shape_t{3, 224, 224}`.
    shape_t(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }
    /// `rank` dimensions, each `value`.
    shape_t(size_type rank, std::int64_t value) {
        reserve(rank);
        std::fill_n(data(), rank, value);
        size_ = static_cast<std::uint32_t>(rank);
    }
    /// A copy of any contiguous range of int64 (a std::vector, a span).
    template <std::ranges::contiguous_range R>
        requires std::same_as<std::remove_cv_t<std::ranges::range_value_t<R>>, std::int64_t> &&
                 (!std::same_as<std::remove_cvref_t<R>, shape_t>)
    shape_t(const R& dims) {
        assign(std::ranges::data(dims), std::ranges::size(dims));
    }
    /// A copy of [first, last), converted to int64.
    template <std::input_iterator It, std::sentinel_for<It> S>
    shape_t(It first, S last) {
        for (; first != last; ++first) push_back(static_cast<std::int64_t>(*first));
    }

    /// A copy.
    shape_t(const shape_t& o) { assign(o.data(), o.size()); }
    /// Takes `o`'s dimensions; `o` is left rank 0.
    shape_t(shape_t&& o) noexcept { take(o); }
    /// Copies `o`'s dimensions.
    shape_t& operator=(const shape_t& o) {
        if (this != &o) {
            size_ = 0;
            assign(o.data(), o.size());
        }
        return *this;
    }
    /// Takes `o`'s dimensions; `o` is left rank 0.
    shape_t& operator=(shape_t&& o) noexcept {
        if (this != &o) {
            release();
            take(o);
        }
        return *this;
    }
    ~shape_t() { release(); }

    /// Rank.
    size_type size() const noexcept { return size_; }
    /// True for rank 0.
    bool empty() const noexcept { return size_ == 0; }
    /// Dimensions that fit without reallocating.
    size_type capacity() const noexcept { return capacity_ ? capacity_ : inline_capacity; }

    /// The first dimension (valid while the shape is unchanged).
    std::int64_t* data() noexcept { return capacity_ ? heap_ : inline_; }
    /// The first dimension (valid while the shape is unchanged).
    const std::int64_t* data() const noexcept { return capacity_ ? heap_ : inline_; }
    /// First dimension.
    iterator begin() noexcept { return data(); }
    /// Past the last dimension.
    iterator end() noexcept { return data() + size_; }
    /// First dimension.
    const_iterator begin() const noexcept { return data(); }
    /// Past the last dimension.
    const_iterator end() const noexcept { return data() + size_; }
    /// Dimension i (unchecked, i < size()).
    std::int64_t& operator[](size_type i) noexcept { return data()[i]; }
    /// Dimension i (unchecked, i < size()).
    const std::int64_t& operator[](size_type i) const noexcept { return data()[i]; }
    /// The first dimension (rank >= 1).
    std::int64_t& front() noexcept { return data()[0]; }
    /// The last dimension (rank >= 1).
    std::int64_t& back() noexcept { return data()[size_ - 1]; }
    /// The first dimension (rank >= 1).
    const std::int64_t& front() const noexcept { return data()[0]; }
    /// The last dimension (rank >= 1).
    const std::int64_t& back() const noexcept { return data()[size_ - 1]; }

    /// Room for `n` dimensions.
    void reserve(size_type n) {
        if (n <= capacity()) return;
        if (n > UINT32_MAX) throw std::length_error("shape_t: rank too large");
        auto grown = std::make_unique<std::int64_t[]>(n);
        std::copy_n(data(), size_, grown.get());
        release();
        heap_ = grown.release();
        capacity_ = static_cast<std::uint32_t>(n);
    }
    /// Appends a dimension.
    void push_back(std::int64_t d) {
        if (size_ == capacity()) reserve(std::max<size_type>(2 * size_, inline_capacity + 1));
        data()[size_++] = d;
    }
    /// Inserts a dimension before `pos`; returns where it went.
    iterator insert(const_iterator pos, std::int64_t d) {
        const auto at = static_cast<size_type>(pos - begin());
        push_back(d);
        std::rotate(begin() + at, end() - 1, end());
        return begin() + at;
    }
    /// Rank `n`; new dimensions are `value`.
    void resize(size_type n, std::int64_t value = 0) {
        reserve(n);
        if (n > size_) std::fill(data() + size_, data() + n, value);
        size_ = static_cast<std::uint32_t>(n);
    }
    /// Rank 0 (keeps the storage).
    void clear() noexcept { size_ = 0; }

    /// Same rank and dimensions.
    friend bool operator==(const shape_t& a, const shape_t& b) noexcept {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    void assign(const std::int64_t* p, size_type n) {
        reserve(n);
        std::copy_n(p, n, data());
        size_ = static_cast<std::uint32_t>(n);
    }
    void take(shape_t& o) noexcept {
        size_ = o.size_;
        capacity_ = std::exchange(o.capacity_, 0);
        if (capacity_)
            heap_ = o.heap_;
        else
            std::copy_n(o.inline_, o.size_, inline_);
        o.size_ = 0;
    }
    void release() noexcept {
        if (std::exchange(capacity_, 0)) delete[] heap_;
    }

    // The heap pointer shares the inline dims' storage (perf: a tensor
    // small enough that a list of 8 stays under glibc's 1 KiB large-chunk
    // line, see tensor.hpp).
    union {
        std::int64_t inline_[inline_capacity];
        std::int64_t* heap_;  // while capacity_ != 0
    };
    std::uint32_t size_ = 0;
    std::uint32_t capacity_ = 0;  // of heap_; 0 while the dims are inline_
};

/// Writes the dimensions as NumPy prints a shape's list: "[3, 224, 224]",
/// "[]" for rank 0.
std::ostream& operator<<(std::ostream& out, const shape_t& shape);
/// The same, as a string.
std::string to_string(const shape_t& shape);

}  // namespace tenbin
TENBIN_API_END
