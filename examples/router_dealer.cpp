// Request-reply with tensors through a ROUTER: a DEALER client and a REQ
// client send tensor requests; the server receives each with its envelope
// (the client's identity, plus the empty delimiter a REQ adds) and replies
// through the same envelope. The tensors travel exactly as tensorcom frames.
// A request that is not tenbin still gets an answer (an empty list): a REQ
// client would otherwise wait for ever.
#include <tenbin/tenbin.hpp>

#include <cstdio>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>

namespace {
// The service: the sum of a float tensor, as a rank-0 tensor.
tenbin::tensor sum_of(const tenbin::tensor& t) {
    const auto v = t.values<float>();
    return tenbin::tensor::from_vector(std::vector<float>{std::accumulate(v.begin(), v.end(), 0.0f)}, {}, "sum");
}
}  // namespace

int main() {
    zmq::context_t ctx;
    // Sockets that receive are bounded (high-water mark, largest message).
    zmq::socket_t server = tenbin::bounded_socket(ctx, zmq::socket_type::router);
    server.set(zmq::sockopt::rcvtimeo, 5000);
    server.bind("tcp://127.0.0.1:*");
    const std::string address = server.get(zmq::sockopt::last_endpoint);

    std::thread serve([&] {
        tenbin::recv_options ro;
        // identity, then a delimiter only if the peer sent one (REQ does)
        ro.envelope = tenbin::envelope_spec::router();
        for (int i = 0; i < 3; ++i) {
            std::optional<tenbin::message> request;
            try {
                request = tenbin::zrecv(server, ro);
            } catch (const tenbin::malformed_message& e) {
                const std::string_view why = tenbin::name(e.code());
                std::printf("server: refused a malformed request (%.*s)\n", static_cast<int>(why.size()), why.data());
                const auto envelope = e.envelope_buffers();
                if (!tenbin::zsend_multipart(server, {}, {.envelope = envelope})) return;  // peer gone
                continue;
            }
            if (!request) return;
            const auto envelope = request->envelope_buffers();
            std::printf("server: request from a %s client, %zu envelope frame(s)\n",
                        request->envelope.size() == 2 ? "REQ" : "DEALER", request->envelope.size());
            if (!tenbin::zsend_multipart(server, sum_of(request->tensors.at(0)), {.envelope = envelope})) return;
        }
    });

    const auto numbers = tenbin::tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}, "numbers");
    bool ok = true;
    for (auto type : {zmq::socket_type::dealer, zmq::socket_type::req}) {
        zmq::socket_t client = tenbin::bounded_socket(ctx, type);
        client.set(zmq::sockopt::rcvtimeo, 5000);
        client.connect(address);
        // A DEALER talks to a ROUTER with no delimiter; a REQ adds one
        // itself and strips it from the reply. Neither needs an envelope here.
        ok = tenbin::zsend_multipart(client, numbers) && ok;
        auto reply = tenbin::zrecv(client);
        const float sum = reply ? reply->tensors.at(0).values<float>()[0] : -1;
        std::printf("client: sum = %g\n", sum);
        ok = ok && sum == 10.0f;
    }
    {
        zmq::socket_t client = tenbin::bounded_socket(ctx, zmq::socket_type::req);
        client.set(zmq::sockopt::rcvtimeo, 5000);
        client.connect(address);
        client.send(zmq::str_buffer("not tensors"), zmq::send_flags::none);
        auto reply = tenbin::zrecv(client);
        std::printf("client: a malformed request %s\n", reply ? "was answered" : "got no answer");
        ok = ok && reply && reply->tensors.empty();
    }
    serve.join();
    std::printf("router_dealer: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
