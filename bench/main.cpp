// tenbin-bench: every tenbin operation beside its baseline (raw libzmq,
// memcpy, plain write/read, the tensorcom-style Python peer), measured in
// one run with repetitions interleaved; prints a table, writes JSON.
//
//   tenbin-bench [--quick] [--json FILE] [--filter TEXT] [--malloc reuse|default]
//
// Throughput is payload bytes (tensor data, not headers or padding) per
// second, or messages per second for small messages. Each figure is the
// median of the repetitions; ratio = tenbin / baseline, higher is better.
//
// Streams run a PUSH sender and a PULL receiver. The sender sends `warmup`
// messages (the receiver checks the first one's content), then waits until
// the receiver has taken them all; the clock runs from then until the
// receiver has the last of `count` more. Two-process cases re-execute this
// program with the hidden `--peer` role flags (or the Python peer) and
// signal "go" over the child's stdin; tenbin and raw libzmq take turns in
// one pair of such processes, which stays up for all repetitions of a case.
#include "suite.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <unistd.h>

namespace bench {

int calibrate(const config& cfg, const std::function<double(int)>& seconds_for, std::uint64_t payload) {
    const int trial = static_cast<int>(std::clamp<std::uint64_t>((8 * MiB) / std::max<std::uint64_t>(payload, 1), 2, 2000));
    const double s = std::max(seconds_for(trial), 1e-6);
    const double per = s / trial;
    return static_cast<int>(std::clamp(cfg.rep_time / per, static_cast<double>(cfg.min_count), 1e6));
}

}  // namespace bench

namespace {

using namespace bench;

std::string self_exe() {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) fail("cannot read /proc/self/exe");
    return std::string(buf, static_cast<std::size_t>(n));
}

const char* usage =
    "usage: tenbin-bench [--quick] [--json FILE] [--filter TEXT] [--malloc reuse|default]\n"
    "                    [--reps N] [--rep-time S] [--python PATH] [--python-peer SCRIPT]\n"
    "  --quick        the short run (under a minute on 2 cores)\n"
    "  --json FILE    write the results as a JSON array\n"
    "  --filter TEXT  only the groups of cases whose \"group transport\" contains TEXT;\n"
    "                 the groups: multi, single, small, noise (inproc, ipc, tcp,\n"
    "                 tcp-2proc), anatomy inproc, loader tcp, stream tcp, acked (tcp,\n"
    "                 shm, tcp-2proc), codec memory, file\n"
    "                 file, multi vs python, single vs python, batch multi,\n"
    "                 curve multi, curve 77 MB multi (tcp-2proc), shm (shm-2proc)\n"
    "  --malloc MODE  in-process and C++ two-process stream cases: call\n"
    "                 tenbin::reuse_large_allocations() (reuse, the default) or not\n"
    "                 (the Python and batch cases set their own)\n"
    "  --reps N       repetitions per case, at least 1 (quick 5, full 7; the Python\n"
    "                 and batch cases 2 fewer, at least 3)\n"
    "  --rep-time S   seconds per repetition, roughly (quick 0.03, full 0.25)\n"
    "  --python PATH  the interpreter of the Python cases (/usr/bin/python3, which\n"
    "                 has pyzmq and NumPy)\n"
    "  --python-peer SCRIPT  the Python peer (bench/python_peer.py of the source tree)\n";

// A wrong command line: what is wrong, then the usage; status 2.
int bad_usage(const std::string& why) {
    std::cerr << "tenbin-bench: " << why << "\n" << usage;
    return 2;
}

// `text` as a number of the option's kind, or nothing if it is not one.
template <class T>
std::optional<T> number(const std::string& text) {
    std::istringstream in(text);
    T v{};
    if (!(in >> v) || !in.eof()) return std::nullopt;
    return v;
}

