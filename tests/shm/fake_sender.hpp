// A +shm sender written for the tests out of the protocol module's parts:
// its side channel answers claims as a sender does, or misbehaves as a
// hostile one would (stays silent, hands over a ring it then makes
// unwritable, sparse segments of any size). Its messages are forged
// frames a receiver is given directly.
#pragma once

#include "peer.hpp"

#include "shm/internal.hpp"
#include "shm/ring.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>

#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <thread>

namespace shm_test {

class fake_sender {
public:
    enum class behaviour {
        answers,    // as a sender does: ring, descriptors, OK
        silent,     // accepts, reads nothing, answers nothing
        ring_ahead  // answers, then sets its ring's count of entries read ahead of those written
    };

    // A side channel of its own; `backlog` 0 and `accept` false leave
    // connections waiting in a full backlog.
    explicit fake_sender(behaviour b, bool accept = true, int backlog = 16) : behaviour_(b) {
        static std::atomic<int> n{0};
        name_ = "tenbin-test-fake-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
        listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        REQUIRE(listen_.get() >= 0);
        socklen_t len = 0;
        const sockaddr_un a = detail::shm_impl::abstract_address(name_, len);
        REQUIRE(::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0);
        REQUIRE(::listen(listen_.get(), backlog) == 0);
        if (accept) thread_ = std::thread([this] { serve(); });
    }
    ~fake_sender() {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
    }
    fake_sender(const fake_sender&) = delete;
    fake_sender& operator=(const fake_sender&) = delete;

    const std::string& name() const { return name_; }

    // A new segment of `bytes` (sparse: nothing is written), sealed as a
    // sender seals its own; its id.
    std::uint64_t segment(std::uint64_t bytes) {
        detail::unique_fd fd(::memfd_create("tenbin-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
        REQUIRE(fd.get() >= 0);
        REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(bytes)) == 0);
        REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0);
        std::lock_guard lock(mutex_);
        segments_[next_id_] = std::move(fd);
        return next_id_++;
    }

    // A message of `segments.size()` u1 tensors of `bytes` bytes, each at
    // the start of its segment, as its frames come out of ZeroMQ.
    std::vector<zmq::message_t> message(std::span<const std::uint64_t> segments, std::uint64_t bytes = 64) {
        std::uint64_t seq = 0;
        {
            std::lock_guard lock(mutex_);
            seq = next_seq_++;
            named_[seq].assign(segments.begin(), segments.end());
        }
        std::vector<zmq::message_t> frames;
        const auto first = detail::encode_shm_first({name_, seq, 0});
        frames.emplace_back(first.data(), first.size());
        for (std::uint64_t s : segments) {
            const std::int64_t shape[] = {static_cast<std::int64_t>(bytes)};
            const std::vector<std::byte> stand_in(bytes);  // the header needs bytes of the size
            const tensor_view v{dtype::u1, shape, {}, stand_in};
            zmq::message_t h(header_size(1));
            encode_header_into(v, {static_cast<std::byte*>(h.data()), h.size()});
            frames.push_back(std::move(h));
            const auto d = detail::encode_shm_descriptor({s, seq, 0, bytes});
            frames.emplace_back(d.data(), d.size());
        }
        return frames;
    }

private:
    void serve() {
        using namespace detail::shm_impl;
        std::vector<detail::unique_fd> peers;
        std::map<int, std::unique_ptr<shm_ring>> rings;
        while (!stop_) {
            std::vector<pollfd> fds{{listen_.get(), POLLIN, 0}};
            if (behaviour_ != behaviour::silent)
                for (auto& p : peers) fds.push_back({p.get(), POLLIN, 0});
            if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
            if (fds[0].revents) {
                const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
                if (fd >= 0) peers.emplace_back(fd);
            }
            for (std::size_t i = 1; i < fds.size(); ++i) {
                if (!fds[i].revents) continue;
                std::array<std::byte, request_size> b{};
                const ssize_t n = ::recv(fds[i].fd, b.data(), b.size(), MSG_DONTWAIT);
                if (n == 0) {  // the receiver closed its end
                    rings.erase(fds[i].fd);
                    std::lock_guard lock(mutex_);
                    given_.erase(fds[i].fd);
                    std::erase_if(peers, [&](const detail::unique_fd& p) { return p.get() == fds[i].fd; });
                    continue;
                }
                if (n != static_cast<ssize_t>(b.size())) continue;
                const request r = parse_request(b);
                if (r.type == packet::claim) answer(fds[i].fd, r.seq, rings);
            }
        }
    }

    // The claim of message `seq` on `fd`: the ring first, then the
    // segments it names that `fd` has not had, then OK.
    void answer(int fd, std::uint64_t seq, std::map<int, std::unique_ptr<detail::shm_impl::shm_ring>>& rings) {
        using namespace detail::shm_impl;
        if (!rings.count(fd)) {
            detail::unique_fd ring_fd;
            rings[fd] = shm_ring::create(ring_fd);
            const int rfd = ring_fd.get();
            send_packet(fd, encode_reply({.type = packet::ring, .seq = seq}), {&rfd, 1});
            if (behaviour_ == behaviour::ring_ahead) {
                // The word after the receiver's count (ring.hpp's layout): ours.
                void* p = ::mmap(nullptr, shm_ring::bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
                REQUIRE(p != MAP_FAILED);
                static_cast<std::uint64_t*>(p)[8] = 1000;
                ::munmap(p, shm_ring::bytes);
            }
        }
        std::lock_guard lock(mutex_);
        for (std::uint64_t id : named_[seq])
            if (given_[fd].insert(id).second) {
                const int sfd = segments_.at(id).get();
                send_packet(fd, encode_reply({.type = packet::fds, .seq = seq, .ids = {id}}), {&sfd, 1});
            }
        send_packet(fd, encode_reply({.type = packet::ok, .seq = seq, .clock = monotonic_ns()}));
    }

    behaviour behaviour_;
    std::string name_;
    detail::unique_fd listen_;
    std::mutex mutex_;
    std::map<std::uint64_t, detail::unique_fd> segments_;
    std::map<std::uint64_t, std::vector<std::uint64_t>> named_;  // the segments of each message
    std::map<int, std::set<std::uint64_t>> given_;
    std::uint64_t next_id_ = 1;
    std::uint64_t next_seq_ = 1;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace shm_test
