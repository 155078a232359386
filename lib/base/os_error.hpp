// How errors name things, and errors of the operating system as tenbin
// errors: one text for every layer.
#pragma once

#include <tenbin/error.hpp>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>

namespace tenbin::detail {

// error(errc::io_error, "<what>: <the system's text for err>"), to throw.
error os_error(const std::string& what, int err = errno);

// 's', for naming a file or a value in an error.
std::string in_quotes(std::string_view s);
std::string in_quotes(const std::filesystem::path& p);
inline std::string in_quotes(const std::string& s) { return in_quotes(std::string_view(s)); }
inline std::string in_quotes(const char* s) { return in_quotes(std::string_view(s)); }

}  // namespace tenbin::detail
