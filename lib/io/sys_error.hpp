// Private helpers of the io layer: operating-system errors.
#pragma once

#include <string>

namespace tenbin::detail {

// Throws error(errc::io_error) with "<what>: <strerror(err)>".
[[noreturn]] void throw_io_error(const std::string& what, int err);

}  // namespace tenbin::detail
