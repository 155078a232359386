// tenbin-bench: peers in other processes.
#include "peers.hpp"

#include "sockets.hpp"

#include <zmq.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace bench {

std::vector<std::string> peer_argv(const config& cfg, const peer& p, const std::string& role, form f,
                                   const workload& w, int warmup, int count, bool session) {
    std::vector<std::string> a;
    if (p.kind == peer_kind::python) {
        a = {cfg.python, cfg.python_peer, role};
    } else {
        a = {cfg.self, "--peer", role, "--impl", session ? "session" : p.kind == peer_kind::tenbin ? "tenbin" : "raw", "--malloc",
             p.malloc_mode, "--hwm", std::to_string(hwm_for(w.payload))};
        if (p.curve) a.insert(a.end(), {"--curve-public", cfg.curve.public_key, "--curve-secret", cfg.curve.secret_key});
    }
    const std::vector<std::string> common = {"--form",   name_of(f),           "--set",   w.set,
                                             "--bytes",  std::to_string(w.bytes), "--warmup", std::to_string(warmup),
                                             "--count", std::to_string(count)};
    a.insert(a.end(), common.begin(), common.end());
    return a;
}

double run_processes(const config& cfg, const peer& receiver, const peer& sender, form f, const workload& w,
                     int warmup, int count) {
    process_ends ends(peer_argv(cfg, receiver, "recv", f, w, warmup, count),
                      peer_argv(cfg, sender, "send", f, w, warmup, count));
    const double s = ends.timed();
    ends.wait();
    return s;
}

namespace {

// `--peer holder` (the redelivery rows): an acked consumer that takes
// `--credit` batches and keeps them unacknowledged, says "holding", and on
// "leave" closes its connection, which gives them back; or is killed.
int holder_main(const std::function<std::string(const std::string&)>& get) {
    tenbin::connection_options o;
    o.acked = true;
    o.credit = std::stoul(get("credit"));
    o.ack_heartbeat = std::chrono::milliseconds(std::stoi(get("heartbeat-ms")));
    o.recv_timeout = std::chrono::seconds(120);
    tenbin::connection c(get("endpoint"), o);
    std::vector<std::vector<tenbin::tensor>> held;
    while (held.size() < o.credit) {
        auto batch = c.recv();
        if (!batch) fail("holder: receive timed out");
        held.push_back(std::move(*batch));
    }
    std::cout << "holding" << std::endl;
    std::string line;
    if (!std::getline(std::cin, line) || line != "leave") fail("holder expected leave");
    c.close();
    return 0;
}

}  // namespace

int peer_main(const std::map<std::string, std::string>& args) {
    // Ends with tenbin-bench, killed mid-run, rather than block on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) return 1;
    auto get = [&](const std::string& k) {
        auto it = args.find(k);
        if (it == args.end()) fail("peer needs --" + k);
        return it->second;
    };
    if (get("peer") == "holder") return holder_main(get);
    if (get("malloc") == "reuse") tenbin::reuse_large_allocations();
    const form f = form_of(get("form"));
    const workload w = make_workload(get("set"), std::stoull(get("bytes")), f == form::single);
    const int hwm = std::stoi(get("hwm"));
    const bool recv = get("peer") == "recv";
    void* s = nullptr;
    std::optional<tenbin::curve_keys> curve;
    if (args.count("curve-public")) curve = tenbin::curve_keys{get("curve-public"), get("curve-secret")};
    tenbin::curve_guard guard;
    const tenbin::curve_keys* keys = curve ? &*curve : nullptr;
    if (recv) {
        std::string bound;
        s = receiver_socket(get("endpoint"), hwm, bound, keys, &guard);
        std::cout << "endpoint " << bound << std::endl;
    } else {
        s = sender_socket(get("endpoint"), hwm, keys, &guard);
    }
    auto read_line = [] {
        std::string line;
        if (!std::getline(std::cin, line)) fail("peer's stdin closed");
        return line;
    };
    auto run_once = [&](impl which, int warmup, int count) {
        if (recv) {
            const double sec = receive_run(s, which, f, w, warmup, count, [] { std::cout << "ready" << std::endl; });
            std::cout << "seconds " << sec << std::endl;
        } else {
            send_run(s, which, f, w, warmup, count, [&] {
                if (read_line() != "go") fail("sender expected go");
            });
        }
    };
    if (get("impl") != "session") {
        run_once(peer_impl(get("impl")), std::stoi(get("warmup")), std::stoi(get("count")));
    } else {
        for (std::string line; (line = read_line()) != "quit";) {
            std::istringstream in(line);
            std::string verb, name;
            int warmup = 0, count = 0;
            if (!(in >> verb >> name >> warmup >> count) || verb != "run") fail("peer got \"" + line + "\"");
            run_once(peer_impl(name), warmup, count);
        }
    }
    zmq_close(s);  // the sender's default linger: everything queued is delivered first
    guard = {};    // its sockets closed before the context terminates
    shared_context()->close();
    return 0;
}

}  // namespace bench
