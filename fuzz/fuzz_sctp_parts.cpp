// libFuzzer target: SCTP message reassembly (detail::read_message_parts),
// driven by scripted parts as a kernel would hand them over, so that it runs
// without an SCTP socket.
//
// Input: a size_hint byte, two bytes of max_size (1 + value % 20000), then
// parts: a flag byte (bit 0: the part ends its message, MSG_EOR; bit 1: the
// message is a notification, taken from its first part) and a length byte
// (the part holds length + 1 bytes, which follow). The script's end is the
// peer closing the connection. A part larger than the space offered is
// handed over in pieces, MSG_EOR on the last, as the kernel does.
// Properties: every data message up to max_size comes out whole and exact,
// every larger one as limit_exceeded, notifications never, and the end of
// the script as io_error; nothing else.
#include "common.hpp"

#include "transport/sctp_parts.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct part {
    std::string bytes;
    bool eor = false;
    bool note = false;  // of its message
};

class script {
public:
    explicit script(std::vector<part> parts) : parts_(std::move(parts)) {}
    tenbin::detail::message_part read(tenbin::mutable_bytes space) {
        if (space.empty()) fuzz::fail("read_message_parts offered no space");
        if (next_ == parts_.size()) return {};  // the peer is gone
        const part& p = parts_[next_];
        const std::size_t n = std::min(space.size(), p.bytes.size() - offset_);
        std::memcpy(space.data(), p.bytes.data() + offset_, n);
        offset_ += n;
        tenbin::detail::message_part out{n, false, p.note};
        if (offset_ == p.bytes.size()) {
            out.end_of_record = p.eor;
            ++next_;
            offset_ = 0;
        }
        return out;
    }

private:
    std::vector<part> parts_;
    std::size_t next_ = 0, offset_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) return 0;
    static constexpr std::size_t hints[] = {0, 1, 7, 64, 100, 4096};
    const std::size_t hint = data[0] < 6 ? hints[data[0]] : std::size_t{data[0]} * 13;
    const std::size_t max_size = 1 + (std::size_t{data[1]} | std::size_t{data[2]} << 8) % 20000;

    std::vector<part> parts;
    // The messages as they should come out: bytes, or "over" for one too
    // large; notifications left out.
    std::vector<std::string> expect;
    std::vector<bool> over;
    std::string message;
    bool note = false, first = true;
    for (std::size_t at = 3; at + 1 < size;) {
        const std::uint8_t flags = data[at];
        const std::size_t n = std::min<std::size_t>(std::size_t{data[at + 1]} + 1, size - at - 2);
        if (n == 0) break;
        if (first) note = (flags & 2) != 0;
        first = false;
        parts.push_back({std::string(reinterpret_cast<const char*>(data + at + 2), n), (flags & 1) != 0, note});
        message += parts.back().bytes;
        at += 2 + n;
        if (parts.back().eor) {
            if (!note) {
                over.push_back(message.size() > max_size);
                expect.push_back(over.back() ? std::string() : message);
            }
            message.clear();
            first = true;
        }
    }

    script s(std::move(parts));
    const tenbin::detail::part_reader reader = [&s](tenbin::mutable_bytes space) { return s.read(space); };
    std::size_t i = 0;
    for (;; ++i) {
        try {
            const tenbin::buffer got = tenbin::detail::read_message_parts(reader, hint, max_size);
            if (i >= expect.size()) fuzz::fail("a message came out of an incomplete or notification-only rest");
            if (over[i]) fuzz::fail("a message over max_size came out");
            if (got.size() != expect[i].size() || (got.size() && std::memcmp(got.data(), expect[i].data(), got.size())))
                fuzz::fail("a message came out changed");
        } catch (const tenbin::error& e) {
            if (e.code() == tenbin::errc::io_error) break;  // the end of the script
            if (e.code() != tenbin::errc::limit_exceeded) fuzz::fail("unexpected error class:", e.what());
            if (i >= expect.size() || !over[i]) fuzz::fail("limit_exceeded for a message within max_size");
        }
        if (i > expect.size()) fuzz::fail("more messages than the script holds");
    }
    if (i != expect.size()) fuzz::fail("messages were lost before the end of the script");
    return 0;
}
