// The +shm sender's send path: copy-in, the message's frames, its record
// in the ledger (the side-channel thread is side_server.cpp's).
#ifdef __linux__

#include "shm/sender.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include <fcntl.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <sys/eventfd.h>
#include <unistd.h>

namespace tenbin::detail {

using namespace shm_impl;

namespace {

// Copy-ins of at least this many bytes use streaming stores: their
// destination (a pool block last written many messages ago) is out of the
// caches, and the bytes are for another process. Smaller ones may find
// their block still cached, where memcpy is faster (measured: bench shm).
constexpr std::size_t stream_bytes = std::size_t{4} << 20;

// Copies `n` bytes to 64-byte-aligned `dst`, past this core's caches
// (x86-64: SSE2 streaming stores, no read of the destination first).
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) {
#if defined(__x86_64__)
    const std::size_t body = n / 64 * 64;
    for (std::size_t i = 0; i < body; i += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + body, src + body, n - body);
    _mm_sfence();  // the streamed bytes are visible before the message is sent
#else
    std::memcpy(dst, src, n);
#endif
}

}  // namespace

shm_sender::shm_sender(const shm_options& o)
    : memory_(std::make_shared<shm_memory>()),
      pool_(pool_options{.max_bytes = o.pool_bytes, .max_buffers = 1024, .wait = std::nullopt}, memory_),
      ledger_({.lease = o.lease,
               .fan_out = o.fan_out,
               .grace = fan_out_grace,
               .max_held_bytes = o.max_held_bytes ? o.max_held_bytes : o.pool_bytes / 4 * 3,
               .laggard_after = o.laggard_after,
               .block_laggards = o.block_laggards,
               .max_unclaimed = o.max_unclaimed}),
      max_peers_(std::max<std::size_t>(o.max_peers, 1)) {
    std::random_device rd;
    const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
    name_ = "tenbin-shm-" + std::to_string(::getpid()) + "-" + std::to_string(r);
    listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (listen_.get() < 0) throw os_error("shm side channel socket");
    socklen_t len = 0;
    const sockaddr_un a = abstract_address(name_, len);
    if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) throw os_error("binding the shm side channel");
    if (::listen(listen_.get(), 64) != 0) throw os_error("listening on the shm side channel");
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake_.get() < 0) throw os_error("eventfd");
    reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    memory_->wake_on_wait(wake_.get());
    thread_ = std::thread([this] { run(); });
}

void shm_sender::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        stopping_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    memory_->wake_on_wait(-1);
    std::vector<flight> dropped;
    {
        std::lock_guard lock(mutex_);
        for (auto& [fd, p] : peers_) {
            if (p.ring) p.ring->ask(shm_ring::cut_off);
            ::close(fd);
        }
        peers_.clear();
        dropped = ledger_.clear();
    }
    dropped.clear();
    // Receivers may still hold what was in flight, or claim it after
    // the stop: none of the pool's blocks is handed out again (they
    // leave as their last holders drop them); a fresh pool replaces it.
    pool_ = tensor_pool(pool_.options(), memory_);
}

std::size_t shm_sender::in_flight() {
    std::lock_guard lock(mutex_);
    return ledger_.in_flight();
}

void shm_sender::drain(std::chrono::milliseconds linger) {
    {
        std::lock_guard lock(mutex_);
        draining_ = true;  // receivers kick the thread after each ring entry
    }
    wake();
    std::unique_lock lock(mutex_);
    done_.wait_for(lock, linger, [&] { return ledger_.settled(); });
}

