// The +shm receiver: one side-channel link per sender (link.hpp), within
// its bounds; tensors made from descriptors checked against the segments.
#ifdef __linux__

#include "shm/link.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace tenbin::detail {

using namespace shm_impl;

namespace {

// A tensor of at most this many bytes that shares its segment with other
// tensors of its message (the sender copies a message's heap tensors into
// one block) is copied out on receipt: kept alone (labels, keys), it would
// hold the whole block from the sender's pool.
constexpr std::uint64_t copy_out_bytes = 64 * 1024;

// How long a receive waits on a sender's side channel without a receive timeout.
constexpr std::chrono::milliseconds default_claim_timeout{30000};

// Keeps one message's mappings; gives the message back when its last
// tensor is dropped.
struct message_keeper {
    std::shared_ptr<side_link> link;
    std::uint64_t seq;
    std::vector<std::shared_ptr<const mapping>> maps;
    ~message_keeper() { link->release(seq); }
};

}  // namespace

class shm_receiver {
public:
    explicit shm_receiver(const shm_options& o)
        : claim_timeout_(o.claim_timeout.value_or(default_claim_timeout)),
          max_senders_(std::max<std::size_t>(o.max_senders, 1)),
          max_mappings_(o.max_mappings),
          max_mapped_bytes_(o.max_mapped_bytes),
          state_(std::make_shared<receiver_state>()) {}

    std::optional<std::vector<tensor>> receive(std::span<const zmq::message_t> frames, const decode_options& opt) {
        const auto deadline = receive_clock::now() + claim_timeout_;
        if (frames.empty()) throw error(errc::bad_header, "an empty shm message");
        const shm_first first = parse_shm_first({frames[0].data<std::byte>(), frames[0].size()});
        if (frames.size() % 2 != 1)
            throw error(errc::odd_chunk_count, "shm message of " + std::to_string(frames.size()) +
                                                   " frames: a header without a descriptor");
        const std::size_t n = frames.size() / 2;
        if (n > opt.limits.max_tensors)
            throw error(errc::limit_exceeded, std::to_string(n) + " tensors, more than limits::max_tensors");
        // Everything the message says is checked before anything is claimed.
        std::vector<tensor_header> headers(n);
        std::vector<shm_descriptor> descs(n);
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const zmq::message_t& h = frames[1 + 2 * i];
            headers[i] = decode_header({h.data<std::byte>(), h.size()}, opt.limits);
            const zmq::message_t& d = frames[2 + 2 * i];
            descs[i] = parse_shm_descriptor({d.data<std::byte>(), d.size()});
            check_shm_descriptor(descs[i], headers[i], first.seq, i);
            total += headers[i].nbytes;
            if (total > opt.limits.max_bytes)
                throw error(errc::limit_exceeded, "message of more than limits::max_bytes");
        }
        std::shared_ptr<side_link> link = link_for(first.side, deadline);
        bool ok = false;
        try {
            ok = link->claim(first.seq, first.claim_by, descs, deadline,
                             [&](std::uint64_t bytes) { return room(bytes, *link); });
        } catch (const error& e) {
            if (e.code() == errc::limit_exceeded) ++refused_;
            if (link->broken()) links_.erase(first.side);
            throw;
        }
        if (!ok) {
            ++skipped_;
            return std::nullopt;
        }
        // From here on the keeper gives the message back, also on an error.
        auto keeper = std::make_shared<message_keeper>();
        keeper->link = link;
        keeper->seq = first.seq;
        const buffer::keeper_type shared = keeper;
        std::vector<std::uint64_t> segments;
        for (const shm_descriptor& d : descs)
            if (d.length != 0) segments.push_back(d.segment);
        std::sort(segments.begin(), segments.end());
        std::vector<tensor> out;
        out.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const shm_descriptor& d = descs[i];
            buffer b;  // an empty tensor holds nothing
            if (d.length != 0) {
                std::shared_ptr<const mapping> m = link->segment(d.segment);
                if (!m)
                    throw error(errc::bad_header, "tensor " + std::to_string(i) + ": unknown shm segment " +
                                                      std::to_string(d.segment));
                check_shm_extent(d, m->size(), headers[i].dtype, i);
                const bytes_view bytes{m->base() + d.offset, static_cast<std::size_t>(d.length)};
                const auto [lo, hi] = std::equal_range(segments.begin(), segments.end(), d.segment);
                if (d.length <= copy_out_bytes && hi - lo > 1) {
                    b = buffer::copy(bytes).read_only();
                } else {
                    b = buffer::share(shared, {const_cast<std::byte*>(bytes.data()), bytes.size()}, false);
                    if (std::find(keeper->maps.begin(), keeper->maps.end(), m) == keeper->maps.end())
                        keeper->maps.push_back(std::move(m));
                }
            }
            out.emplace_back(headers[i].dtype, std::move(headers[i].shape), std::move(b), headers[i].info);
        }
        // Checked on the tensors, as every decoder does: refused, they give the message back at once.
        if (opt.expect_infos) check_infos(out, *opt.expect_infos);
        return out;
    }

    shm_receiver_counters counters() const {
        return {.senders = links_.size(),
                .mappings = state_->mappings.load(),
                .mapped_bytes = state_->mapped_bytes.load(),
                .quiet_claims = state_->quiet_claims.load(),
                .messages_skipped = skipped_,
                .claim_timeouts = state_->claim_timeouts.load(),
                .links_broken = state_->links_broken.load(),
                .refused = refused_,
                .senders_evicted = evicted_};
    }

