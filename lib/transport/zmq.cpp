// tenbin over ZeroMQ: the two wire forms of tensorcom, zero-copy where the
// memory allows it.
//
// Facts about libzmq 4.3.4 this file relies on:
// - The frames of a multipart message become visible to the receiver
//   together (the pipe flushes at message ends), so after the first frame
//   the rest can be read without waiting.
// - High-water marks count whole messages: once the first frame is queued
//   the others cannot hit the mark; a peer lost mid-message makes libzmq
//   drop the partial message (EFAULT) rather than deliver it.
// - Frames of at most 33 bytes live inside the zmq_msg_t itself, so a
//   frame's address changes when the message object moves.
// - A free callback runs on whichever thread drops the last reference: an
//   I/O thread after a tcp/ipc send, the receiver's thread over inproc.
#include <tenbin/zmq.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

namespace tenbin {

namespace {

std::string str(std::size_t n) { return std::to_string(n); }

[[noreturn]] void fail(errc code, const std::string& message) { throw error(code, message); }

void check_frame_size(std::size_t size, const std::string& what) {
    if (size > max_frame_size)
        fail(errc::unsupported, what + " of " + str(size) +
                                    " bytes: libzmq 4.3 cannot carry frames of 2^31 bytes or more");
}

// The free callback of a zero-copy frame. `hint` is the heap copy of the
// tensor's buffer made for this frame; dropping it releases one reference
// to the memory. Runs on a ZeroMQ thread: touches nothing shared but the
// keeper's atomic count, and never throws (buffer releases must not).
void release_frame(void* /*data*/, void* hint) noexcept { delete static_cast<buffer*>(hint); }

zmq::message_t zero_copy_frame(const buffer& owner) {
    auto hint = std::make_unique<buffer>(owner);
    // libzmq only reads the data of a message it sends.
    zmq::message_t frame(const_cast<std::byte*>(owner.data()), owner.size(), &release_frame,
                         hint.get());
    hint.release();  // the frame owns it now; zmq_msg_init_data failing threw above
    return frame;
}

mutable_bytes bytes_of(zmq::message_t& m) noexcept {
    return {static_cast<std::byte*>(m.data()), m.size()};
}

void add_envelope(std::vector<zmq::message_t>& frames, std::span<const zmq::const_buffer> envelope) {
    for (const zmq::const_buffer& e : envelope) frames.emplace_back(e.data(), e.size());
}

// Sends prepared frames as one message. Only the first send may report
// would-block: libzmq accepts the rest of a message once its first frame
// is queued.
bool send_frames(zmq::socket_ref socket, std::vector<zmq::message_t>& frames, zmq::send_flags flags) {
    flags = flags & ~zmq::send_flags::sndmore;
    const std::size_t n = frames.size();
    for (std::size_t i = 0; i < n; ++i) {
        const zmq::send_flags f = i + 1 < n ? flags | zmq::send_flags::sndmore : flags;
        if (!socket.send(frames[i], f)) {
            if (i == 0) return false;
            fail(errc::timeout, "frame " + str(i) + " of " + str(n) +
                                    " could not be queued after the first was; the message is cut short");
        }
    }
    return true;
}

// Which part of a message a receive accepts.
enum class form { any, single, multipart };

// How many leading frames of `frames` are envelope.
std::size_t envelope_size(const std::vector<zmq::message_t>& frames, const envelope_spec& spec) {
    const std::size_t n = frames.size();
    switch (spec.how) {
    case envelope_spec::kind::none:
        return 0;
    case envelope_spec::kind::frames:
        if (spec.count >= n)
            fail(errc::odd_chunk_count, "message of " + str(n) + " frames has no tenbin frame after an envelope of " +
                                            str(spec.count));
        return spec.count;
    case envelope_spec::kind::router:
        // [identity, "", body...] from REQ; [identity, body...] from DEALER.
        // A tenbin header is never empty, but an empty list's single-part
        // frame is: a final empty frame is the body.
        if (n < 2) fail(errc::odd_chunk_count, "message of 1 frame has no tenbin frame after a ROUTER identity");
        return n > 2 && frames[1].size() == 0 ? 2 : 1;
    case envelope_spec::kind::delimited:
        for (std::size_t i = 0; i < n; ++i) {
            if (frames[i].size() != 0) continue;
            if (i + 1 == n)
                fail(errc::odd_chunk_count, "message of " + str(n) + " frames ends with its delimiter (frame " +
                                                str(i) + "): no tenbin frame after the envelope");
            return i + 1;
        }
        fail(errc::odd_chunk_count, "message of " + str(n) + " frames has no empty delimiter frame");
    }
    fail(errc::bad_argument, "unknown envelope_spec kind");
}

// Reads one whole message. Returns nothing when the first frame did not
// come; otherwise every frame of the message has been consumed, whatever
// it throws.
std::optional<std::vector<zmq::message_t>> receive_frames(zmq::socket_ref socket, const recv_options& opt) {
    zmq::message_t first;
    if (!socket.recv(first, opt.flags)) return std::nullopt;
    std::vector<zmq::message_t> frames;
    bool more = first.more();
    // Room for a few tensors up front (perf: regrowing cost allocations on
    // every message; larger lists still grow as needed).
    frames.reserve(more ? 16 : 1);
    std::size_t count = 1;
    bool over = count > opt.max_frames;
    if (!over) frames.push_back(std::move(first));
    while (more) {
        zmq::message_t part;
        // Already here (messages arrive whole): never wait for it.
        if (!socket.recv(part, zmq::recv_flags::dontwait))
            fail(errc::truncated, "frame " + str(count) + " of a multipart message was not there after frame " +
                                      str(count - 1));
        more = part.more();
        ++count;
        if (!over && count > opt.max_frames) {
            over = true;
            frames.clear();
        }
        if (!over) frames.push_back(std::move(part));
    }
    if (over)
        fail(errc::limit_exceeded, "message of " + str(count) + " frames exceeds recv_options::max_frames = " +
                                       str(opt.max_frames));
    return frames;
}

std::optional<message> receive(zmq::socket_ref socket, const recv_options& opt, form want) {
    auto frames = receive_frames(socket, opt);
    if (!frames) return std::nullopt;

    message out;
    const std::size_t skip = envelope_size(*frames, opt.envelope);
    out.envelope.reserve(skip);
    for (std::size_t i = 0; i < skip; ++i) out.envelope.push_back(std::move((*frames)[i]));

    std::vector<buffer> body;
    body.reserve(frames->size() - skip);
    // Header frames of the multipart form are only read while decoding, so
    // they are borrowed from `frames` (alive and unmoved until the end of
    // this function) instead of pinned one by one (perf: a shared keeper per
    // header cost an allocation per tensor).
    const bool multipart = frames->size() - skip > 1;
    for (std::size_t i = skip; i < frames->size(); ++i) {
        if (multipart && (i - skip) % 2 == 0) {
            body.push_back(buffer::borrow(bytes_of((*frames)[i])));
            continue;
        }
        // Pin the message at a heap address before taking data(): a small
        // frame's bytes are inside the message object.
        auto keeper = std::make_shared<zmq::message_t>(std::move((*frames)[i]));
        const mutable_bytes bytes = bytes_of(*keeper);
        // Read-only: over inproc the bytes may be the sender's memory.
        body.push_back(buffer::share(std::move(keeper), bytes, false));
    }

    const std::size_t n = body.size();
    out.single = n == 1;
    try {
        if (n == 1) {
            if (want == form::multipart && !body[0].empty())
                fail(errc::odd_chunk_count, "1 tenbin frame of " + str(body[0].size()) +
                                                " bytes: a header without data, or a single-part message "
                                                "(zrecv accepts either form)");
            out.tensors = decode_buffer(body[0], opt.decode);
        } else {
            if (want == form::single)
                fail(errc::odd_chunk_count, str(n) + " tenbin frames: a single-part message has one "
                                                     "(zrecv accepts either form)");
            out.tensors = decode_list(body, opt.decode);
        }
    } catch (const error& e) {
        const std::string where = n == 1 ? "single-part message of " + str(body[0].size()) + " bytes"
                                         : "multipart message of " + str(n) + " tenbin frames";
        throw error(e.code(), where + ": " + e.what());
    }

    // libzmq gives no alignment guarantee; typed access needs one.
    for (tensor& t : out.tensors)
        if (!t.data().aligned_to(itemsize(t.dtype()))) t = t.aligned();
    return out;
}

}  // namespace

bool zsend_single(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    const std::size_t size = encoded_size(tensors);
    check_frame_size(size, "single-part message");
    std::vector<zmq::message_t> frames;
    frames.reserve(opt.envelope.size() + 1);
    add_envelope(frames, opt.envelope);
    zmq::message_t& body = frames.emplace_back(size);
    encode_buffer_into(tensors, bytes_of(body));
    return send_frames(socket, frames, opt.flags);
}

bool zsend_multipart(zmq::socket_ref socket, tensor_span tensors, const send_options& opt) {
    std::vector<zmq::message_t> frames;
    frames.reserve(opt.envelope.size() + std::max<std::size_t>(2 * tensors.size(), 1));
    add_envelope(frames, opt.envelope);
    // The empty list: no multipart form exists, send the single-part one.
    if (tensors.empty()) frames.emplace_back();

    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view t = tensors[i];
        zmq::message_t& header = frames.emplace_back(header_size(t.ndim()));
        try {
            encode_header_into(t, bytes_of(header));
        } catch (const error& e) {
            throw error(e.code(), "tensor " + str(i) + ": " + e.what());
        }
        check_frame_size(t.data.size(), "tensor " + str(i) + ": data frame");

        const buffer* owner = tensors.owner(i);
        const bool zero_copy = owner && owner->owned() && !t.data.empty() &&
                               t.data.size() >= opt.copy_threshold && owner->data() == t.data.data() &&
                               owner->size() == t.data.size();
        if (zero_copy)
            frames.push_back(zero_copy_frame(*owner));
        else
            frames.emplace_back(t.data.data(), t.data.size());
    }
    return send_frames(socket, frames, opt.flags);
}

std::optional<message> zrecv(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::any);
}

std::optional<message> zrecv_single(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::single);
}

std::optional<message> zrecv_multipart(zmq::socket_ref socket, const recv_options& opt) {
    return receive(socket, opt, form::multipart);
}

}  // namespace tenbin
