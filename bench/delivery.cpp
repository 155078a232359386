// tenbin-bench: acked delivery (credits, acknowledgements, batches of a
// lost consumer given to another) against plain PUSH/PULL, and how long
// a dead consumer's batches take to reach another.
#include "suite.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace bench {

namespace {

constexpr std::size_t credit = 16;

tenbin::connection_options acked_options(tenbin::connection_options o, std::size_t credits = credit,
                                         tenbin::ack_mode ack = tenbin::ack_mode::on_release) {
    o.acked = true;
    o.credit = credits;
    o.ack = ack;
    return o;
}

// Round trips a second between two threads over tcp, raw libzmq, each end
// with a context of its own as each connection has: the most batches a
// second that a window of one could carry (with ack=on_release a consumer
// waits for the confirmation of each release); a window of n, n times
// that.
double round_trips(int count) {
    zmq::context_t near, far;
    zmq::socket_t ask(near, zmq::socket_type::pair), echo(far, zmq::socket_type::pair);
    ask.bind("tcp://127.0.0.1:*");
    echo.connect(ask.get(zmq::sockopt::last_endpoint));
    const int warmup = 100;
    std::thread t([&] {
        zmq::message_t m;
        for (int i = 0; i < warmup + count; ++i)
            if (!echo.recv(m) || !echo.send(m, zmq::send_flags::none)) return;
    });
    zmq::message_t m;
    auto trip = [&] {
        if (!ask.send(zmq::buffer("?", 1), zmq::send_flags::none) || !ask.recv(m)) fail("the echo went");
    };
    for (int i = 0; i < warmup; ++i) trip();
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i) trip();
    const double s = seconds_since(t0);
    t.join();
    return count / s;
}

// Messages a second that a window of `credits` carries over tcp, raw
// libzmq between two threads, a context each: the sender waits while
// `credits` messages (a 32 B header and `payload` bytes, sent as tenbin
// sends them: copied under its copy threshold, zero-copy from there) are
// unacknowledged, the receiver acknowledges a quarter of them at a time, as
// an acked on_take consumer does. Any credit scheme over one connection is
// bound by this: a window's worth a round trip, whatever the bytes. With
// `confirmed` the receiver acknowledges each message as it takes it and
// waits for the sender's confirmation before the next take (keeping the
// messages that came meanwhile), as an on_release consumer that drops each
// batch before the next take does. With no credits, no acknowledgements:
// the plain stream.
double raw_window(std::size_t credits, std::uint64_t payload, int count, bool confirmed = false) {
    const std::vector<std::byte> bytes(std::max<std::uint64_t>(payload, 32));  // outlives the contexts' queues
    zmq::context_t near, far;
    zmq::socket_t tx(near, zmq::socket_type::pair), rx(far, zmq::socket_type::pair);
    tx.set(zmq::sockopt::linger, 0);
    rx.set(zmq::sockopt::linger, 0);
    tx.set(zmq::sockopt::sndhwm, hwm_for(payload));
    rx.set(zmq::sockopt::rcvhwm, hwm_for(payload));
    tx.bind("tcp://127.0.0.1:*");
    rx.connect(tx.get(zmq::sockopt::last_endpoint));
    const std::size_t quarter = confirmed ? 1 : std::max<std::size_t>(1, credits / 4);
    const int warmup = payload >= MiB ? 4 : 100;
    const double s = with_sender_thread(
        [&](const std::function<void()>& wait_go) {
            std::size_t unacked = 0;
            zmq::message_t ack;
            // Each acknowledgement that came is confirmed at once; one is
            // waited for while the window is full.
            auto confirm_acks = [&](bool wait) {
                while (tx.recv(ack, wait ? zmq::recv_flags::none : zmq::recv_flags::dontwait)) {
                    --unacked;
                    if (!tx.send(zmq::buffer("c", 1), zmq::send_flags::none)) fail("raw window: confirm failed");
                    wait = false;
                }
            };
            auto one = [&] {
                if (confirmed)
                    confirm_acks(unacked >= credits);
                else
                    for (; credits > 0 && unacked >= credits; unacked -= quarter)
                        if (!tx.recv(ack)) fail("raw window: no ack");
                zmq::message_t data = payload < tenbin::default_copy_threshold
                                          ? zmq::message_t(bytes.data(), payload)
                                          : zmq::message_t(const_cast<std::byte*>(bytes.data()), payload,
                                                           [](void*, void*) {}, nullptr);
                if (!tx.send(zmq::const_buffer(bytes.data(), 32), zmq::send_flags::sndmore) ||
                    !tx.send(data, zmq::send_flags::none))
                    fail("raw window: send failed");
                ++unacked;
            };
            // A confirmed receiver waits for each of its warmup's
            // confirmations before it says it is ready.
            auto confirm_all = [&] {
                while (confirmed && unacked > 0) confirm_acks(true);
            };
            for (int i = 0; i < warmup; ++i) one();
            confirm_all();
            wait_go();
            for (int i = 0; i < count; ++i) one();
            confirm_all();
        },
        [&](const std::function<void()>& ready) {
            zmq::message_t m;
            std::size_t taken = 0, in_hand = 0;
            // The next message: true for a batch, false for a confirmation (one frame).
            auto next = [&] {
                if (!rx.recv(m)) fail("raw window: receive failed");
                const bool batch = m.more();
                while (m.more())
                    if (!rx.recv(m)) fail("raw window: receive failed");
                return batch;
            };
            auto take = [&] {
                if (in_hand > 0)
                    --in_hand;
                else
                    while (!next()) {
                    }
                if (credits == 0 || ++taken % quarter != 0) return;
                if (!rx.send(zmq::buffer("a", 1), zmq::send_flags::none)) fail("raw window: ack failed");
                if (confirmed)
                    while (next()) ++in_hand;
            };
            for (int i = 0; i < warmup; ++i) take();
            ready();
            const auto t0 = clock_type::now();
            for (int i = 0; i < count; ++i) take();
            return seconds_since(t0);
        });
    return count / s;
}

