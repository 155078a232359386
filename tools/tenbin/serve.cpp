// tenbin serve: send batches, from .ten files or made up, at a given rate.
#include "common.hpp"
#include "interrupt.hpp"
#include "progress.hpp"
#include "sockets.hpp"

#include <tenbin/connect.hpp>

#include <climits>
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>
#include <utility>

namespace tenbin::cli {
namespace {

struct serve_cli_options {
    std::string url;
    std::vector<std::string> files;
    std::string synthetic;
    std::size_t count = 0;
    double rate = 0;
    bool single = false;
    std::string infos;
    socket_choice socket;
    std::optional<double> delay;
    double timeout = 30;
    double report = 5;
    bool tensorcom = false;
    std::size_t epochs = 0;  // 0: no epochs
    std::string producer;
    std::size_t wait_for = 0;
    metrics_choice metrics;
};

// Who takes the batches, as far as serve can tell, for progress reports.
std::string audience(connection& conn, bool pub, const pub_audience& peers) {
    if (conn.options().acked) {
        const std::vector<consumer_info> cs = conn.consumers();
        std::size_t in_flight = 0;
        std::uint64_t redelivered = 0;
        for (const consumer_info& c : cs) {
            in_flight += c.in_flight;
            redelivered += c.redelivered;
        }
        return std::to_string(cs.size()) + (cs.size() == 1 ? " consumer" : " consumers") + " (" +
               std::to_string(in_flight) + " in flight, " + std::to_string(redelivered) + " redelivered)";
    }
    if (pub && conn.options().wait_for > 0) {
        const std::size_t n = conn.subscribers();
        return std::to_string(n) + (n == 1 ? " subscriber" : " subscribers");
    }
    if (peers.watches())
        return std::to_string(peers.peers()) + (peers.peers() == 1 ? " peer connected" : " peers connected");
    return {};
}

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string part; std::getline(in, part, sep);) out.push_back(part);
    return out;
}

// Values a synthetic tensor takes: [lo, hi) for floats, lo..hi (both
// included) for integers. Unset: [0, 1) for floats, every value for integers.
struct value_range {
    bool set = false;
    double lo = 0, hi = 1;        // floats
    long long ilo = 0, ihi = 0;  // integers
};

// Fills a tensor with values that look like data, in `range`; different
// for every seed.
void fill(tensor& t, std::uint64_t seed, const value_range& range) {
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    const auto bytes = t.mutable_bytes();
    const std::size_t n = t.count();
    const std::size_t size = itemsize(t.dtype());
    auto put = [&]<class T>(T value, std::size_t i) { std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T)); };
    // Values in the range, counted from ilo (0: all 2^64).
    const std::uint64_t span = static_cast<std::uint64_t>(range.ihi) - static_cast<std::uint64_t>(range.ilo) + 1;
    for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t r = next();
        const double unit = range.lo + static_cast<double>(r >> 11) * 0x1.0p-53 * (range.hi - range.lo);
        switch (t.dtype()) {
        case dtype::f2: put(float16::from_float(static_cast<float>(unit)), i); break;
        case dtype::f4: put(static_cast<float>(unit), i); break;
        case dtype::f8: put(unit, i); break;
        default:
            // Little-endian two's complement: the low bytes are the value.
            if (range.set) r = static_cast<std::uint64_t>(range.ilo) + (span ? r % span : r);
            std::memcpy(bytes.data() + i * size, &r, size);
            break;
        }
    }
}

// A dtype by its code (f4) or NumPy name (float32).
std::optional<dtype> dtype_named(const std::string& text) {
    static const std::pair<const char*, dtype> numpy[] = {
        {"float16", dtype::f2}, {"float32", dtype::f4}, {"float64", dtype::f8}, {"int8", dtype::i1},
        {"int16", dtype::i2},   {"int32", dtype::i4},   {"int64", dtype::i8},   {"uint8", dtype::u1},
        {"uint16", dtype::u2},  {"uint32", dtype::u4},  {"uint64", dtype::u8},  {"half", dtype::f2},
        {"float", dtype::f4},   {"double", dtype::f8},
    };
    if (const auto t = parse_dtype(text)) return t;
    for (const auto& [name, t] : numpy)
        if (text == name) return t;
    return std::nullopt;
}

