// Private helpers of the io layer: error texts and operating-system errors.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tenbin::detail {

// Throws error(errc::io_error) with "<what>: <strerror(err)>".
[[noreturn]] void throw_io_error(const std::string& what, int err);

// 's', for naming a file or a value in an error.
std::string in_quotes(std::string_view s);
std::string in_quotes(const std::filesystem::path& p);
inline std::string in_quotes(const std::string& s) { return in_quotes(std::string_view(s)); }

}  // namespace tenbin::detail