bool shm_sender::send(zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
                      const stream_position* position, std::optional<std::chrono::milliseconds> timeout) {
    flight f;
    std::vector<shm_descriptor> descs(tensors.size());
    std::vector<std::size_t> copy_in;  // tensors not from the pool
    std::size_t copy_bytes = 0;  // in the pool, aligned
    std::size_t copied = 0;      // the tensors' own
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_view v = tensors[i];
        if (v.data.empty()) continue;
        const buffer* owner = tensors.owner(i);
        if (owner && owner->owned())
            if (auto where = memory_->find(v.data.data(), v.data.size())) {
                descs[i] = {where->first, 0, where->second, v.data.size()};
                f.holders.push_back(*owner);
                f.segments.push_back(where->first);
                continue;
            }
        copy_in.push_back(i);
        copied += v.data.size();
        copy_bytes += (v.data.size() + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
    }
    if (!settle(timeout)) return false;
    if (!copy_in.empty()) {
        // One block for all of them: one segment, one descriptor to hand over.
        std::optional<tensor> block = pool_.try_acquire(
            dtype::u1, {static_cast<std::int64_t>(copy_bytes)}, {}, timeout.value_or(std::chrono::milliseconds::max()));
        if (!block) return false;
        std::byte* base = block->mutable_bytes().data();
        const auto where = memory_->find(base, copy_bytes);
        if (!where) throw error(errc::io_error, "a shm pool block outside its segments");
        std::size_t at = 0;
        for (std::size_t i : copy_in) {
            const bytes_view src = tensors[i].data;
            if (copy_bytes >= stream_bytes) stream_copy(base + at, src.data(), src.size());
            else std::memcpy(base + at, src.data(), src.size());
            descs[i] = {where->first, 0, where->second + at, src.size()};
            at += (src.size() + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
        }
        f.holders.push_back(block->data());
        f.segments.push_back(where->first);
    }

    ledger::sent sent;
    bool sooner = false;
    {
        std::lock_guard lock(mutex_);
        last_send_ = ledger_clock::now();
        if (!copy_in.empty()) {
            ++copy_ins_;
            copy_in_bytes_ += copied;
        }
        sent = ledger_.add(std::move(f), last_send_, memory_->has_closed());
        sooner = sent.sooner || std::exchange(napping_, false);
    }
    if (sooner) wake();  // the thread sleeps past its lease, or naps
    const std::uint64_t seq = sent.seq;
    try {
        for (shm_descriptor& d : descs) d.generation = d.segment ? seq : 0;
        // Frames: built before the first is sent, so the message goes whole or not at all.
        std::vector<zmq::message_t> frames;
        frames.reserve(envelope.size() + 2 + 2 * tensors.size());
        for (const zmq::const_buffer& e : envelope) frames.emplace_back(e.data(), e.size());
        const std::vector<std::byte> first =
            encode_shm_first({name_, seq, sent.claim_by ? monotonic_ns(*sent.claim_by) : 0});
        frames.emplace_back(first.data(), first.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const tensor_view v = tensors[i];
            zmq::message_t h(header_size(v.ndim()));
            encode_header_into(v, {static_cast<std::byte*>(h.data()), h.size()});
            frames.push_back(std::move(h));
            const auto d = encode_shm_descriptor(descs[i]);
            frames.emplace_back(d.data(), d.size());
        }
        if (position) {
            frames.emplace_back(position_frame_size(*position));
            encode_position_into(*position, {static_cast<std::byte*>(frames.back().data()), frames.back().size()});
        }
        const auto flags = zmq::send_flags::none;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const bool more = i + 1 < frames.size();
            std::optional<std::size_t> r;
            for (;;) {
                try {
                    r = socket.send(frames[i], more ? flags | zmq::send_flags::sndmore : flags);
                    break;
                } catch (const zmq::error_t& e) {
                    if (e.num() != EINTR) throw;
                }
            }
            if (!r) {  // only the first frame can time out (whole messages count for the HWM)
                forget(seq);
                return false;
            }
        }
    } catch (...) {
        forget(seq);
        throw;
    }
    return true;
}

void shm_sender::forget(std::uint64_t seq) {
    std::optional<flight> f;
    std::lock_guard lock(mutex_);
    f = ledger_.forget(seq);
}

