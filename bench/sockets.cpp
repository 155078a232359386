// tenbin-bench: sockets of this process and a sender on a thread.
#include "sockets.hpp"

#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>

namespace bench {

std::shared_ptr<zmq::context_t> shared_context() {
    static const auto ctx = std::make_shared<zmq::context_t>();
    return ctx;
}
void set_int(void* s, int option, int value) {
    check_zmq(zmq_setsockopt(s, option, &value, sizeof value), "zmq_setsockopt");
}

int hwm_for(std::uint64_t payload) {
    return static_cast<int>(std::clamp<std::uint64_t>((256 * MiB) / std::max<std::uint64_t>(payload, 1), 2, 1000));
}

std::string endpoint_for(const std::string& transport) {
    static int n = 0;
    ++n;
    if (transport == "inproc") return "inproc://tenbin-bench-" + std::to_string(n);
    if (transport == "ipc") return "ipc:///tmp/tenbin-bench-" + std::to_string(getpid()) + "-" + std::to_string(n);
    return "tcp://127.0.0.1:*";
}

namespace {

void* context() { return shared_context()->handle(); }

std::string last_endpoint(void* s) {
    char buf[256];
    std::size_t len = sizeof buf;
    check_zmq(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, buf, &len), "ZMQ_LAST_ENDPOINT");
    return std::string(buf);
}

// CURVE on a peer's socket (the "curve" rows): the receiver serves, the
// sender is its client, both with the one pair the run generated.
tenbin::curve_guard secure_socket(void* s, const tenbin::curve_keys& keys, bool server) {
    tenbin::curve_options o;
    o.keys = keys;
    if (!server) o.server_key = keys.public_key;
    return tenbin::enable_curve(*shared_context(), zmq::socket_ref(zmq::from_handle, s), o,
                                server ? tenbin::curve_role::server : tenbin::curve_role::client);
}

}  // namespace

void* receiver_socket(const std::string& endpoint, int hwm, std::string& bound,
                      const tenbin::curve_keys* curve, tenbin::curve_guard* guard) {
    void* s = zmq_socket(context(), ZMQ_PULL);
    set_int(s, ZMQ_RCVHWM, hwm);
    set_int(s, ZMQ_RCVTIMEO, 120000);  // a hung peer fails the case instead of the run
    if (curve) *guard = secure_socket(s, *curve, true);
    check_zmq(zmq_bind(s, endpoint.c_str()), "zmq_bind");
    bound = last_endpoint(s);
    return s;
}

void* sender_socket(const std::string& endpoint, int hwm, const tenbin::curve_keys* curve,
                    tenbin::curve_guard* guard) {
    void* s = zmq_socket(context(), ZMQ_PUSH);
    set_int(s, ZMQ_SNDHWM, hwm);
    set_int(s, ZMQ_SNDTIMEO, 120000);
    if (curve) *guard = secure_socket(s, *curve, false);
    check_zmq(zmq_connect(s, endpoint.c_str()), "zmq_connect");
    return s;
}

void read_through(const std::vector<tenbin::tensor>& batch) {
    static volatile std::uint64_t sink = 0;
    std::uint64_t sum = 0;
    for (const tenbin::tensor& t : batch) {
        const tenbin::bytes_view b = t.data().bytes();
        std::size_t i = 0;
        for (; i + 8 <= b.size(); i += 8) {
            std::uint64_t word;
            std::memcpy(&word, b.data() + i, 8);
            sum += word;
        }
        for (; i < b.size(); ++i) sum += static_cast<std::uint64_t>(b[i]);
    }
    sink = sink + sum;
}

double with_sender_thread(const std::function<void(const std::function<void()>&)>& send,
                          const std::function<double(const std::function<void()>&)>& receive) {
    std::atomic<int> go{0};
    std::exception_ptr err;
    std::thread sender([&] {
        try {
            send([&] { go.wait(0); });
        } catch (...) {
            err = std::current_exception();
        }
    });
    double s = 0;
    try {
        s = receive([&] {
            go.store(1);
            go.notify_one();
        });
    } catch (...) {
        go.store(1);
        go.notify_one();
        sender.join();
        throw;
    }
    sender.join();
    if (err) std::rethrow_exception(err);
    return s;
}

