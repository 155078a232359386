// tenbin-bench: sockets of this process (one context for all) and a
// sender on a thread of its own.
#pragma once

#include "messages.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace bench {

// One context (one I/O thread) for every socket of this process, the
// loader's included.
std::shared_ptr<zmq::context_t> shared_context();
void set_int(void* s, int option, int value);

// Queue a bounded number of bytes whatever the message size (HWMs count
// messages): both implementations get the same setting.
int hwm_for(std::uint64_t payload);

// A new endpoint of `transport` (inproc, ipc, tcp: port chosen at bind).
std::string endpoint_for(const std::string& transport);

// A PULL socket bound to `endpoint` (its address as bound in `bound`) and
// a PUSH socket connected to one, each with CURVE when `curve` is given.
void* receiver_socket(const std::string& endpoint, int hwm, std::string& bound,
                      const tenbin::curve_keys* curve = nullptr, tenbin::curve_guard* guard = nullptr);
void* sender_socket(const std::string& endpoint, int hwm, const tenbin::curve_keys* curve = nullptr,
                    tenbin::curve_guard* guard = nullptr);

// A PUSH/PULL pair inside this process, kept for all repetitions of a case.
struct socket_pair {
    void* push = nullptr;
    void* pull = nullptr;
    std::string endpoint;
    socket_pair(const std::string& transport, int hwm) {
        pull = receiver_socket(endpoint_for(transport), hwm, endpoint);
        push = sender_socket(endpoint, hwm);
    }
    ~socket_pair() {
        set_int(push, ZMQ_LINGER, 0);
        zmq_close(push);
        zmq_close(pull);
        if (endpoint.rfind("ipc://", 0) == 0) ::unlink(endpoint.c_str() + 6);
    }
};

// What a consumer does at the least with a batch: reads every byte of it
// (as 64-bit words, into a sum the compiler must keep).
void read_through(const std::vector<tenbin::tensor>& batch);

// One repetition with `send(wait_go)` on a thread of this process:
// `receive(ready)` receives here and returns its seconds, calling `ready`
// (which lets `wait_go` return) once the warmup messages are in.
double with_sender_thread(const std::function<void(const std::function<void()>&)>& send,
                          const std::function<double(const std::function<void()>&)>& receive);

// Raw libzmq from socket `tx` (on a thread) to `rx`: messages of frames of
// `sizes` bytes (zmq_send, zmq_msg_recv), the seconds `count` of them take
// after `warmup`. A ROUTER `tx` names its receiver `to` in a frame first.
double raw_frames(void* tx, void* rx, const std::vector<std::size_t>& sizes, int warmup, int count,
                  const std::string& to = {});

// The same with the sender sending from `push`; `receive(ready)` receives here and returns its seconds, calling
// `ready` once the warmup messages are in.
double run_sender_thread(void* push, impl sender_impl, form f, const workload& w, int warmup, int count,
                         const std::function<double(const std::function<void()>&)>& receive);

// One repetition over `p`: the sender on a thread, the receiver here.
double run_threads(socket_pair& p, impl sender_impl, impl receiver_impl, form f, const workload& w, int warmup,
                   int count);
double run_threads(socket_pair& p, impl which, form f, const workload& w, int warmup, int count);

// A sending and a receiving tenbin connection in this process, kept for
// all repetitions of a case: over "tcp" the sender binds a port of the
// system's choice, over "shm" (+shm) a new path; the receiver dials it.
struct connection_pair {
    tenbin::connection tx, rx;
    connection_pair(const std::string& transport, const tenbin::connection_options& tx_opt,
                    const tenbin::connection_options& rx_opt);
};

// The receiving URL for a sender bound by connection_pair's rule.
std::string receiver_url(const tenbin::connection& tx);

// Options for a connection of a case: queues of `hwm` messages, and a
// peer that hangs fails the case rather than the run.
tenbin::connection_options case_options(int hwm);

// A receiver that works like a trainer: `step` with each message (a
// sleep, as a wait for the GPU), then drops it before it asks for the next
// (as a range-for does) or, with `keep`, keeps it until the next has come
// (as a loop of next() calls may).
struct trainer_loop {
    std::chrono::microseconds step{};
    bool keep = false;
};

// One repetition between two tenbin connections: `tx` sends on a thread,
// `rx` receives here (as fast as it can, or as `trainer` says).
double run_connections(connection_pair& p, const workload& w, int warmup, int count,
                       const trainer_loop& trainer = {});

}  // namespace bench
