// libFuzzer target: what streams and acked delivery read from peers. The
// input is tried as a position frame, a delivery control message, a pack
// (also behind a pack's header) and a stream state's JSON (each: only typed
// errors, and what is accepted reads back the same once written), then as a run of events for a consumer's
// stream tracker (4 bytes each: producer, epoch, seq, mark or a clock
// step), whose properties are checked: no batch given twice, nothing held
// past its bounds, an epoch's end never before its start.
#include "common.hpp"

#include "connect/delivery_protocol.hpp"
#include "connect/stream_tracker.hpp"

#include <tenbin/position.hpp>
#include <tenbin/stream.hpp>

#include <cstring>
#include <set>
#include <string_view>
#include <tuple>

namespace {

void typed(const tenbin::error& e) {
    using tenbin::errc;
    if (!fuzz::decoder_error(e.code()) && e.code() != errc::unsupported && e.code() != errc::bad_argument)
        fuzz::fail("a class a peer's bytes must not produce:", e.what());
}

// The batches a pack reads back the same once packed again.
void pack(tenbin::bytes_view in) {
    using tenbin::detail::pack_entry;
    tenbin::decode_options opt;
    opt.limits.max_tensors = 8;
    opt.limits.max_bytes = 1u << 20;
    std::vector<pack_entry> good;
    try {
        tenbin::detail::read_pack(tenbin::buffer::copy(in), opt, [&](pack_entry&& e) {
            if (e.fault) return typed(*e.fault);
            good.push_back(std::move(e));
        });
    } catch (const tenbin::error& e) {
        typed(e);
    }
    tenbin::detail::pack_writer w;
    for (const pack_entry& e : good) w.append(e.tensors, *e.position);
    if (w.empty()) return;
    std::size_t i = 0;
    tenbin::detail::read_pack(tenbin::buffer::copy(w.frame()), opt, [&](pack_entry&& e) {
        if (e.fault || *e.position != *good[i].position || e.tensors.size() != good[i].tensors.size())
            fuzz::fail("a pack's batch reads back otherwise");
        ++i;
    });
}

void frames(tenbin::bytes_view in) {
    pack(in);
    if (!in.empty()) {
        // Behind a pack's header: magic, version, a count from the first byte.
        std::vector<std::byte> packed(16, std::byte{0});
        std::memcpy(packed.data(), tenbin::detail::pack_magic, 8);
        packed[8] = std::byte{1};
        packed[12] = static_cast<std::byte>(static_cast<std::uint8_t>(in[0]) % 8);
        packed.insert(packed.end(), in.begin() + 1, in.end());
        pack(packed);
    }
    try {
        const tenbin::stream_position p = tenbin::decode_position(in);
        if (tenbin::decode_position(tenbin::encode_position(p)) != p) fuzz::fail("a position frame reads back otherwise");
    } catch (const tenbin::error& e) {
        typed(e);
    }
    try {
        const tenbin::detail::control c = tenbin::detail::decode_control(in);
        const tenbin::detail::control again =
            tenbin::detail::decode_control(tenbin::detail::encode_control(c, c.heartbeat_ms));
        if (again.type != c.type || again.acks != c.acks || again.taken != c.taken || again.name != c.name ||
            again.tally != c.tally || again.packs != c.packs || again.unconfirmed != c.unconfirmed ||
            again.reports_taken != c.reports_taken || again.heartbeat_ms != c.heartbeat_ms)
            fuzz::fail("a control message reads back otherwise");
    } catch (const tenbin::error& e) {
        typed(e);
    }
    try {
        const tenbin::stream_state s =
            tenbin::stream_state_from_json({reinterpret_cast<const char*>(in.data()), in.size()});
        if (tenbin::stream_state_from_json(tenbin::to_json(s)) != s) fuzz::fail("a stream state reads back otherwise");
    } catch (const tenbin::error& e) {
        typed(e);
    }
}

void events(tenbin::bytes_view in) {
    using namespace std::chrono_literals;
    using tenbin::detail::stream_event;
    tenbin::stream_options o;
    o.epoch_timeout = 100ms;
    constexpr std::size_t hold = 8;
    tenbin::detail::stream_tracker t(o, hold, 1u << 20);
    auto now = tenbin::detail::stream_tracker::clock::time_point{};
    std::set<std::tuple<std::string, std::uint64_t, std::uint64_t>> given;
    std::uint64_t ended = 0;
    std::vector<stream_event> out;
    const auto take = [&] {
        for (const stream_event& e : out) {
            if (e.what == stream_event::kind::message) {
                const auto& p = *e.message.position;
                if (!given.emplace(p.producer, p.epoch, p.seq).second) fuzz::fail("a batch given twice");
            } else if (e.what == stream_event::kind::epoch_end) {
                if (e.epoch < ended) fuzz::fail("an epoch ended before one it follows");
                ended = e.epoch + 1;
            }
        }
        out.clear();
        if (t.held_messages() > hold + 1) fuzz::fail("more held than the bound");
    };
    for (std::size_t at = 0; at + 4 <= in.size(); at += 4) {
        const auto b = [&](std::size_t k) { return static_cast<std::uint8_t>(in[at + k]); };
        if (b(0) == 0xff) {
            now += std::chrono::milliseconds(b(1));
            t.tick(now, out);
        } else {
            tenbin::detail::tracked m;
            m.position = tenbin::stream_position{std::string(1, static_cast<char>('a' + b(0) % 4)), 1, b(1) % 8u,
                                                 b(2), static_cast<tenbin::stream_position::mark>(b(3) % 3), 0};
            m.bytes = 1;
            t.add(std::move(m), now, out);
        }
        take();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const tenbin::bytes_view in(reinterpret_cast<const std::byte*>(data), size);
    frames(in);
    events(in);
    return 0;
}