private:
    struct known {
        std::shared_ptr<side_link> link;
        std::uint64_t used = 0;  // when last used, in messages
    };

    // The link to side channel `side`, connected by `deadline` if new. A
    // link broken since its last message (a release found the sender
    // hostile or gone) is this message's error, once.
    std::shared_ptr<side_link> link_for(const std::string& side, receive_clock::time_point deadline) {
        ++uses_;
        if (auto it = links_.find(side); it != links_.end()) {
            if (it->second.link->broken()) {
                const std::string why = it->second.link->why();
                links_.erase(it);
                throw error(errc::io_error, "shm side channel '" + side + "': " + why);
            }
            it->second.used = uses_;
            return it->second.link;
        }
        // Senders come and go: forget those gone, and their mappings (the
        // tensors still alive keep theirs).
        std::erase_if(links_, [](auto& e) { return e.second.link->hung_up(); });
        if (links_.size() >= max_senders_ && !evict(nullptr)) {
            ++refused_;
            throw error(errc::limit_exceeded, "a message from a +shm sender beyond the " +
                                                  std::to_string(max_senders_) +
                                                  " this receiver serves, each with tensors held "
                                                  "(shm_options::max_senders)");
        }
        auto link = std::make_shared<side_link>(side, deadline, state_);
        links_[side] = {link, uses_};
        return link;
    }

    // Closes the least recently used link that no tensor holds, but
    // `keep`: its mappings go. False when there is none.
    bool evict(const side_link* keep) {
        auto victim = links_.end();
        for (auto it = links_.begin(); it != links_.end(); ++it)
            if (it->second.link.get() != keep && it->second.link.use_count() == 1 &&
                (victim == links_.end() || it->second.used < victim->second.used))
                victim = it;
        if (victim == links_.end()) return false;
        links_.erase(victim);
        ++evicted_;
        return true;
    }

    // Whether `link` may map one more segment of `bytes`: idle links go
    // first to make room; nothing, or why not.
    std::optional<std::string> room(std::uint64_t bytes, const side_link& link) {
        const auto fits = [&] {
            return state_->mappings.load() < max_mappings_ && bytes <= max_mapped_bytes_ &&
                   state_->mapped_bytes.load() <= max_mapped_bytes_ - bytes;
        };
        while (!fits())
            if (!evict(&link)) {
                if (state_->mappings.load() >= max_mappings_)
                    return "one more segment would take this receiver past " + std::to_string(max_mappings_) +
                           " mappings (shm_options::max_mappings)";
                return "a segment of " + std::to_string(bytes) + " bytes would take this receiver past " +
                       std::to_string(max_mapped_bytes_) + " mapped bytes (shm_options::max_mapped_bytes)";
            }
        return std::nullopt;
    }

public:
    void interrupt() noexcept {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(state_->interrupted.get(), &one, sizeof one);
    }

private:
    std::chrono::milliseconds claim_timeout_;
    std::size_t max_senders_;
    std::size_t max_mappings_;
    std::uint64_t max_mapped_bytes_;
    std::shared_ptr<receiver_state> state_;
    std::map<std::string, known> links_;
    std::uint64_t uses_ = 0;
    std::uint64_t skipped_ = 0, refused_ = 0, evicted_ = 0;
};

std::shared_ptr<shm_receiver> make_shm_receiver(const shm_options& o) { return std::make_shared<shm_receiver>(o); }
void shm_interrupt(shm_receiver& r) noexcept { r.interrupt(); }
shm_receiver_counters shm_counters(shm_receiver& r) { return r.counters(); }
std::optional<std::vector<tensor>> shm_receive(shm_receiver& r, std::span<const zmq::message_t> frames,
                                               const decode_options& opt) {
    return r.receive(frames, opt);
}

}  // namespace tenbin::detail

#endif
