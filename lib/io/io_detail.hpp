// Private helpers of the io layer: writing a file whole.
#pragma once

#include "base/os_error.hpp"

#include <filesystem>
#include <functional>

namespace tenbin::detail {

// Writes the file at `path` through `write(fd)`, whole or not at all: a
// regular file, existing or new, is written under a temporary name beside
// it and renamed over the path once written and closed (files.cpp says
// which files are written in place instead). Throws what `write` throws,
// or io_error.
void write_file(const std::filesystem::path& path, const std::function<void(int fd)>& write);

}  // namespace tenbin::detail
