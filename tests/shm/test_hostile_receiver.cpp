// A +shm sender against receivers that misbehave, and against a process
// short of descriptors: what the sender shares stays unchanged while a
// receiver maps it, and the sender keeps serving the receivers that behave.
#include "peer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>

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

TEST_CASE("no descriptor of a segment, reopened writable through /proc, can change what a receiver reads") {
    shm_pair p;
    REQUIRE(p.send(filled(p.pool(), 7)));
    const auto got = p.recv().value();
    // What a same-user peer can reach: every memfd of the sender, through
    // /proc/PID/fd (here the sender is this process).
    std::size_t tried = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
        if (ec || target.find("memfd:tenbin-shm") == std::string::npos) continue;
        const int fd = ::open(e.path().c_str(), O_RDWR | O_CLOEXEC);
        REQUIRE(fd >= 0);  // opening is allowed; writing is not
        const std::int32_t bad = -1;
        CHECK(::pwrite(fd, &bad, sizeof bad, 0) < 0);
        CHECK(errno == EPERM);
        void* w = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(w == MAP_FAILED);
        if (w != MAP_FAILED) {
            *static_cast<std::int32_t*>(w) = bad;
            ::munmap(w, 4096);
        }
        ::close(fd);
        ++tried;
    }
    CHECK(tried >= 1);
    // Nor the receiver's own read-only mapping.
    const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(got.at(0).data().data()) & ~std::uintptr_t{4095};
    CHECK(::mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE) != 0);
    CHECK(all_are(got.at(0), 7));
}

TEST_CASE("a sender refuses receivers past max_peers and tells them why; the one in goes on") {
    detail::shm_options so;
    so.max_peers = 1;
    shm_pair p(so);
    REQUIRE(p.send(filled(p.pool(), 1)));
    CHECK(all_are(p.recv().value().at(0), 1));
    // A second receiver, given the next message as it came.
    REQUIRE(p.send(filled(p.pool(), 2)));
    auto frames = p.frames().value();
    const auto second = detail::make_shm_receiver();
    try {
        (void)detail::shm_receive(*second, frames, decode_options{});
        FAIL("a receiver past max_peers got in");
    } catch (const error& e) {
        CHECK(e.code() == errc::io_error);
        CHECK_MESSAGE(std::string(e.what()).find("max_peers") != std::string::npos, std::string(e.what()));
    }
    CHECK(p.counters().peers_refused == 1);
    CHECK(p.counters().peers == 1);
    for (std::int32_t k = 3; k <= 5; ++k) {
        REQUIRE(p.send(filled(p.pool(), k)));
        CHECK(all_are(p.recv().value().at(0), k));
    }
}

namespace {

// CPU seconds this process used so far.
double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

TEST_CASE("700 side-channel connections from a process, the sender out of descriptors: it neither breaks nor spins") {
    detail::shm_options so;
    so.max_peers = 1000;  // descriptors run out first
    shm_pair p(so);
    REQUIRE(p.send(filled(p.pool(), 1)));
    auto frames = p.frames().value();
    const std::string side = detail::parse_shm_first({frames[0].data<std::byte>(), frames[0].size()}).side;
    CHECK(all_are(detail::shm_receive(*p.receiver, frames, decode_options{}).value().at(0), 1));
    REQUIRE(eventually([&] { return p.pool().stats().in_use == 0; }));
    {
        // The sender's process may open some 40 more descriptors (as a
        // sender at the default 1,024 that already uses 980).
        fd_limit low(count_fds() + 40);
        int ready[2];
        REQUIRE(::pipe(ready) == 0);
        child flood(spawn("flood " + side + " 700 " + std::to_string(ready[1])));
        char x;
        REQUIRE(::read(ready[0], &x, 1) == 1);
        ::close(ready[0]);
        ::close(ready[1]);
        // Connections still waiting to be accepted keep the listener
        // readable: a sender that polls it without taking them spins.
        const double before = cpu_seconds();
        std::this_thread::sleep_for(1s);
        const double spent = cpu_seconds() - before;
        MESSAGE("CPU seconds in one idle second, flooded: " << spent);
        CHECK(spent < 0.25);
        // The receiver already in is served as before (on the pool's block:
        // a new one would need a descriptor).
        for (std::int32_t k = 2; k <= 20; ++k) {
            REQUIRE(p.send(filled(p.pool(), k)));
            CHECK(all_are(p.recv().value().at(0), k));
            REQUIRE(eventually([&] { return p.pool().stats().in_use == 0; }));
        }
        const auto c = p.counters();
        MESSAGE("peers " << c.peers << ", refused " << c.peers_refused);
        CHECK(c.peers_refused > 500);
        CHECK(c.peers < 60);
    }
    CHECK(eventually([&] { return p.counters().peers == 1; }));
}
