// tenbin-bench: numbered streams (epochs and positions): what the position
// each message carries costs against plain messages, and how long a
// consumer resuming from a saved state waits for its first batch against
// a fresh one.
#include "suite.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bench {

void suite::numbered() {
    const std::string transport = "tcp";
    if (!wanted("stream numbered vs plain", transport)) return;
    const int warmup = 2;
    // Single-part at 256 B too: there the position is a chunk of the one
    // frame, not a frame of its own.
    struct numbered_case {
        bool small, single;
    };
    for (const auto [small, single] : {numbered_case{false, false}, {true, false}, {true, true}}) {
        const form f = small ? form::small : form::multi;
        const workload w = small ? make_workload("small", 0, false) : make_workload("quad", MiB, false);
        tenbin::connection_options plain = case_options(hwm_for(w.payload));
        plain.multipart = !single;
        tenbin::connection_options numbered = plain;
        numbered.producer = "bench";
        connection_pair with(transport, numbered, plain), without(transport, plain, plain);
        const int count = calibrate(cfg, [&](int c) { return run_connections(with, w, warmup, c); }, w.payload);
        auto rate = [&](connection_pair& p) {
            return [&] { return throughput(w, f, count, run_connections(p, w, warmup, count)); };
        };
        const auto m = interleave(cfg.reps, rate(with), rate(without));
        // Every message of `with` was numbered and none was lost or repeated.
        const tenbin::stream_counters c = with.rx.stream_stats();
        if (!with.tx.position() || c.gaps != 0 || c.duplicates != 0) fail("the numbered stream lost its count");
        add({single ? "stream numbered vs plain, single-part" : "stream numbered vs plain", transport, w.payload,
             m.first, m.second, small ? "msg/s" : "GB/s", "plain messages, the same connections",
             small ? "64 f4 a message; goal: within 10%" : "goal: within 2%"});
    }
    // What the position costs libzmq itself at 256 B, whatever tenbin does:
    // the frames of a plain message (a 32 B header, 256 B of data) with the
    // 64 B position frame after them, or with the position inside the
    // header (96 B: past the 33 bytes libzmq keeps inside a message, so
    // allocated as the data is).
    const workload w = make_workload("small", 0, false);
    const std::size_t header = 32, data = w.payload, position = 64;
    socket_pair raw(transport, hwm_for(w.payload));
    const std::vector<std::size_t> plain_frames{header, data};
    const int count =
        calibrate(cfg, [&](int n) { return raw_frames(raw.push, raw.pull, plain_frames, warmup, n); }, w.payload);
    auto rate = [&](std::vector<std::size_t> sizes) {
        return [&, sizes] { return count / raw_frames(raw.push, raw.pull, sizes, warmup, count); };
    };
    const std::vector<double> m = interleave_all(
        cfg.reps, {rate({header, data, position}), rate({header + position, data}), rate(plain_frames)});
    add({"stream numbered bound, raw libzmq, a frame more", transport, w.payload, m[0], m[2], "msg/s",
         "raw libzmq, the frames of a plain message (32 + 256 B)", "and a 64 B position frame"});
    add({"stream numbered bound, raw libzmq, in the header", transport, w.payload, m[1], m[2], "msg/s",
         "raw libzmq, the frames of a plain message (32 + 256 B)", "the 64 B position inside a 96 B header"});
}

// A trainer restarting from its checkpoint: it reads its saved state
// (JSON), opens its loader, loads the state, and waits for the batch after
// the ones it took, which its producer, replaying, sends from there. The
// baseline opens a loader and waits for a producer's first batch. Each
// repetition opens a new producer and a new loader (a new context and
// connection, as a restarted process has).
void suite::resume() {
    const std::string transport = "tcp";
    if (!wanted("stream resume to first batch", transport)) return;
    const workload w = make_workload("quad", MiB, false);
    constexpr std::uint64_t taken = 1000;
    tenbin::stream_state saved;
    saved.producers["bench"].next = taken;
    const std::string checkpoint = tenbin::to_json(saved);
    auto first_batch = [&](bool resumed) {
        return [&, resumed] {
            tenbin::connection_options o = case_options(hwm_for(w.payload));
            o.producer = "bench";
            tenbin::connection tx("zrpush://127.0.0.1:*", o);
            if (resumed) tx.seek(0, taken);
            tenbin::loader_options lo;
            lo.connection = case_options(hwm_for(w.payload));
            lo.reuse_allocations = false;  // as --malloc says
            std::optional<tenbin::loader> l;
            const double s = with_sender_thread(
                [&](const std::function<void()>& wait_go) {
                    wait_go();
                    if (!tx.send(w.tensors)) fail("send timed out");
                },
                [&](const std::function<void()>& ready) {
                    const auto t0 = clock_type::now();
                    if (resumed) lo.connection.resume_from = tenbin::stream_state_from_json(checkpoint);
                    l.emplace(receiver_url(tx), lo);
                    ready();
                    const auto batch = l->next();
                    if (!batch) fail("no first batch");
                    const double sec = seconds_since(t0);
                    check_received(*batch, w, true);
                    return sec;
                });
            const std::uint64_t next = l->state().producers.at("bench").next;
            if (next != (resumed ? taken + 1 : 1)) fail("the resumed consumer is not where it should be");
            return 1 / s;
        };
    };
    const int reps = 3 * cfg.reps;  // short and noisy: more of them
    const auto m = interleave(reps, first_batch(true), first_batch(false));
    add({"stream resume to first batch", transport, w.payload, m.first, m.second, "op/s",
         "a fresh consumer's first batch",
         "ms to the first batch: resumed " + std::to_string(1e3 / m.first).substr(0, 5) + ", fresh " +
             std::to_string(1e3 / m.second).substr(0, 5),
         reps});
}

}  // namespace bench
