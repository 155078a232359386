// A +shm sender against receivers that misbehave, and against a process
// short of descriptors: what the sender shares stays unchanged while a
// receiver maps it, and the sender keeps serving the receivers that behave.
#include "peer.hpp"

using namespace tenbin;
using namespace shm_test;
using namespace std::chrono_literals;

TEST_CASE("a held message whose retire fails (no descriptor to spare) keeps its block out of the pool") {
    detail::shm_options so;
    so.lease = 300ms;
    shm_pair p(so);
    REQUIRE(p.send(filled(p.pool(), 1)));
    auto held = p.recv().value();  // claimed and held past the lease
    {
        // The lease ends while the sender cannot make the fresh memfd the
        // block's bytes would move to.
        no_descriptors full;
        REQUIRE(eventually([&] { return p.counters().retires_failed == 1; }));
        CHECK(p.counters().blocks_pinned == 1);
    }
    // The same size again: the held block is not handed out, so these
    // messages are written elsewhere (before: into the held tensor).
    for (std::int32_t k = 2; k <= 4; ++k) {
        REQUIRE(p.send(filled(p.pool(), k)));
        CHECK(all_are(p.recv().value().at(0), k));
    }
    CHECK(all_are(held.at(0), 1));
    // Descriptors to spare again: a later pass retires it after all, or its
    // holder lets go first; either way every block comes back.
    held.clear();
    CHECK(eventually([&] { return p.counters().blocks_pinned == 0 && p.pool().stats().in_use == 0; }));
}
