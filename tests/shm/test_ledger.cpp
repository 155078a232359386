// The +shm sender's bookkeeping (lib/shm/ledger.hpp), driven through time
// by hand: claims, releases, leases, peers coming and going, the PUB rules.
// No process, socket or clock.
#include "shm/ledger.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

using namespace tenbin;
using namespace tenbin::detail::shm_impl;
using namespace std::chrono_literals;

namespace {

const time_point t0 = time_point() + 1000s;

// A message of one block of `bytes` in segment `segment`; `released`
// counts the times its block went back (its last holder dropped).
flight message(std::uint64_t segment, std::shared_ptr<int> released, std::size_t bytes = 64) {
    flight f;
    auto* p = new std::byte[bytes];
    f.holders.push_back(buffer::adopt(p, bytes, [released, p] {
        ++*released;
        delete[] p;
    }));
    f.segments.push_back(segment);
    return f;
}

// Whether peer `p`'s claim of `seq` went through.
bool took(ledger& l, peer_id p, std::uint64_t seq) { return l.claim(p, seq) == ledger::claimed::ok; }

// How many messages `out` gives back to the pool (dropped here).
std::size_t drop(ledger::outcome& out) {
    const std::size_t n = out.done.size();
    out.done.clear();
    return n;
}

}  // namespace

TEST_CASE("PUSH: a message is done with once its claimer releases it, not before") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s});
    l.join(7);
    auto released = std::make_shared<int>(0);
    const auto sent = l.add(message(1, released), t0, false);
    CHECK(sent.seq == 1);
    REQUIRE(sent.claim_by);
    CHECK(*sent.claim_by == t0 + 30s);  // half the lease
    CHECK(took(l, 7, sent.seq));
    ledger::outcome out;
    l.settle(t0 + 1ms, out);
    CHECK(out.done.empty());
    CHECK(l.settled());  // claimed: a close need not wait for it
    l.release(7, sent.seq);
    l.settle(t0 + 2ms, out);
    CHECK(drop(out) == 1);
    CHECK(l.in_flight() == 0);
}

TEST_CASE("a message claimed by nobody is given up at its lease; a claim after that is refused") {
    ledger l({.lease = 10s, .fan_out = false, .grace = 1s});
    l.join(3);
    const auto sent = l.add(message(1, std::make_shared<int>(0)), t0, false);
    ledger::outcome out;
    CHECK_FALSE(l.expiring(t0 + 9s));
    CHECK(l.collect(t0 + 9s, out) == t0 + 10s);
    CHECK(out.done.empty());
    CHECK(l.expiring(t0 + 10s));
    CHECK(l.collect(t0 + 10s, out) == time_point::max());
    CHECK(drop(out) == 1);
    CHECK(l.to_retire().empty());
    CHECK(l.counters().leases_expired == 1);
    CHECK_FALSE(took(l, 3, sent.seq));
}

TEST_CASE("a message held past its lease goes back to the pool once its segments are retired") {
    ledger l({.lease = 10s, .fan_out = false, .grace = 1s});
    l.join(3);
    flight f = message(5, std::make_shared<int>(0));
    f.segments.push_back(6);
    const auto sent = l.add(std::move(f), t0, false);
    REQUIRE(took(l, 3, sent.seq));
    ledger::outcome out;
    l.collect(t0 + 10s, out);
    CHECK(out.done.empty());
    CHECK(l.to_retire() == std::vector<std::uint64_t>{5, 6});
    CHECK_FALSE(took(l, 3, sent.seq));  // given up: a claim now is refused
    l.retired(5, true);
    l.sweep(out);
    CHECK(out.done.empty());  // 6 still shares its pages with the holder
    l.retired(6, true);
    l.sweep(out);
    CHECK(drop(out) == 1);
    CHECK(l.in_flight() == 0);
    CHECK(l.counters().retires_failed == 0);
}

TEST_CASE("a retire that fails keeps the message out of the pool until its holder lets go or a retry succeeds") {
    ledger l({.lease = 10s, .fan_out = false, .grace = 1s});
    l.join(3);
    l.join(4);
    const auto a = l.add(message(5, std::make_shared<int>(0)), t0, false);
    const auto b = l.add(message(6, std::make_shared<int>(0)), t0, false);
    REQUIRE(took(l, 3, a.seq));
    REQUIRE(took(l, 4, b.seq));
    ledger::outcome out;
    l.collect(t0 + 10s, out);
    for (std::uint64_t s : l.to_retire()) l.retired(s, false);
    for (std::uint64_t s : l.to_retire()) l.retired(s, false);  // tried again: counted once a message
    l.sweep(out);
    CHECK(out.done.empty());
    CHECK(l.pinned() == 2);
    CHECK(l.counters().retires_failed == 2);
    CHECK(l.in_flight() == 2);
    // a: its holder releases it, as it would through its ring.
    l.release(3, a.seq);
    l.sweep(out);
    CHECK(drop(out) == 1);
    // b: a retry succeeds while its holder keeps it.
    CHECK(l.to_retire() == std::vector<std::uint64_t>{6});
    l.retired(6, true);
    l.sweep(out);
    CHECK(drop(out) == 1);
    CHECK(l.pinned() == 0);
    CHECK(l.in_flight() == 0);
}