// "LO..HI" for dtype `t`, checked against what it holds.
value_range parse_range(const std::string& text, dtype t, const std::string& part) {
    const auto dots = text.find("..");
    const auto bad = [&](const std::string& why) {
        return usage_error("--synthetic: '" + part + "': range '" + text + "' " + why);
    };
    if (dots == std::string::npos) throw bad("is not LO..HI");
    const std::string lo = text.substr(0, dots), hi = text.substr(dots + 2);
    value_range r;
    r.set = true;
    if (is_float(t)) {
        if (!CLI::detail::lexical_cast(lo, r.lo) || !CLI::detail::lexical_cast(hi, r.hi) || !std::isfinite(r.lo) ||
            !std::isfinite(r.hi))
            throw bad("needs two numbers");
        if (!(r.lo < r.hi)) throw bad("is empty (LO must be below HI)");
        return r;
    }
    if (!CLI::detail::lexical_cast(lo, r.ilo) || !CLI::detail::lexical_cast(hi, r.ihi))
        throw bad("needs two integers");
    if (r.ilo > r.ihi) throw bad("is empty (LO must not exceed HI)");
    const int bits = static_cast<int>(itemsize(t) * 8);
    const long long min = !is_signed(t) ? 0 : bits == 64 ? LLONG_MIN : -(1LL << (bits - 1));
    const long long max = bits == 64 ? LLONG_MAX : is_signed(t) ? (1LL << (bits - 1)) - 1 : (1LL << bits) - 1;
    if (r.ilo < min || r.ihi > max)
        throw bad("does not fit " + std::string(code(t)) + " (" + std::to_string(min) + ".." + std::to_string(max) +
                  ")");
    return r;
}

// "f2:256,3,224,224;i4:256", each part optionally named ("input=f2:...")
// and ranged ("labels=int32:256:0..9").
std::vector<tensor> synthetic_batch(const std::string& spec, std::uint64_t seed) {
    std::vector<tensor> out;
    for (const std::string& part : split(spec, ';')) {
        std::string rest = part, info;
        if (const auto eq = rest.find('='); eq != std::string::npos) {
            info = rest.substr(0, eq);
            rest = rest.substr(eq + 1);
        }
        const auto colon = rest.find(':');
        const auto t = dtype_named(rest.substr(0, colon));
        if (!t)
            throw usage_error("--synthetic: '" + part +
                              "': unknown dtype; use a code (f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8) or a NumPy "
                              "name (float16, int32, ...)");
        value_range range;
        if (colon != std::string::npos) {
            if (const auto second = rest.find(':', colon + 1); second != std::string::npos) {
                range = parse_range(rest.substr(second + 1), *t, part);
                rest = rest.substr(0, second);
            }
        }
        shape_t shape;
        if (colon != std::string::npos)
            for (const std::string& d : split(rest.substr(colon + 1), ',')) {
                std::size_t used = 0;
                long long v = -1;
                try {
                    v = std::stoll(d, &used);
                } catch (const std::exception&) {
                }
                if (v < 0 || used != d.size())
                    throw usage_error("--synthetic: '" + part + "': bad dimension '" + d + "'");
                shape.push_back(v);
            }
        // Refused before anything is allocated: a frame holds less than
        // 2 GiB, so a tensor can never be larger. count() throws only on
        // overflow here (no dimension is negative): larger still.
        const auto fits_a_frame = [&] {
            try {
                return tensor_view{*t, shape, {}, {}}.count() <= max_frame_size / itemsize(*t);
            } catch (const tenbin::error&) {
                return false;
            }
        };
        if (!fits_a_frame())
            throw usage_error("--synthetic: '" + part + "': over " + std::to_string(max_frame_size) +
                              " bytes, more than a ZeroMQ frame holds");
        tensor x;
        try {
            x = tensor::zeros(*t, std::move(shape), info);
        } catch (const tenbin::error& e) {  // the name
            throw usage_error("--synthetic: '" + part + "': " + e.what());
        }
        fill(x, seed * 131 + out.size(), range);
        out.push_back(std::move(x));
    }
    if (out.empty()) throw usage_error("--synthetic: no tensors in '" + spec + "'");
    return out;
}

