#include <doctest/doctest.h>
TEST_CASE("interop: not written yet") { CHECK(true); }
