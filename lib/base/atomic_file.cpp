#include "base/atomic_file.hpp"

#include "base/os_error.hpp"

#include <atomic>
#include <cerrno>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace tenbin::detail {

atomic_file::atomic_file(std::filesystem::path target, mode_t mode) : target_(std::move(target)) {
    // A hidden name of this process's own: two writers never share one.
    static std::atomic<unsigned> serial{0};
    // Appended: GCC 12 at -O3 warns (-Wrestrict, wrongly) about a string
    // inserted at the front.
    std::string name(1, '.');
    name += target_.filename().string();
    name += ".tmp-";
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(serial++);
    temp_ = target_.parent_path() / name;
    int fd;
    do fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) throw os_error("cannot create " + in_quotes(temp_) + " to replace " + in_quotes(target_));
    fd_.reset(fd);
}

atomic_file::~atomic_file() {
    if (!committed_) {
        fd_.reset();
        ::unlink(temp_.c_str());
    }
}

void atomic_file::commit(bool durable) {
    if (durable && ::fsync(fd_.get()) != 0) throw os_error("fsync " + in_quotes(temp_));
    if (::close(fd_.release()) != 0) throw os_error("close " + in_quotes(temp_));
    if (::rename(temp_.c_str(), target_.c_str()) != 0)
        throw os_error("rename " + in_quotes(temp_) + " to " + in_quotes(target_));
    committed_ = true;
}

}  // namespace tenbin::detail