int run_serve(const serve_cli_options& opt) {
    std::vector<std::vector<tensor>> batches;
    std::vector<std::string> sources;  // where each batch comes from, for messages
    for (const std::string& f : opt.files) {
        try {
            for (auto& m : load_messages(f, &sources)) batches.push_back(std::move(m));
        } catch (...) {
            print_current_error(f);
            return current_error_status();
        }
    }
    // Two different synthetic batches, alternated, so consecutive messages differ.
    if (!opt.synthetic.empty())
        for (std::uint64_t seed = 0; seed < 2; ++seed) {
            batches.push_back(synthetic_batch(opt.synthetic, seed));
            sources.emplace_back("--synthetic");
        }
    if (batches.empty()) throw usage_error("nothing to send: give --file or --synthetic");
    const std::vector<std::string> infos = opt.infos.empty() ? std::vector<std::string>{} : split(opt.infos, ',');
    for (std::size_t b = 0; b < batches.size() && !infos.empty(); ++b)
        if (batches[b].size() != infos.size())
            throw usage_error("--infos gives " + std::to_string(infos.size()) + " infos, but " +
                              (sources[b] == "--synthetic" ? sources[b] : "'" + sources[b] + "'") +
                              " has " + std::to_string(batches[b].size()) + " tensors");

    // Refused before anything is sent.
    if (opt.tensorcom)
        for (std::size_t b = 0; b < batches.size(); ++b)
            check_tensorcom_flag(batches[b], sources[b]);

    const bool numbered = opt.epochs > 0 || !opt.producer.empty() || opt.socket.acked;
    if (numbered && opt.tensorcom)
        throw usage_error("--tensorcom: a numbered stream (--epochs, --producer, --acked) ends with marks "
                          "without tensors, which a Python tensorcom receiver cannot take");

    connection_options co = connection_options_for(opt.socket, opt.url);
    co.multipart = !opt.single;
    co.allow64 = true;  // the files or specs say what to send
    if (!infos.empty()) co.infos = infos;
    co.producer = opt.producer;
    co.stream = numbered;
    name_for_metrics(opt.metrics, co, "serve");
    const auto kind = resolve_endpoints(opt.socket, {opt.url}).front().kind;
    const bool pub = kind == tenbin::socket_kind::pub;
    if (opt.wait_for > 0 && !pub && !opt.socket.acked)
        throw usage_error("--wait-for waits for subscribers (a pub socket) or acked consumers (--acked)");
    co.wait_for = opt.wait_for;
    pub_audience::prepare(co, kind);
    connection conn = open_connection(opt.socket, {opt.url}, co, "tenbin serve");

    const interrupt_catcher catcher;
    const metrics_server metrics(opt.metrics, conn, "tenbin serve");
    // The audience asked for replaces the guess of a delay.
    sleep_unless_interrupted(opt.delay.value_or(pub && opt.wait_for == 0 ? 1.0 : 0.0));
    const auto timed_out = [&](const std::string& what, const std::string& why = {}) {
        std::cerr << "tenbin serve: error: timeout: " << what << " within " << seconds_text(opt.timeout) << why
                  << silence_hint({opt.url}, conn.endpoints()) << "\n";
        return exit_timeout;
    };
    // A pub connection waits itself, at its first send; an acked one hands
    // out nothing before: this wait says who is missing at the timeout.
    if (opt.socket.acked && opt.wait_for > 0) {
        const auto deadline = deadline_in(opt.timeout);
        while (conn.consumers().size() < opt.wait_for && !interrupted()) {
            if (deadline && std::chrono::steady_clock::now() >= *deadline)
                return timed_out(std::to_string(conn.consumers().size()) + " of " + std::to_string(opt.wait_for) +
                                 " consumers came");
            sleep_unless_interrupted(0.05);
        }
    }

    progress report("tenbin serve", opt.report);
    pub_audience peers(conn);
    const auto start = std::chrono::steady_clock::now();
    // An epoch is one pass over the batches, or --count messages.
    const std::size_t per_epoch = opt.epochs ? (opt.count ? opt.count : batches.size()) : opt.count;
    std::size_t sent = 0, epoch = 0, in_epoch = 0;
    while (!interrupted()) {
        if (per_epoch && in_epoch == per_epoch) {
            // The stream's end ends the last epoch too.
            if (!opt.epochs || epoch + 1 == opt.epochs) break;
            if (!end_until(conn, false, deadline_in(opt.timeout))) {
                if (interrupted()) break;
                report.finish(conn.stats(), audience(conn, pub, peers));
                return timed_out("the end of epoch " + std::to_string(epoch) + " could not be sent");
            }
            in_epoch = 0;
            ++epoch;
        }
        if (opt.rate > 0) {  // paced against the start: no drift over long runs
            const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                         std::chrono::duration<double>(static_cast<double>(sent) / opt.rate));
            sleep_unless_interrupted(std::chrono::duration<double>(due - std::chrono::steady_clock::now()).count());
            if (interrupted()) break;
        }
        if (!send_until(conn, batches[in_epoch % batches.size()], deadline_in(opt.timeout))) {
            if (interrupted()) break;
            report.finish(conn.stats(), audience(conn, pub, peers));
            return timed_out("message " + std::to_string(sent + 1) + " could not be sent",
                             (pub && opt.wait_for ? " (" + std::to_string(conn.subscribers()) + " of " +
                                                        std::to_string(opt.wait_for) + " subscribers came)"
                                                  : std::string(" (no receiver?)")));
        }
        ++sent;
        ++in_epoch;
        peers.sample();
        report.update(conn.stats(), audience(conn, pub, peers));
    }
    if (!interrupted() && numbered && !end_until(conn, true, deadline_in(opt.timeout)) && !interrupted()) {
        report.finish(conn.stats(), audience(conn, pub, peers));
        return timed_out("the end of the stream could not be sent");
    }
    // Acked: done when every batch was acknowledged, not when it was queued.
    if (opt.socket.acked && !acknowledged_until(conn, sent, deadline_in(opt.timeout)) && !interrupted()) {
        report.finish(conn.stats(), audience(conn, pub, peers));
        return timed_out(std::to_string(conn.delivery_stats().acknowledged) + " of " + std::to_string(sent) +
                         " messages were acknowledged");
    }
    report.finish(conn.stats(), audience(conn, pub, peers));
    peers.warn_if_nobody("tenbin serve", sent, "--wait-for K waits for K subscribers");
    if (interrupted()) {
        std::cerr << "tenbin serve: interrupted after " << sent << " messages (" << interrupting_signal() << ")\n";
        return interrupted_status();
    }
    return exit_ok;
}

}  // namespace

