#include "connect/link.hpp"

#include "core/codec_detail.hpp"
#include "shm/shm.hpp"
#include "transport/frames.hpp"

#include <vector>

namespace tenbin::detail {

namespace {

class plain final : public link {
public:
    explicit plain(bool multipart) : multipart_(multipart) {}

    bool send(zmq::socket_ref socket, tensor_span tensors, const send_options& so,
              std::optional<std::chrono::milliseconds>) override {
        return multipart_ ? zsend_multipart(socket, tensors, so) : zsend_single(socket, tensors, so);
    }
    bool receive(zmq::socket_ref socket, const recv_options& ro, message& into) override {
        return zrecv(socket, into, ro);
    }
    std::optional<std::vector<tensor>> decode(std::vector<zmq::message_t>& body, const decode_options& opt) override {
        // Each frame kept alive by its own keeper, as zrecv's are.
        std::vector<buffer> frames;
        frames.reserve(body.size());
        for (zmq::message_t& f : body) {
            auto kept = std::make_shared<zmq::message_t>(std::move(f));
            frames.push_back(buffer::share(kept, {kept->data<std::byte>(), kept->size()}, false));
        }
        std::vector<tensor> out = frames.size() == 1 ? decode_buffer(frames[0], opt) : decode_list(frames, opt);
        align_received(out);
        return out;
    }

private:
    bool multipart_;
};

class shared_memory final : public link {
public:
    shared_memory(bool sends, bool receives, const shm_options& o) {
        if (sends) sender_ = make_shm_sender(o);
        if (receives) receiver_ = make_shm_receiver(o);
    }
    ~shared_memory() override {
        if (sender_) shm_close(*sender_, std::chrono::milliseconds(0));
    }

    bool send(zmq::socket_ref socket, tensor_span tensors, const send_options& so,
              std::optional<std::chrono::milliseconds> timeout) override {
        return shm_send(*sender_, socket, tensors, so.envelope, so.position, timeout);
    }
    bool receive(zmq::socket_ref socket, const recv_options& ro, message& into) override {
        for (;;) {
            if (!zrecv_frames(socket, ro, into, body_)) return false;
            std::optional<std::vector<tensor>> tensors = shm_receive(*receiver_, body_, ro.decode);
            body_.clear();
            if (!tensors) continue;  // given up by its sender before we claimed it
            into.tensors = std::move(*tensors);
            into.single = false;
            return true;
        }
    }
    std::optional<std::vector<tensor>> decode(std::vector<zmq::message_t>& body, const decode_options& opt) override {
        return shm_receive(*receiver_, body, opt);
    }
    void close(std::chrono::milliseconds linger) override {
        if (sender_) shm_close(*sender_, linger);
    }
    void interrupt() noexcept override {
        if (receiver_) shm_interrupt(*receiver_);
    }
    tensor_pool* pool() override { return sender_ ? &shm_pool(*sender_) : nullptr; }
    std::optional<shm_sender_counters> sender_counters() override {
        if (!sender_) return std::nullopt;
        return shm_counters(*sender_);
    }
    std::optional<shm_receiver_counters> receiver_counters() override {
        if (!receiver_) return std::nullopt;
        return shm_counters(*receiver_);
    }

private:
    std::shared_ptr<shm_sender> sender_;
    std::shared_ptr<shm_receiver> receiver_;
    std::vector<zmq::message_t> body_;
};

}  // namespace

std::unique_ptr<link> plain_link(bool multipart) { return std::make_unique<plain>(multipart); }
std::unique_ptr<link> shm_link(bool sends, bool receives, const shm_options& opt) {
    return std::make_unique<shared_memory>(sends, receives, opt);
}

}  // namespace tenbin::detail
