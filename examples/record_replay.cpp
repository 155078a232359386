// Record a stream of messages into a .ten file, then replay it.
//
// A .ten file is a flat sequence of tensors. The recorder appends each
// received message's tensors with tenbin::write (gathered writes: tensor
// bytes go to the file without being copied); the replayer reads them back
// two at a time (each message here holds two tensors) and sends them on.
#include <tenbin/tenbin.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

int main() {
    const auto path = std::filesystem::temp_directory_path() / ("record-" + std::to_string(::getpid()) + ".ten");
    zmq::context_t ctx;
    zmq::socket_t tx(ctx, zmq::socket_type::pair);
    zmq::socket_t rx = tenbin::bounded_socket(ctx, zmq::socket_type::pair);  // bounded receive queue
    rx.bind("inproc://live");
    tx.connect("inproc://live");
    rx.set(zmq::sockopt::rcvtimeo, 2000);

    // The live stream.
    constexpr int messages = 5;
    for (int i = 0; i < messages; ++i)
        if (!tenbin::zsend_multipart(tx, {tenbin::tensor::from_vector(std::vector<float>(256, float(i)), {16, 16}, "x"),
                                          tenbin::tensor::from_vector(std::vector<std::int64_t>{i}, {1}, "step")}))
            return 1;

    // Record.
    {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        tenbin::fd_sink file(fd);
        for (int i = 0; i < messages; ++i)
            if (auto m = tenbin::zrecv(rx)) tenbin::write(file, m->tensors);
        ::close(fd);
    }
    std::printf("record_replay: recorded %d messages, %ju bytes in %s\n", messages,
                static_cast<std::uintmax_t>(std::filesystem::file_size(path)), path.c_str());

    // Replay, and check what comes out the other side.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    tenbin::fd_source file(fd);
    int replayed = 0;
    bool ok = true;
    while (true) {
        auto tensors = tenbin::read(file, {.count = 2});
        if (tensors.empty()) break;  // clean end of file
        ok = tenbin::zsend_multipart(tx, tensors) && ok;
        auto m = tenbin::zrecv(rx);
        ok = ok && m && m->tensors[1].values<std::int64_t>()[0] == replayed &&
             m->tensors[0].values<float>()[255] == float(replayed);
        ++replayed;
    }
    ::close(fd);
    std::filesystem::remove(path);
    ok = ok && replayed == messages;
    std::printf("record_replay: replayed %d messages %s\n", replayed, ok ? "intact" : "WRONG");
    return ok ? 0 : 1;
}
