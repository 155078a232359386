// The sender's memfd segments.
#ifdef __linux__

#include "shm/memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace tenbin::detail::shm_impl {

int new_segment_fd(std::size_t size, const char* name) {
    unique_fd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd.get() < 0) throw os_error("memfd_create");
    if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throw os_error("ftruncate of a shm segment");
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) throw os_error("sealing a shm segment");
    return fd.release();
}

void seal_writes(int fd) {
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0)
        throw os_error("sealing a shm segment against writes (F_SEAL_FUTURE_WRITE needs Linux 5.1)");
}

mutable_bytes shm_memory::allocate(std::size_t size) {
    if (size == 0) size = buffer_alignment;
    unique_fd fd(new_segment_fd(size));
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) throw os_error("mapping a shm segment");
    try {
        seal_writes(fd.get());  // after our own mapping, the only writable one
    } catch (...) {
        ::munmap(p, size);
        throw;
    }
    std::lock_guard lock(mutex_);
    segments_[static_cast<std::byte*>(p)] = {next_id_++, fd.release(), size};
    return {static_cast<std::byte*>(p), size};
}

void shm_memory::deallocate(mutable_bytes block) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = segments_.find(block.data());
    if (it == segments_.end()) return;
    ::munmap(block.data(), it->second.size);
    ::close(it->second.fd);
    closed_.push_back(it->second.id);
    segments_.erase(it);
}

void shm_memory::waiting(bool begins) noexcept {
    waiters_.fetch_add(begins ? 1 : -1);
    if (!begins) return;
    std::lock_guard lock(mutex_);
    const std::uint64_t one = 1;
    if (wake_fd_ >= 0) {
        [[maybe_unused]] const ssize_t r = ::write(wake_fd_, &one, sizeof one);
    }
}

void shm_memory::wake_on_wait(int eventfd) {
    std::lock_guard lock(mutex_);
    wake_fd_ = eventfd;
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> shm_memory::find(const std::byte* p, std::size_t n) {
    std::lock_guard lock(mutex_);
    auto it = segments_.upper_bound(const_cast<std::byte*>(p));
    if (it == segments_.begin()) return std::nullopt;
    --it;
    const auto off = static_cast<std::size_t>(p - it->first);
    if (off > it->second.size || n > it->second.size - off) return std::nullopt;
    return std::pair{it->second.id, std::uint64_t{off}};
}

int shm_memory::read_only_fd(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    for (auto& [base, s] : segments_)
        if (s.id == id) {
            const std::string path = "/proc/self/fd/" + std::to_string(s.fd);
            return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        }
    return -1;
}

bool shm_memory::retire(std::uint64_t id) noexcept {
    std::lock_guard lock(mutex_);
    for (auto& [base, s] : segments_) {
        if (s.id != id) continue;
        try {
            unique_fd fd(new_segment_fd(s.size));
            for (std::size_t done = 0; done < s.size;) {
                const ssize_t w = ::pwrite(fd.get(), base + done, s.size - done, static_cast<off_t>(done));
                if (w <= 0) return false;
                done += static_cast<std::size_t>(w);
            }
            // Since Linux 6.12 a MAP_FIXED mapping that fails leaves the old one in place.
            if (::mmap(base, s.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.get(), 0) == MAP_FAILED)
                return false;
            // Fails only where allocate()'s seal did: never here.
            if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) return false;
            ::close(s.fd);
            closed_.push_back(s.id);
            s.fd = fd.release();
            s.id = next_id_++;
            ++retired_;
            return true;
        } catch (...) {
            return false;
        }
    }
    return true;
}

std::uint64_t shm_memory::retired() {
    std::lock_guard lock(mutex_);
    return retired_;
}

std::vector<std::uint64_t> shm_memory::take_closed() {
    std::lock_guard lock(mutex_);
    return std::exchange(closed_, {});
}

bool shm_memory::has_closed() {
    std::lock_guard lock(mutex_);
    return !closed_.empty();
}

}  // namespace tenbin::detail::shm_impl

#endif
