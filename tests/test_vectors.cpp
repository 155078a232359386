#include <doctest/doctest.h>
#include <tenbin/core.hpp>
TEST_CASE("placeholder2") { CHECK(tenbin::itemsize(tenbin::dtype::f4) == 4); }
