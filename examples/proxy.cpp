// Tensors through an existing ZeroMQ device: producers PUSH to a zmq::proxy
// (PULL in, PUSH out) running in its own thread, and a consumer PULLs from
// it. The proxy forwards frames without looking at them, so tenbin messages,
// multipart or single-part, cross it unchanged.
#include <tenbin/tenbin.hpp>

#include <cstdio>
#include <thread>

int main() {
    zmq::context_t ctx;
    // Receiving sockets bounded (high-water mark, largest message), whatever a peer sends.
    zmq::socket_t frontend = tenbin::bounded_socket(ctx, zmq::socket_type::pull);
    zmq::socket_t backend(ctx, zmq::socket_type::push);
    frontend.bind("inproc://frontend");
    backend.bind("inproc://backend");
    // zmq::proxy runs until the context shuts down; a PAIR control socket
    // stops it cleanly instead.
    zmq::socket_t control(ctx, zmq::socket_type::pair), control_peer(ctx, zmq::socket_type::pair);
    control.bind("inproc://control");
    control_peer.connect("inproc://control");
    std::thread device([&] { zmq::proxy_steerable(frontend, backend, zmq::socket_ref(), control); });

    zmq::socket_t producer(ctx, zmq::socket_type::push);
    zmq::socket_t consumer = tenbin::bounded_socket(ctx, zmq::socket_type::pull);
    producer.connect("inproc://frontend");
    consumer.connect("inproc://backend");
    consumer.set(zmq::sockopt::rcvtimeo, 5000);

    const auto a = tenbin::tensor::from_vector(std::vector<double>(1000, 0.5), {10, 100}, "a");
    const auto b = tenbin::tensor::from_vector(std::vector<std::uint8_t>{1, 2, 3}, {3}, "b");
    bool ok = tenbin::zsend_multipart(producer, {a, b});
    ok = tenbin::zsend_single(producer, {a, b}) && ok;

    for (const char* form : {"multipart", "single-part"}) {
        auto m = tenbin::zrecv(consumer);
        ok = ok && m && m->tensors.size() == 2 && m->tensors[0].view() == a.view() && m->tensors[1].view() == b.view();
        std::printf("proxy: %s message %s\n", form, ok ? "crossed intact" : "was damaged or lost");
    }
    control_peer.send(zmq::str_buffer("TERMINATE"));
    device.join();
    return ok ? 0 : 1;
}