TEST_CASE("a pinned message whose holder leaves goes back to the pool") {
    ledger l({.lease = 10s, .fan_out = false, .grace = 1s});
    l.join(3);
    const auto a = l.add(message(5, std::make_shared<int>(0)), t0, false);
    REQUIRE(took(l, 3, a.seq));
    ledger::outcome out;
    l.collect(t0 + 10s, out);
    l.retired(5, false);
    l.leave(3);
    l.sweep(out);
    CHECK(drop(out) == 1);
}

TEST_CASE("a peer that leaves releases what it held") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s});
    l.join(1);
    l.join(2);
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    const auto b = l.add(message(2, std::make_shared<int>(0)), t0, false);
    REQUIRE(took(l, 1, a.seq));
    REQUIRE(took(l, 2, b.seq));
    l.leave(1);
    ledger::outcome out;
    l.settle(t0 + 1s, out);
    CHECK(drop(out) == 1);
    CHECK(l.in_flight() == 1);
    CHECK(l.peers() == std::vector<peer_id>{2});
}

TEST_CASE("between deadlines a PUSH pass looks only at the messages touched since") {
    ledger l({.lease = 10s, .fan_out = false, .grace = 1s});
    l.join(1);
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    const auto b = l.add(message(2, std::make_shared<int>(0)), t0 + 1s, false);
    REQUIRE(took(l, 1, a.seq));
    REQUIRE(took(l, 1, b.seq));
    l.release(1, b.seq);
    ledger::outcome out;
    CHECK(l.collect(t0 + 2s, out) == t0 + 10s);  // the first lease still due
    CHECK(drop(out) == 1);
    l.release(1, a.seq);
    CHECK(l.collect(t0 + 3s, out) == t0 + 10s);
    CHECK(drop(out) == 1);
    CHECK(l.in_flight() == 0);
}

TEST_CASE("segments: each given once per peer; a closed one is told to the peers that had it") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s});
    l.join(1);
    l.join(2);
    flight f = message(4, std::make_shared<int>(0));
    f.segments.push_back(9);
    const auto a = l.add(std::move(f), t0, false);
    REQUIRE(took(l, 1, a.seq));
    CHECK(l.to_give(1, a.seq) == std::vector<std::uint64_t>{4, 9});
    CHECK(l.to_give(1, a.seq).empty());
    l.closed(std::vector<std::uint64_t>{9, 11});
    CHECK(l.untold());
    // Claims wait for their answers while a peer has closed segments to hear of.
    CHECK_FALSE(l.add(message(6, std::make_shared<int>(0)), t0, false).claim_by);
    CHECK(l.take_closed(2, 10).empty());
    CHECK(l.take_closed(1, 10) == std::vector<std::uint64_t>{9});
    CHECK_FALSE(l.untold());
    CHECK(l.add(message(6, std::make_shared<int>(0)), t0, false).claim_by);
    CHECK_FALSE(l.add(message(6, std::make_shared<int>(0)), t0, true).claim_by);  // the pool closed some
}

TEST_CASE("PUB: done once every subscriber is past it; a late joiner's claim is refused") {
    ledger l({.lease = 60s, .fan_out = true, .grace = 1s});
    l.join(1);
    l.join(2);
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    REQUIRE(a.claim_by);
    CHECK(*a.claim_by == t0 + 500ms);  // half the grace
    const auto b = l.add(message(2, std::make_shared<int>(0)), t0, false);
    ledger::outcome out;
    REQUIRE(took(l, 1, a.seq));
    l.release(1, a.seq);
    l.settle(t0 + 1ms, out);
    CHECK(out.done.empty());  // subscriber 2 is not past it
    REQUIRE(took(l, 2, b.seq));  // past it (a PUB receiver skips nothing it was sent)
    l.settle(t0 + 2ms, out);
    CHECK(drop(out) == 1);
    l.release(2, b.seq);
    CHECK_FALSE(l.settled());
    l.settle(t0 + 3ms, out);
    CHECK(out.done.empty());  // subscriber 1 is not past b
    l.join(3);
    REQUIRE(took(l, 1, b.seq));
    l.release(1, b.seq);
    l.settle(t0 + 4ms, out);
    CHECK(out.done.empty());  // the new subscriber has claimed nothing
    CHECK_FALSE(took(l, 3, a.seq));  // given up before it joined
    REQUIRE(took(l, 3, b.seq));
    l.release(3, b.seq);
    l.settle(t0 + 5ms, out);
    CHECK(drop(out) == 1);
    CHECK(l.settled());
}

TEST_CASE("PUB with no subscriber on the side channel: a message waits the grace, quietly claimed by nobody") {
    ledger l({.lease = 60s, .fan_out = true, .grace = 1s});
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    CHECK_FALSE(a.claim_by);  // the first subscriber's claim waits for its answer
    ledger::outcome out;
    CHECK(l.collect(t0 + 999ms, out) == t0 + 1s);
    CHECK(out.done.empty());
    CHECK(l.expiring(t0 + 1s));
    l.collect(t0 + 1s, out);
    CHECK(drop(out) == 1);
}

