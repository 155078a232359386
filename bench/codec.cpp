// tenbin-bench: the codec alone, in memory.
#include "suite.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace bench {

// ---- 4: the codec alone ----
void suite::codec() {
    if (!wanted("codec", "memory")) return;
    const double t = cfg.quick ? 0.02 : 0.1;
    volatile std::size_t sink = 0;
    const workload b = make_workload("batch", 0, false);
    const tenbin::tensor& x = b.tensors[0];  // rank 4: a 56-byte header
    {
        std::int64_t words[7];
        const auto m = interleave(
            cfg.reps,
            [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::encode_header(x).size(); }, t); },
            [&] {
                return 1e9 / ns_per_op(
                                 [&] {
                                     // What an unchecked encoder does: store the words.
                                     std::memcpy(&words[0], "f2\0\0\0\0\0\0", 8);
                                     std::memcpy(&words[1], "input\0\0\0", 8);
                                     words[2] = static_cast<std::int64_t>(x.ndim());
                                     for (std::size_t i = 0; i < x.ndim(); ++i) words[3 + i] = x.shape()[i];
                                     sink = sink + static_cast<std::size_t>(words[3 + (sink & 3)]);
                                 },
                                 t);
            });
        add({"codec encode_header", "memory", 0, m.first, m.second, "op/s", "unchecked word stores",
             "ns/tensor " + std::to_string(1e9 / m.first).substr(0, 5)});
    }
    {
        const std::vector<std::byte> h = b.headers[0];
        const auto m = interleave(
            cfg.reps,
            [&] {
                return 1e9 / ns_per_op([&] { sink = sink + tenbin::decode_header(h).shape.size(); }, t);
            },
            [&] {
                return 1e9 / ns_per_op(
                                 [&] {
                                     std::int64_t words[7];
                                     std::memcpy(words, h.data(), sizeof words);
                                     sink = sink + static_cast<std::size_t>(words[2] + words[6]);
                                 },
                                 t);
            });
        add({"codec decode_header", "memory", 0, m.first, m.second, "op/s", "unchecked word loads",
             "ns/tensor " + std::to_string(1e9 / m.first).substr(0, 5)});
    }
    {
        const tenbin::buffer big = make_workload("quad", 256 * MiB).encoded;
        const tenbin::buffer tiny = make_workload("quad", 1 * KiB).encoded;
        if (!(tenbin::decode_buffer(big)[3].view() == make_workload("quad", 256 * MiB, false).tensors[3].view()))
            fail("decode_buffer of the 256 MiB buffer differs");
        const auto m = interleave(
            cfg.reps,
            [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::decode_buffer(big).size(); }, t); },
            [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::decode_buffer(tiny).size(); }, t); });
        add({"codec decode_buffer 256MiB vs 1KiB", "memory", 256 * MiB, m.first, m.second, "op/s",
             "decode_buffer of 1 KiB", "ns/call " + std::to_string(1e9 / m.first).substr(0, 6)});
    }
    for (bool into : {true, false}) {
        const workload w = make_workload("quad", 64 * MiB);
        const std::size_t size = w.encoded.size();
        tenbin::buffer out = tenbin::buffer::allocate(size);
        std::memset(out.writable_bytes().data(), 0, size);
        auto rate = [&](double ns) { return static_cast<double>(w.payload) / ns; };
        const auto m = interleave(
            cfg.reps,
            [&] {
                return rate(ns_per_op(
                    [&] {
                        if (into) {
                            tenbin::encode_buffer_into(w.tensors, out.writable_bytes());
                        } else {
                            sink = sink + tenbin::encode_buffer(w.tensors).size();
                        }
                    },
                    t));
            },
            [&] {
                return rate(ns_per_op(
                    [&] {
                        std::byte* dst = into ? out.writable_bytes().data()
                                              : static_cast<std::byte*>(std::aligned_alloc(64, size));
                        std::size_t at = 0;
                        for (const auto& x : w.tensors) {
                            std::memcpy(dst + at, x.data().data(), x.nbytes());
                            at += x.nbytes();
                        }
                        sink = sink + static_cast<std::size_t>(dst[at - 1]);
                        if (!into) std::free(dst);
                    },
                    t));
            });
        if (into) {  // the baseline wrote `out` last: encode once more to check
            tenbin::encode_buffer_into(w.tensors, out.writable_bytes());
            if (std::memcmp(out.data(), w.encoded.data(), size) != 0) fail("encode_buffer_into differs");
        }
        add({into ? "codec encode_buffer_into" : "codec encode_buffer", "memory", w.payload, m.first, m.second,
             "GB/s", into ? "memcpy of the payload" : "aligned_alloc + memcpy + free", {}});
    }
}

}  // namespace bench
