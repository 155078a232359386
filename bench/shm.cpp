// tenbin-bench: +shm between two processes, against tcp, ipc and memcpy.
// A receiving process (forked, kept for all repetitions) takes each
// message from a tenbin connection and drops it; this process sends.
// Over +shm the pool path sends tensors acquired from the connection's
// pool (no copy; as on the other paths, nobody refills them), the
// copy-in path the workload's heap tensors (one memcpy into shared
// memory), each on a connection of its own as a producer has: sharing
// one, every repetition would start with a pool full of the other
// path's block sizes, and measure their replacement. Against the same
// workload over tcp and ipc connections between two processes, and a
// warm memcpy of the same bytes here.
#include "suite.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace bench {

namespace {

// Forked while this process has no other thread: a thread of a ZeroMQ
// context, say, caught inside the allocator at the fork leaves its lock
// held in the child, whose first allocation then waits for ever (seen
// under ASan, whose allocator takes no care of fork).
struct receiver_process {
    pid_t pid = -1;
    int to = -1, from = -1;
    std::string address;  // its connection's first endpoint
    receiver_process(const std::string& url, const tenbin::connection_options& o, bool reuse) {
        int a[2], b[2];
        if (::pipe(a) != 0 || ::pipe(b) != 0) fail("pipe");
        pid = ::fork();
        if (pid < 0) fail("fork");
        if (pid == 0) {
            ::close(a[1]);
            ::close(b[0]);
            int code = 0;
            try {
                if (reuse) tenbin::reuse_large_allocations();
                tenbin::connection c(url, o);
                const std::string bound = c.endpoints().at(0).address;
                const auto size = static_cast<std::uint32_t>(bound.size());
                if (::write(b[1], &size, sizeof size) != sizeof size || ::write(b[1], bound.data(), size) != size)
                    fail("the parent is gone");
                for (int n = 0; ::read(a[0], &n, sizeof n) == sizeof n && n > 0;) {
                    for (int i = 0; i < n; ++i)
                        if (!c.recv()) fail("receive timed out");
                    const char d = 'd';
                    if (::write(b[1], &d, 1) != 1) break;
                }
            } catch (const std::exception& e) {
                std::cerr << "tenbin-bench: shm receiver: " << e.what() << std::endl;
                code = 1;
            }
            ::_exit(code);
        }
        ::close(a[0]);
        ::close(b[1]);
        to = a[1];
        from = b[0];
        std::uint32_t size = 0;
        if (::read(from, &size, sizeof size) != sizeof size || size > 4096) fail("the shm receiver failed to start");
        address.resize(size);
        if (::read(from, address.data(), size) != static_cast<ssize_t>(size)) fail("the shm receiver failed to start");
    }
    receiver_process(const receiver_process&) = delete;
    receiver_process& operator=(const receiver_process&) = delete;
    // Seconds for `n` messages from `send_one`, until the receiver has them all.
    double run(int n, const std::function<void()>& send_one) {
        if (::write(to, &n, sizeof n) != sizeof n) fail("receiver gone");
        const auto t0 = clock_type::now();
        for (int i = 0; i < n; ++i) send_one();
        char d = 0;
        if (::read(from, &d, 1) != 1) fail("the shm receiver failed");
        return seconds_since(t0);
    }
    ~receiver_process() {
        ::close(to);  // ends its loop
        ::close(from);
        int status = 0;
        ::waitpid(pid, &status, 0);
    }
};

}  // namespace

