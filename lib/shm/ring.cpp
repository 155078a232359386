// The ring's memfd (see ring.hpp).
#ifdef __linux__

#include "shm/memory.hpp"
#include "shm/ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

namespace tenbin::detail::shm_impl {

std::unique_ptr<shm_ring> shm_ring::create(unique_fd& fd) {
    unique_fd made(new_segment_fd(bytes, "tenbin-ring"));
    // Written by both ends: sealed against size changes only.
    if (::fcntl(made.get(), F_ADD_SEALS, F_SEAL_SEAL) != 0) throw os_error("sealing a shm ring");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, made.get(), 0);
    if (p == MAP_FAILED) throw os_error("mapping a shm ring");
    fd = std::move(made);
    return std::unique_ptr<shm_ring>(new shm_ring(static_cast<std::byte*>(p), true));
}

std::unique_ptr<shm_ring> shm_ring::open(int fd) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    struct stat st {};
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || ::fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(bytes))
        throw error(errc::io_error, "shm side channel: a ring that is not a sealed memfd of its size");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw os_error("mapping a shm ring");
    return std::unique_ptr<shm_ring>(new shm_ring(static_cast<std::byte*>(p), true));
}

shm_ring::~shm_ring() {
    if (mapped_) ::munmap(base_, bytes);
}

}  // namespace tenbin::detail::shm_impl

#endif