// Messages a second of frames of `sizes` bytes, raw libzmq over tcp between
// two threads, a context each. With `router` both ends are ROUTER sockets,
// as acked delivery's are: the sender names the receiver in a routing-id
// frame first (not sent on the wire), the receiver gets the sender's.
double raw_messages(bool router, const std::vector<std::size_t>& sizes, int hwm, int count) {
    zmq::context_t near, far;
    zmq::socket_t rx(far, router ? zmq::socket_type::router : zmq::socket_type::pull),
        tx(near, router ? zmq::socket_type::router : zmq::socket_type::push);
    rx.set(zmq::sockopt::rcvhwm, hwm);
    tx.set(zmq::sockopt::sndhwm, hwm);
    tx.set(zmq::sockopt::linger, 0);
    rx.bind("tcp://127.0.0.1:*");
    const std::string to = router ? "consumer" : "";
    if (router) {
        tx.set(zmq::sockopt::connect_routing_id, to);
        tx.set(zmq::sockopt::router_mandatory, 1);  // a full queue waits, as acked delivery's does
    }
    tx.connect(rx.get(zmq::sockopt::last_endpoint));
    if (router) {
        // The route exists once the connection is up (EHOSTUNREACH until then).
        while (zmq_send(tx.handle(), to.data(), to.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() != EHOSTUNREACH && zmq_errno() != EAGAIN) fail("raw send failed");
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        (void)tx.send(zmq::message_t(), zmq::send_flags::none);
        zmq::message_t m;
        do (void)rx.recv(m);
        while (m.more());
    }
    return count / raw_frames(tx.handle(), rx.handle(), sizes, 100, count, to);
}

}  // namespace