subcommand add_serve(CLI::App& parent) {
    auto opt = std::make_shared<serve_cli_options>();
    CLI::App* app = parent.add_subcommand(
        "serve", "Send batches from .ten files or synthetic ones, at a rate (tensorcom serve)");
    app->add_option("URL", opt->url,
                    "tensorcom URL (zpush://host:port, zpub+ipc:///path, ...) or ZeroMQ endpoint\n"
                    "(see --socket)")
        ->required();
    app->add_option("--file,-f", opt->files,
                    "A file whose tensors make a batch (repeat for several; sent in turn): .ten,\n"
                    ".ten.zst, .npy, .npz or .safetensors (names become infos), or a .tar shard\n"
                    "(tenbin recv --save) whose messages are sent in order");
    app->add_option("--synthetic", opt->synthetic,
                    "Made-up batches, e.g. \"f2:256,3,224,224;i4:256\": [NAME=]DTYPE:DIMS[:LO..HI] per\n"
                    "tensor; DTYPE a code or NumPy name (float16, int32, ...); no DIMS (\"f4:\") is a\n"
                    "scalar; values uniform in [LO, HI) for floats (default 0..1), LO..HI inclusive\n"
                    "for integers (default: every value), e.g. \"y=int32:256:0..999\"");
    app->add_option("--count,-n", opt->count, "Messages to send; 0: until interrupted")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_option("--rate", opt->rate, "Messages per second (0: as fast as possible)")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--single", opt->single, "Send single-part messages (default: multipart)");
    app->add_option("--infos", opt->infos, "Comma-separated infos to send instead of the tensors' own");
    app->add_option("--delay", opt->delay, "Seconds to wait before the first message (default: 1 for pub, else 0)")
        ->check(nonnegative);
    app->add_option("--timeout", opt->timeout, "Seconds a send may wait for a receiver (0: forever)")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_option("--report", opt->report, "Seconds between progress reports on stderr (0: none)")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_flag("--tensorcom", opt->tensorcom,
                  "Refuse to send what a Python tensorcom receiver cannot decode (u4, rank-0 tensors)");
    app->add_option("--epochs", opt->epochs,
                    "Send the batches this many times (0: until interrupted), each pass an epoch\n"
                    "ended by an end mark (with --count: --count messages per epoch); a numbered\n"
                    "stream, ended at the end")
        ->check(nonnegative);
    app->add_option("--producer", opt->producer,
                    "Number the messages as the producer NAME, stable across restarts (1 to 64\n"
                    "printable ASCII characters), so that receivers know its epochs, drop what they\n"
                    "had and count what they missed; the stream is ended at the end")
        ->type_name("NAME");
    app->add_option("--wait-for", opt->wait_for,
                    "Before the first message, wait (at most --timeout) until this many subscribers\n"
                    "(pub) or consumers (--acked) joined")
        ->type_name("K")
        ->check(nonnegative);
    add_socket_choice(*app, opt->socket, {"push", "pub", "dealer", "pair"}, tenbin::socket_kind::push, false);
    add_metrics_choice(*app, opt->metrics);
    app->footer(
        "Sends the batches in turn, each --file's tensors and (with --synthetic) two\n"
        "made-up batches of that layout, --count messages in all, paced to --rate\n"
        "messages per second. Progress goes to stderr every --report seconds (with\n"
        "--acked, the consumers; with --wait-for on pub, the subscribers).\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops it between messages, with a last report.\n"
        "Exit status: 0 sent, 1 error (unreadable file, refused endpoint, ...),\n"
        "2 timed out (no receiver took a message within --timeout), 64 wrong options\n"
        "or arguments (bad URL, bad --synthetic, nothing to send), 130 interrupted\n"
        "(SIGINT), 143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin serve zpush://localhost:7880 -f a.ten -f b.ten --rate 100   (PUSH connects)\n"
        "  tenbin serve zpub://*:7881 --synthetic 'x=f2:64,3,224,224;y=i4:64'   (PUB binds)\n"
        "  tenbin serve tcp://localhost:5555 --synthetic f4:1000 -n 10          (PUSH connects)\n"
        "  tenbin serve 'zrpush://*:7880' --file shard.tar --epochs 3 --producer a --acked");
    return {app, [opt] { return run_serve(*opt); }};
}

}  // namespace tenbin::cli
