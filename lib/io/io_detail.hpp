// Private helpers of the io layer: error texts, operating-system errors,
// writing a file whole.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace tenbin::detail {

// Throws error(errc::io_error) with "<what>: <strerror(err)>".
[[noreturn]] void throw_io_error(const std::string& what, int err);

// 's', for naming a file or a value in an error.
std::string in_quotes(std::string_view s);
std::string in_quotes(const std::filesystem::path& p);
inline std::string in_quotes(const std::string& s) { return in_quotes(std::string_view(s)); }

// Writes the file at `path` through `write(fd)`, whole or not at all: a
// regular file, existing or new, is written under a temporary name beside
// it and renamed over the path once written and closed (files.cpp says
// which files are written in place instead). Throws what `write` throws,
// or io_error.
void write_file(const std::filesystem::path& path, const std::function<void(int fd)>& write);

}  // namespace tenbin::detail
