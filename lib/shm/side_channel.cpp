// The side channel's plumbing, shared by the sender and the receiver.
#ifdef __linux__

#include "shm/memory.hpp"
#include "shm/ring.hpp"

#include <cerrno>
#include <cstddef>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

namespace tenbin::detail::shm_impl {

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    a.sun_path[0] = '\0';
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return a;
}

bool send_packet(int fd, std::span<const std::byte> bytes, std::span<const int> fds) {
    iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_packet)];
    if (!fds.empty()) {
        mh.msg_control = control;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    for (;;) {
        const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n >= 0) return true;
        if (errno != EINTR) return false;
    }
}

std::array<std::byte, 16> request(std::uint32_t type, std::uint64_t seq) {
    std::array<std::byte, 16> p{};
    store_le<std::uint32_t>(p.data(), type);
    store_le<std::uint64_t>(p.data() + 8, seq);
    return p;
}

std::unique_ptr<shm_ring> shm_ring::create(unique_fd& fd) {
    unique_fd made(new_segment_fd(bytes, "tenbin-ring"));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, made.get(), 0);
    if (p == MAP_FAILED) throw os_error("mapping a shm ring");
    fd = std::move(made);
    return std::unique_ptr<shm_ring>(new shm_ring(static_cast<std::byte*>(p)));
}

std::unique_ptr<shm_ring> shm_ring::open(int fd) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    struct stat st {};
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || ::fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(bytes))
        throw error(errc::io_error, "shm side channel: a ring that is not a sealed memfd of its size");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw os_error("mapping a shm ring");
    return std::unique_ptr<shm_ring>(new shm_ring(static_cast<std::byte*>(p)));
}

shm_ring::~shm_ring() { ::munmap(base_, bytes); }

}  // namespace tenbin::detail::shm_impl

#endif
