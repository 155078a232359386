#include <tenbin/buffer.hpp>
#include <tenbin/error.hpp>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace tenbin {

namespace {
struct aligned_free {
    void operator()(void* p) const noexcept { std::free(p); }
};
}  // namespace

buffer buffer::allocate(std::size_t size) {
    // aligned_alloc needs a size that is a multiple of the alignment.
    const std::size_t rounded = (size + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
    void* p = std::aligned_alloc(buffer_alignment, rounded ? rounded : buffer_alignment);
    if (!p) throw std::bad_alloc();
    std::shared_ptr<void> keeper(p, aligned_free{});
    return buffer(static_cast<std::byte*>(p), size, std::move(keeper), true);
}

buffer buffer::copy(bytes_view bytes) {
    buffer b = allocate(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data_, bytes.data(), bytes.size());
    return b;
}

buffer buffer::borrow(bytes_view bytes) {
    return buffer(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr, false);
}

buffer buffer::adopt(void* data, std::size_t size, std::function<void()> release) {
    struct releaser {
        explicit releaser(std::function<void()> r) : release(std::move(r)) {}
        releaser(const releaser&) = delete;
        releaser& operator=(const releaser&) = delete;
        std::function<void()> release;
        ~releaser() {
            if (release) release();
        }
    };
    auto keeper = std::make_shared<releaser>(std::move(release));
    return buffer(static_cast<std::byte*>(data), size, std::move(keeper), true);
}

buffer buffer::share(keeper_type keeper, mutable_bytes bytes, bool writable) {
    return buffer(bytes.data(), bytes.size(), std::move(keeper), writable);
}

mutable_bytes buffer::writable_bytes() const {
    if (!writable_)
        throw error(errc::unsupported, "buffer of " + std::to_string(size_) +
                                           " bytes is read-only (borrowed or mapped); clone it to write");
    return {data_, size_};
}

buffer buffer::slice(std::size_t offset, std::size_t length) const {
    if (offset > size_ || length > size_ - offset)
        throw error(errc::bad_argument, "slice [" + std::to_string(offset) + ", +" +
                                            std::to_string(length) + ") of a buffer of " +
                                            std::to_string(size_) + " bytes");
    return buffer(data_ + offset, length, keeper_, writable_);
}

}  // namespace tenbin
