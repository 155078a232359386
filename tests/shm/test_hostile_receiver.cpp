// A +shm sender against receivers that misbehave, and against a process
// short of descriptors: what the sender shares stays unchanged while a
// receiver maps it, and the sender keeps serving the receivers that behave.
#include "peer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <poll.h>
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
    bool failed = false;
    std::uint64_t pinned = 0;
    {
        // The lease ends while the sender cannot make the fresh memfd the
        // block's bytes would move to. (No assertion in here: see
        // no_descriptors.)
        no_descriptors full;
        failed = eventually([&] { return p.counters().retires_failed == 1; });
        pinned = p.counters().blocks_pinned;
    }
    REQUIRE(failed);
    CHECK(pinned == 1);
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
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    std::optional<child> flood;
    flood.emplace(spawn("flood " + side + " 700 " + std::to_string(ready[1])));
    // Results, checked once descriptors are back (see no_descriptors).
    bool flooded = false, served = true;
    double spent = 0;
    detail::shm_sender_counters c;
    {
        // The sender's process may open some 40 more descriptors (as a
        // sender at the default 1,024 that already uses 980).
        fd_limit low(count_fds() + 40);
        char x;
        flooded = ::read(ready[0], &x, 1) == 1;
        // Connections still waiting to be accepted keep the listener
        // readable: a sender that polls it without taking them spins.
        const double before = cpu_seconds();
        std::this_thread::sleep_for(1s);
        spent = cpu_seconds() - before;
        // The receiver already in is served as before (on the pool's block:
        // a new one would need a descriptor).
        for (std::int32_t k = 2; k <= 20 && served; ++k) {
            std::optional<tensor> t = p.pool().try_acquire(dtype::i4, {4096}, "", 5s);
            if (!t) break;
            for (auto& v : t->mutable_values<std::int32_t>()) v = k;
            const bool sent = p.send(*t);
            t.reset();
            auto got = sent ? p.recv() : std::nullopt;
            served = got && all_are(got->at(0), k);
            got.reset();
            served = served && eventually([&] { return p.pool().stats().in_use == 0; });
        }
        c = p.counters();
    }
    ::close(ready[0]);
    ::close(ready[1]);
    REQUIRE(flooded);
    MESSAGE("CPU seconds in one idle second, flooded: " << spent);
    CHECK(spent < 0.25);
    CHECK(served);
    MESSAGE("peers " << c.peers << ", refused " << c.peers_refused);
    CHECK(c.peers_refused > 500);
    CHECK(c.peers < 60);
    flood.reset();  // killed: its connections close
    CHECK(eventually([&] { return p.counters().peers == 1; }));
}

TEST_CASE("a receiver that claims everything and never releases is cut off; the stream goes on, what it held intact") {
    detail::shm_options so;
    so.pool_bytes = 8u << 20;  // one receiver may hold 6 MiB of it while another is there
    shm_pair p(so);
    const auto hoarder = detail::make_shm_receiver();
    std::vector<std::vector<tensor>> hoard;
    std::string why;
    for (std::int32_t k = 1; k <= 60; ++k) {
        REQUIRE(p.send(filled(p.pool(), k, 1 << 17)));  // 512 KiB; before: timed out once the hoard held the pool
        auto frames = p.frames().value();
        if (why.empty()) {
            try {
                hoard.push_back(detail::shm_receive(*hoarder, frames, {}).value());
            } catch (const error& e) {
                why = e.what();
            }
        }
        CHECK(all_are(detail::shm_receive(*p.receiver, frames, {}).value().at(0), k));
    }
    CHECK(why.find("max_held_bytes") != std::string::npos);
    CHECK(p.counters().peers_cut_off == 1);
    CHECK(hoard.size() == 12);
    // What it held moved out of the pool; its pages stayed as they were.
    CHECK(eventually([&] { return p.pool().stats().in_use == 0; }));
    for (std::size_t i = 0; i < hoard.size(); ++i) CHECK(all_are(hoard[i].at(0), static_cast<std::int32_t>(i + 1)));
}

namespace {

// A +shm publisher on a raw PUB socket at ipc `name`, its sender's
// counters at hand.
struct publisher {
    zmq::context_t ctx{1};
    zmq::socket_t pub{ctx, zmq::socket_type::pub};
    std::shared_ptr<detail::shm_sender> sender;

