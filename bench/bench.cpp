// tenbin-bench: every tenbin operation beside its baseline (raw libzmq,
// memcpy, plain write/read, the tensorcom-style Python peer), measured in
// one run with repetitions interleaved; prints a table, writes JSON.
//
//   tenbin-bench [--quick] [--json FILE] [--filter TEXT] [--malloc reuse|default]
//
// Throughput is payload bytes (tensor data, not headers or padding) per
// second, or messages per second for small messages. Each figure is the
// median of the repetitions; ratio = tenbin / baseline, higher is better.
//
// Streams run a PUSH sender and a PULL receiver. The sender sends `warmup`
// messages (the receiver checks the first one's content), then waits until
// the receiver has taken them all; the clock runs from then until the
// receiver has the last of `count` more. Two-process cases re-execute this
// program with the hidden `--peer` role flags (or the Python peer) and
// signal "go" over the child's stdin; tenbin and raw libzmq take turns in
// one pair of such processes, which stays up for all repetitions of a case.
#include "harness.hpp"

#include <tenbin/tenbin.hpp>

#include <zmq.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TENBIN_BENCH_PYTHON_PEER
#define TENBIN_BENCH_PYTHON_PEER "bench/python_peer.py"
#endif

namespace {

using namespace bench;

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
bool pins(impl i) { return i == impl::raw_kept || i == impl::raw_floor; }
// The producers (the "producer" rows) make every batch they send, writing
// each byte of it: pool fills tensors from a tenbin::tensor_pool, fresh
// allocates new tensors, raw_fresh mallocs each frame and hands it to
// zmq_msg_init_data with a free callback. Their receivers are tenbin's
// (pool, fresh) and raw libzmq's (raw_fresh).
bool produces(impl i) { return i == impl::pool || i == impl::fresh || i == impl::raw_fresh; }
impl receiver_for(impl i) {
    if (!produces(i)) return i;
    return i == impl::raw_fresh ? impl::raw : impl::tenbin;
}
// Names of the implementations the two-process peers run.
const char* peer_name(impl i) {
    switch (i) {
    case impl::tenbin: return "tenbin";
    case impl::raw: return "raw";
    case impl::pool: return "pool";
    case impl::fresh: return "fresh";
    case impl::raw_fresh: return "raw_fresh";
    default: fail("peers run tenbin, raw or a producer");
    }
}
impl peer_impl(const std::string& name) {
    for (impl i : {impl::tenbin, impl::raw, impl::pool, impl::fresh, impl::raw_fresh})
        if (name == peer_name(i)) return i;
    fail("unknown peer implementation " + name);
}
bool decodes(impl i) { return i == impl::raw_decoded || i == impl::raw_floor; }
enum class form { multi, single, small };

const char* name_of(form f) { return f == form::multi ? "multi" : f == form::single ? "single" : "small"; }
form form_of(const std::string& s) {
    if (s == "multi") return form::multi;
    if (s == "single") return form::single;
    if (s == "small") return form::small;
    fail("unknown form " + s);
}

// ---- workloads ----------------------------------------------------------------

// Byte j of tensor k is (31 j + 7 k) mod 251: aperiodic in powers of two, and
// the Python peer makes the same bytes from one 251-byte period.
void fill_pattern(std::byte* p, std::size_t n, int k) {
    std::byte period[251];
    for (int j = 0; j < 251; ++j) period[j] = static_cast<std::byte>((31 * j + 7 * k) % 251);
    for (std::size_t off = 0; off < n; off += 251) std::memcpy(p + off, period, std::min<std::size_t>(251, n - off));
}

tenbin::tensor pattern_tensor(tenbin::dtype t, tenbin::shape_t shape, int k, std::string info = {}) {
    std::uint64_t n = tenbin::itemsize(t);
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    tenbin::buffer b = tenbin::buffer::allocate(n);
    fill_pattern(b.writable_bytes().data(), n, k);
    return tenbin::tensor(t, std::move(shape), std::move(b), std::move(info));
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
workload make_workload(const std::string& set, std::uint64_t bytes, bool with_encoded = true) {
    workload w;
    w.set = set;
    w.bytes = bytes;
    if (set == "quad" || set == "octo") {
        const int n = set == "quad" ? 4 : 8;
        if (bytes % (4 * n)) fail(set + " needs a multiple of " + std::to_string(4 * n) + " bytes");
        for (int k = 0; k < n; ++k)
            w.tensors.push_back(pattern_tensor(tenbin::dtype::f4, {static_cast<std::int64_t>(bytes / (4 * n))}, k));
    } else if (set == "small") {
        w.tensors.push_back(pattern_tensor(tenbin::dtype::f4, {64}, 0));
    } else if (set == "batch") {
        w.tensors.push_back(pattern_tensor(tenbin::dtype::f2, {256, 3, 224, 224}, 0, "input"));
        w.tensors.push_back(pattern_tensor(tenbin::dtype::i4, {256}, 1, "target"));
    } else {
        fail("unknown set " + set);
    }
    for (const auto& t : w.tensors) {
        w.headers.push_back(tenbin::encode_header(t));
        w.payload += t.nbytes();
    }
    if (with_encoded) w.encoded = tenbin::encode_buffer(w.tensors);
    return w;
}

// Messages a second for small messages, else GB/s of tensor data.
double throughput(const workload& w, form f, int count, double seconds) {
    return f == form::small ? count / seconds : static_cast<double>(w.payload) * count / seconds / 1e9;
}

// ---- one message, both ways -----------------------------------------------------

zmq::socket_ref ref(void* s) { return zmq::socket_ref(zmq::from_handle, s); }

// Raw zero-copy frames point into the workload, which outlives the sockets.
void no_free(void*, void*) {}

void check_zmq(int rc, const char* what) {
    if (rc < 0) fail(std::string(what) + ": " + zmq_strerror(zmq_errno()));
}

// raw_kept's sender: one block per message holds a keeper of each tensor;
// each frame's release drops one reference, the last frees the block. It
// is kept under glibc's fastbin size (120 bytes): the sender allocates it
// and the receiver's thread frees it, and a larger block freed across
// threads goes through the arena's lock, which alone cost this case a
// third of its rate.
constexpr std::size_t max_kept = 4;

struct kept_block {
    std::atomic<int> refs{0};
    std::array<tenbin::buffer::keeper_type, max_kept> keep;
};
static_assert(sizeof(kept_block) <= 120);

void release_kept(void*, void* hint) {
    auto* b = static_cast<kept_block*>(hint);
    if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete b;
}

void free_frame(void* data, void*) { std::free(data); }

// A producer's message: every tensor of `w` made anew (from the pool, the
// heap, or malloc for raw libzmq) and filled with its bytes.
void produce_one(void* s, impl which, const workload& w) {
    if (which == impl::raw_fresh) {
        const std::size_t n = w.tensors.size();
        for (std::size_t k = 0; k < n; ++k) {
            check_zmq(zmq_send(s, w.headers[k].data(), w.headers[k].size(), ZMQ_SNDMORE), "zmq_send header");
            const tenbin::buffer& d = w.tensors[k].data();
            void* p = std::malloc(d.size() == 0 ? 1 : d.size());
            if (!p) fail("out of memory");
            std::memcpy(p, d.data(), d.size());
            zmq_msg_t m;
            check_zmq(zmq_msg_init_data(&m, p, d.size(), &free_frame, nullptr), "zmq_msg_init_data");
            if (zmq_msg_send(&m, s, k + 1 < n ? ZMQ_SNDMORE : 0) < 0) {
                zmq_msg_close(&m);
                check_zmq(-1, "zmq_msg_send");
            }
        }
        return;
    }
    // One pool for the process, as a producer keeps one (the sending
    // thread is new for every repetition).
    static tenbin::tensor_pool pool;
    std::vector<tenbin::tensor> batch;
    batch.reserve(w.tensors.size());
    for (const tenbin::tensor& t : w.tensors) {
        tenbin::tensor made = which == impl::pool ? pool.acquire(t.dtype(), t.shape(), t.info())
                                                  : tenbin::tensor(t.dtype(), t.shape(),
                                                                   tenbin::buffer::allocate(t.nbytes()), t.info());
        if (t.nbytes() != 0) std::memcpy(made.mutable_bytes().data(), t.data().data(), t.nbytes());
        batch.push_back(std::move(made));
    }
    if (!tenbin::zsend_multipart(ref(s), batch)) fail("tenbin send timed out");
}

void send_one(void* s, impl which, form f, const workload& w) {
    if (produces(which)) {
        if (f != form::multi) fail("the producers send multipart only");
        return produce_one(s, which, w);
    }
    if (which == impl::tenbin) {
        const bool ok = f == form::single ? tenbin::zsend_single(ref(s), w.tensors)
                                          : tenbin::zsend_multipart(ref(s), w.tensors);
        if (!ok) fail("tenbin send timed out");
        return;
    }
    if (which == impl::raw_tensors) {
        if (f != form::small) fail("raw_tensors sends small messages only");
        const tenbin::tensor_view t = w.tensors[0].view();
        std::array<std::byte, tenbin::header_size(tenbin::max_supported_rank)> header;
        const std::size_t size = tenbin::header_size(t.ndim());
        tenbin::encode_header_into(t, {header.data(), size});
        check_zmq(zmq_send(s, header.data(), size, ZMQ_SNDMORE), "zmq_send header");
        check_zmq(zmq_send(s, t.data.data(), t.data.size(), 0), "zmq_send data");
        return;
    }
    if (which != impl::raw && f != form::multi) fail("the anatomy cases are multipart only");
    if (f == form::single) {
        // One frame of the encoded size and the one copy tenbin also makes.
        zmq_msg_t m;
        check_zmq(zmq_msg_init_size(&m, w.encoded.size()), "zmq_msg_init_size");
        std::memcpy(zmq_msg_data(&m), w.encoded.data(), w.encoded.size());
        if (zmq_msg_send(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            check_zmq(-1, "zmq_msg_send");
        }
        return;
    }
    // Headers as prepared; data copied for small messages, else zero-copy
    // (pinned by a kept_block for the pinning variants).
    const std::size_t n = w.tensors.size();
    kept_block* b = nullptr;
    if (pins(which)) {
        if (n > max_kept) fail("the pinning raw senders send at most 4 tensors");
        b = new kept_block;
        b->refs.store(static_cast<int>(n), std::memory_order_relaxed);
        for (std::size_t k = 0; k < n; ++k) b->keep[k] = w.tensors[k].data().keeper();
    }
    for (std::size_t k = 0; k < n; ++k) {
        check_zmq(zmq_send(s, w.headers[k].data(), w.headers[k].size(), ZMQ_SNDMORE), "zmq_send header");
        const int flags = k + 1 < n ? ZMQ_SNDMORE : 0;
        const tenbin::buffer& d = w.tensors[k].data();
        if (f == form::small) {
            check_zmq(zmq_send(s, d.data(), d.size(), flags), "zmq_send data");
        } else {
            zmq_msg_t m;
            check_zmq(zmq_msg_init_data(&m, const_cast<std::byte*>(d.data()), d.size(), b ? &release_kept : &no_free, b),
                      "zmq_msg_init_data");
            if (zmq_msg_send(&m, s, flags) < 0) {
                zmq_msg_close(&m);
                check_zmq(-1, "zmq_msg_send");
            }
        }
    }
}

tenbin::bytes_view expected_frame(form f, const workload& w, std::size_t i) {
    if (f == form::single) return w.encoded.bytes();
    return i % 2 == 0 ? tenbin::bytes_view(w.headers[i / 2]) : w.tensors[i / 2].data().bytes();
}

// What tenbin received must be what was sent: sizes always, bytes when
// `verify` (the first message of a run).
void check_received(const std::vector<tenbin::tensor>& got, const workload& w, bool verify) {
    if (got.size() != w.tensors.size()) fail("received the wrong number of tensors");
    for (std::size_t k = 0; k < w.tensors.size(); ++k) {
        if (got[k].nbytes() != w.tensors[k].nbytes()) fail("received a tensor of the wrong size");
        if (verify && !(got[k].view() == w.tensors[k].view())) fail("received tensor differs");
    }
}

// tenbin receives into `kept`, one message for the whole run, as the raw
// receiver reuses one zmq_msg_t.
void recv_one(void* s, impl which, form f, const workload& w, bool verify, tenbin::message& kept) {
    which = receiver_for(which);
    if (which == impl::tenbin) {
        const bool got = f == form::single ? tenbin::zrecv_single(ref(s), kept) : tenbin::zrecv_multipart(ref(s), kept);
        if (!got) fail("tenbin receive timed out");
        check_received(kept.tensors, w, verify);
        return;
    }
    if (which == impl::raw_tensors) {
        if (f != form::small) fail("raw_tensors receives small messages only");
        struct frame {
            zmq_msg_t m;
            frame() { zmq_msg_init(&m); }
            ~frame() { zmq_msg_close(&m); }
        };
        tenbin::tensor_header header;
        {
            frame h;
            check_zmq(zmq_msg_recv(&h.m, s, 0), "zmq_msg_recv header");
            header = tenbin::decode_header({static_cast<const std::byte*>(zmq_msg_data(&h.m)), zmq_msg_size(&h.m)});
        }
        auto data = std::make_shared<frame>();
        check_zmq(zmq_msg_recv(&data->m, s, 0), "zmq_msg_recv data");
        const tenbin::mutable_bytes bytes{static_cast<std::byte*>(zmq_msg_data(&data->m)), zmq_msg_size(&data->m)};
        if (bytes.size() != header.nbytes || zmq_msg_more(&data->m)) fail("raw receive got other frames than were sent");
        kept.tensors.clear();
        kept.tensors.emplace_back(header.dtype, std::move(header.shape),
                                  tenbin::buffer::share(std::shared_ptr<const void>(std::move(data), bytes.data()), bytes, false),
                                  header.info);
        check_received(kept.tensors, w, verify);
        return;
    }
    // Frame i of a [header, data] message as the decoding variants check
    // it: a header is decoded, a data frame must hold what the header
    // before it said.
    std::uint64_t expect = 0;
    auto check_pair = [&](std::size_t i, zmq_msg_t& m) {
        const tenbin::bytes_view b{static_cast<const std::byte*>(zmq_msg_data(&m)), zmq_msg_size(&m)};
        if (i % 2 == 0) {
            expect = tenbin::decode_header(b).nbytes;
            return true;
        }
        return b.size() == expect;
    };
    if (pins(which)) {
        // Every frame stays open until the whole message is in.
        const std::size_t want = 2 * w.tensors.size();
        zmq_msg_t frames[2 * max_kept + 1];
        if (want > 2 * max_kept) fail("the anatomy cases receive at most 4 tensors");
        std::size_t n = 0;
        bool more = true;
        while (more && n <= want) {
            zmq_msg_init(&frames[n]);
            if (zmq_msg_recv(&frames[n], s, 0) < 0) fail("zmq_msg_recv failed");
            more = zmq_msg_more(&frames[n++]) != 0;
        }
        bool bad = more || n != want;
        if (decodes(which) && !bad)
            for (std::size_t i = 0; i < n; ++i) bad |= !check_pair(i, frames[i]);
        for (std::size_t i = 0; i < n; ++i) {
            if (i < want) {
                const tenbin::bytes_view e = expected_frame(f, w, i);
                bad |= zmq_msg_size(&frames[i]) != e.size() ||
                       (verify && std::memcmp(zmq_msg_data(&frames[i]), e.data(), e.size()) != 0);
            }
            zmq_msg_close(&frames[i]);
        }
        if (bad) fail("raw receive got other frames than were sent");
        return;
    }
    zmq_msg_t m;
    zmq_msg_init(&m);
    const std::size_t want = f == form::single ? 1 : 2 * w.tensors.size();
    std::size_t frames = 0;
    bool bad = false;
    do {
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            check_zmq(-1, "zmq_msg_recv");
        }
        if (decodes(which)) bad |= !check_pair(frames, m);
        if (frames < want) {
            const tenbin::bytes_view e = expected_frame(f, w, frames);
            bad |= zmq_msg_size(&m) != e.size();
            if (verify && !bad) bad |= std::memcmp(zmq_msg_data(&m), e.data(), e.size()) != 0;
        }
        ++frames;
    } while (zmq_msg_more(&m));
    zmq_msg_close(&m);
    if (bad || frames != want) fail("raw receive got other frames than were sent");
}

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
                   const std::function<void()>& ready) {
    tenbin::message kept;
    return timed_receive(warmup, count, ready, [&](bool verify) { recv_one(s, which, f, w, verify, kept); });
}

void send_run(void* s, impl which, form f, const workload& w, int warmup, int count,
              const std::function<void()>& wait_go) {
    for (int i = 0; i < warmup; ++i) send_one(s, which, f, w);
    wait_go();
    for (int i = 0; i < count; ++i) send_one(s, which, f, w);
}

// ---- sockets ------------------------------------------------------------------

// One context (one I/O thread) for every socket of this process, the
// loader's included.
std::shared_ptr<zmq::context_t> shared_context() {
    static const auto ctx = std::make_shared<zmq::context_t>();
    return ctx;
}
void* context() { return shared_context()->handle(); }

void set_int(void* s, int option, int value) {
    check_zmq(zmq_setsockopt(s, option, &value, sizeof value), "zmq_setsockopt");
}

// Queue a bounded number of bytes whatever the message size (HWMs count
// messages): both implementations get the same setting.
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

void* receiver_socket(const std::string& endpoint, int hwm, std::string& bound,
                      const tenbin::curve_keys* curve = nullptr, tenbin::curve_guard* guard = nullptr) {
    void* s = zmq_socket(context(), ZMQ_PULL);
    set_int(s, ZMQ_RCVHWM, hwm);
    set_int(s, ZMQ_RCVTIMEO, 120000);  // a hung peer fails the case instead of the run
    if (curve) *guard = secure_socket(s, *curve, true);
    check_zmq(zmq_bind(s, endpoint.c_str()), "zmq_bind");
    bound = last_endpoint(s);
    return s;
}

void* sender_socket(const std::string& endpoint, int hwm, const tenbin::curve_keys* curve = nullptr,
                    tenbin::curve_guard* guard = nullptr) {
    void* s = zmq_socket(context(), ZMQ_PUSH);
    set_int(s, ZMQ_SNDHWM, hwm);
    set_int(s, ZMQ_SNDTIMEO, 120000);
    if (curve) *guard = secure_socket(s, *curve, false);
    check_zmq(zmq_connect(s, endpoint.c_str()), "zmq_connect");
    return s;
}

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

// One repetition with the sender on a thread of this process sending from
// `push`; `receive(ready)` receives here and returns its seconds, calling
// `ready` once the warmup messages are in.
double run_sender_thread(void* push, impl sender_impl, form f, const workload& w, int warmup, int count,
                         const std::function<double(const std::function<void()>&)>& receive) {
    std::atomic<int> go{0};
    std::exception_ptr err;
    std::thread sender([&] {
        try {
            send_run(push, sender_impl, f, w, warmup, count, [&] { go.wait(0); });
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

double run_threads(socket_pair& p, impl sender_impl, impl receiver_impl, form f, const workload& w, int warmup,
                   int count) {
    return run_sender_thread(p.push, sender_impl, f, w, warmup, count, [&](const std::function<void()>& ready) {
        return receive_run(p.pull, receiver_impl, f, w, warmup, count, ready);
    });
}

double run_threads(socket_pair& p, impl which, form f, const workload& w, int warmup, int count) {
    return run_threads(p, which, which, f, w, warmup, count);
}

// ---- peers in other processes ---------------------------------------------------

struct config {
    bool quick = false;
    int reps = 7;
    double rep_time = 0.25;  // seconds per repetition, roughly
    int min_count = 8;
    std::string filter;
    std::string malloc_mode = "reuse";
    std::string python = "/usr/bin/python3";
    std::string python_peer = TENBIN_BENCH_PYTHON_PEER;
    std::string self;
    tenbin::curve_keys curve;  // for peers with `curve` (made by the curve group)
};

enum class peer_kind { tenbin, raw, python };

struct peer {
    peer_kind kind = peer_kind::tenbin;
    std::string malloc_mode = "default";  // C++ peers only
    bool curve = false;                   // C++ peers only: CURVE on (cfg.curve's keys)
};

std::vector<std::string> peer_argv(const config& cfg, const peer& p, const std::string& role, form f,
                                   const workload& w, int warmup, int count, bool session = false) {
    std::vector<std::string> a;
    if (p.kind == peer_kind::python) {
        a = {cfg.python, cfg.python_peer, role};
    } else {
        a = {cfg.self, "--peer", role, "--impl", session ? "session" : p.kind == peer_kind::tenbin ? "tenbin" : "raw", "--malloc",
             p.malloc_mode, "--hwm", std::to_string(hwm_for(w.payload))};
        if (p.curve) a.insert(a.end(), {"--curve-public", cfg.curve.public_key, "--curve-secret", cfg.curve.secret_key});
    }
    const std::vector<std::string> common = {"--form",   name_of(f),           "--set",   w.set,
                                             "--bytes",  std::to_string(w.bytes), "--warmup", std::to_string(warmup),
                                             "--count", std::to_string(count)};
    a.insert(a.end(), common.begin(), common.end());
    return a;
}

// Both ends of a two-process case: child processes over tcp loopback.
struct process_ends {
    child receiver, sender;
    process_ends(std::vector<std::string> ra, std::vector<std::string> sa)
        : receiver(with(std::move(ra), {"--endpoint", "tcp://127.0.0.1:*"})),
          sender(with(std::move(sa), {"--endpoint", bound_endpoint(receiver)})) {}

    // One repetition's exchange once both ends know what to do: the
    // receiver says "ready" after the warmup, the sender is told "go", the
    // receiver reports the seconds of the rest.
    double timed() {
        if (const std::string l = receiver.read_line(); l != "ready") fail("receiver said " + l);
        sender.write_line("go");
        const std::string done = receiver.read_line();
        if (done.rfind("seconds ", 0) != 0) fail("receiver said " + done);
        return std::stod(done.substr(8));
    }
    void wait() {
        receiver.wait();
        sender.wait();
    }

private:
    static std::vector<std::string> with(std::vector<std::string> argv, std::initializer_list<std::string> more) {
        argv.insert(argv.end(), more);
        return argv;
    }
    static std::string bound_endpoint(child& receiver) {
        const std::string line = receiver.read_line();
        if (line.rfind("endpoint ", 0) != 0) fail("receiver said " + line);
        return line.substr(9);
    }
};

// One repetition in two fresh processes: for peers that differ in more
// than the code they run (Python, another malloc mode).
double run_processes(const config& cfg, const peer& receiver, const peer& sender, form f, const workload& w,
                     int warmup, int count) {
    process_ends ends(peer_argv(cfg, receiver, "recv", f, w, warmup, count),
                      peer_argv(cfg, sender, "send", f, w, warmup, count));
    const double s = ends.timed();
    ends.wait();
    return s;
}

// A receiving and a sending process kept for all repetitions of a case,
// as socket_pair is for threads: tenbin and raw libzmq take turns on one
// connection between warm processes, and differ only in the code they
// run. (Fresh processes per repetition measured cold heaps and a new
// connection each time: the two-process ratios spread over +-15% from run
// to run.) Each repetition is one "run IMPL WARMUP COUNT" line to both.
class process_pair {
public:
    process_pair(const config& cfg, form f, const workload& w)
        : ends_(peer_argv(cfg, {peer_kind::tenbin, cfg.malloc_mode}, "recv", f, w, 0, 0, true),
                peer_argv(cfg, {peer_kind::tenbin, cfg.malloc_mode}, "send", f, w, 0, 0, true)) {}
    process_pair(const process_pair&) = delete;
    process_pair& operator=(const process_pair&) = delete;
    ~process_pair() {
        try {
            ends_.receiver.write_line("quit");
            ends_.sender.write_line("quit");
            ends_.wait();
        } catch (const std::exception& e) {
            std::cerr << "tenbin-bench: peers did not stop cleanly: " << e.what() << std::endl;
        }
    }

    double run(impl which, int warmup, int count) {
        const std::string line = std::string("run ") + peer_name(which) + " " + std::to_string(warmup) + " " +
                                 std::to_string(count);
        ends_.receiver.write_line(line);
        ends_.sender.write_line(line);
        return ends_.timed();
    }

private:
    process_ends ends_;
};

// The hidden `--peer send|recv` role: one side of run_processes, or with
// `--impl session` of a process_pair.
int peer_main(const std::map<std::string, std::string>& args) {
    // Ends with tenbin-bench, killed mid-run, rather than block on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) return 1;
    auto get = [&](const std::string& k) {
        auto it = args.find(k);
        if (it == args.end()) fail("peer needs --" + k);
        return it->second;
    };
    if (get("malloc") == "reuse") tenbin::reuse_large_allocations();
    const form f = form_of(get("form"));
    const workload w = make_workload(get("set"), std::stoull(get("bytes")), f == form::single);
    const int hwm = std::stoi(get("hwm"));
    const bool recv = get("peer") == "recv";
    void* s = nullptr;
    std::optional<tenbin::curve_keys> curve;
    if (args.count("curve-public")) curve = tenbin::curve_keys{get("curve-public"), get("curve-secret")};
    tenbin::curve_guard guard;
    const tenbin::curve_keys* keys = curve ? &*curve : nullptr;
    if (recv) {
        std::string bound;
        s = receiver_socket(get("endpoint"), hwm, bound, keys, &guard);
        std::cout << "endpoint " << bound << std::endl;
    } else {
        s = sender_socket(get("endpoint"), hwm, keys, &guard);
    }
    auto read_line = [] {
        std::string line;
        if (!std::getline(std::cin, line)) fail("peer's stdin closed");
        return line;
    };
    auto run_once = [&](impl which, int warmup, int count) {
        if (recv) {
            const double sec = receive_run(s, which, f, w, warmup, count, [] { std::cout << "ready" << std::endl; });
            std::cout << "seconds " << sec << std::endl;
        } else {
            send_run(s, which, f, w, warmup, count, [&] {
                if (read_line() != "go") fail("sender expected go");
            });
        }
    };
    if (get("impl") != "session") {
        run_once(peer_impl(get("impl")), std::stoi(get("warmup")), std::stoi(get("count")));
    } else {
        for (std::string line; (line = read_line()) != "quit";) {
            std::istringstream in(line);
            std::string verb, name;
            int warmup = 0, count = 0;
            if (!(in >> verb >> name >> warmup >> count) || verb != "run") fail("peer got \"" + line + "\"");
            run_once(peer_impl(name), warmup, count);
        }
    }
    zmq_close(s);  // the sender's default linger: everything queued is delivered first
    guard = {};    // its sockets closed before the context terminates
    shared_context()->close();
    return 0;
}

// ---- measuring -------------------------------------------------------------------

// Repetitions of several contenders, rotating who runs first; returns medians.
std::vector<double> interleave_all(int reps, const std::vector<std::function<double()>>& fns) {
    std::vector<std::vector<double>> v(fns.size());
    for (int r = 0; r < reps; ++r)
        for (std::size_t i = 0; i < fns.size(); ++i) {
            const std::size_t k = (i + static_cast<std::size_t>(r)) % fns.size();
            v[k].push_back(fns[k]());
        }
    std::vector<double> out;
    for (auto& x : v) out.push_back(median(x));
    return out;
}

// Messages per repetition: enough for about cfg.rep_time, from one trial
// run of `seconds_for(count)`.
int calibrate(const config& cfg, const std::function<double(int)>& seconds_for, std::uint64_t payload) {
    const int trial = static_cast<int>(std::clamp<std::uint64_t>((8 * MiB) / std::max<std::uint64_t>(payload, 1), 2, 2000));
    const double s = std::max(seconds_for(trial), 1e-6);
    const double per = s / trial;
    return static_cast<int>(std::clamp(cfg.rep_time / per, static_cast<double>(cfg.min_count), 1e6));
}

struct suite {
    config cfg;
    std::vector<result> results;

    bool wanted(const std::string& name, const std::string& transport) const {
        return cfg.filter.empty() || (name + " " + transport).find(cfg.filter) != std::string::npos;
    }
    void add(result r) {
        if (r.reps == 0) r.reps = cfg.reps;
        print_row(r);
        results.push_back(std::move(r));
    }

    // ---- 1-3: streams against raw libzmq ----
    // With `contender` raw, raw libzmq against itself in the same
    // alternation (the "noise" rows): what this machine's noise alone makes
    // of a ratio that should be 1.
    void streams(form f, const std::vector<std::uint64_t>& sizes, const std::vector<std::string>& transports,
                 impl contender = impl::tenbin) {
        const bool small = f == form::small;
        const bool noise = contender == impl::raw;
        const std::string group = noise ? "noise" : name_of(f);
        const std::string versus = f == form::multi    ? "raw libzmq, zero-copy frames"
                                   : f == form::single ? "raw libzmq, 1 frame + memcpy"
                                                       : "raw libzmq, 2 copied frames";
        for (std::uint64_t size : sizes) {
            const workload w = small ? make_workload("small", 0) : make_workload("quad", size);
            const int warmup = 2;
            for (const std::string& transport : transports) {
                if (!wanted(group, transport)) continue;
                auto to_rate = [&](double sec, int count) { return throughput(w, f, count, sec); };
                std::pair<double, double> m;
                if (transport == "tcp-2proc") {
                    process_pair p(cfg, f, w);
                    const int count = calibrate(
                        cfg, [&](int c) { return p.run(contender, warmup, c); }, w.payload);
                    m = interleave(
                        cfg.reps, [&] { return to_rate(p.run(contender, warmup, count), count); },
                        [&] { return to_rate(p.run(impl::raw, warmup, count), count); });
                } else {
                    socket_pair p(transport, hwm_for(w.payload));
                    const int count = calibrate(
                        cfg, [&](int c) { return run_threads(p, contender, f, w, warmup, c); }, w.payload);
                    m = interleave(
                        cfg.reps, [&] { return to_rate(run_threads(p, contender, f, w, warmup, count), count); },
                        [&] { return to_rate(run_threads(p, impl::raw, f, w, warmup, count), count); });
                }
                // A noise row's name holds no form's word: scripts that pick
                // rows by "multi", "single" or "small" never take it for one.
                add({noise ? "noise: raw vs raw" : name_of(f), transport, w.payload, m.first, m.second,
                     small ? "msg/s" : "GB/s", versus,
                     noise ? std::string("both sides raw libzmq, the ") + name_of(f) + " workload" : ""});
            }
        }
    }

    // ---- where tenbin's time goes over inproc ----
    // Over inproc no byte moves, so a multipart message costs what its
    // bookkeeping costs, and the raw baseline never reads what it receives.
    // Raw libzmq doing the format's work (raw_decoded), the lifetime work
    // (raw_kept) and both (raw_floor), and each side of tenbin with a raw
    // peer, all against plain raw libzmq in the same run.
    void anatomy(std::uint64_t size) {
        if (!wanted("anatomy", "inproc")) return;
        const workload w = make_workload("quad", size);
        const int warmup = 2;
        socket_pair p("inproc", hwm_for(w.payload));
        const int count = calibrate(
            cfg, [&](int c) { return run_threads(p, impl::tenbin, form::multi, w, warmup, c); }, w.payload);
        // The rate of `n` messages of `wl` in form `f` over `on`, from
        // `sender` to `receiver` (GB/s; messages a second for small ones).
        auto rate = [&](socket_pair& on, form f, const workload& wl, int n, impl sender, impl receiver) {
            return [&, f, n, sender, receiver] {
                return throughput(wl, f, n, run_threads(on, sender, receiver, f, wl, warmup, n));
            };
        };
        auto multi = [&](int n, impl sender, impl receiver) { return rate(p, form::multi, w, n, sender, receiver); };
        const std::vector<double> m = interleave_all(
            cfg.reps, {multi(count, impl::raw, impl::raw), multi(count, impl::raw, impl::raw_decoded),
                       multi(count, impl::raw_kept, impl::raw_kept), multi(count, impl::raw_floor, impl::raw_floor),
                       multi(count, impl::tenbin, impl::raw), multi(count, impl::raw, impl::tenbin),
                       multi(count, impl::tenbin, impl::tenbin)});
        const std::string versus = "raw libzmq, zero-copy frames";
        add({"anatomy raw + header decode", "inproc", w.payload, m[1], m[0], "GB/s", versus,
             "raw receiver decoding and checking every header"});
        add({"anatomy raw + lifetimes", "inproc", w.payload, m[2], m[0], "GB/s", versus,
             "raw libzmq pinning tensors and keeping frames open"});
        add({"anatomy raw floor", "inproc", w.payload, m[3], m[0], "GB/s", versus,
             "raw libzmq doing both: the least a zero-copy tenbin library does"});
        add({"anatomy tenbin sender", "inproc", w.payload, m[4], m[0], "GB/s", versus, "zsend_multipart to a raw receiver"});
        add({"anatomy tenbin receiver", "inproc", w.payload, m[5], m[0], "GB/s", versus,
             "raw sender to zrecv_multipart"});
        add({"anatomy tenbin", "inproc", w.payload, m[6], m[0], "GB/s", versus, "both sides tenbin"});
        add({"anatomy tenbin vs floor", "inproc", w.payload, m[6], m[3], "GB/s", "the raw floor above",
             "both sides tenbin"});

        // Per-message bookkeeping that grows with the tensor count (each
        // zero-copy frame's keeper, each received tensor) shows at 8.
        const workload w8 = make_workload("octo", size);
        const int count8 = calibrate(
            cfg, [&](int c) { return run_threads(p, impl::tenbin, form::multi, w8, warmup, c); }, w8.payload);
        const auto m8 = interleave(cfg.reps, rate(p, form::multi, w8, count8, impl::tenbin, impl::tenbin),
                                   rate(p, form::multi, w8, count8, impl::raw, impl::raw));
        add({"anatomy tenbin, 8 tensors", "inproc", w8.payload, m8.first, m8.second, "GB/s", versus,
             "both sides tenbin, 8 tensors of 128 KiB"});

        // Small messages: there a message costs raw libzmq so little that
        // building the owned tensor a receiver returns shows. Raw libzmq,
        // the floor with owned tensors, tenbin.
        const workload ws = make_workload("small", 0);
        socket_pair ps("inproc", hwm_for(ws.payload));
        auto small = [&](int n, impl which) { return rate(ps, form::small, ws, n, which, which); };
        const int counts = calibrate(
            cfg, [&](int c) { return run_threads(ps, impl::tenbin, form::small, ws, warmup, c); }, ws.payload);
        const std::vector<double> ms = interleave_all(
            cfg.reps, {small(counts, impl::raw), small(counts, impl::raw_tensors), small(counts, impl::tenbin)});
        const std::string small_versus = "raw libzmq, 2 copied frames";
        // Named by size: a row named "small" is the small-message case.
        add({"anatomy 256 B, raw + tensors", "inproc", ws.payload, ms[1], ms[0], "msg/s", small_versus,
             "raw libzmq encoding each header, decoding it into an owned tensor that keeps its frame: the floor"});
        add({"anatomy 256 B tenbin", "inproc", ws.payload, ms[2], ms[0], "msg/s", small_versus, "both sides tenbin"});
        add({"anatomy 256 B tenbin vs floor", "inproc", ws.payload, ms[2], ms[1], "msg/s", "the 256 B floor above",
             "both sides tenbin"});
    }

    // ---- producers: a tensor pool against a fresh tensor per message ----
    // Each sender makes every batch it sends and writes all of its bytes
    // (copied from the workload): from a tenbin::tensor_pool, as new
    // tenbin tensors, or as malloc'd frames given to raw libzmq with
    // zmq_msg_init_data. The pool's blocks come back once ZeroMQ is done
    // with them, so it writes the same warm pages every time; the others
    // pay the allocator and, for large blocks, a page fault per page.
    void producers() {
        const std::vector<std::pair<std::string, std::uint64_t>> cases = {
            {"quad", MiB}, {"quad", 64 * MiB}, {"batch", 0}};
        const int warmup = 2;
        for (const auto& [set, size] : cases) {
            const workload w = make_workload(set, size, false);
            const std::string note = set == "batch" ? "the 77 MB batch" : "";
            for (const std::string transport : {"inproc", "tcp-2proc"}) {
                if (!wanted("producer", transport)) continue;
                auto to_rate = [&](double sec, int count) { return throughput(w, form::multi, count, sec); };
                std::vector<double> m;
                if (transport == "tcp-2proc") {
                    process_pair p(cfg, form::multi, w);
                    const int count = calibrate(
                        cfg, [&](int c) { return p.run(impl::pool, warmup, c); }, w.payload);
                    auto run = [&](impl which) {
                        return [&, which] { return to_rate(p.run(which, warmup, count), count); };
                    };
                    m = interleave_all(cfg.reps, {run(impl::pool), run(impl::fresh), run(impl::raw_fresh)});
                } else {
                    socket_pair p(transport, hwm_for(w.payload));
                    const int count = calibrate(
                        cfg, [&](int c) { return run_threads(p, impl::pool, form::multi, w, warmup, c); }, w.payload);
                    auto run = [&](impl which) {
                        return [&, which] { return to_rate(run_threads(p, which, form::multi, w, warmup, count), count); };
                    };
                    m = interleave_all(cfg.reps, {run(impl::pool), run(impl::fresh), run(impl::raw_fresh)});
                }
                add({"producer pool vs fresh", transport, w.payload, m[0], m[1], "GB/s",
                     "a new tenbin tensor per message", note});
                add({"producer pool vs raw", transport, w.payload, m[0], m[2], "GB/s",
                     "raw libzmq, malloc + zmq_msg_init_data per frame", note});
            }
        }
    }

    // ---- the loader: receiving and decoding on a thread of its own ----
    // zsend_multipart from a thread to a tenbin::loader whose batches are
    // taken here, against receiving here. With a consumer that does nothing
    // else this is what the hop to the consumer costs (its queue, locks and
    // wake-ups); with one that reads every byte of each batch (a trainer
    // does more) it is what prefetching gains, receiving while the consumer
    // works. The loader keeps its socket for all repetitions, as a trainer
    // does.
    void loader(const std::vector<std::uint64_t>& sizes) {
        const std::string transport = "tcp";
        if (!wanted("loader", transport)) return;
        const int warmup = 2;
        for (const std::uint64_t size : sizes) {
            const bool small = size == 0;
            const form f = small ? form::small : form::multi;
            const workload w = small ? make_workload("small", 0) : make_workload("quad", size);
            const int hwm = hwm_for(w.payload);
            tenbin::loader_options opt;
            opt.connection.recv_hwm = hwm;
            opt.reuse_allocations = false;  // as --malloc says
            tenbin::loader l(shared_context(), std::vector<std::string>{"zpull://127.0.0.1:*"}, opt);
            void* push = sender_socket(l.endpoints().at(0).address, hwm);
            socket_pair p(transport, hwm);
            // Seconds for `count` messages from a tenbin sender on `to`,
            // each taken by `take()` and checked, and read when `reads`.
            auto run = [&](void* to, int count, bool reads, auto take) {
                return run_sender_thread(to, impl::tenbin, f, w, warmup, count, [&](const std::function<void()>& ready) {
                    return timed_receive(warmup, count, ready, [&](bool verify) {
                        const std::vector<tenbin::tensor> batch = take();
                        check_received(batch, w, verify);
                        if (reads) read_through(batch);
                    });
                });
            };
            auto via_loader = [&](int count, bool reads) {
                return run(push, count, reads, [&] {
                    auto batch = l.next(std::chrono::seconds(120));
                    if (!batch) fail(l.closed() ? "the loader closed" : "the loader timed out");
                    return std::move(*batch);
                });
            };
            auto via_zrecv = [&](int count, bool reads) {
                return run(p.push, count, reads, [&] {
                    auto m = tenbin::zrecv_multipart(ref(p.pull));
                    if (!m) fail("tenbin receive timed out");
                    return std::move(m->tensors);
                });
            };
            const int count = calibrate(cfg, [&](int c) { return via_loader(c, false); }, w.payload);
            auto rate = [&](auto seconds) { return [&, seconds] { return throughput(w, f, count, seconds()); }; };
            const std::vector<double> m = interleave_all(
                cfg.reps, {rate([&] { return via_loader(count, false); }),
                           rate([&] { return run_threads(p, impl::raw, f, w, warmup, count); }),
                           rate([&] { return via_zrecv(count, false); }), rate([&] { return via_loader(count, true); }),
                           rate([&] { return via_zrecv(count, true); })});
            const char* unit = small ? "msg/s" : "GB/s";
            const std::string what = small ? "64 f4 a message, zsend_multipart to loader::next" : "zsend_multipart to loader::next";
            add({"loader", transport, w.payload, m[0], m[1], unit, "raw libzmq received on the consumer's thread", what});
            add({"loader vs zrecv", transport, w.payload, m[0], m[2], unit, "zrecv_multipart on the consumer's thread",
                 what});
            add({"loader, consumer reads", transport, w.payload, m[3], m[4], unit,
                 "zrecv_multipart on the consumer's thread, which reads", "the consumer reads every byte of each batch"});
            set_int(push, ZMQ_LINGER, 0);
            zmq_close(push);
        }
    }

    // ---- 6: the tensorcom-style Python peer, two processes over tcp ----
    void python(form f, const std::vector<std::uint64_t>& sizes) {
        if (!wanted(std::string(name_of(f)) + " vs python", "tcp-2proc")) return;
        const peer tp{peer_kind::tenbin, "reuse"}, pp{peer_kind::python, {}};
        for (std::uint64_t size : sizes) {
            const workload w = make_workload("quad", size, false);
            const int count = calibrate(
                cfg, [&](int c) { return run_processes(cfg, tp, tp, f, w, 2, c); }, w.payload);
            auto rate = [&](double sec) { return throughput(w, f, count, sec); };
            // Python is slower: fewer repetitions keep the run short.
            const int reps = std::max(3, cfg.reps - 2);
            const auto m = interleave(
                reps, [&] { return rate(run_processes(cfg, tp, tp, f, w, 2, count)); },
                [&] { return rate(run_processes(cfg, pp, pp, f, w, 2, count)); });
            add({std::string(name_of(f)) + " vs python", "tcp-2proc", w.payload, m.first, m.second, "GB/s",
                 "tensorcom-style Python (pyzmq defaults)", "both tenbin peers with reuse_large_allocations", reps});
        }
    }

    // ---- +shm: shared memory between two processes ----
    // A receiving process (forked, kept for all repetitions) takes each
    // message from a tenbin connection and drops it; this process sends.
    // Over +shm the pool path sends tensors acquired from the connection's
    // pool (no copy; as on the other paths, nobody refills them), the
    // copy-in path the workload's heap tensors (one memcpy into shared
    // memory), each on a connection of its own as a producer has: sharing
    // one, every repetition would start with a pool full of the other
    // path's block sizes, and measure their replacement. Against the same
    // workload over tcp and ipc connections between two processes, and a
    // warm memcpy of the same bytes here.
    struct receiver_process {
        pid_t pid = -1;
        int to = -1, from = -1;
        receiver_process(const std::string& url, const tenbin::connection_options& o, bool reuse) {
            int a[2], b[2];
            if (::pipe(a) != 0 || ::pipe(b) != 0) fail("pipe");
            pid = ::fork();
            if (pid < 0) fail("fork");
            if (pid == 0) {
                ::close(a[1]);
                ::close(b[0]);
                int code = 0;
                try {
                    if (reuse) tenbin::reuse_large_allocations();
                    tenbin::connection c(url, o);
                    for (int n = 0; ::read(a[0], &n, sizeof n) == sizeof n && n > 0;) {
                        for (int i = 0; i < n; ++i)
                            if (!c.recv()) fail("receive timed out");
                        const char d = 'd';
                        if (::write(b[1], &d, 1) != 1) break;
                    }
                } catch (const std::exception& e) {
                    std::cerr << "tenbin-bench: shm receiver: " << e.what() << std::endl;
                    code = 1;
                }
                ::_exit(code);
            }
            ::close(a[0]);
            ::close(b[1]);
            to = a[1];
            from = b[0];
        }
        receiver_process(const receiver_process&) = delete;
        receiver_process& operator=(const receiver_process&) = delete;
        // Seconds for `n` messages from `send_one`, until the receiver has them all.
        double run(int n, const std::function<void()>& send_one) {
            if (::write(to, &n, sizeof n) != sizeof n) fail("receiver gone");
            const auto t0 = clock_type::now();
            for (int i = 0; i < n; ++i) send_one();
            char d = 0;
            if (::read(from, &d, 1) != 1) fail("the shm receiver failed");
            return seconds_since(t0);
        }
        ~receiver_process() {
            ::close(to);  // ends its loop
            ::close(from);
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
    };

    void shm() {
        if (!wanted("shm", "2proc")) return;
        const std::vector<std::pair<std::string, std::uint64_t>> cases = {{"batch", 0}, {"quad", MiB}, {"quad", 16 * MiB}};
        for (const auto& [set, size] : cases) {
            const workload w = make_workload(set, size, false);
            const int hwm = hwm_for(w.payload);
            tenbin::connection_options o;
            o.send_hwm = hwm;
            o.recv_hwm = hwm;
            o.recv_timeout = std::chrono::seconds(120);
            o.send_timeout = std::chrono::seconds(120);
            o.shm_pool_bytes = std::min<std::uint64_t>(2 * GiB, (2 * hwm + 6) * (w.payload + 64 * KiB));
            const std::string tag = std::to_string(::getpid()) + "-" + set + std::to_string(size);
            const bool reuse = cfg.malloc_mode == "reuse";
            // One sender and receiver per transport, for all repetitions.
            const std::string shm_name = "/tmp/tenbin-bench-shm-" + tag, ipc_name = "/tmp/tenbin-bench-ipc-" + tag;
            const std::string copy_name = "/tmp/tenbin-bench-shm-copy-" + tag;
            // Forked before the senders exist, so that no child holds their segments.
            receiver_process shm_rx("zpull+shm://" + shm_name, o, reuse);
            receiver_process copy_rx("zpull+shm://" + copy_name, o, reuse);
            receiver_process ipc_rx("zpull+ipc://" + ipc_name, o, reuse);
            // tcp: the sender binds a port of the system's choice, the receiver dials it.
            tenbin::connection tcp_tx("zrpush://127.0.0.1:*", o);
            receiver_process tcp_rx("zrpull://" + tcp_tx.endpoints().at(0).address.substr(6), o, reuse);
            tenbin::connection shm_tx("zpush+shm://" + shm_name, o);
            tenbin::connection copy_tx("zpush+shm://" + copy_name, o);
            tenbin::connection ipc_tx("zpush+ipc://" + ipc_name, o);
            auto send_pool = [&] {
                std::vector<tenbin::tensor> m;
                for (const auto& t : w.tensors) m.push_back(shm_tx.pool().acquire(t.dtype(), t.shape(), t.info()));
                if (!shm_tx.send(m)) fail("shm send timed out");
            };
            auto sender = [&](tenbin::connection& c) {
                return [&] {
                    if (!c.send(w.tensors)) fail("send timed out");
                };
            };
            std::vector<std::byte> dst(w.payload);
            auto copy_once = [&] {
                std::size_t at = 0;
                for (const auto& t : w.tensors) {
                    std::memcpy(dst.data() + at, t.data().data(), t.nbytes());
                    at += t.nbytes();
                }
            };
            // Warm every path (segments made and mapped, sockets connected).
            shm_rx.run(4, send_pool);
            copy_rx.run(4, sender(copy_tx));
            ipc_rx.run(2, sender(ipc_tx));
            tcp_rx.run(2, sender(tcp_tx));
            const int count = calibrate(cfg, [&](int c) { return tcp_rx.run(c, sender(tcp_tx)); }, w.payload);
            const int fast = calibrate(cfg, [&](int c) { return shm_rx.run(c, send_pool); }, w.payload);
            auto rate = [&](int n, auto seconds) {
                return [&, n, seconds] { return static_cast<double>(w.payload) * n / seconds() / 1e9; };
            };
            const std::vector<double> m = interleave_all(
                cfg.reps, {rate(fast, [&] { return shm_rx.run(fast, send_pool); }),
                           rate(fast, [&] { return copy_rx.run(fast, sender(copy_tx)); }),
                           rate(count, [&] { return ipc_rx.run(count, sender(ipc_tx)); }),
                           rate(count, [&] { return tcp_rx.run(count, sender(tcp_tx)); }),
                           rate(fast, [&] {
                               const auto t0 = clock_type::now();
                               for (int i = 0; i < fast; ++i) copy_once();
                               return seconds_since(t0);
                           })});
            const std::string note = set == "batch" ? "the 77 MB batch" : "";
            add({"shm pool vs tcp-2proc", "shm-2proc", w.payload, m[0], m[3], "GB/s",
                 "a tenbin connection over tcp, two processes", note});
            add({"shm pool vs ipc-2proc", "shm-2proc", w.payload, m[0], m[2], "GB/s",
                 "a tenbin connection over ipc, two processes", note});
            add({"shm pool vs memcpy", "shm-2proc", w.payload, m[0], m[4], "GB/s", "a warm memcpy of the bytes", note});
            add({"shm copy-in vs memcpy", "shm-2proc", w.payload, m[1], m[4], "GB/s", "a warm memcpy of the bytes",
                 note});
        }
    }

    // ---- the tensorcom-sized batch: the allocation wall ----
    void batch() {
        if (!wanted("batch multi", "tcp-2proc")) return;
        const workload w = make_workload("batch", 0, false);
        const peer t_reuse{peer_kind::tenbin, "reuse"}, t_default{peer_kind::tenbin, "default"},
            r_default{peer_kind::raw, "default"}, r_reuse{peer_kind::raw, "reuse"}, py{peer_kind::python, {}};
        const int count = cfg.quick ? 3 : 16;
        auto run = [&](const peer& p) {
            return [&, p] { return static_cast<double>(w.payload) * count / run_processes(cfg, p, p, form::multi, w, 2, count) / 1e9; };
        };
        const int reps = std::max(3, cfg.reps - 2);
        const auto m = interleave_all(reps, {run(t_reuse), run(t_default), run(r_default), run(r_reuse), run(py)});
        add({"batch multi, reuse on", "tcp-2proc", w.payload, m[0], m[2], "GB/s", "raw libzmq, glibc defaults",
             "77 MB: 256x3x224x224 f2 + 256 i4", reps});
        add({"batch multi, both glibc defaults", "tcp-2proc", w.payload, m[1], m[2], "GB/s",
             "raw libzmq, glibc defaults", {}, reps});
        add({"batch multi, both reuse on", "tcp-2proc", w.payload, m[0], m[3], "GB/s",
             "raw libzmq + reuse_large_allocations", {}, reps});
        add({"batch multi vs python", "tcp-2proc", w.payload, m[0], m[4], "GB/s",
             "tensorcom-style Python (pyzmq defaults)", "tenbin with reuse on", reps});
    }

    // ---- CURVE against plain tcp: the cost of encryption ----
    // Both sides tenbin (reuse on) in two processes, plain and CURVE in
    // alternation; ratio = CURVE / plain.
    void curve() {
        const bool one = wanted("curve multi", "tcp-2proc"), batch = wanted("curve 77 MB multi", "tcp-2proc");
        if (!one && !batch) return;
        // Keys go to the peers as arguments: none may start with '-'.
        do cfg.curve = tenbin::generate_curve_keys();
        while (cfg.curve.public_key[0] == '-' || cfg.curve.secret_key[0] == '-');
        const peer plain{peer_kind::tenbin, "reuse"}, secured{peer_kind::tenbin, "reuse", true};
        const int reps = std::max(3, cfg.reps - 2);
        if (one) {
            const workload w = make_workload("quad", MiB, false);
            const int count = calibrate(
                cfg, [&](int c) { return run_processes(cfg, secured, secured, form::multi, w, 2, c); }, w.payload);
            auto rate = [&](const peer& p) {
                return [&, p] { return throughput(w, form::multi, count, run_processes(cfg, p, p, form::multi, w, 2, count)); };
            };
            const auto m = interleave_all(reps, {rate(secured), rate(plain)});
            add({"curve multi", "tcp-2proc", w.payload, m[0], m[1], "GB/s", "plain tcp, the same peers",
                 "CURVE (libsodium) on both sides", reps});
        }
        if (batch) {
            const workload w = make_workload("batch", 0, false);
            const int count = cfg.quick ? 3 : 16;
            auto rate = [&](const peer& p) {
                return [&, p] {
                    return static_cast<double>(w.payload) * count / run_processes(cfg, p, p, form::multi, w, 2, count) / 1e9;
                };
            };
            const auto m = interleave_all(reps, {rate(secured), rate(plain)});
            add({"curve 77 MB multi", "tcp-2proc", w.payload, m[0], m[1], "GB/s", "plain tcp, the same peers",
                 "77 MB batch, CURVE on both sides", reps});
        }
    }

    // ---- 4: the codec alone ----
    void codec() {
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

    // ---- 5: files ----
    void files() {
        if (!wanted("file", "file")) return;
        const std::uint64_t size = cfg.quick ? 256 * MiB : GiB;
        const workload w = make_workload("quad", size);
        const std::string dir = "/tmp/tenbin-bench-" + std::to_string(getpid());
        std::filesystem::create_directories(dir);
        struct cleanup {
            std::string d;
            ~cleanup() { std::filesystem::remove_all(d); }
        } clean{dir};
        const std::string a = dir + "/a.ten", b = dir + "/b.ten";
        auto gbps = [&](double sec) { return static_cast<double>(w.payload) / sec / 1e9; };
        auto plain_write = [&](const std::string& path) {
            const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
            if (fd < 0) fail("open " + path);
            std::size_t at = 0;
            while (at < w.encoded.size()) {
                const ssize_t n = ::write(fd, w.encoded.data() + at, std::min<std::size_t>(w.encoded.size() - at, 1u << 30));
                if (n <= 0) fail("write " + path);
                at += static_cast<std::size_t>(n);
            }
            if (::close(fd) != 0) fail("close " + path);
        };
        {
            auto m = interleave(
                cfg.reps,
                [&] {
                    ::unlink(a.c_str());
                    const auto t0 = clock_type::now();
                    tenbin::save(a, w.tensors);
                    return gbps(seconds_since(t0));
                },
                [&] {
                    ::unlink(b.c_str());
                    const auto t0 = clock_type::now();
                    plain_write(b);
                    return gbps(seconds_since(t0));
                });
            add({"file save", "file", w.payload, m.first, m.second, "GB/s", "plain write of the same bytes",
                 "/tmp, page cache"});
        }
        {
            const auto loaded = tenbin::load(a);
            for (std::size_t k = 0; k < 4; ++k)
                if (!(loaded[k].view() == w.tensors[k].view())) fail("load differs from what was saved");
        }
        {
            auto m = interleave(
                cfg.reps,
                [&] {
                    const auto t0 = clock_type::now();
                    auto t = tenbin::load(a);
                    const double s = seconds_since(t0);
                    if (t.size() != 4) fail("load");
                    return gbps(s);
                },
                [&] {
                    const auto t0 = clock_type::now();
                    const int fd = ::open(a.c_str(), O_RDONLY);
                    struct stat st {};
                    if (fd < 0 || ::fstat(fd, &st) != 0) fail("open " + a);
                    const auto n = static_cast<std::size_t>(st.st_size);
                    auto* p = static_cast<std::byte*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
                    std::size_t at = 0;
                    while (at < n) {
                        const ssize_t r = ::read(fd, p + at, std::min<std::size_t>(n - at, 0x7ffff000));
                        if (r <= 0) fail("read " + a);
                        at += static_cast<std::size_t>(r);
                    }
                    ::close(fd);
                    const double s = seconds_since(t0);
                    std::free(p);
                    return gbps(s);
                });
            add({"file load", "file", w.payload, m.first, m.second, "GB/s", "plain read of the same bytes",
                 "/tmp, page cache"});
        }
        {
            ::unlink(b.c_str());
            const std::string big = dir + "/big.ten", little = dir + "/little.ten";
            // The full mode maps 1 GiB; the file is the one just measured
            // (256 MiB in quick mode).
            std::filesystem::rename(a, big);
            tenbin::save(little, make_workload("quad", MiB, false).tensors);
            volatile std::size_t sink = 0;
            const double t = cfg.quick ? 0.02 : 0.1;
            if (!(tenbin::load_mmap(big)[2].view() == w.tensors[2].view())) fail("load_mmap differs");
            const auto m = interleave(
                cfg.reps, [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::load_mmap(big).size(); }, t); },
                [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::load_mmap(little).size(); }, t); });
            add({"file load_mmap " + human_bytes(w.payload) + " vs 1 MiB", "file", w.payload, m.first, m.second,
                 "op/s", "load_mmap of a 1 MiB file", "us/call " + std::to_string(1e6 / m.first).substr(0, 6)});
        }
    }
};

std::string self_exe() {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) fail("cannot read /proc/self/exe");
    return std::string(buf, static_cast<std::size_t>(n));
}

const char* usage =
    "usage: tenbin-bench [--quick] [--json FILE] [--filter TEXT] [--malloc reuse|default]\n"
    "                    [--reps N] [--rep-time S] [--python PATH] [--python-peer SCRIPT]\n"
    "  --quick        the short run (under a minute on 2 cores)\n"
    "  --json FILE    write the results as a JSON array\n"
    "  --filter TEXT  only the groups of cases whose \"group transport\" contains TEXT;\n"
    "                 the groups: multi, single, small, noise (inproc, ipc, tcp,\n"
    "                 tcp-2proc), anatomy inproc, loader tcp, codec memory, file\n"
    "                 file, multi vs python, single vs python, batch multi,\n"
    "                 curve multi, curve 77 MB multi (tcp-2proc), shm (shm-2proc)\n"
    "  --malloc MODE  in-process and C++ two-process stream cases: call\n"
    "                 tenbin::reuse_large_allocations() (reuse, the default) or not\n"
    "                 (the Python and batch cases set their own)\n"
    "  --reps N       repetitions per case, at least 1 (quick 5, full 7; the Python\n"
    "                 and batch cases 2 fewer, at least 3)\n"
    "  --rep-time S   seconds per repetition, roughly (quick 0.03, full 0.25)\n"
    "  --python PATH  the interpreter of the Python cases (/usr/bin/python3, which\n"
    "                 has pyzmq and NumPy)\n"
    "  --python-peer SCRIPT  the Python peer (bench/python_peer.py of the source tree)\n";

// A wrong command line: what is wrong, then the usage; status 2.
int bad_usage(const std::string& why) {
    std::cerr << "tenbin-bench: " << why << "\n" << usage;
    return 2;
}

// `text` as a number of the option's kind, or nothing if it is not one.
template <class T>
std::optional<T> number(const std::string& text) {
    std::istringstream in(text);
    T v{};
    if (!(in >> v) || !in.eof()) return std::nullopt;
    return v;
}

int run(int argc, char** argv) {
    std::map<std::string, std::string> args;
    std::vector<std::string> flags;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick" || a == "--help" || a == "-h") {
            flags.push_back(a);
        } else if (a.rfind("--", 0) == 0 && i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0) {
            args[a.substr(2)] = argv[++i];
        } else {
            return bad_usage(a.rfind("--", 0) == 0 ? "option '" + a + "' needs a value" : "unknown argument '" + a + "'");
        }
    }
    if (args.count("peer")) return peer_main(args);  // this program re-executed, with options of its own
    for (const auto& [key, value] : args)
        if (key != "json" && key != "filter" && key != "malloc" && key != "reps" && key != "rep-time" &&
            key != "python" && key != "python-peer")
            return bad_usage("unknown option '--" + key + "'");
    suite s;
    config& cfg = s.cfg;
    for (const auto& f : flags) {
        if (f == "--quick") cfg.quick = true;
        else {
            std::cout << usage;
            return 0;
        }
    }
    if (args.count("filter")) cfg.filter = args["filter"];
    if (args.count("malloc")) cfg.malloc_mode = args["malloc"];
    if (args.count("python")) cfg.python = args["python"];
    if (args.count("python-peer")) cfg.python_peer = args["python-peer"];
    if (cfg.malloc_mode != "reuse" && cfg.malloc_mode != "default")
        return bad_usage("--malloc is reuse or default, not '" + cfg.malloc_mode + "'");
    cfg.self = self_exe();
    if (cfg.quick) {
        cfg.reps = 5;
        cfg.rep_time = 0.03;
        cfg.min_count = 3;
    }
    if (args.count("reps")) {
        const auto reps = number<int>(args["reps"]);
        if (!reps || *reps < 1) return bad_usage("--reps needs a whole number of at least 1, not '" + args["reps"] + "'");
        cfg.reps = *reps;
    }
    if (args.count("rep-time")) {
        const auto t = number<double>(args["rep-time"]);
        if (!t || !(*t > 0) || !std::isfinite(*t))
            return bad_usage("--rep-time needs a number of seconds above 0, not '" + args["rep-time"] + "'");
        cfg.rep_time = *t;
    }
    if (cfg.malloc_mode == "reuse") tenbin::reuse_large_allocations();
    // A JSON file that cannot be written fails now, not after the run.
    if (args.count("json")) {
        const bool existed = std::filesystem::exists(args["json"]);
        if (!std::ofstream(args["json"], std::ios::app)) {
            std::cerr << "tenbin-bench: cannot write " << args["json"] << std::endl;
            return 1;
        }
        if (!existed) std::filesystem::remove(args["json"]);
    }