// Both ends tenbin connections in this process, the sender on a thread;
// acked and plain pairs with the same options take turns. Over +shm each
// pool holds what the credits and queues may keep in flight. Also
// ack=on_take (no round trip a batch), at 256 B with credit 16 and 256,
// ack=on_release against raw round trips (what it is bound by), and
// trainers' loops with a step (see trainer_loop): one that drops its batch
// before the next take waits for the confirmation, one that keeps it does
// not.
void suite::acked() {
    struct acked_case {
        std::string set;
        std::uint64_t size;
        std::size_t credits = credit;
        tenbin::ack_mode ack = tenbin::ack_mode::on_release;
        trainer_loop trainer{};
    };
    constexpr auto step = std::chrono::milliseconds(1);
    const std::vector<acked_case> cases = {{"quad", MiB},
                                           {"quad", MiB, credit, tenbin::ack_mode::on_release, {step}},
                                           {"quad", MiB, credit, tenbin::ack_mode::on_release, {step, true}},
                                           {"quad", MiB, credit, tenbin::ack_mode::on_take},
                                           {"batch", 0},
                                           {"small", 0},
                                           {"small", 0, credit, tenbin::ack_mode::on_take},
                                           {"small", 0, 256, tenbin::ack_mode::on_take},
                                           {"small", 0, 1024, tenbin::ack_mode::on_take}};
    for (const std::string transport : {"tcp", "shm"}) {
        if (!wanted("acked vs plain", transport)) continue;
        for (const acked_case& c : cases) {
            const bool trains = c.trainer.step.count() > 0;
            // The first confirmation after a pause trails a whole window of
            // batches (some ms): a trainer's case wants a second a
            // repetition to show its steady state, too long for the quick run.
            if (trains && cfg.quick) continue;
            const form f = c.set == "small" ? form::small : form::multi;
            const bool on_take = c.ack == tenbin::ack_mode::on_take;
            // The batch is slow to send: fewer repetitions, as its other rows.
            const bool batch = c.set == "batch";
            const int warmup = batch ? 1 : 2, reps = batch ? std::max(3, cfg.reps - 2) : cfg.reps;
            const workload w = make_workload(c.set, c.size, false);
            const int hwm = hwm_for(w.payload);
            tenbin::connection_options plain = case_options(hwm);
            plain.shm_pool_bytes =
                std::min<std::uint64_t>(2 * GiB, (c.credits + 2 * hwm + 6) * (w.payload + 64 * KiB));
            const tenbin::connection_options acked = acked_options(plain, c.credits, c.ack);
            connection_pair with(transport, acked, acked), without(transport, plain, plain);
            if (transport == "shm") {
                // Each pool's blocks first touched before the clock runs: a
                // fresh memfd's pages fault in on first write (a 77 MB block
                // about as long as its copy), and the pair that meets more
                // of them in the timed runs would look slower.
                const int blocks = static_cast<int>(plain.shm_pool_bytes / (w.payload + 64 * KiB)) + 1;
                run_connections(with, w, 0, blocks);
                run_connections(without, w, 0, blocks);
            }
            const int count =
                trains ? static_cast<int>(std::chrono::seconds(1) / c.trainer.step)
                     : calibrate(cfg, [&](int n) { return run_connections(with, w, warmup, n); }, w.payload);
            auto rate = [&](connection_pair& p) {
                return [&] { return throughput(w, f, count, run_connections(p, w, warmup, count, c.trainer)); };
            };
            const auto m = interleave(reps, rate(with), rate(without));
            const tenbin::delivery_counters d = with.tx.delivery_stats();
            if (d.redelivered != 0 || d.bad_acks != 0 || d.sent < static_cast<std::uint64_t>(count))
                fail("acked delivery lost its count");
            const std::string goal = f == form::small ? "goal: at least 0.7x" : "goal: at least 0.95x";
            const std::string how = "credit " + std::to_string(c.credits) + (on_take ? ", ack=on_take" : "");
            const std::string row = trains    ? c.trainer.keep ? "acked vs plain, step, batch kept"
                                                               : "acked vs plain, a trainer's step"
                                    : on_take ? "acked vs plain, on_take"
                                              : "acked vs plain";
            const std::string what =
                batch    ? ", the 77 MB batch; "
                : trains ? ", a step of " + std::to_string(c.trainer.step.count() / 1000) + " ms (a sleep) with each batch, " +
                               (c.trainer.keep ? "kept until the next comes" : "dropped before the next take") + ", both; "
                         : "; ";
            add({row, transport, w.payload, m.first, m.second, f == form::small ? "msg/s" : "GB/s",
                 "plain PUSH/PULL, the same options", how + what + goal, reps});
            if (transport == "tcp" && c.set == "quad" && !on_take && !trains) {
                // What any design that confirms each release before the
                // next take carries at this size: the confirmation comes
                // behind the batches sent before it on the one connection.
                const auto r = interleave(
                    reps, [&] { return raw_window(c.credits, w.payload, count, true) * w.payload / 1e9; },
                    [&] { return raw_window(0, w.payload, count) * w.payload / 1e9; });
                char reached[64];
                std::snprintf(reached, sizeof reached, "acked reached %.2f of it, plain %.2f of raw plain",
                              m.first / r.first, m.second / r.second);
                add({"raw confirmed window vs raw plain", transport, w.payload, r.first, r.second, "GB/s",
                     "raw libzmq, the same stream without acknowledgements",
                     "raw libzmq, a window of " + std::to_string(c.credits) +
                         " batches of one frame, each acknowledged as it is taken and its confirmation awaited "
                         "before the next take, as an on_release consumer that drops each batch: what such a "
                         "consumer can carry here (" + reached + ")",
                     reps});
            }
            if (transport == "tcp" && f == form::small && !on_take) {
                std::vector<double> trips;
                for (int i = 0; i < reps; ++i) trips.push_back(round_trips(count));
                const double bound = median(trips);
                add({"acked on_release vs a round trip", transport, w.payload, m.first, bound, "msg/s",
                     "round trips between two threads, raw libzmq",
                     "a confirmed release a batch; the window of credit " + std::to_string(credit) +
                         " is bound by " + std::to_string(static_cast<long>(credit * bound)) + " msg/s",
                     reps});
            }
            if (transport == "tcp" && f == form::small && on_take) {
                std::vector<double> windows;
                for (int i = 0; i < reps; ++i) windows.push_back(raw_window(c.credits, w.payload, count));
                const double window = median(windows);
                char reached[32];
                std::snprintf(reached, sizeof reached, "%.2f", m.first / window);
                add({"raw credit window vs plain", transport, w.payload, window, m.second, "msg/s",
                     "plain PUSH/PULL, the same run as the acked row above",
                     "raw libzmq, a window of " + std::to_string(c.credits) +
                         " messages acknowledged a quarter at a time: what any credit scheme can carry here "
                         "(the acked row above reached " + reached + " of it)",
                     reps});
            }
            if (transport == "tcp" && f == form::small && c.credits == 256) {
                // What libzmq itself moves with an acked message's frames:
                // routing id, a 32 B header, the data, the 64 B position.
                const std::vector<std::size_t> plain_frames{32, w.payload}, acked_frames{32, w.payload, 64};
                const auto r = interleave(reps, [&] { return raw_messages(true, acked_frames, hwm, count); },
                                          [&] { return raw_messages(false, plain_frames, hwm, count); });
                add({"acked bound, raw libzmq ROUTER", transport, w.payload, r.first, r.second, "msg/s",
                     "raw libzmq PUSH/PULL, the frames of a plain message (32 + 256 B)",
                     "ROUTER to ROUTER, the frames of an acked batch sent alone (routing id, 32 + 256 + 64 B): "
                     "the acked rows' bound but for packs, which carry many a message",
                     reps});
            }
        }
    }
}