void suite::shm() {
    if (!wanted("shm", "2proc")) return;
    const std::vector<std::pair<std::string, std::uint64_t>> cases = {{"batch", 0}, {"quad", MiB}, {"quad", 16 * MiB}};
    for (const auto& [set, size] : cases) {
        const workload w = make_workload(set, size, false);
        const int hwm = hwm_for(w.payload);
        tenbin::connection_options o = case_options(hwm);
        o.shm_pool_bytes = std::min<std::uint64_t>(2 * GiB, (2 * hwm + 6) * (w.payload + 64 * KiB));
        const std::string tag = std::to_string(::getpid()) + "-" + set + std::to_string(size);
        const bool reuse = cfg.malloc_mode == "reuse";
        // One sender and receiver per transport, for all repetitions.
        const std::string shm_name = "/tmp/tenbin-bench-shm-" + tag, ipc_name = "/tmp/tenbin-bench-ipc-" + tag;
        const std::string copy_name = "/tmp/tenbin-bench-shm-copy-" + tag;
        // Forked before the senders exist, so that no child holds their
        // segments (and no sender's thread runs at a fork).
        receiver_process shm_rx("zpull+shm://" + shm_name, o, reuse);
        receiver_process copy_rx("zpull+shm://" + copy_name, o, reuse);
        receiver_process ipc_rx("zpull+ipc://" + ipc_name, o, reuse);
        // tcp: the receiver binds a port of the system's choice, the sender dials it.
        receiver_process tcp_rx("zpull://127.0.0.1:*", o, reuse);
        tenbin::connection tcp_tx("zpush://" + tcp_rx.address.substr(6), o);
        tenbin::connection shm_tx("zpush+shm://" + shm_name, o);
        tenbin::connection copy_tx("zpush+shm://" + copy_name, o);
        tenbin::connection ipc_tx("zpush+ipc://" + ipc_name, o);
        auto send_pool = [&] {
            std::vector<tenbin::tensor> m;
            for (const auto& t : w.tensors) m.push_back(shm_tx.pool().acquire(t.dtype(), t.shape(), t.info()));
            if (!shm_tx.send(m)) fail("shm send timed out");
        };
        auto sender = [&](tenbin::connection& c) {
            return [&] {
                if (!c.send(w.tensors)) fail("send timed out");
            };
        };
        std::vector<std::byte> dst(w.payload);
        auto copy_once = [&] {
            std::size_t at = 0;
            for (const auto& t : w.tensors) {
                std::memcpy(dst.data() + at, t.data().data(), t.nbytes());
                at += t.nbytes();
            }
        };
        // Warm every path (segments made and mapped, sockets connected).
        shm_rx.run(4, send_pool);
        copy_rx.run(4, sender(copy_tx));
        ipc_rx.run(2, sender(ipc_tx));
        tcp_rx.run(2, sender(tcp_tx));
        const int count = calibrate(cfg, [&](int c) { return tcp_rx.run(c, sender(tcp_tx)); }, w.payload);
        const int fast = calibrate(cfg, [&](int c) { return shm_rx.run(c, send_pool); }, w.payload);
        auto rate = [&](int n, auto seconds) {
            return [&, n, seconds] { return throughput(w, form::multi, n, seconds()); };
        };
        const std::vector<double> m = interleave_all(
            cfg.reps, {rate(fast, [&] { return shm_rx.run(fast, send_pool); }),
                       rate(fast, [&] { return copy_rx.run(fast, sender(copy_tx)); }),
                       rate(count, [&] { return ipc_rx.run(count, sender(ipc_tx)); }),
                       rate(count, [&] { return tcp_rx.run(count, sender(tcp_tx)); }),
                       rate(fast, [&] {
                           const auto t0 = clock_type::now();
                           for (int i = 0; i < fast; ++i) copy_once();
                           return seconds_since(t0);
                       })});
        const std::string note = set == "batch" ? "the 77 MB batch" : "";
        add({"shm pool vs tcp-2proc", "shm-2proc", w.payload, m[0], m[3], "GB/s",
             "a tenbin connection over tcp, two processes", note});
        add({"shm pool vs ipc-2proc", "shm-2proc", w.payload, m[0], m[2], "GB/s",
             "a tenbin connection over ipc, two processes", note});
        add({"shm pool vs memcpy", "shm-2proc", w.payload, m[0], m[4], "GB/s", "a warm memcpy of the bytes", note});
        add({"shm copy-in vs memcpy", "shm-2proc", w.payload, m[1], m[4], "GB/s", "a warm memcpy of the bytes",
             note});
    }
}

}  // namespace bench
