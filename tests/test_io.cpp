#include <doctest/doctest.h>
TEST_CASE("io: not written yet") { CHECK(true); }
