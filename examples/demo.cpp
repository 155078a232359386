// The main demo: a pub/sub data loader over tcp loopback.
//
// Several producers (threads here; processes or hosts in real life) each
// publish training batches on their own PUB socket. One tenbin::loader
// subscribes to all of them through a single brace-expanded URL, receives
// and decodes on a background thread into a bounded queue, and the "trainer"
// loop takes batches from it, checking every byte of every batch.
//
//   build/examples/demo [producers] [batches-per-producer]
#include <tenbin/tenbin.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::int64_t batch_size = 32, channels = 3, side = 64;

// Every element is a function of (producer, sequence, index), so the
// receiver can check a batch without having seen it before.
std::uint16_t pixel(int producer, int seq, std::size_t i) {
    return static_cast<std::uint16_t>((producer * 7919 + seq * 104729 + i * 31) & 0x3bff);
}

std::vector<tenbin::tensor> make_batch(int producer, int seq) {
    std::vector<std::uint16_t> images(batch_size * channels * side * side);
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = pixel(producer, seq, i);
    // Labels carry who made the batch and its number: [producer, seq, ...].
    std::vector<std::int32_t> labels(batch_size, -1);
    labels[0] = producer;
    labels[1] = seq;
    // The vectors' storage becomes the tensors' and is sent zero-copy.
    auto x = tenbin::tensor(tenbin::dtype::f2, {batch_size, channels, side, side},
                            tenbin::buffer::adopt(std::move(images)), "images");
    auto y = tenbin::tensor::from_vector(std::move(labels), {batch_size}, "labels");
    return {std::move(x), std::move(y)};
}

bool batch_is_intact(const std::vector<tenbin::tensor>& b, int& producer, int& seq) {
    if (b.size() != 2 || b[0].info() != "images" || b[1].info() != "labels") return false;
    if (b[0].shape() != tenbin::shape_t{batch_size, channels, side, side}) return false;
    const auto labels = b[1].values<std::int32_t>();
    producer = labels[0];
    seq = labels[1];
    // f2 data read as its bit patterns: the check is exact.
    const auto* px = reinterpret_cast<const std::uint16_t*>(b[0].data().data());
    for (std::size_t i = 0; i < b[0].count(); ++i)
        if (px[i] != pixel(producer, seq, i)) return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const int producers = argc > 1 ? std::atoi(argv[1]) : 3;
    const int batches = argc > 2 ? std::atoi(argv[2]) : 40;
    using namespace std::chrono_literals;

    // Producers bind on ports the system picks; the loader is told them.
    tenbin::connection_options pub_opt;
    pub_opt.pub_nodrop = true;  // wait for a slow trainer rather than drop
    std::vector<tenbin::connection> pubs;
    std::string ports;
    for (int p = 0; p < producers; ++p) {
        pubs.emplace_back("zpub://127.0.0.1:*", pub_opt);
        const std::string addr = pubs.back().endpoints()[0].address;
        if (p) ports += ',';
        ports += addr.substr(addr.rfind(':') + 1);
    }
    const std::string url = "zsub://127.0.0.1:{" + ports + "}";
    std::printf("loader subscribes to %s\n", url.c_str());

    tenbin::loader_options lo;
    lo.queue_messages = 8;
    lo.connection.recv_timeout = 20s;  // a stalled producer fails the demo
    tenbin::loader loader(url, lo);
    std::this_thread::sleep_for(500ms);  // let subscriptions reach the publishers

    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            for (int seq = 0; seq < batches; ++seq)
                if (!pubs[static_cast<std::size_t>(p)].send(make_batch(p, seq))) return;  // send timed out
        });

    const auto start = std::chrono::steady_clock::now();
    std::map<int, int> next_seq;  // per producer: the sequence number expected next
    int bad = 0;
    std::uint64_t bytes = 0;
    for (int n = 0; n < producers * batches; ++n) {
        const auto batch = loader.next();
        if (!batch) break;
        int producer = -1, seq = -1;
        if (!batch_is_intact(*batch, producer, seq) || seq != next_seq[producer]) {
            ++bad;
            std::fprintf(stderr, "batch %d: corrupt or out of order (producer %d, seq %d)\n", n, producer, seq);
        }
        next_seq[producer] = seq + 1;
        for (const auto& t : *batch) bytes += t.nbytes();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (auto& t : threads) t.join();

    int received = 0;
    for (const auto& [p, n] : next_seq) received += n;
    std::printf("received %d of %d batches from %zu producers, %d bad\n", received, producers * batches,
                next_seq.size(), bad);
    std::printf("%.1f batches/s, %.1f MB/s (%.1f MB in %.2f s)\n", received / secs, bytes / secs / 1e6, bytes / 1e6,
                secs);
    std::printf("loader peak queue: %zu messages, %.1f MB\n", loader.peak_queued_messages(),
                loader.peak_queued_bytes() / 1e6);
    const bool ok = bad == 0 && received == producers * batches;
    std::printf("%s\n", ok ? "demo: OK, every batch arrived intact and in order" : "demo: FAILED");
    return ok ? 0 : 1;
}
