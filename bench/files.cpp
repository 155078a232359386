// tenbin-bench: .ten files against plain write and read.
#include "suite.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bench {

// ---- 5: files ----
void suite::files() {
    if (!wanted("file", "file")) return;
    const std::uint64_t size = cfg.quick ? 256 * MiB : GiB;
    const workload w = make_workload("quad", size);
    const std::string dir = "/tmp/tenbin-bench-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    struct cleanup {
        std::string d;
        ~cleanup() { std::filesystem::remove_all(d); }
    } clean{dir};
    const std::string a = dir + "/a.ten", b = dir + "/b.ten";
    auto gbps = [&](double sec) { return static_cast<double>(w.payload) / sec / 1e9; };
    auto plain_write = [&](const std::string& path) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd < 0) fail("open " + path);
        std::size_t at = 0;
        while (at < w.encoded.size()) {
            const ssize_t n = ::write(fd, w.encoded.data() + at, std::min<std::size_t>(w.encoded.size() - at, 1u << 30));
            if (n <= 0) fail("write " + path);
            at += static_cast<std::size_t>(n);
        }
        if (::close(fd) != 0) fail("close " + path);
    };
    {
        auto m = interleave(
            cfg.reps,
            [&] {
                ::unlink(a.c_str());
                const auto t0 = clock_type::now();
                tenbin::save(a, w.tensors);
                return gbps(seconds_since(t0));
            },
            [&] {
                ::unlink(b.c_str());
                const auto t0 = clock_type::now();
                plain_write(b);
                return gbps(seconds_since(t0));
            });
        add({"file save", "file", w.payload, m.first, m.second, "GB/s", "plain write of the same bytes",
             "/tmp, page cache"});
    }
    {
        const auto loaded = tenbin::load(a);
        for (std::size_t k = 0; k < 4; ++k)
            if (!(loaded[k].view() == w.tensors[k].view())) fail("load differs from what was saved");
    }
    {
        auto m = interleave(
            cfg.reps,
            [&] {
                const auto t0 = clock_type::now();
                auto t = tenbin::load(a);
                const double s = seconds_since(t0);
                if (t.size() != 4) fail("load");
                return gbps(s);
            },
            [&] {
                const auto t0 = clock_type::now();
                const int fd = ::open(a.c_str(), O_RDONLY);
                struct stat st {};
                if (fd < 0 || ::fstat(fd, &st) != 0) fail("open " + a);
                const auto n = static_cast<std::size_t>(st.st_size);
                auto* p = static_cast<std::byte*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
                std::size_t at = 0;
                while (at < n) {
                    const ssize_t r = ::read(fd, p + at, std::min<std::size_t>(n - at, 0x7ffff000));
                    if (r <= 0) fail("read " + a);
                    at += static_cast<std::size_t>(r);
                }
                ::close(fd);
                const double s = seconds_since(t0);
                std::free(p);
                return gbps(s);
            });
        add({"file load", "file", w.payload, m.first, m.second, "GB/s", "plain read of the same bytes",
             "/tmp, page cache"});
    }
    {
        ::unlink(b.c_str());
        const std::string big = dir + "/big.ten", little = dir + "/little.ten";
        // The full mode maps 1 GiB; the file is the one just measured
        // (256 MiB in quick mode).
        std::filesystem::rename(a, big);
        tenbin::save(little, make_workload("quad", MiB, false).tensors);
        volatile std::size_t sink = 0;
        const double t = cfg.quick ? 0.02 : 0.1;
        if (!(tenbin::load_mmap(big)[2].view() == w.tensors[2].view())) fail("load_mmap differs");
        const auto m = interleave(
            cfg.reps, [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::load_mmap(big).size(); }, t); },
            [&] { return 1e9 / ns_per_op([&] { sink = sink + tenbin::load_mmap(little).size(); }, t); });
        add({"file load_mmap " + human_bytes(w.payload) + " vs 1 MiB", "file", w.payload, m.first, m.second,
             "op/s", "load_mmap of a 1 MiB file", "us/call " + std::to_string(1e6 / m.first).substr(0, 6)});
    }
}

}  // namespace bench
