#include "connect/delivery_protocol.hpp"

#include "base/endian.hpp"
#include "core/codec_detail.hpp"

#include <tenbin/error.hpp>

#include <cstring>
#include <memory>

namespace tenbin::detail {

namespace {

constexpr std::size_t header = 16;

class writer {
public:
    explicit writer(std::vector<std::byte>& out) : out_(out) {}
    void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
    void u32(std::uint32_t v) { append_le(out_, v, 4); }
    void u64(std::uint64_t v) { append_le(out_, v, 8); }
    void name(const std::string& s) {
        if (s.empty() || s.size() > 255) throw error(errc::bad_argument, "a control message name of 1 to 255 bytes");
        u8(static_cast<std::uint8_t>(s.size()));
        const auto* p = reinterpret_cast<const std::byte*>(s.data());
        out_.insert(out_.end(), p, p + s.size());
    }

private:
    std::vector<std::byte>& out_;
};

// One bounds-checked cursor over a frame.
class reader {
public:
    explicit reader(bytes_view b) : b_(b) {}
    void need(std::size_t n, const char* what) {
        if (b_.size() - at_ < n)
            throw error(errc::bad_header, std::string("control message ends inside ") + what + " (byte " +
                                              std::to_string(at_) + " of " + std::to_string(b_.size()) + ")");
    }
    std::uint8_t u8(const char* what) {
        need(1, what);
        return static_cast<std::uint8_t>(b_[at_++]);
    }
    std::uint16_t u16(const char* what) { return le<std::uint16_t>(what); }
    std::uint32_t u32(const char* what) { return le<std::uint32_t>(what); }
    std::uint64_t u64(const char* what) { return le<std::uint64_t>(what); }
    std::string name(const char* what) {
        const std::size_t n = u8(what);
        if (n == 0) throw error(errc::bad_header, std::string("control message: an empty ") + what);
        need(n, what);
        std::string s(reinterpret_cast<const char*>(b_.data() + at_), n);
        at_ += n;
        return s;
    }
    // Bounds a count by what the rest of the frame can hold, before any
    // allocation for it.
    std::uint32_t count(const char* what, std::size_t limit, std::size_t each) {
        const std::uint32_t n = u32(what);
        if (n > limit)
            throw error(errc::limit_exceeded, std::string("control message: ") + std::to_string(n) + " " + what +
                                                  ", more than " + std::to_string(limit));
        need(std::size_t{n} * each, what);
        return n;
    }
    void done() {
        if (at_ != b_.size())
            throw error(errc::bad_header, "control message: " + std::to_string(b_.size() - at_) + " bytes past its end");
    }
    void skip(std::size_t n) {
        need(n, "reserved bytes");
        at_ += n;
    }

private:
    template <class T>
    T le(const char* what) {
        need(sizeof(T), what);
        const auto v = load_le<T>(b_.data() + at_);
        at_ += sizeof(T);
        return v;
    }

