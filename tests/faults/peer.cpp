// tenbin-fault-peer: the far end of the process-based fault tests. A test
// starts it, reads its stdout, kills it (SIGKILL) and starts it again.
//
//   send URL [--tag T] [--from N] [--count C] [--bytes B] [--interval-us U]
//        Sends messages (faults/message.hpp) numbered from N, C of them
//        (0 = until killed), retrying a message whose send timed out. Prints
//        "ready" once connected and "sent C" at the end.
//   recv URL [--count C] [--idle-ms T] [--report-ms R]
//        Receives and checks every message. Prints "endpoint ADDRESS" once
//        bound, "counts TAG:N ..." every R ms (when R > 0), and at the end
//        "ok received=N gaps=G". Exit 1 on a corrupted, duplicated or
//        reordered message, 2 when nothing came for T ms before C arrived.
//   pub URL [--count C] [--bytes B] [--delay-ms D]
//        Waits D ms (default 500) for subscriptions to arrive, publishes C
//        messages as fast as it can (a PUB drops at its high-water mark),
//        then exits without lingering: "published C".
//   producer URL [--count C] [--heartbeat-ms H]
//        An acked producer named "shard": C numbered batches (values the
//        batch's seq) from the start, then the stream's end; a restart
//        replays from the start. Prints "endpoint ADDRESS", then, having
//        waited for every acknowledgement, "stats sent=S acknowledged=A
//        redelivered=R skipped=K".
//   trainer URL --state FILE [--work-ms W] [--heartbeat-ms H]
//        An acked consumer through a loader (ack on_release, credit 4),
//        resumed from its checkpoint FILE when it exists. Per batch: prints
//        "processing V", works W ms, then checkpoints: the batches it
//        processed and its loader's state, in FILE (JSON, replaced whole).
//        While a file FILE.hold exists it stops in the work of its next
//        batch, saying "held V", for a test to kill it there.
//        Prints "end" at the stream's end; exits 2 when nothing came for
//        --idle-ms.
//   keygen DIR NAME
//        Writes the CURVE certificates DIR/NAME.key and DIR/NAME.key_secret.
// Each socket mode takes --curve-cert FILE (this side's secret
// certificate), --curve-server FILE (the server's public one, to connect)
// and --curve-allow DIR (clients' public ones, to bind); recv then adds
// "refused=N" (handshakes refused) to its counts.
#include "faults/message.hpp"

#include <tenbin/connect.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

struct args {
    std::string mode, url;
    std::uint32_t tag = 0;
    std::uint64_t from = 0, count = 0;
    std::size_t bytes = 0;
    long interval_us = 0, idle_ms = 10000, report_ms = 0, delay_ms = 500;
    std::string curve_cert, curve_server, curve_allow;
    std::string state;
    long work_ms = 0, heartbeat_ms = 200;
};

// The CURVE settings the --curve-* options give (none without --curve-cert).
void apply_curve(const args& a, tenbin::connection_options& o) {
    if (a.curve_cert.empty()) return;
    tenbin::curve_options c;
    c.keys = tenbin::load_secret_certificate(a.curve_cert);
    if (!a.curve_server.empty()) c.server_key = tenbin::load_public_certificate(a.curve_server);
    if (!a.curve_allow.empty()) c.allowed_clients = tenbin::load_public_certificates(a.curve_allow);
    o.curve = std::move(c);
}

args parse(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: tenbin-fault-peer send|recv|pub URL [options]\n";
        std::exit(64);
    }
    args a;
    a.mode = argv[1];
    a.url = argv[2];
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--tag") a.tag = static_cast<std::uint32_t>(std::stoul(v));
        else if (k == "--from") a.from = std::stoull(v);
        else if (k == "--count") a.count = std::stoull(v);
        else if (k == "--bytes") a.bytes = std::stoull(v);
        else if (k == "--interval-us") a.interval_us = std::stol(v);
        else if (k == "--idle-ms") a.idle_ms = std::stol(v);
        else if (k == "--report-ms") a.report_ms = std::stol(v);
        else if (k == "--delay-ms") a.delay_ms = std::stol(v);
        else if (k == "--curve-cert") a.curve_cert = v;
        else if (k == "--curve-server") a.curve_server = v;
        else if (k == "--curve-allow") a.curve_allow = v;
        else if (k == "--state") a.state = v;
        else if (k == "--work-ms") a.work_ms = std::stol(v);
        else if (k == "--heartbeat-ms") a.heartbeat_ms = std::stol(v);
        else {
            std::cerr << "unknown option " << k << "\n";
            std::exit(64);
        }
    }
    return a;
}

