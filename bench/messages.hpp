// tenbin-bench: what one message carries (workloads) and how each
// implementation sends and receives it: tenbin, raw libzmq and the raw
// variants that do part of tenbin's work.
#pragma once

#include "harness.hpp"

#include <tenbin/tenbin.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// Raw libzmq doing part of what any conforming zero-copy receiver of
// owned tensors must do, for the anatomy cases: raw_kept the lifetime work
// (the sender keeps each tensor alive until libzmq releases its frame, the
// receiver keeps every frame of a message open until the message is done
// with); raw_decoded the format's work (the receiver decodes each header
// and checks it against its data frame; the sender is plain raw); raw_floor
// both, with nothing else: the floor for such a library. For small
// messages, raw_tensors: the sender encodes each header as it sends, the
// receiver decodes and checks it and hands the data frame, kept open by a
// shared keeper, to a tenbin::tensor, the shortest way the library's
// public types allow: the floor for a library that returns owned tensors.
enum class impl { tenbin, raw, raw_kept, raw_decoded, raw_floor, raw_tensors, pool, fresh, raw_fresh };
inline bool pins(impl i) { return i == impl::raw_kept || i == impl::raw_floor; }
// The producers (the "producer" rows) make every batch they send, writing
// each byte of it: pool fills tensors from a tenbin::tensor_pool, fresh
// allocates new tensors, raw_fresh mallocs each frame and hands it to
// zmq_msg_init_data with a free callback. Their receivers are tenbin's
// (pool, fresh) and raw libzmq's (raw_fresh).
inline bool produces(impl i) { return i == impl::pool || i == impl::fresh || i == impl::raw_fresh; }
inline impl receiver_for(impl i) {
    if (!produces(i)) return i;
    return i == impl::raw_fresh ? impl::raw : impl::tenbin;
}
// Names of the implementations the two-process peers run.
inline const char* peer_name(impl i) {
    switch (i) {
    case impl::tenbin: return "tenbin";
    case impl::raw: return "raw";
    case impl::pool: return "pool";
    case impl::fresh: return "fresh";
    case impl::raw_fresh: return "raw_fresh";
    default: fail("peers run tenbin, raw or a producer");
    }
}
inline impl peer_impl(const std::string& name) {
    for (impl i : {impl::tenbin, impl::raw, impl::pool, impl::fresh, impl::raw_fresh})
        if (name == peer_name(i)) return i;
    fail("unknown peer implementation " + name);
}
inline bool decodes(impl i) { return i == impl::raw_decoded || i == impl::raw_floor; }
enum class form { multi, single, small };

inline const char* name_of(form f) { return f == form::multi ? "multi" : f == form::single ? "single" : "small"; }
inline form form_of(const std::string& s) {
    if (s == "multi") return form::multi;
    if (s == "single") return form::single;
    if (s == "small") return form::small;
    fail("unknown form " + s);
}

// What one message carries, in every form the senders need.
struct workload {
    std::string set;
    std::uint64_t bytes = 0;  // the `--bytes` argument (quad only)
    std::vector<tenbin::tensor> tensors;
    std::vector<std::vector<std::byte>> headers;  // encode_header of each
    tenbin::buffer encoded;                       // encode_buffer (single form)
    std::uint64_t payload = 0;                    // tensor bytes per message
};

// quad: 4 float32 tensors sharing `bytes` (octo: 8); small: 64 float32; batch: a
// tensorcom-sized batch (256x3x224x224 float16 plus 256 int32 labels).
workload make_workload(const std::string& set, std::uint64_t bytes, bool with_encoded = true);

// Messages a second for small messages, else GB/s of tensor data.
double throughput(const workload& w, form f, int count, double seconds);

zmq::socket_ref ref(void* s);
void check_zmq(int rc, const char* what);

// One message of `w` from `s` by `which`, in form `f`.
void send_one(void* s, impl which, form f, const workload& w);

// What tenbin received must be what was sent: sizes always, bytes when
// `verify` (the first message of a run).
void check_received(const std::vector<tenbin::tensor>& got, const workload& w, bool verify);

// One message received by `which` (tenbin into `kept`, one message for
// the whole run, as the raw receiver reuses one zmq_msg_t) and checked.
void recv_one(void* s, impl which, form f, const workload& w, bool verify, tenbin::message& kept);

// The receiver side of one repetition: takes `warmup` messages by
// `take_one(verify)` (verifying the first), calls `ready`, and returns the
// seconds `count` more take.
template <class Take>
double timed_receive(int warmup, int count, const std::function<void()>& ready, Take&& take_one) {
    for (int i = 0; i < warmup; ++i) take_one(i == 0);
    const auto t0 = clock_type::now();
    ready();
    for (int i = 0; i < count; ++i) take_one(false);
    return seconds_since(t0);
}

// The same for recv_one.
double receive_run(void* s, impl which, form f, const workload& w, int warmup, int count,
                   const std::function<void()>& ready);

// The sender side: `warmup` messages, `wait_go()`, `count` more.
void send_run(void* s, impl which, form f, const workload& w, int warmup, int count,
              const std::function<void()>& wait_go);

}  // namespace bench
