// tenbin-bench: the loader, receiving on a thread of its own.
#include "suite.hpp"

#include <zmq.h>

#include <chrono>
#include <string>
#include <vector>

namespace bench {

// ---- the loader: receiving and decoding on a thread of its own ----
// zsend_multipart from a thread to a tenbin::loader whose batches are
// taken here, against receiving here. With a consumer that does nothing
// else this is what the hop to the consumer costs (its queue, locks and
// wake-ups); with one that reads every byte of each batch (a trainer
// does more) it is what prefetching gains, receiving while the consumer
// works. The loader keeps its socket for all repetitions, as a trainer
// does.
void suite::loader(const std::vector<std::uint64_t>& sizes) {
    const std::string transport = "tcp";
    if (!wanted("loader", transport)) return;
    const int warmup = 2;
    for (const std::uint64_t size : sizes) {
        const bool small = size == 0;
        const form f = small ? form::small : form::multi;
        const workload w = small ? make_workload("small", 0) : make_workload("quad", size);
        const int hwm = hwm_for(w.payload);
        tenbin::loader_options opt;
        opt.connection.recv_hwm = hwm;
        opt.reuse_allocations = false;  // as --malloc says
        tenbin::loader l(shared_context(), std::vector<std::string>{"zpull://127.0.0.1:*"}, opt);
        void* push = sender_socket(l.endpoints().at(0).address, hwm);
        socket_pair p(transport, hwm);
        // Seconds for `count` messages from a tenbin sender on `to`,
        // each taken by `take()` and checked, and read when `reads`.
        auto run = [&](void* to, int count, bool reads, auto take) {
            return run_sender_thread(to, impl::tenbin, f, w, warmup, count, [&](const std::function<void()>& ready) {
                return timed_receive(warmup, count, ready, [&](bool verify) {
                    const std::vector<tenbin::tensor> batch = take();
                    check_received(batch, w, verify);
                    if (reads) read_through(batch);
                });
            });
        };
        auto via_loader = [&](int count, bool reads) {
            return run(push, count, reads, [&] {
                auto batch = l.next(std::chrono::seconds(120));
                if (!batch) fail(l.closed() ? "the loader closed" : "the loader timed out");
                return std::move(*batch);
            });
        };
        auto via_zrecv = [&](int count, bool reads) {
            return run(p.push, count, reads, [&] {
                auto m = tenbin::zrecv_multipart(ref(p.pull));
                if (!m) fail("tenbin receive timed out");
                return std::move(m->tensors);
            });
        };
        const int count = calibrate(cfg, [&](int c) { return via_loader(c, false); }, w.payload);
        auto rate = [&](auto seconds) { return [&, seconds] { return throughput(w, f, count, seconds()); }; };
        const std::vector<double> m = interleave_all(
            cfg.reps, {rate([&] { return via_loader(count, false); }),
                       rate([&] { return run_threads(p, impl::raw, f, w, warmup, count); }),
                       rate([&] { return via_zrecv(count, false); }), rate([&] { return via_loader(count, true); }),
                       rate([&] { return via_zrecv(count, true); })});
        const char* unit = small ? "msg/s" : "GB/s";
        const std::string what = small ? "64 f4 a message, zsend_multipart to loader::next" : "zsend_multipart to loader::next";
        add({"loader", transport, w.payload, m[0], m[1], unit, "raw libzmq received on the consumer's thread", what});
        add({"loader vs zrecv", transport, w.payload, m[0], m[2], unit, "zrecv_multipart on the consumer's thread",
             what});
        add({"loader, consumer reads", transport, w.payload, m[3], m[4], unit,
             "zrecv_multipart on the consumer's thread, which reads", "the consumer reads every byte of each batch"});
        set_int(push, ZMQ_LINGER, 0);
        zmq_close(push);
    }
}

}  // namespace bench