    publisher(const std::string& name, detail::shm_options o) {
        o.fan_out = true;
        sender = detail::make_shm_sender(o);
        pub.set(zmq::sockopt::sndhwm, 16);
        pub.set(zmq::sockopt::linger, 0);
        pub.bind("ipc://" + name);
    }
    ~publisher() { detail::shm_close(*sender, 0ms); }
    // False when the pool stays full, or the send waits, past `timeout`.
    bool send(std::int32_t k, std::chrono::milliseconds timeout) {
        std::optional<tensor> t = detail::shm_pool(*sender).try_acquire(dtype::i4, {1 << 16}, "", timeout);
        if (!t) return false;
        for (auto& v : t->mutable_values<std::int32_t>()) v = k;
        return detail::shm_send(*sender, pub, *t, {}, nullptr, timeout);
    }
};

// A subscriber process of role "count": its pipe's read end.
struct subscriber {
    int pipe[2] = {-1, -1};
    std::unique_ptr<child> process;
    subscriber(const std::string& name, int count) {
        REQUIRE(::pipe(pipe) == 0);
        process = std::make_unique<child>(spawn("count " + name + " " + std::to_string(count) + " " +
                                                std::to_string(pipe[1])));
    }
    ~subscriber() {
        ::close(pipe[0]);
        ::close(pipe[1]);
    }
    bool readable() {
        pollfd p{pipe[0], POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }
};

}  // namespace

TEST_CASE("a stopped zpub+shm subscriber does not stall the others: it skips what it lagged on, counted both sides") {
    const std::string name = test_zmq::fresh_ipc_path();
    detail::shm_options so;
    so.pool_bytes = 8u << 20;  // 32 messages of 256 KiB
    publisher pub(name, so);
    std::vector<std::unique_ptr<subscriber>> subs;
    for (int i = 0; i < 3; ++i) subs.push_back(std::make_unique<subscriber>(name, 300));
    std::int32_t k = 0;
    // Until each has its first message (joined PUB/SUB and the side channel).
    std::vector<bool> ready(3, false);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::count(ready.begin(), ready.end(), true) < 3 && std::chrono::steady_clock::now() < deadline) {
        REQUIRE(pub.send(++k, 5s));
        std::this_thread::sleep_for(2ms);
        for (std::size_t i = 0; i < 3; ++i)
            if (!ready[i] && subs[i]->readable()) {
                char x;
                REQUIRE(::read(subs[i]->pipe[0], &x, 1) == 1);
                ready[i] = true;
            }
    }
    REQUIRE(std::count(ready.begin(), ready.end(), true) == 3);
    ::kill(subs[0]->process->pid(), SIGSTOP);
    // The others get their 300 while it is stopped; every send goes through
    // (before: the pool filled with what the stopped one had not claimed,
    // and sends timed out until the lease).
    std::vector<bool> finished(3, false);
    const auto stopped_at = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration detected{};
    while (!(finished[1] && finished[2]) && std::chrono::steady_clock::now() < deadline + 30s) {
        REQUIRE(pub.send(++k, 5s));
        std::this_thread::sleep_for(2ms);
        if (detected == decltype(detected){} && detail::shm_counters(*pub.sender).laggard_drops > 0)
            detected = std::chrono::steady_clock::now() - stopped_at;
        for (std::size_t i = 1; i < 3; ++i) finished[i] = finished[i] || subs[i]->readable();
    }
    REQUIRE((finished[1] && finished[2]));
    MESSAGE("the stopped subscriber was first dropped for "
            << std::chrono::duration_cast<std::chrono::milliseconds>(detected).count() << " ms after it stopped");
    CHECK(detected < 10s);  // the lease is 60 s
    const std::uint64_t dropped = detail::shm_counters(*pub.sender).laggard_drops;
    CHECK(dropped > 0);
    // Let it go on: it skips what was given up for it, and gets the rest.
    ::kill(subs[0]->process->pid(), SIGCONT);
    while (!subs[0]->readable() && std::chrono::steady_clock::now() < deadline + 60s) {
        REQUIRE(pub.send(++k, 5s));
        std::this_thread::sleep_for(2ms);
    }
    std::uint64_t result[2] = {0, 0};
    REQUIRE(::read(subs[0]->pipe[0], result, sizeof result) == sizeof result);
    MESSAGE("publisher: " << dropped << " laggard drops; stopped subscriber: " << result[1] << " skipped");
    CHECK(result[0] == 300);
    CHECK(result[1] > 0);
    CHECK(wait_exit(subs[0]->process->pid()) == 0);
}

TEST_CASE("with block_laggards a stopped subscriber holds the publisher back instead, and nothing is dropped") {
    const std::string name = test_zmq::fresh_ipc_path();
    detail::shm_options so;
    so.pool_bytes = 4u << 20;
    so.block_laggards = true;
    publisher pub(name, so);
    subscriber sub(name, 1000000);
    subscriber other(name, 1000000);
    std::int32_t k = 0;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!(sub.readable() && other.readable()) && std::chrono::steady_clock::now() < deadline) {
        REQUIRE(pub.send(++k, 5s));
        std::this_thread::sleep_for(2ms);
    }
    ::kill(sub.process->pid(), SIGSTOP);
    bool held_back = false;
    for (int i = 0; i < 200 && !held_back; ++i) held_back = !pub.send(++k, 200ms);
    CHECK(held_back);
    CHECK(detail::shm_counters(*pub.sender).laggard_drops == 0);
    ::kill(sub.process->pid(), SIGCONT);
}
