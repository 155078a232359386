// libFuzzer target: zrecv's envelope and form logic over a real socket pair
// (inproc PAIR), every envelope_spec and form, small limits.
//
// Input: one mode byte, then frames, each a 2-byte little-endian length and
// its bytes (as fuzz-decode_list), sent as one message.
//   bits 0-2  envelope: none, frames(1), frames(2), frames(0), router,
//             delimited, topic, frames(3)
//   bits 3-4  form: zrecv, zrecv_single, zrecv_multipart (3: zrecv)
//   bit 5     small limits and max_frames = 9
//   bit 6     receive into a kept message (the `into` overloads)
// Properties: the result (tensors and envelope, or the error's class and
// envelope) is what a model built here from the frames and decode_buffer /
// decode_list says; and a sentinel message sent after each input arrives
// intact, so no input leaves the socket inside a message.
#include "common.hpp"

#include <tenbin/zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using tenbin::envelope_spec;
using tenbin::errc;

struct pair_of_sockets {
    zmq::context_t context{1};
    zmq::socket_t tx{context, zmq::socket_type::pair};
    zmq::socket_t rx{context, zmq::socket_type::pair};
    pair_of_sockets() {
        rx.bind("inproc://fuzz-zrecv");
        tx.connect("inproc://fuzz-zrecv");
        // Everything is queued before it is received: a wait means a lost
        // message, which the properties catch as such, not as a hang.
        rx.set(zmq::sockopt::rcvtimeo, 2000);
        tx.set(zmq::sockopt::sndtimeo, 2000);
    }
};

// libFuzzer's timer signal (-timeout) can interrupt a send (EINTR, which
// cppzmq throws) on a busy machine; the library's sends start again, and so
// does this one. A frame interrupted was not sent.
void send_frame(zmq::socket_t& tx, const std::string& frame, zmq::send_flags flags) {
    for (;;) {
        try {
            (void)tx.send(zmq::buffer(frame), flags);
            return;
        } catch (const zmq::error_t& e) {
            if (e.num() != EINTR) throw;
        }
    }
}

pair_of_sockets& sockets() {
    static pair_of_sockets* s = new pair_of_sockets;  // never destroyed: libFuzzer exits without unwinding
    return *s;
}

envelope_spec spec_of(unsigned bits) {
    switch (bits & 7) {
    case 0: return envelope_spec::none();
    case 1: return envelope_spec::frames(1);
    case 2: return envelope_spec::frames(2);
    case 3: return envelope_spec::frames(0);
    case 4: return envelope_spec::router();
    case 5: return envelope_spec::delimited();
    case 6: return envelope_spec::topic();
    default: return envelope_spec::frames(3);
    }
}

enum class form { any, single, multipart };

// What zrecv should make of `frames`: tensors and envelope, or an error.
struct outcome {
    std::optional<errc> error;
    std::size_t envelope = 0;  // frames split off, also when it failed after the split
    bool position = false;     // the last frame was a position (no tenbin frame)
    std::vector<tenbin::tensor> tensors;
};

outcome model(const std::vector<std::string>& frames, const tenbin::recv_options& opt, form want) {
    outcome out;
    const std::size_t f = frames.size();
    if (f > opt.max_frames) {
        out.error = errc::limit_exceeded;
        return out;
    }
    std::size_t skip = 0;
    switch (opt.envelope.how) {
    case envelope_spec::kind::none: skip = 0; break;
    case envelope_spec::kind::frames: skip = std::min(opt.envelope.count, f); break;
    case envelope_spec::kind::router: {
        // An identity, then an empty single-part message and its position
        // frame, is not an identity and a delimiter.
        const bool empty_then_position = f == 3 && tenbin::is_position_frame(tenbin::bytes_view(
                                                           reinterpret_cast<const std::byte*>(frames[2].data()), frames[2].size()));
        skip = f > 2 && frames[1].empty() && !empty_then_position ? 2 : 1;
        break;
    }
    case envelope_spec::kind::delimited: {
        std::size_t i = 0;
        while (i < f && !frames[i].empty()) ++i;
        if (i == f) {
            out.error = errc::odd_chunk_count;  // no delimiter: nothing split off
            return out;
        }
        skip = i + 1;
        break;
    }
    }
    out.envelope = skip;
    if (skip == f) {
        out.error = errc::odd_chunk_count;
        return out;
    }
    std::vector<tenbin::buffer> body;
    for (std::size_t i = skip; i < f; ++i) body.push_back(tenbin::buffer::copy(
            tenbin::bytes_view(reinterpret_cast<const std::byte*>(frames[i].data()), frames[i].size())));
    try {
        // A producer's position frame comes last, after one frame or after
        // header/data pairs; any other one is misplaced.
        if (body.size() >= 2 && tenbin::is_position_frame(body.back().bytes())) {
            (void)tenbin::decode_position(body.back().bytes());
            body.pop_back();
            out.position = true;
        }
        if (body.size() == 1) {
            if (want == form::multipart && body[0].size() != 0) {
                out.error = errc::odd_chunk_count;
                return out;
            }
            out.tensors = tenbin::decode_buffer(body[0], opt.decode);
        } else {
            if (want == form::single) {
                out.error = errc::odd_chunk_count;
                return out;
            }
            if (body.size() % 2 == 1) {
                const bool misplaced = std::any_of(body.begin(), body.end(), [](const tenbin::buffer& b) {
                    return tenbin::is_position_frame(b.bytes());
                });
                out.error = misplaced ? errc::bad_header : errc::odd_chunk_count;
                return out;
            }
            out.tensors = tenbin::decode_list(body, opt.decode);
        }
    } catch (const tenbin::error& e) {
        fuzz::check_error(e);
        out.error = e.code();
    }
    return out;
}