double raw_frames(void* tx, void* rx, const std::vector<std::size_t>& sizes, int warmup, int count,
                  const std::string& to) {
    const std::vector<std::byte> bytes(*std::max_element(sizes.begin(), sizes.end()));
    return with_sender_thread(
        [&](const std::function<void()>& wait_go) {
            auto one = [&] {
                if (!to.empty() && zmq_send(tx, to.data(), to.size(), ZMQ_SNDMORE) < 0) fail("raw send failed");
                for (std::size_t k = 0; k < sizes.size(); ++k)
                    if (zmq_send(tx, bytes.data(), sizes[k], k + 1 < sizes.size() ? ZMQ_SNDMORE : 0) < 0)
                        fail("raw send failed");
            };
            for (int i = 0; i < warmup; ++i) one();
            wait_go();
            for (int i = 0; i < count; ++i) one();
        },
        [&](const std::function<void()>& ready) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            auto take = [&] {
                do
                    if (zmq_msg_recv(&m, rx, 0) < 0) fail("raw receive failed");
                while (zmq_msg_more(&m));
            };
            for (int i = 0; i < warmup; ++i) take();
            ready();
            const auto t0 = clock_type::now();
            for (int i = 0; i < count; ++i) take();
            const double s = seconds_since(t0);
            zmq_msg_close(&m);
            return s;
        });
}

double run_sender_thread(void* push, impl sender_impl, form f, const workload& w, int warmup, int count,
                         const std::function<double(const std::function<void()>&)>& receive) {
    return with_sender_thread(
        [&](const std::function<void()>& wait_go) { send_run(push, sender_impl, f, w, warmup, count, wait_go); },
        receive);
}

namespace {

std::string sender_url(const std::string& transport) {
    static int n = 0;
    if (transport == "shm")
        return "zrpush+shm:///tmp/tenbin-bench-pair-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    if (transport == "tcp") return "zrpush://127.0.0.1:*";
    fail("connection pairs run over tcp or shm, not " + transport);
}

}  // namespace

std::string receiver_url(const tenbin::connection& tx) {
    const std::string& address = tx.endpoints().at(0).address;  // tcp://HOST:PORT or ipc://PATH
    return (address.rfind("tcp://", 0) == 0 ? "zrpull://" : "zrpull+shm://") + address.substr(6);
}

connection_pair::connection_pair(const std::string& transport, const tenbin::connection_options& tx_opt,
                                 const tenbin::connection_options& rx_opt)
    : tx(sender_url(transport), tx_opt), rx(receiver_url(tx), rx_opt) {}

tenbin::connection_options case_options(int hwm) {
    tenbin::connection_options o;
    o.send_hwm = hwm;
    o.recv_hwm = hwm;
    o.recv_timeout = std::chrono::seconds(120);
    o.send_timeout = std::chrono::seconds(120);
    return o;
}

double run_connections(connection_pair& p, const workload& w, int warmup, int count, const trainer_loop& trainer) {
    tenbin::connection &tx = p.tx, &rx = p.rx;
    auto send = [&] {
        if (!tx.send(w.tensors)) fail("send timed out");
    };
    return with_sender_thread(
        [&](const std::function<void()>& wait_go) {
            for (int i = 0; i < warmup; ++i) send();
            wait_go();
            for (int i = 0; i < count; ++i) send();
        },
        [&](const std::function<void()>& ready) {
            std::vector<tenbin::tensor> held;
            return timed_receive(warmup, count, ready, [&](bool verify) {
                auto got = rx.recv();
                if (!got) fail(rx.stream_ended() ? "the stream ended" : "receive timed out");
                check_received(*got, w, verify);
                if (trainer.step.count() == 0) return;
                if (trainer.keep) held = std::move(*got);  // the one before goes
                std::this_thread::sleep_for(trainer.step);
            });
        });
}

double run_threads(socket_pair& p, impl sender_impl, impl receiver_impl, form f, const workload& w, int warmup,
                   int count) {
    return run_sender_thread(p.push, sender_impl, f, w, warmup, count, [&](const std::function<void()>& ready) {
        return receive_run(p.pull, receiver_impl, f, w, warmup, count, ready);
    });
}

double run_threads(socket_pair& p, impl which, form f, const workload& w, int warmup, int count) {
    return run_threads(p, which, which, f, w, warmup, count);
}

}  // namespace bench
