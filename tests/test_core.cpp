#include <doctest/doctest.h>
#include <tenbin/core.hpp>
TEST_CASE("placeholder") { CHECK(tenbin::itemsize(tenbin::dtype::f4) == 4); }