int run_send(const args& a) {
    tenbin::connection_options o;
    o.send_timeout = 200ms;
    o.linger = 2000ms;
    apply_curve(a, o);
    tenbin::connection c(a.url, o);
    std::cout << "ready" << std::endl;
    for (std::uint64_t i = 0; a.count == 0 || i < a.count; ++i) {
        const auto m = faults::make_message(a.tag, a.from + i, a.bytes);
        while (!c.send(m)) {
        }  // no peer or a full queue: the same message again
        if (a.interval_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(a.interval_us));
    }
    std::cout << "sent " << a.count << std::endl;
    return 0;
}

int run_recv(const args& a) {
    tenbin::connection_options o;
    o.recv_timeout = 50ms;
    o.linger = 0ms;
    apply_curve(a, o);
    tenbin::connection c(a.url, o);
    std::cout << "endpoint " << c.endpoints().at(0).address << std::endl;
    std::map<std::uint32_t, std::uint64_t> next, counts;
    std::uint64_t received = 0, gaps = 0;
    auto last_message = std::chrono::steady_clock::now();
    auto last_report = last_message;
    while (a.count == 0 || received < a.count) {
        const auto now = std::chrono::steady_clock::now();
        if (a.report_ms > 0 && now - last_report >= std::chrono::milliseconds(a.report_ms)) {
            std::cout << "counts";
            for (auto [tag, n] : counts) std::cout << ' ' << tag << ':' << n;
            if (o.curve) std::cout << " refused=" << c.refused_handshakes();
            std::cout << std::endl;
            last_report = now;
        }
        std::optional<std::vector<tenbin::tensor>> m;
        try {
            m = c.recv();
        } catch (const tenbin::error& e) {
            std::cout << "malformed " << e.what() << std::endl;
            return 1;
        }
        if (!m) {
            if (now - last_message > std::chrono::milliseconds(a.idle_ms)) {
                std::cout << "idle received=" << received << std::endl;
                return 2;
            }
            continue;
        }
        last_message = now;
        faults::stamp s{};
        std::string why;
        if (!faults::check_message(*m, s, why)) {
            std::cout << "corrupt " << why << std::endl;
            return 1;
        }
        auto it = next.find(s.tag);
        if (it != next.end() && s.seq < it->second) {
            std::cout << "duplicate or reordered: tag " << s.tag << " seq " << s.seq << " after " << it->second - 1
                      << std::endl;
            return 1;
        }
        if (it != next.end() && s.seq > it->second) ++gaps;
        next[s.tag] = s.seq + 1;
        ++counts[s.tag];
        ++received;
    }
    std::cout << "ok received=" << received << " gaps=" << gaps << std::endl;
    return 0;
}

int run_pub(const args& a) {
    tenbin::connection_options o;
    o.linger = 0ms;
    apply_curve(a, o);
    tenbin::connection c(a.url, o);
    std::cout << "endpoint " << c.endpoints().at(0).address << std::endl;
    std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
    for (std::uint64_t i = 0; i < a.count; ++i)
        if (!c.send(faults::make_message(a.tag, a.from + i, a.bytes))) return 1;
    std::cout << "published " << a.count << std::endl;
    return 0;
}

tenbin::connection_options acked_options(const args& a) {
    tenbin::connection_options o;
    o.acked = true;
    o.ack_heartbeat = std::chrono::milliseconds(a.heartbeat_ms);
    o.send_timeout = 200ms;
    o.recv_timeout = 50ms;
    o.linger = 20000ms;  // a producer waits this long for its last acknowledgements
    return o;
}

