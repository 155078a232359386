#include "base/os_error.hpp"

#include <system_error>

namespace tenbin::detail {

// system_category().message is strerror's text without its thread-safety caveat.
error os_error(const std::string& what, int err) {
    return error(errc::io_error, what + ": " + std::system_category().message(err));
}

// Appended, not "'" + std::string(s) + "'": GCC 12 at -O3 warns
// (-Wrestrict, wrongly) about a string inserted at the front.
std::string in_quotes(std::string_view s) {
    std::string out(1, '\'');
    out += s;
    out += '\'';
    return out;
}
std::string in_quotes(const std::filesystem::path& p) { return in_quotes(p.string()); }

}  // namespace tenbin::detail
