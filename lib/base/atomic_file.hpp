// A file replaced whole or not at all.
#pragma once

#include "base/fd.hpp"

#include <filesystem>

#include <sys/types.h>

namespace tenbin::detail {

// Writes go to a new file beside `target` (created exclusively with
// `mode`, less the umask), which commit() renames over `target`: readers
// see the old file or the new one, never a part. Destroyed uncommitted, it
// removes the new file. Throws io_error (os_error) naming the file.
class atomic_file {
public:
    atomic_file(std::filesystem::path target, mode_t mode);
    ~atomic_file();
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;

    int fd() const noexcept { return fd_.get(); }
    const std::filesystem::path& temp_path() const noexcept { return temp_; }

    // Closes the new file (checking: delayed write errors surface there),
    // after an fsync when `durable`, and renames it over the target.
    void commit(bool durable = false);

private:
    std::filesystem::path target_, temp_;
    unique_fd fd_;
    bool committed_ = false;
};

}  // namespace tenbin::detail