TEST_CASE("a failed send forgets its message") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s});
    auto released = std::make_shared<int>(0);
    const auto a = l.add(message(1, released), t0, false);
    CHECK(l.forget(a.seq));
    CHECK(*released == 1);
    CHECK_FALSE(l.forget(a.seq));
    CHECK(l.in_flight() == 0);
}

TEST_CASE("a peer that claims past max_held_bytes while another is there is cut off; what it held is retired") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s, .max_held_bytes = 200});
    l.join(1);
    l.join(2);
    std::vector<std::uint64_t> seqs;
    for (std::uint64_t s = 1; s <= 3; ++s)
        seqs.push_back(l.add(message(s, std::make_shared<int>(0), 100), t0, false).seq);
    CHECK(took(l, 1, seqs[0]));
    CHECK(took(l, 1, seqs[1]));
    CHECK(l.claim(1, seqs[2]) == ledger::claimed::cut_off);
    CHECK(l.counters().peers_cut_off == 1);
    CHECK_FALSE(l.has_peer(1));
    CHECK(l.claim(1, seqs[2]) == ledger::claimed::gone);  // cut off: nothing more
    // What it held leaves only once retired: it may still map it.
    ledger::outcome out;
    l.settle(t0 + 1ms, out);
    CHECK(out.done.empty());
    CHECK(l.to_retire() == std::vector<std::uint64_t>{1, 2});
    l.retired(1, true);
    l.retired(2, true);
    l.sweep(out);
    CHECK(drop(out) == 2);
    // Alone on the side channel, a peer may hold the whole pool (backpressure).
    l.leave(2);
    l.join(3);
    CHECK(took(l, 3, seqs[2]));
    const auto more = l.add(message(9, std::make_shared<int>(0), 500), t0, false);
    CHECK(took(l, 3, more.seq));
}

TEST_CASE("PUB: a message nobody holds is given up for the laggards after laggard_after, each drop counted") {
    ledger l({.lease = 60s, .fan_out = true, .grace = 1s, .laggard_after = 300ms});
    l.join(1);
    l.join(2);  // stopped: claims nothing
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    REQUIRE(a.claim_by);
    CHECK(*a.claim_by == t0 + 150ms);  // half the time to its give-up
    const auto b = l.add(message(2, std::make_shared<int>(0)), t0 + 100ms, false);
    REQUIRE(took(l, 1, a.seq));
    l.release(1, a.seq);
    REQUIRE(took(l, 1, b.seq));  // held: not given up while held
    ledger::outcome out;
    CHECK(l.collect(t0 + 299ms, out) == t0 + 300ms);
    CHECK(out.done.empty());
    CHECK(l.expiring(t0 + 300ms));
    l.collect(t0 + 450ms, out);
    CHECK(drop(out) == 1);  // a, for peer 2
    CHECK(l.counters().laggard_drops == 1);
    CHECK_FALSE(took(l, 2, a.seq));  // it skips it when it gets to it
    l.release(1, b.seq);
    l.collect(t0 + 451ms, out);
    CHECK(drop(out) == 1);  // b: peer 2 is past a, not past b
    CHECK(l.counters().laggard_drops == 2);
}

TEST_CASE("PUB with block_laggards: a message waits for every subscriber until its lease") {
    ledger l({.lease = 5s, .fan_out = true, .grace = 1s, .laggard_after = 300ms, .block_laggards = true});
    l.join(1);
    l.join(2);
    const auto a = l.add(message(1, std::make_shared<int>(0)), t0, false);
    REQUIRE(took(l, 1, a.seq));
    l.release(1, a.seq);
    ledger::outcome out;
    l.collect(t0 + 4s, out);
    CHECK(out.done.empty());
    l.collect(t0 + 5s, out);
    CHECK(drop(out) == 1);
    CHECK(l.counters().laggard_drops == 0);
    CHECK(l.counters().leases_expired == 1);
}

TEST_CASE("PUSH: sends wait at max_unclaimed per peer; what a peer that left never claimed no longer counts") {
    ledger l({.lease = 60s, .fan_out = false, .grace = 1s, .max_unclaimed = 2});
    std::vector<std::uint64_t> seqs;
    auto send = [&] { seqs.push_back(l.add(message(seqs.size() + 1, std::make_shared<int>(0)), t0, false).seq); };
    send();
    send();
    CHECK_FALSE(l.may_send());  // no peer yet: a window of one peer's
    l.join(1);
    l.join(2);
    CHECK(l.may_send());  // two peers: four
    send();
    send();
    CHECK_FALSE(l.may_send());
    REQUIRE(took(l, 1, seqs[0]));
    CHECK(l.may_send());
    send();
    CHECK_FALSE(l.may_send());
    // Peer 2 is killed with what ZeroMQ had queued to it: those never come.
    l.leave(2);
    CHECK(l.may_send());
    send();
    send();
    CHECK_FALSE(l.may_send());  // one peer: two
    CHECK(l.forget(seqs.back()));  // a send that failed gives its place back
    CHECK(l.may_send());
}