    bytes_view b_;
    std::size_t at_ = 0;
};

}  // namespace

bool is_control_frame(bytes_view frame) noexcept {
    return frame.size() >= sizeof control_magic && std::memcmp(frame.data(), control_magic, sizeof control_magic) == 0;
}

std::vector<std::byte> encode_control(const control& c, std::uint32_t heartbeat_ms) {
    std::vector<std::byte> out(header, std::byte{0});
    std::memcpy(out.data(), control_magic, sizeof control_magic);
    out[8] = std::byte{control_version};
    out[9] = static_cast<std::byte>(c.type);
    if (c.type == control_type::ack) store_le<std::uint16_t>(out.data() + 10, c.held_us);
    store_le<std::uint32_t>(out.data() + 12, heartbeat_ms);
    writer w(out);
    switch (c.type) {
    case control_type::hello:
        w.u8(static_cast<std::uint8_t>(c.role));
        w.u8(c.answer ? 1 : 0);
        w.u8((c.packs ? 1 : 0) | (c.unconfirmed ? 2 : 0) | (c.reports_taken ? 4 : 0));
        w.u8(0);
        w.u32(c.window);
        w.u64(c.incarnation);
        w.name(c.name);
        if (c.taken.size() > max_reported_producers)
            throw error(errc::limit_exceeded, "positions of more than " + std::to_string(max_reported_producers) +
                                                  " producers in one hello");
        w.u32(static_cast<std::uint32_t>(c.taken.size()));
        for (const auto& [producer, p] : c.taken) {
            w.name(producer);
            w.u64(p.epoch);
            w.u64(p.next);
            const std::size_t k = std::min(p.taken.size(), max_reported_taken);
            w.u32(static_cast<std::uint32_t>(k));
            for (std::size_t i = 0; i < k; ++i) w.u64(p.taken[i]);
        }
        break;
    case control_type::heartbeat:
        w.u64(c.incarnation);
        w.u64(c.tally);
        break;
    case control_type::ack:
        if (c.acks.size() > max_control_acks)
            throw error(errc::limit_exceeded, "more than " + std::to_string(max_control_acks) + " acks in one message");
        w.u32(static_cast<std::uint32_t>(c.acks.size()));
        for (const batch_id& a : c.acks) {
            w.u64(a.epoch);
            w.u64(a.seq);
        }
        break;
    case control_type::bye: break;
    case control_type::confirm: w.u64(c.confirmed); break;
    }
    return out;
}

control decode_control(bytes_view frame) {
    if (!is_control_frame(frame)) throw error(errc::bad_magic, "not a control message (no ~TenAck~)");
    reader r(frame);
    r.skip(8);
    const std::uint8_t version = r.u8("the version");
    if (version != control_version)
        throw error(errc::unsupported, "control message version " + std::to_string(version) + "; this build speaks " +
                                           std::to_string(control_version));
    const std::uint8_t type = r.u8("the type");
    const std::uint16_t held_us = r.u16("an ack's hold");
    control c;
    c.heartbeat_ms = r.u32("the heartbeat");
    switch (type) {
    case static_cast<std::uint8_t>(control_type::hello): {
        c.type = control_type::hello;
        const std::uint8_t role = r.u8("the role");
        if (role != static_cast<std::uint8_t>(peer_role::producer) && role != static_cast<std::uint8_t>(peer_role::consumer))
            throw error(errc::bad_header, "control message: unknown role " + std::to_string(role));
        c.role = static_cast<peer_role>(role);
        c.answer = r.u8("the answer flag") != 0;
        const std::uint8_t flags = r.u8("the flags");  // other bits: for later versions
        c.packs = (flags & 1) != 0;
        c.unconfirmed = (flags & 2) != 0;
        c.reports_taken = (flags & 4) != 0;
        r.skip(1);
        c.window = r.u32("the window");
        c.incarnation = r.u64("the incarnation");
        c.name = r.name("name");
        const std::uint32_t n = r.count("producers", max_reported_producers, 1 + 1 + 8 + 8 + 4);
        for (std::uint32_t i = 0; i < n; ++i) {
            std::string producer = r.name("producer name");
            producer_state p;
            p.epoch = r.u64("an epoch");
            p.next = r.u64("a next");
            const std::uint32_t k = r.count("taken batches", max_reported_taken, 8);
            p.taken.reserve(k);
            for (std::uint32_t j = 0; j < k; ++j) p.taken.push_back(r.u64("a taken batch"));
            c.taken[std::move(producer)] = std::move(p);
        }
        break;
    }
    case static_cast<std::uint8_t>(control_type::heartbeat):
        c.type = control_type::heartbeat;
        c.incarnation = r.u64("the incarnation");
        c.tally = r.u64("the tally");
        break;
    case static_cast<std::uint8_t>(control_type::ack): {
        c.type = control_type::ack;
        c.held_us = held_us;
        const std::uint32_t n = r.count("acks", max_control_acks, 16);
        c.acks.reserve(n);
        for (std::uint32_t i = 0; i < n; ++i) {
            batch_id a;
            a.epoch = r.u64("an ack's epoch");
            a.seq = r.u64("an ack's seq");
            c.acks.push_back(a);
        }
        break;
    }
    case static_cast<std::uint8_t>(control_type::bye): c.type = control_type::bye; break;
    case static_cast<std::uint8_t>(control_type::confirm):
        c.type = control_type::confirm;
        c.confirmed = r.u64("the count confirmed");
        break;
    default: throw error(errc::bad_header, "control message: unknown type " + std::to_string(type));
    }
    r.done();
    return c;
}

// ---- packs -----------------------------------------------------------------

namespace {
constexpr std::size_t pack_header = 16, entry_header = 16;
}

void pack_writer::append(tensor_span tensors, const stream_position& position) {
    plan_.assign(tensors, &position);  // throws before anything is appended
    const chunk_plan& plan = plan_;
    if (bytes_.empty()) {
        bytes_.assign(pack_header, std::byte{0});
        std::memcpy(bytes_.data(), pack_magic, sizeof pack_magic);
        bytes_[8] = std::byte{control_version};
    }
    const std::size_t at = bytes_.size();
    bytes_.resize(at + entry_header + plan.size());
    store_le<std::uint64_t>(bytes_.data() + at, plan.size());
    std::memset(bytes_.data() + at + 8, 0, 8);
    plan.copy_to({bytes_.data() + at + entry_header, plan.size()});
    store_le<std::uint32_t>(bytes_.data() + 12, static_cast<std::uint32_t>(++count_));
}

void pack_writer::expect(std::size_t batches) {
    if (count_ == 0) return;
    const std::size_t each = (bytes_.size() - pack_header) / count_;
    bytes_.reserve(pack_header + batches * each);
}

zmq::message_t pack_writer::release() {
    auto owned = std::make_unique<std::vector<std::byte>>(std::move(bytes_));
    bytes_ = {};
    count_ = 0;
    zmq::message_t m(owned->data(), owned->size(),
                     [](void*, void* hint) { delete static_cast<std::vector<std::byte>*>(hint); }, owned.get());
    owned.release();  // the message's now
    return m;
}

bool is_pack_frame(bytes_view frame) noexcept {
    return frame.size() >= sizeof pack_magic && std::memcmp(frame.data(), pack_magic, sizeof pack_magic) == 0;
}

void read_pack(const buffer& pack, const decode_options& opt, const std::function<void(pack_entry&&)>& each) {
    const bytes_view b = pack.bytes();
    if (!is_pack_frame(b)) throw error(errc::bad_magic, "not a pack (no ~TenPack)");
    if (b.size() < pack_header) throw error(errc::bad_header, "a pack of " + std::to_string(b.size()) + " bytes ends inside its header");
    if (b[8] != std::byte{control_version})
        throw error(errc::unsupported, "pack version " + std::to_string(static_cast<int>(b[8])) + "; this build speaks " +
                                           std::to_string(control_version));
    const std::uint32_t n = load_le<std::uint32_t>(b.data() + 12);
    if (n > max_pack_batches)
        throw error(errc::limit_exceeded, "a pack of " + std::to_string(n) + " batches, more than " + std::to_string(max_pack_batches));
    std::size_t at = pack_header;
    for (std::uint32_t i = 0; i < n; ++i) {
        if (b.size() - at < entry_header)
            throw error(errc::truncated, "pack ends inside the size of batch " + std::to_string(i) + " of " + std::to_string(n));
        const std::uint64_t size = load_le<std::uint64_t>(b.data() + at);
        at += entry_header;
        if (size > b.size() - at)
            throw error(errc::truncated, "pack batch " + std::to_string(i) + " claims " + std::to_string(size) + " bytes; " +
                                             std::to_string(b.size() - at) + " are left");
        pack_entry e;
        try {
            detail::decode_buffer_into(pack.slice(at, size), opt, e.tensors, &e.position);
            if (!e.position) throw error(errc::bad_header, "pack batch " + std::to_string(i) + " has no position");
            align_received(e.tensors);
        } catch (const error& fault) {
            e.fault = fault;
        }
        at += size;
        each(std::move(e));
    }
    if (at != b.size()) throw error(errc::bad_header, "pack: " + std::to_string(b.size() - at) + " bytes past its batches");
}

}  // namespace tenbin::detail