int run(int argc, char** argv) {
    std::map<std::string, std::string> args;
    std::vector<std::string> flags;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick" || a == "--help" || a == "-h") {
            flags.push_back(a);
        } else if (a.rfind("--", 0) == 0 && i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0) {
            args[a.substr(2)] = argv[++i];
        } else {
            return bad_usage(a.rfind("--", 0) == 0 ? "option '" + a + "' needs a value" : "unknown argument '" + a + "'");
        }
    }
    if (args.count("peer")) return peer_main(args);  // this program re-executed, with options of its own
    for (const auto& [key, value] : args)
        if (key != "json" && key != "filter" && key != "malloc" && key != "reps" && key != "rep-time" &&
            key != "python" && key != "python-peer")
            return bad_usage("unknown option '--" + key + "'");
    suite s;
    config& cfg = s.cfg;
    for (const auto& f : flags) {
        if (f == "--quick") cfg.quick = true;
        else {
            std::cout << usage;
            return 0;
        }
    }
    if (args.count("filter")) cfg.filter = args["filter"];
    if (args.count("malloc")) cfg.malloc_mode = args["malloc"];
    if (args.count("python")) cfg.python = args["python"];
    if (args.count("python-peer")) cfg.python_peer = args["python-peer"];
    if (cfg.malloc_mode != "reuse" && cfg.malloc_mode != "default")
        return bad_usage("--malloc is reuse or default, not '" + cfg.malloc_mode + "'");
    cfg.self = self_exe();
    if (cfg.quick) {
        cfg.reps = 5;
        cfg.rep_time = 0.03;
        cfg.min_count = 3;
    }
    if (args.count("reps")) {
        const auto reps = number<int>(args["reps"]);
        if (!reps || *reps < 1) return bad_usage("--reps needs a whole number of at least 1, not '" + args["reps"] + "'");
        cfg.reps = *reps;
    }
    if (args.count("rep-time")) {
        const auto t = number<double>(args["rep-time"]);
        if (!t || !(*t > 0) || !std::isfinite(*t))
            return bad_usage("--rep-time needs a number of seconds above 0, not '" + args["rep-time"] + "'");
        cfg.rep_time = *t;
    }
    if (cfg.malloc_mode == "reuse") tenbin::reuse_large_allocations();
    // A JSON file that cannot be written fails now, not after the run.
    if (args.count("json")) {
        const bool existed = std::filesystem::exists(args["json"]);
        if (!std::ofstream(args["json"], std::ios::app)) {
            std::cerr << "tenbin-bench: cannot write " << args["json"] << std::endl;
            return 1;
        }
        if (!existed) std::filesystem::remove(args["json"]);
    }

    const auto t0 = clock_type::now();
    std::cout << "tenbin-bench " << (cfg.quick ? "quick" : "full") << ": medians of " << cfg.reps
              << " interleaved repetitions; malloc " << cfg.malloc_mode << "; GB = 1e9 bytes of tensor data"
              << std::endl;
    print_header();
    const std::vector<std::uint64_t> sizes = {4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB};
    const std::vector<std::string> transports = {"inproc", "ipc", "tcp", "tcp-2proc"};
    const std::vector<std::uint64_t> py_sizes =
        cfg.quick ? std::vector<std::uint64_t>{16 * MiB} : sizes;
    // A group that fails (a peer missing, a socket error) is reported and
    // the others still run: their results are written all the same.
    int failed = 0;
    auto group = [&](const char* what, const std::function<void()>& run_group) {
        try {
            run_group();
        } catch (const std::exception& e) {
            ++failed;
            std::cerr << "tenbin-bench: " << what << " failed: " << e.what() << std::endl;
        }
    };
    group("multi", [&] { s.streams(form::multi, sizes, transports); });
    group("single", [&] { s.streams(form::single, sizes, transports); });
    group("small", [&] { s.streams(form::small, {0}, transports); });
    group("noise", [&] {
        s.streams(form::multi, {MiB, 64 * MiB}, transports, impl::raw);
        s.streams(form::small, {0}, transports, impl::raw);
    });
    group("anatomy", [&] { s.anatomy(MiB); });
    group("producer", [&] { s.producers(); });
    group("loader", [&] {
        s.loader(cfg.quick ? std::vector<std::uint64_t>{0, MiB} : std::vector<std::uint64_t>{0, 64 * KiB, MiB, 16 * MiB});
    });
    group("codec", [&] { s.codec(); });
    group("files", [&] { s.files(); });
    group("multi vs python", [&] { s.python(form::multi, py_sizes); });
    group("single vs python", [&] { s.python(form::single, py_sizes); });
    group("batch", [&] { s.batch(); });
    group("curve", [&] { s.curve(); });
    group("shm", [&] { s.shm(); });
    group("stream", [&] {
        s.numbered();
        s.resume();
    });
    group("metrics", [&] { s.exporter(); });
    group("acked", [&] {
        s.acked();
        s.redelivery();
    });
    std::cout << "total " << std::fixed << std::setprecision(1) << seconds_since(t0) << " s" << std::endl;
    if (args.count("json")) write_json(args["json"], s.results);
    shared_context()->close();
    if (s.results.empty() && !failed) {
        std::cerr << "tenbin-bench: no case matches --filter '" << cfg.filter << "'\n";
        return 1;
    }
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "tenbin-bench: " << e.what() << std::endl;
        return 1;
    }
}
