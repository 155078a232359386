// A push/pull pipeline: a source pushes batches to two workers, each worker
// normalises its batch and pushes the result to one sink. PUSH spreads
// messages over the workers; PULL fans their results back in.
//
//   source --push--> [worker, worker] --push--> sink
#include <tenbin/tenbin.hpp>

#include <cstdio>
#include <thread>

int main() {
    using namespace std::chrono_literals;
    constexpr int batches = 20;
    // inproc endpoints need one context shared by both ends.
    auto ctx = std::make_shared<zmq::context_t>(1);
    const std::vector<std::string> to_workers{"zrpush+inproc://work"}, from_source{"zrpull+inproc://work"};
    const std::vector<std::string> to_sink{"zpush+inproc://results"}, at_sink{"zpull+inproc://results"};

    tenbin::connection_options opt;
    opt.recv_timeout = 5s;
    tenbin::connection source(ctx, to_workers, opt);  // binds
    tenbin::connection sink(ctx, at_sink, opt);       // binds

    auto worker = [&] {
        tenbin::connection in(ctx, from_source, opt), out(ctx, to_sink, opt);
        // Range-for receives until the source has been quiet for recv_timeout.
        in.socket().set(zmq::sockopt::rcvtimeo, 300);
        for (auto& batch : in) {
            // Received bytes are read-only (they may be the sender's memory
            // over inproc): the first write gives x a copy of its own.
            tenbin::tensor x = batch[0];
            for (float& v : x.mutable_values<float>()) v = v / 255.0f;
            if (!out.send({x.with_info("scaled"), batch[1]})) break;  // the sink stopped taking
        }
    };
    std::thread w1(worker), w2(worker);

    for (int i = 0; i < batches; ++i) {
        std::vector<float> pixels(1000, 255.0f * static_cast<float>(i % 2));
        if (!source.send({tenbin::tensor::from_vector(std::move(pixels), {10, 100}, "raw"),
                          tenbin::tensor::from_vector(std::vector<std::int32_t>{i}, {1}, "index")}))
            break;  // no worker took it in time: the check below reports the missing batches
    }

    int seen = 0, wrong = 0;
    for (int i = 0; i < batches; ++i) {
        auto result = sink.recv();
        if (!result) break;
        const auto x = (*result)[0].values<float>();
        const int index = (*result)[1].values<std::int32_t>()[0];
        wrong += (x[0] != static_cast<float>(index % 2) || (*result)[0].info() != "scaled");
        ++seen;
    }
    w1.join();
    w2.join();
    std::printf("push_pull: %d of %d batches came back scaled, %d wrong\n", seen, batches, wrong);
    return seen == batches && wrong == 0 ? 0 : 1;
}
