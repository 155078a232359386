// A +shm receiver against senders that misbehave (fake_sender.hpp): no
// receive waits past its timeout, a hostile ring breaks the link instead
// of blocking a release, mappings and side channels stay within their
// bounds, and messages of the senders that behave keep arriving.
#include "fake_sender.hpp"

#include <tenbin/connect.hpp>

using namespace tenbin;
using namespace shm_test;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

// A receiver's options with a claim timeout of `t`.
detail::shm_options receive_within(std::chrono::milliseconds t) {
    detail::shm_options o;
    o.claim_timeout = t;
    return o;
}

// The class and text of the error `f` throws ("none" when it returns).
template <class F>
std::pair<errc, std::string> failure(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return {e.code(), e.what()};
    }
    FAIL("no error");
    return {};
}

// The receiver of `p` still takes its sender's messages.
void still_served(shm_pair& p, std::int32_t k) {
    REQUIRE(p.send(filled(p.pool(), k)));
    CHECK(all_are(p.recv().value().at(0), k));
}

}  // namespace

TEST_CASE("a side channel whose backlog stays full: the receive gives up at its timeout, saying so") {
    shm_pair p({}, receive_within(300ms));
    still_served(p, 1);
    fake_sender stuck(fake_sender::behaviour::silent, false, 0);
    // Connections nobody accepts fill its backlog.
    std::vector<detail::unique_fd> waiting;
    for (int i = 0; i < 8; ++i) {
        detail::unique_fd c(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        socklen_t len = 0;
        const sockaddr_un a = detail::shm_impl::abstract_address(stuck.name(), len);
        if (::connect(c.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) break;
        waiting.push_back(std::move(c));
    }
    const std::uint64_t s = stuck.segment(4096);
    const auto start = clock_type::now();
    const auto [code, what] = failure([&] { (void)detail::shm_receive(*p.receiver, stuck.message({&s, 1}), {}); });
    CHECK(clock_type::now() - start < 5s);  // before: for ever
    CHECK(code == errc::timeout);
    CHECK(what.find("accepted no connection") != std::string::npos);
    still_served(p, 2);
}

TEST_CASE("a silent side channel costs one receive timeout and says so; good senders go on") {
    shm_pair p({}, receive_within(300ms));
    still_served(p, 1);
    fake_sender silent(fake_sender::behaviour::silent);
    const std::uint64_t s = silent.segment(4096);
    for (int k = 0; k < 2; ++k) {
        const auto start = clock_type::now();
        const auto [code, what] = failure([&] { (void)detail::shm_receive(*p.receiver, silent.message({&s, 1}), {}); });
        CHECK(clock_type::now() - start < 5s);  // before: 30 s each
        CHECK(code == errc::timeout);
        CHECK(what.find("did not answer the claim") != std::string::npos);  // before: "closed its side channel"
    }
    CHECK(detail::shm_counters(*p.receiver).claim_timeouts == 2);
    still_served(p, 2);
}

TEST_CASE("a ring its sender makes unwritable breaks the link at once, never a wait; the next message says why") {
    shm_pair p;
    still_served(p, 1);
    fake_sender hostile(fake_sender::behaviour::ring_ahead);
    const std::uint64_t s = hostile.segment(4096);
    auto held = detail::shm_receive(*p.receiver, hostile.message({&s, 1}), {}).value();
    const auto start = clock_type::now();
    held.clear();  // the release finds the ring unwritable
    CHECK(clock_type::now() - start < 1s);  // before: waited 30 s for room
    CHECK(detail::shm_counters(*p.receiver).links_broken == 1);
    const auto [code, what] = failure([&] { (void)detail::shm_receive(*p.receiver, hostile.message({&s, 1}), {}); });
    CHECK(code == errc::io_error);
    CHECK(what.find("ring cannot be written") != std::string::npos);
    still_served(p, 2);
}

TEST_CASE("a hostile sender cannot take a receiver past max_mappings or max_mapped_bytes; good senders go on") {
    detail::shm_options ro;
    ro.max_mappings = 8;
    ro.max_mapped_bytes = std::uint64_t{1} << 30;
    shm_pair p({}, ro);
    still_served(p, 1);
    const auto mapped = detail::shm_counters(*p.receiver).mappings;
    SUBCASE("mappings") {
        fake_sender hostile(fake_sender::behaviour::answers);
        std::vector<std::uint64_t> many;
        for (int i = 0; i < 20; ++i) many.push_back(hostile.segment(4096));
        const auto [code, what] = failure([&] { (void)detail::shm_receive(*p.receiver, hostile.message(many), {}); });
        CHECK(code == errc::limit_exceeded);
        CHECK(what.find("max_mappings") != std::string::npos);
    }
    SUBCASE("bytes: a sparse segment of a TiB") {
        fake_sender hostile(fake_sender::behaviour::answers);
        const std::uint64_t huge = hostile.segment(std::uint64_t{1} << 40);
        const auto [code, what] =
            failure([&] { (void)detail::shm_receive(*p.receiver, hostile.message({&huge, 1}), {}); });
        CHECK(code == errc::limit_exceeded);
        CHECK(what.find("max_mapped_bytes") != std::string::npos);
    }
    const auto c = detail::shm_counters(*p.receiver);
    CHECK(c.refused == 1);
    CHECK(c.mappings <= mapped);  // what the hostile sender handed over is unmapped (idle senders' too)
    for (std::int32_t k = 2; k <= 4; ++k) still_served(p, k);
}

TEST_CASE("side channels of many senders stay within max_senders: idle ones close, held ones refuse the next") {
    detail::shm_options ro;
    ro.max_senders = 4;
    shm_pair p({}, ro);
    still_served(p, 1);
    std::vector<std::unique_ptr<fake_sender>> senders;
    std::vector<std::uint64_t> segs;
    for (int i = 0; i < 12; ++i) {
        senders.push_back(std::make_unique<fake_sender>(fake_sender::behaviour::answers));
        segs.push_back(senders.back()->segment(4096));
    }
    const std::size_t fds = count_fds();
    // Each message's tensors dropped at once: its link is idle after it.
    for (std::size_t i = 0; i < senders.size(); ++i)
        CHECK(detail::shm_receive(*p.receiver, senders[i]->message({&segs[i], 1}), {}));
    auto c = detail::shm_counters(*p.receiver);
    CHECK(c.senders <= 4);
    CHECK(c.senders_evicted >= 8);
    CHECK(eventually([&] { return count_fds() <= fds + 8; }));  // 4 links, both ends in this process
    still_served(p, 2);
    // Every link held by tensors: the next sender's message is refused.
    std::vector<std::vector<tensor>> held;
    REQUIRE(p.send(filled(p.pool(), 3)));
    held.push_back(p.recv().value());
    for (std::size_t i = 0; i < 3; ++i)
        held.push_back(detail::shm_receive(*p.receiver, senders[i]->message({&segs[i], 1}), {}).value());
    const auto [code, what] =
        failure([&] { (void)detail::shm_receive(*p.receiver, senders[5]->message({&segs[5], 1}), {}); });
    CHECK(code == errc::limit_exceeded);
    CHECK(what.find("max_senders") != std::string::npos);
    CHECK(detail::shm_counters(*p.receiver).refused == 1);
    still_served(p, 4);
}

TEST_CASE("a loader talking to a sender that never answers is destroyed within its receive timeout") {
    const std::string address = "ipc://" + test_zmq::fresh_ipc_path();
    fake_sender silent(fake_sender::behaviour::silent);
    const std::uint64_t s = silent.segment(4096);
    zmq::context_t ctx(1);
    zmq::socket_t out = test_zmq::make_socket(ctx, zmq::socket_type::push);
    std::optional<loader> l;
    l.emplace("zpull+shm://" + address.substr(6));
    out.connect(address);
    for (int i = 0; i < 3; ++i) {
        auto frames = silent.message({&s, 1});
        forward(out, frames);
    }
    std::this_thread::sleep_for(200ms);  // the loader is in a claim
    const auto start = clock_type::now();
    l.reset();
    CHECK(clock_type::now() - start < 2s);  // before: up to 30 s a claim
}