int run_producer(const args& a) {
    tenbin::connection_options o = acked_options(a);
    o.producer = "shard";
    tenbin::connection c(a.url, o);
    std::cout << "endpoint " << c.endpoints().at(0).address << std::endl;
    const bool shm = a.url.find("+shm") != std::string::npos;
    for (std::uint64_t i = 0; i < a.count; ++i) {
        tenbin::tensor t = shm ? c.pool().acquire(tenbin::dtype::i4, {1024}, "batch")
                               : tenbin::tensor(tenbin::dtype::i4, {1024}, tenbin::buffer::allocate(4096), "batch");
        for (auto& v : t.mutable_values<std::int32_t>()) v = static_cast<std::int32_t>(i);
        while (!c.send({t})) {
        }  // nobody has credit yet: the same batch again
    }
    while (!c.end_stream()) {
    }
    c.close();  // waits for the acknowledgements
    const tenbin::delivery_counters d = c.delivery_stats();
    std::cout << "stats sent=" << d.sent << " acknowledged=" << d.acknowledged << " redelivered=" << d.redelivered
              << " skipped=" << d.skipped << std::endl;
    return 0;
}

// A trainer's checkpoint: the batches it processed and its loader's state,
// written together (replaced whole), as a training job checkpoints its
// model with its data position.
void save_checkpoint(const std::string& path, const std::vector<std::int32_t>& processed, const std::string& state) {
    std::string text = "{\"processed\":[";
    for (std::size_t i = 0; i < processed.size(); ++i) text += (i ? "," : "") + std::to_string(processed[i]);
    text += "],\"state\":" + state + "}";
    const std::string temp = path + ".tmp";
    std::FILE* f = std::fopen(temp.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + temp);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::rename(temp.c_str(), path.c_str());
}

int run_trainer(const args& a) {
    tenbin::loader_options lo;
    lo.connection = acked_options(a);
    lo.connection.credit = 4;
    lo.queue_messages = 4;
    tenbin::loader l(a.url, lo);
    std::vector<std::int32_t> processed;
    if (std::FILE* f = std::fopen(a.state.c_str(), "r")) {
        std::string text(1 << 22, '\0');
        text.resize(std::fread(text.data(), 1, text.size(), f));
        std::fclose(f);
        const auto j = nlohmann::json::parse(text);
        processed = j["processed"].get<std::vector<std::int32_t>>();
        l.load_state(tenbin::stream_state_from_json(j["state"].dump()));
    }
    auto last = std::chrono::steady_clock::now();
    while (!l.stream_ended()) {
        for (auto& batch : l) {
            const std::int32_t v = batch.at(0).values<std::int32_t>()[0];
            std::cout << "processing " << v << std::endl;
            if (std::filesystem::exists(a.state + ".hold")) {
                std::cout << "held " << v << std::endl;
                while (std::filesystem::exists(a.state + ".hold"))
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(a.work_ms));
            processed.push_back(v);
            save_checkpoint(a.state, processed, tenbin::to_json(l.state()));
            last = std::chrono::steady_clock::now();
        }
        if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(a.idle_ms)) {
            const tenbin::stream_counters sc = l.stream_stats();
            std::cout << "idle duplicates=" << sc.duplicates << " late=" << sc.late << std::endl;
            return 2;
        }
    }
    std::cout << "end" << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const args a = parse(argc, argv);
    try {
        if (a.mode == "send") return run_send(a);
        if (a.mode == "recv") return run_recv(a);
        if (a.mode == "pub") return run_pub(a);
        if (a.mode == "producer") return run_producer(a);
        if (a.mode == "trainer") return run_trainer(a);
        if (a.mode == "keygen") {
            tenbin::create_certificates(a.url, argc > 3 ? argv[3] : "");
            return 0;
        }
        std::cerr << "unknown mode " << a.mode << "\n";
        return 64;
    } catch (const std::exception& e) {
        std::cerr << "tenbin-fault-peer: " << e.what() << "\n";
        return 3;
    }
}
