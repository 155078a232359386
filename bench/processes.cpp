// tenbin-bench: two-process cases: against the tensorcom-style Python
// peer, on the tensorcom-sized batch, and with CURVE.
#include "suite.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace bench {

// ---- 6: the tensorcom-style Python peer, two processes over tcp ----
void suite::python(form f, const std::vector<std::uint64_t>& sizes) {
    if (!wanted(std::string(name_of(f)) + " vs python", "tcp-2proc")) return;
    const peer tp{peer_kind::tenbin, "reuse"}, pp{peer_kind::python, {}};
    for (std::uint64_t size : sizes) {
        const workload w = make_workload("quad", size, false);
        const int count = calibrate(
            cfg, [&](int c) { return run_processes(cfg, tp, tp, f, w, 2, c); }, w.payload);
        auto rate = [&](double sec) { return throughput(w, f, count, sec); };
        // Python is slower: fewer repetitions keep the run short.
        const int reps = std::max(3, cfg.reps - 2);
        const auto m = interleave(
            reps, [&] { return rate(run_processes(cfg, tp, tp, f, w, 2, count)); },
            [&] { return rate(run_processes(cfg, pp, pp, f, w, 2, count)); });
        add({std::string(name_of(f)) + " vs python", "tcp-2proc", w.payload, m.first, m.second, "GB/s",
             "tensorcom-style Python (pyzmq defaults)", "both tenbin peers with reuse_large_allocations", reps});
    }
}

// ---- the tensorcom-sized batch: the allocation wall ----
void suite::batch() {
    if (!wanted("batch multi", "tcp-2proc")) return;
    const workload w = make_workload("batch", 0, false);
    const peer t_reuse{peer_kind::tenbin, "reuse"}, t_default{peer_kind::tenbin, "default"},
        r_default{peer_kind::raw, "default"}, r_reuse{peer_kind::raw, "reuse"}, py{peer_kind::python, {}};
    const int count = cfg.quick ? 3 : 16;
    auto run = [&](const peer& p) {
        return [&, p] { return throughput(w, form::multi, count, run_processes(cfg, p, p, form::multi, w, 2, count)); };
    };
    const int reps = std::max(3, cfg.reps - 2);
    const auto m = interleave_all(reps, {run(t_reuse), run(t_default), run(r_default), run(r_reuse), run(py)});
    add({"batch multi, reuse on", "tcp-2proc", w.payload, m[0], m[2], "GB/s", "raw libzmq, glibc defaults",
         "77 MB: 256x3x224x224 f2 + 256 i4", reps});
    add({"batch multi, both glibc defaults", "tcp-2proc", w.payload, m[1], m[2], "GB/s",
         "raw libzmq, glibc defaults", {}, reps});
    add({"batch multi, both reuse on", "tcp-2proc", w.payload, m[0], m[3], "GB/s",
         "raw libzmq + reuse_large_allocations", {}, reps});
    add({"batch multi vs python", "tcp-2proc", w.payload, m[0], m[4], "GB/s",
         "tensorcom-style Python (pyzmq defaults)", "tenbin with reuse on", reps});
}

// ---- CURVE against plain tcp: the cost of encryption ----
// Both sides tenbin (reuse on) in two processes, plain and CURVE in
// alternation; ratio = CURVE / plain.
void suite::curve() {
    const bool one = wanted("curve multi", "tcp-2proc"), batch = wanted("curve 77 MB multi", "tcp-2proc");
    if (!one && !batch) return;
    // Keys go to the peers as arguments: none may start with '-'.
    do cfg.curve = tenbin::generate_curve_keys();
    while (cfg.curve.public_key[0] == '-' || cfg.curve.secret_key[0] == '-');
    const peer plain{peer_kind::tenbin, "reuse"}, secured{peer_kind::tenbin, "reuse", true};
    const int reps = std::max(3, cfg.reps - 2);
    // CURVE and plain peers taking turns, `count` messages of `w` each.
    auto secured_vs_plain = [&](const workload& w, int count) {
        auto rate = [&](const peer& p) {
            return [&, p] { return throughput(w, form::multi, count, run_processes(cfg, p, p, form::multi, w, 2, count)); };
        };
        return interleave_all(reps, {rate(secured), rate(plain)});
    };
    if (one) {
        const workload w = make_workload("quad", MiB, false);
        const int count = calibrate(
            cfg, [&](int c) { return run_processes(cfg, secured, secured, form::multi, w, 2, c); }, w.payload);
        const auto m = secured_vs_plain(w, count);
        add({"curve multi", "tcp-2proc", w.payload, m[0], m[1], "GB/s", "plain tcp, the same peers",
             "CURVE (libsodium) on both sides", reps});
    }
    if (batch) {
        const workload w = make_workload("batch", 0, false);
        const auto m = secured_vs_plain(w, cfg.quick ? 3 : 16);
        add({"curve 77 MB multi", "tcp-2proc", w.payload, m[0], m[1], "GB/s", "plain tcp, the same peers",
             "77 MB batch, CURVE on both sides", reps});
    }
}

}  // namespace bench
