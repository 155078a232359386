// What the +shm tests across processes share: the far ends (a fresh exec
// of the test binary running the "shm peer" case), batches that say which
// message they are, counts of descriptors and mappings, a tap that catches
// a +shm message as it travels.
#pragma once

#include <tenbin/connect.hpp>
#include <tenbin/pool.hpp>

#include "shm/protocol.hpp"
#include "shm/shm.hpp"
#include "support.hpp"
#include "zmq_fixture.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace shm_test {

using namespace tenbin;
using namespace std::chrono_literals;

// Runs peer `role` (the "shm peer" case of test_transport.cpp) in a child
// process: a fresh exec of this binary, since a forked copy of a threaded
// process cannot start threads of its own under ThreadSanitizer. Its exit
// code is 0 when the role succeeded, 1 when it threw.
inline pid_t spawn(const std::string& role) {
    const std::string env = "TENBIN_SHM_PEER=" + role;
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    envp.push_back(const_cast<char*>(env.c_str()));
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::execle("/proc/self/exe", "test-shm", "--test-case=shm peer", "--no-intro", static_cast<char*>(nullptr),
                 envp.data());
        ::_exit(127);
    }
    return pid;
}

inline int wait_exit(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A batch whose every element says which message it is: a pool tensor
// (sent without a copy) and a heap tensor (copied in).
inline std::vector<tensor> batch(connection& c, std::int32_t k, std::int64_t n = 4096) {
    tensor a = c.pool().acquire(dtype::i4, {n}, "pooled");
    for (auto& v : a.mutable_values<std::int32_t>()) v = k;
    std::vector<std::int32_t> b(static_cast<std::size_t>(n / 2), -k);
    return {a, tensor::from_vector(std::move(b), {n / 2}, "heap")};
}

// Which message `m` is, after checking every element agrees; -1 if not.
inline std::int32_t check_batch(const std::vector<tensor>& m) {
    if (m.size() != 2 || m[0].info() != "pooled" || m[1].info() != "heap") return -1;
    const auto a = m[0].values<std::int32_t>();
    const auto b = m[1].values<std::int32_t>();
    if (a.empty()) return -1;
    const std::int32_t k = a[0];
    for (std::int32_t v : a)
        if (v != k) return -1;
    for (std::int32_t v : b)
        if (v != -k) return -1;
    return k;
}

inline std::size_t count_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

inline std::size_t count_maps() {
    std::ifstream in("/proc/self/maps");
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
}

// Waits (at most 10 s) until every block of `c`'s pool but `held` is back.
inline bool wait_idle(connection& c, std::size_t held = 0) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (c.pool().stats().in_use > held && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
    return c.pool().stats().in_use == held;
}

// Mappings of shm segments in this process (both ends' when both are here).
inline std::size_t count_shm_maps() {
    std::ifstream in("/proc/self/maps");
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.find("memfd:tenbin-shm") != std::string::npos;
    return n;
}

// Longer waits than the other tests': the far end is a fresh process,
// and runs under the sanitizers too.
inline connection_options timeouts() { return test_zmq::bounded_options(10s, 5s); }

// The same, with a sender's pool of `bytes`.
inline connection_options with_pool(std::uint64_t bytes) {
    connection_options o = timeouts();
    o.shm_pool_bytes = bytes;
    return o;
}


// One shm message as it travels, caught by a plain socket.
struct tap {
    zmq::context_t ctx{1};
    std::string name = test_zmq::fresh_ipc_path();
    connection push{"zpush+shm://" + name, [] {
        connection_options o = timeouts();
        o.linger = 100ms;  // messages refused before their claim are never claimed
        return o;
    }()};
    zmq::socket_t in{ctx, zmq::socket_type::pull};
    tap() { in.bind("ipc://" + name); }
    std::vector<zmq::message_t> next(tensor_span t) {
        REQUIRE(push.send(t));
        std::vector<zmq::message_t> frames;
        do {
            frames.emplace_back();
            REQUIRE(in.recv(frames.back()));
        } while (frames.back().more());
        return frames;
    }
};

inline void forward(zmq::socket_t& out, std::vector<zmq::message_t>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i)
        out.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

// Writes a descriptor word of frame `f` in place.
inline void put_u64(zmq::message_t& f, std::size_t at, std::uint64_t v) {
    test_support::store_le({static_cast<std::byte*>(f.data()), f.size()}, at, 8, v);
}


// A +shm sender and receiver of this process on raw ZeroMQ sockets (PUSH
// to PULL over ipc), for the tests that read their counters or hand them
// hostile input.
struct shm_pair {
    zmq::context_t ctx{1};
    zmq::socket_t out = test_zmq::make_socket(ctx, zmq::socket_type::push);
    zmq::socket_t in = test_zmq::make_socket(ctx, zmq::socket_type::pull);
    std::shared_ptr<detail::shm_sender> sender;
    std::shared_ptr<detail::shm_receiver> receiver;

    explicit shm_pair(const detail::shm_options& so = {}, const detail::shm_options& ro = {})
        : sender(detail::make_shm_sender(so)), receiver(detail::make_shm_receiver(ro)) {
        const std::string address = "ipc://" + test_zmq::fresh_ipc_path();
        in.bind(address);
        out.connect(address);
    }
    ~shm_pair() { detail::shm_close(*sender, 0ms); }

    tensor_pool& pool() { return detail::shm_pool(*sender); }
    detail::shm_sender_counters counters() { return detail::shm_counters(*sender); }
    bool send(tensor_span t) { return detail::shm_send(*sender, out, t, {}, nullptr, 5000ms); }
    // The next message's frames as they came (nothing after 5 s).
    std::optional<std::vector<zmq::message_t>> frames() {
        std::vector<zmq::message_t> f;
        do {
            f.emplace_back();
            if (!in.recv(f.back())) return std::nullopt;
        } while (f.back().more());
        return f;
    }
    std::optional<std::vector<tensor>> recv() {
        auto f = frames();
        if (!f) return std::nullopt;
        return detail::shm_receive(*receiver, *f, decode_options{});
    }
};

// A pool tensor of `n` i4 elements, each `k`.
inline tensor filled(tensor_pool& pool, std::int32_t k, std::int64_t n = 4096) {
    tensor t = pool.acquire(dtype::i4, {n});
    for (auto& v : t.mutable_values<std::int32_t>()) v = k;
    return t;
}

// Whether every element of `t` is `k`.
inline bool all_are(const tensor& t, std::int32_t k) {
    const auto v = t.values<std::int32_t>();
    return std::all_of(v.begin(), v.end(), [&](std::int32_t x) { return x == k; });
}

// test_support::eventually with 10 s: these tests wait on child processes.
template <class F>
bool eventually(F&& done) {
    return test_support::eventually(std::forward<F>(done), 10s);
}


// A child process, killed (SIGKILL) and reaped when this goes.
class child {
public:
    explicit child(pid_t pid) : pid_(pid) {}
    ~child() {
        ::kill(pid_, SIGKILL);
        wait_exit(pid_);
    }
    child(const child&) = delete;
    child& operator=(const child&) = delete;
    pid_t pid() const { return pid_; }

private:
    pid_t pid_;
};

// This process's descriptor limit lowered to `n` while it lives.
class fd_limit {
public:
    explicit fd_limit(std::size_t n) {
        // UBSan checks a virtual call by writing to a pipe (see
        // no_descriptors) and caches the type once checked: the library
        // reports a short descriptor table through this one.
        (void)std::system_category().message(EMFILE);
        REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
        rlimit low = saved_;
        low.rlim_cur = n;
        REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    }
    ~fd_limit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
    fd_limit(const fd_limit&) = delete;
    fd_limit& operator=(const fd_limit&) = delete;

private:
    rlimit saved_{};
};

// Fills this process's descriptor table while it lives: every open, socket
// and memfd_create fails with EMFILE. No doctest assertion in its scope:
// UBSan checks a virtual call by writing to a pipe, and without a
// descriptor for it reports the call (a false "invalid vptr").
class no_descriptors {
public:
    no_descriptors() : limit_(count_fds() + 16) {
        for (int fd; (fd = ::dup(0)) >= 0;) fds_.push_back(fd);
    }
    ~no_descriptors() {
        for (int fd : fds_) ::close(fd);
    }
    no_descriptors(const no_descriptors&) = delete;
    no_descriptors& operator=(const no_descriptors&) = delete;

private:
    fd_limit limit_;
    std::vector<int> fds_;
};

// The "count" role (see test_transport.cpp): a subscriber on the detail
// API, which reads its receiver's counters.
inline void count_subscriber(const std::string& name, int count, int fd) {
    zmq::context_t ctx(1);
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::subscribe, "");
    sub.set(zmq::sockopt::rcvtimeo, 30000);
    sub.set(zmq::sockopt::linger, 0);
    sub.connect("ipc://" + name);
    const auto receiver = detail::make_shm_receiver();
    std::uint64_t received = 0;
    std::int32_t last = 0;
    while (received < static_cast<std::uint64_t>(count)) {
        std::vector<zmq::message_t> frames;
        do {
            frames.emplace_back();
            if (!sub.recv(frames.back())) throw std::runtime_error("timed out");
        } while (frames.back().more());
        const auto m = detail::shm_receive(*receiver, frames, decode_options{});
        if (!m) continue;  // given up for this subscriber: skipped
        const std::int32_t k = m->at(0).values<std::int32_t>()[0];
        if (k <= last || !std::all_of(m->at(0).values<std::int32_t>().begin(), m->at(0).values<std::int32_t>().end(),
                                      [&](std::int32_t v) { return v == k; }))
            throw std::runtime_error("a message out of order or changed");
        if (received++ == 0 && ::write(fd, "x", 1) != 1) throw std::runtime_error("ready pipe");
        last = k;
    }
    const std::uint64_t out[2] = {received, detail::shm_counters(*receiver).messages_skipped};
    if (::write(fd, out, sizeof out) != sizeof out) throw std::runtime_error("result pipe");
}

// Connects to side channel `name` up to `count` times (retrying a full
// backlog, for 10 s at most) with this process's whole descriptor limit,
// writes a byte to `fd` and holds the connections until killed.
inline void flood_side_channel(const std::string& name, int count, int fd) {
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    std::vector<int> held;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (static_cast<int>(held.size()) < count && std::chrono::steady_clock::now() < deadline) {
        const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
        if (s < 0) break;
        if (::connect(s, reinterpret_cast<const sockaddr*>(&a), len) == 0) {
            held.push_back(s);
        } else {
            ::close(s);
            std::this_thread::sleep_for(1ms);  // the backlog is full
        }
    }
    [[maybe_unused]] const auto w = ::write(fd, "x", 1);
    ::pause();
}

}  // namespace shm_test