// A consumer process takes a credit's worth of batches and keeps them,
// acknowledging none; another consumer (here) waits with credit. The clock
// runs from the first one's end until the second has one of its batches.
// Killed (SIGKILL): its connection drops, which the producer's socket
// monitor sees. Silent (SIGSTOP): the connection stays up, and
// the producer waits for the missed heartbeats. Both against leaving
// (closing without acknowledging), which says so.
void suite::redelivery() {
    const std::string transport = "tcp-2proc";
    if (!wanted("acked redelivery", transport)) return;
    const std::chrono::milliseconds heartbeat(100);
    const workload w = make_workload("quad", MiB, false);
    tenbin::connection_options o = acked_options(case_options(hwm_for(w.payload)));
    o.ack_heartbeat = heartbeat;
    enum class end { killed, silent, leaving };
    auto redelivered_after = [&](end how) {
        return [&, how] {
            tenbin::connection tx("zrpush://127.0.0.1:*", o);
            child holder({cfg.self, "--peer", "holder", "--endpoint", receiver_url(tx), "--credit",
                          std::to_string(credit), "--heartbeat-ms", std::to_string(heartbeat.count())});
            for (std::size_t i = 0; i < credit; ++i)
                if (!tx.send(w.tensors)) fail("send timed out");
            if (const std::string l = holder.read_line(); l != "holding") fail("the holder said " + l);
            tenbin::connection rx(receiver_url(tx), o);
            for (const auto t0 = clock_type::now(); tx.consumers().size() < 2;) {
                if (seconds_since(t0) > 10) fail("the second consumer never joined");
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            double first = 0;
            const auto t0 = clock_type::now();
            if (how == end::killed) holder.kill();
            else if (how == end::silent) holder.stop();
            else holder.write_line("leave");
            for (std::size_t i = 0; i < credit; ++i) {
                const auto batch = rx.recv();
                if (i == 0) first = seconds_since(t0);
                if (!batch) fail("the held batches never came back");
                check_received(*batch, w, i == 0);
            }
            if (how == end::leaving) holder.wait();
            else holder.kill();
            if (tx.delivery_stats().redelivered != credit) fail("not every held batch was redelivered");
            return 1 / first;
        };
    };
    const std::vector<double> m = interleave_all(
        cfg.reps, {redelivered_after(end::killed), redelivered_after(end::silent), redelivered_after(end::leaving)});
    auto ms = [](double rate) { return std::to_string(1e3 / rate).substr(0, 5); };
    const std::string goal = "; heartbeat " + std::to_string(heartbeat.count()) + " ms, goal: within 2";
    add({"acked redelivery, killed vs leaving", transport, w.payload, m[0], m[2], "op/s",
         "a consumer that closes without acknowledging",
         "ms to the first redelivered batch: killed " + ms(m[0]) + ", leaving " + ms(m[2]) + goal});
    add({"acked redelivery, silent vs leaving", transport, w.payload, m[1], m[2], "op/s",
         "a consumer that closes without acknowledging",
         "ms to the first redelivered batch: silent " + ms(m[1]) + ", leaving " + ms(m[2]) + goal});
}

}  // namespace bench
