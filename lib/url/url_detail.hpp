// brace_expand with its bound as a parameter. The fuzz target expands under
// a small bound, so that an input reaching it costs microseconds, not the
// milliseconds of 65,536 strings; the library always uses 65,536.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin::detail {

std::vector<std::string> brace_expand(std::string_view pattern, std::size_t max_expansions);

}  // namespace tenbin::detail
