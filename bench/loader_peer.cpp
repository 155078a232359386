// tenbin-bench-loader: the C++ loader as the receiving end of the
// two-process cases of bench/python_bench.py, with the protocol of
// tenbin-bench's `--peer recv`: binds a PULL loader to --endpoint, prints
// "endpoint E", takes --warmup batches, prints "ready", takes --count more
// and prints "seconds S" for those.
#include <tenbin/connect.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>

int main(int argc, char** argv) {
    std::map<std::string, std::string> args;
    for (int i = 1; i + 1 < argc; i += 2) args[std::string(argv[i]).substr(2)] = argv[i + 1];
    for (const char* k : {"endpoint", "warmup", "count"})
        if (!args.count(k)) {
            std::cerr << "usage: tenbin-bench-loader --endpoint E --warmup N --count N\n";
            return 2;
        }
    try {
        tenbin::loader_options o;
        o.connection.kind = tenbin::socket_kind::pull;
        o.connection.bind = true;
        o.connection.recv_timeout = std::chrono::milliseconds(120000);  // a hung peer fails the case
        tenbin::loader l(args["endpoint"], o);
        std::cout << "endpoint " << l.endpoints().front().address << std::endl;
        auto take = [&l] {
            if (!l.next()) throw std::runtime_error("no batch within the receive timeout");
        };
        for (int i = std::stoi(args["warmup"]); i > 0; --i) take();
        const auto t0 = std::chrono::steady_clock::now();
        std::cout << "ready" << std::endl;
        for (int i = std::stoi(args["count"]); i > 0; --i) take();
        const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
        std::cout << "seconds " << s.count() << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "tenbin-bench-loader: " << e.what() << std::endl;
        return 1;
    }
    return 0;
}