void shm_sender::retire(ledger::outcome& out) {
    for (std::uint64_t s : ledger_.to_retire()) ledger_.retired(s, memory_->retire(s));
    ledger_.sweep(out);
}

shm_sender_counters shm_sender::counters() {
    std::lock_guard lock(mutex_);
    const ledger_counters& l = ledger_.counters();
    return {.peers = peers_.size(),
            .peers_refused = peers_refused_,
            .leases_expired = l.leases_expired,
            .segments_retired = memory_->retired(),
            .retires_failed = l.retires_failed,
            .blocks_pinned = ledger_.pinned(),
            .peers_cut_off = l.peers_cut_off,
            .laggard_drops = l.laggard_drops,
            .copy_ins = copy_ins_,
            .copy_in_bytes = copy_in_bytes_};
}

bool shm_sender::settle(std::optional<std::chrono::milliseconds> timeout) {
    const auto deadline = timeout ? ledger_clock::now() + *timeout : time_point::max();
    ledger::outcome out;
    std::unique_lock lock(mutex_);
    for (;;) {
        take_rings();
        ledger_.settle(ledger_clock::now(), out);
        ledger_.sweep(out);  // pinned messages their holders let go
        if (ledger_.may_send()) break;
        // Too many sent and not claimed: the rings are read again in a
        // moment (claims come every few microseconds), packets wake us.
        if (ledger_clock::now() >= deadline) return false;
        done_.wait_until(lock, std::min(deadline, ledger_clock::now() + std::chrono::microseconds(100)));
    }
    lock.unlock();
    if (!out.done.empty()) done_.notify_all();
    return true;
}

void shm_sender::tell_cut(int fd, cut_reason why) {
    reply r;
    r.type = packet::cut_off;
    r.reason = why;
    [[maybe_unused]] const bool told = send_packet(fd, encode_reply(r));  // told if it has room
}

void shm_sender::take_rings() {
    for (auto& [fd, p] : peers_) take_ring(fd, p);
}

void shm_sender::take_ring(int fd, peer& p) {
    if (!p.ring || p.cut) return;
    bool cut = false;
    const bool sane = p.ring->take([&](std::uint64_t word) {
        const ring_entry e = parse_ring_entry(word);
        if (e.release) ledger_.release(fd, e.seq);
        else if (!cut) cut = ledger_.claim(fd, e.seq) == ledger::claimed::cut_off;
    });
    if (!sane) cut_locked(fd, p, cut_reason::corrupt_ring);
    else if (cut) cut_locked(fd, p, cut_reason::held_too_much);
}

void shm_sender::cut_locked(int fd, peer& p, cut_reason why) {
    if (p.cut) return;
    p.cut = true;
    ledger_.cut(fd);  // (a no-op when the ledger did it)
    if (p.ring) p.ring->ask(shm_ring::cut_off);
    tell_cut(fd, why);
    // The thread drops it at the hang-up (closing it here could close a
    // descriptor number it is about to poll).
    ::shutdown(fd, SHUT_RDWR);
}

void shm_sender::wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = ::write(wake_.get(), &one, sizeof one);
}

std::shared_ptr<shm_sender> make_shm_sender(const shm_options& o) { return std::make_shared<shm_sender>(o); }
shm_sender_counters shm_counters(shm_sender& s) { return s.counters(); }
tensor_pool& shm_pool(shm_sender& s) { return s.pool(); }
bool shm_send(shm_sender& s, zmq::socket_ref socket, tensor_span tensors, std::span<const zmq::const_buffer> envelope,
              const stream_position* position, std::optional<std::chrono::milliseconds> timeout) {
    return s.send(socket, tensors, envelope, position, timeout);
}
void shm_close(shm_sender& s, std::chrono::milliseconds linger) {
    s.drain(linger);
    s.stop();
}
std::size_t shm_in_flight(shm_sender& s) { return s.in_flight(); }

}  // namespace tenbin::detail

#endif