    const auto t0 = clock_type::now();
    std::cout << "tenbin-bench " << (cfg.quick ? "quick" : "full") << ": medians of " << cfg.reps
              << " interleaved repetitions; malloc " << cfg.malloc_mode << "; GB = 1e9 bytes of tensor data"
              << std::endl;
    print_header();
    const std::vector<std::uint64_t> sizes = {4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB};
    const std::vector<std::string> transports = {"inproc", "ipc", "tcp", "tcp-2proc"};
    const std::vector<std::uint64_t> py_sizes =
        cfg.quick ? std::vector<std::uint64_t>{16 * MiB} : sizes;
    // A group that fails (a peer missing, a socket error) is reported and
    // the others still run: their results are written all the same.
    int failed = 0;
    auto group = [&](const char* what, const std::function<void()>& run_group) {
        try {
            run_group();
        } catch (const std::exception& e) {
            ++failed;
            std::cerr << "tenbin-bench: " << what << " failed: " << e.what() << std::endl;
        }
    };
    group("multi", [&] { s.streams(form::multi, sizes, transports); });
    group("single", [&] { s.streams(form::single, sizes, transports); });
    group("small", [&] { s.streams(form::small, {0}, transports); });
    group("noise", [&] {
        s.streams(form::multi, {MiB, 64 * MiB}, transports, impl::raw);
        s.streams(form::small, {0}, transports, impl::raw);
    });
    group("anatomy", [&] { s.anatomy(MiB); });
    group("producer", [&] { s.producers(); });
    group("loader", [&] {
        s.loader(cfg.quick ? std::vector<std::uint64_t>{0, MiB} : std::vector<std::uint64_t>{0, 64 * KiB, MiB, 16 * MiB});
    });
    group("codec", [&] { s.codec(); });
    group("files", [&] { s.files(); });
    group("multi vs python", [&] { s.python(form::multi, py_sizes); });
    group("single vs python", [&] { s.python(form::single, py_sizes); });
    group("batch", [&] { s.batch(); });
    group("curve", [&] { s.curve(); });
    group("shm", [&] { s.shm(); });
    std::cout << "total " << std::fixed << std::setprecision(1) << seconds_since(t0) << " s" << std::endl;
    if (args.count("json")) write_json(args["json"], s.results);
    shared_context()->close();
    if (s.results.empty() && !failed) {
        std::cerr << "tenbin-bench: no case matches --filter '" << cfg.filter << "'\n";
        return 1;
    }
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "tenbin-bench: " << e.what() << std::endl;
        return 1;
    }
}
