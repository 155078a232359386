#include "transport/ipc_readers.hpp"

#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace tenbin::detail {

namespace {

// The sun_path bytes of the "ipc://" addresses (abstract: a leading NUL).
std::vector<std::string> socket_paths(std::span<const std::string> addresses) {
    std::vector<std::string> paths;
    for (const std::string& a : addresses) {
        if (a.rfind("ipc://", 0) != 0) continue;
        std::string& path = paths.emplace_back(a.substr(6));
        if (!path.empty() && path.front() == '@') path.front() = '\0';
    }
    return paths;
}

std::string path_of(const sockaddr_un& a, socklen_t len) {
    const auto offset = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path));
    if (len <= offset) return {};
    std::string p(a.sun_path, len - offset);
    // A file path ends at its NUL; an abstract name is all the bytes.
    if (!p.empty() && p.front() != '\0') p = p.substr(0, std::strlen(p.c_str()));
    return p;
}

int socket_option(int fd, int name) {
    int value = -1;
    socklen_t len = sizeof value;
    return getsockopt(fd, SOL_SOCKET, name, &value, &len) == 0 ? value : -1;
}

// Bytes written and not yet read by the peer on this process's unix
// stream sockets connected to, or accepted on, one of `paths`.
std::uint64_t unread_bytes(const std::vector<std::string>& paths) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return 0;
    std::uint64_t unread = 0;
    while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        const int s = static_cast<int>(fd);
        if (socket_option(s, SO_DOMAIN) != AF_UNIX || socket_option(s, SO_TYPE) != SOCK_STREAM ||
            socket_option(s, SO_ACCEPTCONN) != 0)
            continue;
        // Connected to one of the paths (its peer's name), or accepted on one (its own).
        const auto named = [&](int (*name_of)(int, sockaddr*, socklen_t*)) {
            sockaddr_un a{};
            socklen_t len = sizeof a;
            return name_of(s, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
                   std::find(paths.begin(), paths.end(), path_of(a, len)) != paths.end();
        };
        int queued = 0;
        if ((named(getpeername) || named(getsockname)) && ioctl(s, SIOCOUTQ, &queued) == 0 && queued > 0)
            unread += static_cast<std::uint64_t>(queued);
    }
    closedir(dir);
    return unread;
}

}  // namespace

bool await_ipc_readers(std::span<const std::string> addresses, std::chrono::milliseconds linger) {
    const std::vector<std::string> paths = socket_paths(addresses);
    if (paths.empty()) return true;
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + linger;
    constexpr int quiet_checks = 3;
    for (int quiet = 0; quiet < quiet_checks;) {
        quiet = unread_bytes(paths) == 0 ? quiet + 1 : 0;
        if (quiet == quiet_checks) break;
        if (clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

}  // namespace tenbin::detail