bool receive(zmq::socket_ref rx, const tenbin::recv_options& opt, form want, bool into, tenbin::message& m) {
    if (into) {
        switch (want) {
        case form::any: return tenbin::zrecv(rx, m, opt);
        case form::single: return tenbin::zrecv_single(rx, m, opt);
        case form::multipart: return tenbin::zrecv_multipart(rx, m, opt);
        }
    }
    std::optional<tenbin::message> got;
    switch (want) {
    case form::any: got = tenbin::zrecv(rx, opt); break;
    case form::single: got = tenbin::zrecv_single(rx, opt); break;
    case form::multipart: got = tenbin::zrecv_multipart(rx, opt); break;
    }
    if (!got) return false;
    m = std::move(*got);
    return true;
}

// The sentinel: an envelope the spec takes exactly, then two tensors.
void send_sentinel(zmq::socket_ref tx, const envelope_spec& spec, form want,
                   const std::vector<tenbin::tensor>& tensors) {
    std::vector<std::string> env;
    switch (spec.how) {
    case envelope_spec::kind::none: break;
    case envelope_spec::kind::frames:
        for (std::size_t i = 0; i < spec.count; ++i) env.push_back("e" + std::to_string(i));
        break;
    case envelope_spec::kind::router: env = {"identity", ""}; break;
    case envelope_spec::kind::delimited: env = {"a", "b", ""}; break;
    }
    std::vector<zmq::const_buffer> views;
    for (const auto& e : env) views.emplace_back(e.data(), e.size());
    tenbin::send_options so;
    so.envelope = views;
    const bool sent = want == form::single ? tenbin::zsend_single(tx, tensors, so) : tenbin::zsend_multipart(tx, tensors, so);
    if (!sent) fuzz::fail("the sentinel could not be sent");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t mode = data[0];
    std::vector<std::string> frames;
    for (std::size_t at = 1; at < size && frames.size() < 64;) {
        std::size_t n = data[at];
        if (at + 1 < size) n |= std::size_t{data[at + 1]} << 8;
        at = std::min(at + 2, size);
        n = std::min(n, size - at);
        frames.emplace_back(reinterpret_cast<const char*>(data + at), n);
        at += n;
    }
    if (frames.empty()) frames.emplace_back();

    tenbin::recv_options opt;
    opt.envelope = spec_of(mode);
    const unsigned f = (mode >> 3) & 3;
    const form want = f == 1 ? form::single : f == 2 ? form::multipart : form::any;
    if (mode & 0x20) {
        opt.decode.limits = fuzz::small_limits();
        opt.max_frames = 9;
    }
    const bool into = (mode & 0x40) != 0;

    pair_of_sockets& s = sockets();
    for (std::size_t i = 0; i < frames.size(); ++i)
        send_frame(s.tx, frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    static const std::vector<tenbin::tensor> sentinel = {
        tenbin::tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, "sentinel"),
        tenbin::tensor::from_vector(std::vector<std::int16_t>{7}, {}, "tail")};
    send_sentinel(s.tx, opt.envelope, want, sentinel);

    const outcome expect = model(frames, opt, want);
    tenbin::message m;
    std::optional<errc> got_error;
    std::vector<std::string> got_envelope;
    try {
        if (!receive(s.rx, opt, want, into, m)) fuzz::fail("the message was lost (receive timed out)");
        for (const auto& e : m.envelope) got_envelope.emplace_back(e.data<char>(), e.size());
    } catch (const tenbin::malformed_message& e) {
        got_error = e.code();
        got_envelope = e.envelope();
    } catch (const tenbin::error& e) {
        got_error = e.code();
    }
    if (got_error != expect.error) {
        std::fprintf(stderr, "zrecv: %s, model: %s\n", got_error ? std::string(tenbin::name(*got_error)).c_str() : "ok",
                     expect.error ? std::string(tenbin::name(*expect.error)).c_str() : "ok");
        fuzz::fail("zrecv and the model disagree on the outcome");
    }
    if (got_error && !(m.tensors.empty() && m.envelope.empty()))
        fuzz::fail("a failed receive left tensors or envelope in the message");
    // The envelope split off, also carried by the error (too many frames
    // and a missing delimiter fail before any split).
    const std::vector<std::string> want_envelope(frames.begin(),
                                                 frames.begin() + static_cast<std::ptrdiff_t>(expect.envelope));
    if (got_envelope != want_envelope) fuzz::fail("the envelope is not the frames the spec takes");
    if (!got_error) {
        if (m.tensors != expect.tensors) fuzz::fail("zrecv and decode_buffer/decode_list disagree");
        const std::size_t tenbin_frames = frames.size() - expect.envelope - (expect.position ? 1 : 0);
        if (m.single != (tenbin_frames == 1)) fuzz::fail("message::single is wrong");
        for (const auto& t : m.tensors)
            if (!t.data().aligned_to(tenbin::itemsize(t.dtype()))) fuzz::fail("a received tensor is not aligned");
    }

    // The next message is untouched by whatever came before it.
    tenbin::message next;
    try {
        if (!receive(s.rx, opt, want, into, next)) fuzz::fail("the sentinel was lost");
    } catch (const tenbin::error& e) {
        fuzz::fail("the sentinel was refused:", e.what());
    }
    if (next.tensors != sentinel) fuzz::fail("the sentinel arrived changed");
    return 0;
}
