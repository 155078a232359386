// tenbin-bench: acked delivery (credits, acknowledgements, batches of a
// lost consumer given to another) against plain PUSH/PULL, and how long
// a dead consumer's batches take to reach another.
#include "suite.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace bench {

namespace {

constexpr std::size_t credit = 16;

tenbin::connection_options acked_options(tenbin::connection_options o) {
    o.acked = true;
    o.credit = credit;
    return o;
}

}  // namespace

// Both ends tenbin connections in this process, the sender on a thread;
// acked and plain pairs with the same options take turns. Over +shm each
// pool holds what the credits and queues may keep in flight.
void suite::acked() {
    const std::vector<std::pair<std::string, std::uint64_t>> cases = {{"quad", MiB}, {"batch", 0}, {"small", 0}};
    for (const std::string transport : {"tcp", "shm"}) {
        if (!wanted("acked vs plain", transport)) continue;
        for (const auto& [set, size] : cases) {
            const form f = set == "small" ? form::small : form::multi;
            // The batch is slow to send: fewer repetitions, as its other rows.
            const bool batch = set == "batch";
            const int warmup = batch ? 1 : 2, reps = batch ? std::max(3, cfg.reps - 2) : cfg.reps;
            const workload w = make_workload(set, size, false);
            const int hwm = hwm_for(w.payload);
            tenbin::connection_options plain = case_options(hwm);
            plain.shm_pool_bytes =
                std::min<std::uint64_t>(2 * GiB, (credit + 2 * hwm + 6) * (w.payload + 64 * KiB));
            const tenbin::connection_options acked = acked_options(plain);
            connection_pair with(transport, acked, acked), without(transport, plain, plain);
            const int count =
                calibrate(cfg, [&](int c) { return run_connections(with, w, warmup, c); }, w.payload);
            auto rate = [&](connection_pair& p) {
                return [&] { return throughput(w, f, count, run_connections(p, w, warmup, count)); };
            };
            const auto m = interleave(reps, rate(with), rate(without));
            const tenbin::delivery_counters d = with.tx.delivery_stats();
            if (d.redelivered != 0 || d.bad_acks != 0 || d.sent < static_cast<std::uint64_t>(count))
                fail("acked delivery lost its count");
            const std::string goal = f == form::small ? "goal: at least 0.7x" : "goal: at least 0.95x";
            add({"acked vs plain", transport, w.payload, m.first, m.second, f == form::small ? "msg/s" : "GB/s",
                 "plain PUSH/PULL, the same options",
                 "credit " + std::to_string(credit) + (batch ? ", the 77 MB batch; " : "; ") + goal, reps});
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
