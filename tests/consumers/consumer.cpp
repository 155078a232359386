// A program built against an installed (or subproject) tenbin only, through
// its public headers: encodes and decodes, sends over ZeroMQ, and uses the
// optional parts the installed build has. Exits non-zero on any mismatch.
#include <tenbin/tenbin.hpp>
#if TENBIN_HAS_DLPACK
#include <tenbin/dlpack.hpp>
#endif

#include <cstdlib>
#include <iostream>
#include <vector>

namespace {

void expect(bool ok, const char* what) {
    if (!ok) {
        std::cerr << "consumer: " << what << " failed\n";
        std::exit(1);
    }
}

}  // namespace

int main() try {
    const auto t = tenbin::tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}, "x");

    const tenbin::buffer encoded = tenbin::encode_buffer({t});
    const auto decoded = tenbin::decode_buffer(encoded);
    expect(decoded.size() == 1 && decoded[0].view() == t.view(), "encode_buffer/decode_buffer");

    zmq::context_t ctx;
    zmq::socket_t pull(ctx, zmq::socket_type::pull);
    zmq::socket_t push(ctx, zmq::socket_type::push);
    pull.set(zmq::sockopt::rcvtimeo, 5000);
    pull.bind("inproc://consumer");
    push.connect("inproc://consumer");
    expect(tenbin::zsend_multipart(push, {t}), "zsend_multipart");
    const auto msg = tenbin::zrecv(pull);
    expect(msg && msg->tensors.size() == 1 && msg->tensors[0].values<float>()[2] == 3.25f, "zrecv");

#if TENBIN_HAS_ZSTD
    tenbin::memory_sink packed;
    {
        tenbin::zstd_sink z(packed);
        tenbin::write(z, {t});
        z.finish();
    }
    tenbin::memory_source in(packed.bytes());
    tenbin::zstd_source unpacked(in);
    const auto back = tenbin::read(unpacked);
    expect(back.size() == 1 && back[0].view() == t.view(), "zstd round trip");
#endif
#if TENBIN_HAS_DLPACK
    const tenbin::tensor shared = tenbin::from_dlpack(tenbin::to_dlpack(t), "x");
    expect(shared.data().data() == t.data().data(), "DLPack round trip");
#endif

    std::cout << "consumer ok: tenbin " << TENBIN_VERSION << ", zstd " << TENBIN_HAS_ZSTD << ", dlpack "
              << TENBIN_HAS_DLPACK << "\n";
    return 0;
} catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
}
