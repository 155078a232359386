// tenbin-bench-loader: the C++ ends of the two-process cases of
// bench/python_bench.py that tenbin-bench's peers cannot play.
//
// Receiving (the default): the C++ loader, with the protocol of
// tenbin-bench's `--peer recv`: binds a PULL loader to --endpoint (an
// address, or a URL such as zpull+shm:///tmp/x), prints "endpoint E", takes
// --warmup batches, prints "ready", takes --count more and prints
// "seconds S" for those. --hwm sets its recv_hwm (default: the library's);
// --set (and --bytes) checks the first batch.
//
// Sending (--send URL): a producer on a tenbin::connection, for URLs that
// need one (zpush+shm://...): sends --warmup messages of --set (batch, quad
// of --bytes, small), waits for "go" on stdin, sends --count more, then
// closes (waiting for receivers to claim what was sent). --shm pool sends
// tensors acquired from the connection's pool (no copy; as tenbin-bench's
// senders, nobody refills them), --shm fill the same, each filled with the
// set's bytes first (a producer writing every byte of its batch in place),
// --shm copy (the default) the same heap tensors each time, which the
// connection copies into shared memory. On other URLs (ipc, tcp) the pool
// is a tensor_pool of the producer's own, as Python's Connection.acquire
// gives there.
#include <tenbin/connect.hpp>
#include <tenbin/pool.hpp>
#include <tenbin/url.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Byte j of tensor k is (31 j + 7 k) mod 251, as tenbin-bench and the Python peer make them.
tenbin::tensor pattern(tenbin::dtype t, tenbin::shape_t shape, int k, std::string info = {}) {
    std::uint64_t n = tenbin::itemsize(t);
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    tenbin::buffer b = tenbin::buffer::allocate(n);
    std::byte* p = b.writable_bytes().data();
    for (std::uint64_t j = 0; j < n; ++j) p[j] = static_cast<std::byte>((31 * (j % 251) + 7 * k) % 251);
    return tenbin::tensor(t, std::move(shape), std::move(b), std::move(info));
}

// The messages of tenbin-bench's sets.
std::vector<tenbin::tensor> workload(const std::string& set, std::uint64_t bytes) {
    std::vector<tenbin::tensor> w;
    if (set == "quad") {
        for (int k = 0; k < 4; ++k) w.push_back(pattern(tenbin::dtype::f4, {static_cast<std::int64_t>(bytes / 16)}, k));
    } else if (set == "small") {
        w.push_back(pattern(tenbin::dtype::f4, {64}, 0));
    } else if (set == "batch") {
        w.push_back(pattern(tenbin::dtype::f2, {256, 3, 224, 224}, 0, "input"));
        w.push_back(pattern(tenbin::dtype::i4, {256}, 1, "target"));
    } else {
        throw std::runtime_error("unknown set " + set);
    }
    return w;
}

int send_main(std::map<std::string, std::string>& args) {
    const auto w = workload(args["set"], std::stoull(args.count("bytes") ? args["bytes"] : "0"));
    std::uint64_t payload = 0;
    for (const auto& t : w) payload += t.nbytes();
    const std::string shm = args.count("shm") ? args["shm"] : "copy";
    const bool pool = shm == "pool" || shm == "fill";
    tenbin::connection_options o;
    o.kind = tenbin::socket_kind::push;
    o.bind = false;
    if (args.count("hwm")) o.send_hwm = std::stoi(args["hwm"]);
    o.send_timeout = std::chrono::milliseconds(120000);
    // Room for the messages in flight (high-water marks on both sides) and a few more.
    o.shm_pool_bytes = std::min<std::uint64_t>(std::uint64_t{4} << 30, (2 * static_cast<std::uint64_t>(o.send_hwm) + 40) * (payload + (64 << 10)));
    tenbin::pool_options own_options;
    own_options.max_bytes = o.shm_pool_bytes;
    tenbin::tensor_pool own(own_options);
    tenbin::connection c(args["send"], o);
    tenbin::tensor_pool& source = tenbin::parse_url(args["send"]).shm ? c.pool() : own;
    auto send_one = [&] {
        bool sent;
        if (pool) {
            std::vector<tenbin::tensor> m;
            for (const auto& t : w) {
                m.push_back(source.acquire(t.dtype(), t.shape(), t.info()));
                if (shm == "fill") std::memcpy(m.back().mutable_bytes().data(), t.data().data(), t.nbytes());
            }
            sent = c.send(m);
        } else {
            sent = c.send(w);
        }
        if (!sent) throw std::runtime_error("send timed out");
    };
    for (int i = std::stoi(args["warmup"]); i > 0; --i) send_one();
    std::string line;
    if (!std::getline(std::cin, line) || line != "go") throw std::runtime_error("sender expected go");
    for (int i = std::stoi(args["count"]); i > 0; --i) send_one();
    c.close();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::map<std::string, std::string> args;
    for (int i = 1; i + 1 < argc; i += 2) args[std::string(argv[i]).substr(2)] = argv[i + 1];
    for (const char* k : {"warmup", "count"})
        if (!args.count(k) || !(args.count("endpoint") || args.count("send"))) {
            std::cerr << "usage: tenbin-bench-loader --endpoint E --warmup N --count N [--hwm N]\n"
                         "       tenbin-bench-loader --send URL --set S [--bytes N] --warmup N --count N [--hwm N] [--shm pool|fill|copy]\n";
            return 2;
        }
    try {
        if (args.count("send")) return send_main(args);
        tenbin::loader_options o;
        o.connection.kind = tenbin::socket_kind::pull;
        o.connection.bind = true;
        o.connection.recv_timeout = std::chrono::milliseconds(120000);  // a hung peer fails the case
        if (args.count("hwm")) o.connection.recv_hwm = std::stoi(args["hwm"]);
        tenbin::loader l(args["endpoint"], o);
        std::cout << "endpoint " << l.endpoints().front().address << std::endl;
        auto take = [&l] {
            auto m = l.next();
            if (!m) throw std::runtime_error("no batch within the receive timeout");
            return std::move(*m);
        };
        // With --set, the first batch is checked against the producers' bytes.
        for (int i = std::stoi(args["warmup"]); i > 0; --i) {
            auto m = take();
            if (!args.count("set") || i != std::stoi(args["warmup"])) continue;
            const auto w = workload(args["set"], std::stoull(args.count("bytes") ? args["bytes"] : "0"));
            bool same = m.size() == w.size();
            for (std::size_t k = 0; same && k < m.size(); ++k)
                same = m[k].dtype() == w[k].dtype() && m[k].shape() == w[k].shape() && m[k].nbytes() == w[k].nbytes() &&
                       std::memcmp(m[k].data().data(), w[k].data().data(), w[k].nbytes()) == 0;
            if (!same) throw std::runtime_error("received tensors differ");
        }
        const auto t0 = std::chrono::steady_clock::now();
        std::cout << "ready" << std::endl;
        for (int i = std::stoi(args["count"]); i > 0; --i) take();
        const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
        std::cout << "seconds " << s.count() << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "tenbin-bench-loader: " << e.what() << std::endl;
        return 1;
    }
    return 0;
}
