#include <doctest/doctest.h>
TEST_CASE("sctp: not written yet") { CHECK(true); }
