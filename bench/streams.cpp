// tenbin-bench: streams of tenbin against raw libzmq over every transport,
// where tenbin's time goes over inproc, and producers making each batch.
#include "suite.hpp"

#include <zmq.h>

#include <algorithm>
#include <string>
#include <vector>

namespace bench {

// ---- 1-3: streams against raw libzmq ----
// With `contender` raw, raw libzmq against itself in the same
// alternation (the "noise" rows): what this machine's noise alone makes
// of a ratio that should be 1.
void suite::streams(form f, const std::vector<std::uint64_t>& sizes, const std::vector<std::string>& transports,
             impl contender) {
    const bool small = f == form::small;
    const bool noise = contender == impl::raw;
    const std::string group = noise ? "noise" : name_of(f);
    const std::string versus = f == form::multi    ? "raw libzmq, zero-copy frames"
                               : f == form::single ? "raw libzmq, 1 frame + memcpy"
                                                   : "raw libzmq, 2 copied frames";
    for (std::uint64_t size : sizes) {
        const workload w = small ? make_workload("small", 0) : make_workload("quad", size);
        const int warmup = 2;
        for (const std::string& transport : transports) {
            if (!wanted(group, transport)) continue;
            auto to_rate = [&](double sec, int count) { return throughput(w, f, count, sec); };
            std::pair<double, double> m;
            if (transport == "tcp-2proc") {
                process_pair p(cfg, f, w);
                const int count = calibrate(
                    cfg, [&](int c) { return p.run(contender, warmup, c); }, w.payload);
                m = interleave(
                    cfg.reps, [&] { return to_rate(p.run(contender, warmup, count), count); },
                    [&] { return to_rate(p.run(impl::raw, warmup, count), count); });
            } else {
                socket_pair p(transport, hwm_for(w.payload));
                const int count = calibrate(
                    cfg, [&](int c) { return run_threads(p, contender, f, w, warmup, c); }, w.payload);
                m = interleave(
                    cfg.reps, [&] { return to_rate(run_threads(p, contender, f, w, warmup, count), count); },
                    [&] { return to_rate(run_threads(p, impl::raw, f, w, warmup, count), count); });
            }
            // A noise row's name holds no form's word: scripts that pick
            // rows by "multi", "single" or "small" never take it for one.
            add({noise ? "noise: raw vs raw" : name_of(f), transport, w.payload, m.first, m.second,
                 small ? "msg/s" : "GB/s", versus,
                 noise ? std::string("both sides raw libzmq, the ") + name_of(f) + " workload" : ""});
        }
    }
}

// ---- where tenbin's time goes over inproc ----
// Over inproc no byte moves, so a multipart message costs what its
// bookkeeping costs, and the raw baseline never reads what it receives.
// Raw libzmq doing the format's work (raw_decoded), the lifetime work
// (raw_kept) and both (raw_floor), and each side of tenbin with a raw
// peer, all against plain raw libzmq in the same run.
void suite::anatomy(std::uint64_t size) {
    if (!wanted("anatomy", "inproc")) return;
    const workload w = make_workload("quad", size);
    const int warmup = 2;
    socket_pair p("inproc", hwm_for(w.payload));
    const int count = calibrate(
        cfg, [&](int c) { return run_threads(p, impl::tenbin, form::multi, w, warmup, c); }, w.payload);
    // The rate of `n` messages of `wl` in form `f` over `on`, from
    // `sender` to `receiver` (GB/s; messages a second for small ones).
    auto rate = [&](socket_pair& on, form f, const workload& wl, int n, impl sender, impl receiver) {
        return [&, f, n, sender, receiver] {
            return throughput(wl, f, n, run_threads(on, sender, receiver, f, wl, warmup, n));
        };
    };
    auto multi = [&](int n, impl sender, impl receiver) { return rate(p, form::multi, w, n, sender, receiver); };
    const std::vector<double> m = interleave_all(
        cfg.reps, {multi(count, impl::raw, impl::raw), multi(count, impl::raw, impl::raw_decoded),
                   multi(count, impl::raw_kept, impl::raw_kept), multi(count, impl::raw_floor, impl::raw_floor),
                   multi(count, impl::tenbin, impl::raw), multi(count, impl::raw, impl::tenbin),
                   multi(count, impl::tenbin, impl::tenbin)});
    const std::string versus = "raw libzmq, zero-copy frames";
    add({"anatomy raw + header decode", "inproc", w.payload, m[1], m[0], "GB/s", versus,
         "raw receiver decoding and checking every header"});
    add({"anatomy raw + lifetimes", "inproc", w.payload, m[2], m[0], "GB/s", versus,
         "raw libzmq pinning tensors and keeping frames open"});
    add({"anatomy raw floor", "inproc", w.payload, m[3], m[0], "GB/s", versus,
         "raw libzmq doing both: the least a zero-copy tenbin library does"});
    add({"anatomy tenbin sender", "inproc", w.payload, m[4], m[0], "GB/s", versus, "zsend_multipart to a raw receiver"});
    add({"anatomy tenbin receiver", "inproc", w.payload, m[5], m[0], "GB/s", versus,
         "raw sender to zrecv_multipart"});
    add({"anatomy tenbin", "inproc", w.payload, m[6], m[0], "GB/s", versus, "both sides tenbin"});
    add({"anatomy tenbin vs floor", "inproc", w.payload, m[6], m[3], "GB/s", "the raw floor above",
         "both sides tenbin"});

    // Per-message bookkeeping that grows with the tensor count (each
    // zero-copy frame's keeper, each received tensor) shows at 8.
    const workload w8 = make_workload("octo", size);
    const int count8 = calibrate(
        cfg, [&](int c) { return run_threads(p, impl::tenbin, form::multi, w8, warmup, c); }, w8.payload);
    const auto m8 = interleave(cfg.reps, rate(p, form::multi, w8, count8, impl::tenbin, impl::tenbin),
                               rate(p, form::multi, w8, count8, impl::raw, impl::raw));
    add({"anatomy tenbin, 8 tensors", "inproc", w8.payload, m8.first, m8.second, "GB/s", versus,
         "both sides tenbin, 8 tensors of 128 KiB"});

    // Small messages: there a message costs raw libzmq so little that
    // building the owned tensor a receiver returns shows. Raw libzmq,
    // the floor with owned tensors, tenbin.
    const workload ws = make_workload("small", 0);
    socket_pair ps("inproc", hwm_for(ws.payload));
    auto small = [&](int n, impl which) { return rate(ps, form::small, ws, n, which, which); };
    const int counts = calibrate(
        cfg, [&](int c) { return run_threads(ps, impl::tenbin, form::small, ws, warmup, c); }, ws.payload);
    const std::vector<double> ms = interleave_all(
        cfg.reps, {small(counts, impl::raw), small(counts, impl::raw_tensors), small(counts, impl::tenbin)});
    const std::string small_versus = "raw libzmq, 2 copied frames";
    // Named by size: a row named "small" is the small-message case.
    add({"anatomy 256 B, raw + tensors", "inproc", ws.payload, ms[1], ms[0], "msg/s", small_versus,
         "raw libzmq encoding each header, decoding it into an owned tensor that keeps its frame: the floor"});
    add({"anatomy 256 B tenbin", "inproc", ws.payload, ms[2], ms[0], "msg/s", small_versus, "both sides tenbin"});
    add({"anatomy 256 B tenbin vs floor", "inproc", ws.payload, ms[2], ms[1], "msg/s", "the 256 B floor above",
         "both sides tenbin"});
}

// ---- producers: a tensor pool against a fresh tensor per message ----
// Each sender makes every batch it sends and writes all of its bytes
// (copied from the workload): from a tenbin::tensor_pool, as new
// tenbin tensors, or as malloc'd frames given to raw libzmq with
// zmq_msg_init_data. The pool's blocks come back once ZeroMQ is done
// with them, so it writes the same warm pages every time; the others
// pay the allocator and, for large blocks, a page fault per page.
void suite::producers() {
    const std::vector<std::pair<std::string, std::uint64_t>> cases = {
        {"quad", MiB}, {"quad", 64 * MiB}, {"batch", 0}};
    const int warmup = 2;
    for (const auto& [set, size] : cases) {
        const workload w = make_workload(set, size, false);
        const std::string note = set == "batch" ? "the 77 MB batch" : "";
        for (const std::string transport : {"inproc", "tcp-2proc"}) {
            if (!wanted("producer", transport)) continue;
            auto to_rate = [&](double sec, int count) { return throughput(w, form::multi, count, sec); };
            std::vector<double> m;
            if (transport == "tcp-2proc") {
                process_pair p(cfg, form::multi, w);
                const int count = calibrate(
                    cfg, [&](int c) { return p.run(impl::pool, warmup, c); }, w.payload);
                auto run = [&](impl which) {
                    return [&, which] { return to_rate(p.run(which, warmup, count), count); };
                };
                m = interleave_all(cfg.reps, {run(impl::pool), run(impl::fresh), run(impl::raw_fresh)});
            } else {
                socket_pair p(transport, hwm_for(w.payload));
                const int count = calibrate(
                    cfg, [&](int c) { return run_threads(p, impl::pool, form::multi, w, warmup, c); }, w.payload);
                auto run = [&](impl which) {
                    return [&, which] { return to_rate(run_threads(p, which, form::multi, w, warmup, count), count); };
                };
                m = interleave_all(cfg.reps, {run(impl::pool), run(impl::fresh), run(impl::raw_fresh)});
            }
            add({"producer pool vs fresh", transport, w.payload, m[0], m[1], "GB/s",
                 "a new tenbin tensor per message", note});
            add({"producer pool vs raw", transport, w.payload, m[0], m[2], "GB/s",
                 "raw libzmq, malloc + zmq_msg_init_data per frame", note});
        }
    }
}

}  // namespace bench
