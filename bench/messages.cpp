// tenbin-bench: workloads, and one message sent and received by each
// implementation.
#include "messages.hpp"

#include <zmq.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace bench {

namespace {

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

}  // namespace

workload make_workload(const std::string& set, std::uint64_t bytes, bool with_encoded) {
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

double throughput(const workload& w, form f, int count, double seconds) {
    return f == form::small ? count / seconds : static_cast<double>(w.payload) * count / seconds / 1e9;
}

// ---- one message, both ways -----------------------------------------------------

zmq::socket_ref ref(void* s) { return zmq::socket_ref(zmq::from_handle, s); }

void check_zmq(int rc, const char* what) {
    if (rc < 0) fail(std::string(what) + ": " + zmq_strerror(zmq_errno()));
}

namespace {

// Raw zero-copy frames point into the workload, which outlives the sockets.
void no_free(void*, void*) {}

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

}  // namespace

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

namespace {

tenbin::bytes_view expected_frame(form f, const workload& w, std::size_t i) {
    if (f == form::single) return w.encoded.bytes();
    return i % 2 == 0 ? tenbin::bytes_view(w.headers[i / 2]) : w.tensors[i / 2].data().bytes();
}

}  // namespace

void check_received(const std::vector<tenbin::tensor>& got, const workload& w, bool verify) {
    if (got.size() != w.tensors.size()) fail("received the wrong number of tensors");
    for (std::size_t k = 0; k < w.tensors.size(); ++k) {
        if (got[k].nbytes() != w.tensors[k].nbytes()) fail("received a tensor of the wrong size");
        if (verify && !(got[k].view() == w.tensors[k].view())) fail("received tensor differs");
    }
}

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

}  // namespace bench
