// tenbin tool: shared helpers (see common.hpp).
#include "common.hpp"
#include "shard.hpp"

#include <tenbin/config.hpp>
#include <tenbin/connect.hpp>
#include <tenbin/io.hpp>
#if TENBIN_HAS_ZSTD
#include <tenbin/zstd.hpp>
#endif

#include <openssl/evp.h>

#include <algorithm>
#include <utility>
#include <vector>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tenbin::cli {

// ---- describing tensors ---------------------------------------------------

std::string sha256_hex(bytes_view bytes) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    // EVP_Digest handles an empty input (a null pointer with size 0) fine.
    if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("OpenSSL EVP_Digest(SHA-256) failed");
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 0xf];
    }
    return out;
}

nlohmann::ordered_json describe(const tensor& t) {
    nlohmann::ordered_json j;
    j["info"] = t.info();
    j["dtype"] = std::string(code(t.dtype()));
    j["shape"] = t.shape();
    j["nbytes"] = static_cast<std::uint64_t>(t.nbytes());
    j["sha256"] = sha256_hex(t.data().bytes());
    return j;
}

nlohmann::ordered_json describe(const std::vector<tensor>& tensors) {
    auto list = nlohmann::ordered_json::array();
    for (const auto& t : tensors) list.push_back(describe(t));
    return list;
}

std::string json_line(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string shape_text(const shape_t& shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(shape[i]);
    }
    return out + "]";
}

void print_table(std::ostream& out, const std::vector<tensor>& tensors, std::string_view indent,
                 const std::vector<std::string>* names) {
    struct row {
        std::string cells[6];
    };
    std::vector<row> rows;
    rows.push_back({{"#", names ? "name" : "info", "dtype", "shape", "nbytes", "sha256"}});
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        const std::string_view name = names ? std::string_view((*names)[i]) : t.info();
        rows.push_back({{std::to_string(i), name.empty() ? "-" : printable(name),
                         std::string(code(t.dtype())), shape_text(t.shape()),
                         std::to_string(t.nbytes()), sha256_hex(t.data().bytes())}});
    }
    std::size_t width[6] = {};
    for (const auto& r : rows)
        for (int c = 0; c < 6; ++c) width[c] = std::max(width[c], r.cells[c].size());
    for (const auto& r : rows) {
        std::string line(indent);
        for (int c = 0; c < 6; ++c) {
            const auto& cell = r.cells[c];
            const auto pad = std::string(width[c] - cell.size(), ' ');
            // Numbers read best right-aligned; the last column needs no padding.
            if (c == 0 || c == 4)
                line += pad + cell;
            else if (c == 5)
                line += cell;
            else
                line += cell + pad;
            if (c != 5) line += "  ";
        }
        out << line << '\n';
    }
}

// ---- errors -----------------------------------------------------------------

std::string one_line(std::string_view text) {
    std::string out(text);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return out;
}

std::string cli_text(std::string_view text) {
    std::string out = one_line(text);
    static const std::pair<std::string_view, std::string_view> words[] = {
        {"limits::max_bytes = ", "--max-bytes "},
        {"(limits::max_bytes)", "(--max-bytes)"},
        {"see recv_options::envelope", "see --socket, and a URL's #topic"},
    };
    for (const auto& [cpp, cli] : words)
        for (std::size_t at; (at = out.find(cpp)) != std::string::npos;) out.replace(at, cpp.size(), cli);
    return out;
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
    if (word.size() > 64) return {};  // no option is that long
    // Edit distance where swapping two neighbours counts one ("sned").
    const auto distance = [](std::string_view a, std::string_view b) {
        std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
        for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
        for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
        for (std::size_t i = 1; i <= a.size(); ++i)
            for (std::size_t j = 1; j <= b.size(); ++j) {
                d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
                if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                    d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        return d[a.size()][b.size()];
    };
    std::string best;
    std::size_t best_distance = std::max<std::size_t>(1, word.size() / 3) + 1;
    for (const auto& c : candidates) {
        // A prefix ("--cou" for "--count") is close whatever its length.
        const std::size_t d = c.starts_with(word) && word.size() >= 3 ? 1 : distance(word, c);
        if (d < best_distance) {
            best = c;
            best_distance = d;
        }
    }
    return best;
}

std::string printable(std::string_view text) {
    std::string out;
    for (char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u != 0x7f) {
            out += c;
            continue;
        }
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\x";
        out += hex[u >> 4];
        out += hex[u & 15];
    }
    return out;
}

std::string current_error_class() {
    try {
        throw;
    } catch (const tenbin::error& e) {
        return std::string(name(e.code()));
    } catch (const zmq::error_t&) {
        return std::string(name(errc::io_error));
    } catch (const std::system_error&) {  // includes filesystem_error
        return std::string(name(errc::io_error));
    } catch (const std::bad_alloc&) {
        return "out_of_memory";
    } catch (...) {
        return "error";
    }
}

int current_error_status() {
    try {
        throw;
    } catch (const usage_error&) {
        return exit_usage;
    } catch (const tenbin::error& e) {
        return e.code() == errc::bad_url ? exit_usage : exit_failed;
    } catch (...) {
        return exit_failed;
    }
}

std::string current_error_message() {
    try {
        throw;
    } catch (const std::bad_alloc&) {
        return "not enough memory";
    } catch (const std::exception& e) {
        return cli_text(e.what());
    } catch (...) {
        return "unknown exception";
    }
}

void print_current_error(std::string_view where) {
    std::cerr << where << ": error: " << current_error_class() << ": " << current_error_message()
              << std::endl;
}

// ---- loading ----------------------------------------------------------------

namespace {

[[noreturn]] void throw_io(const std::string& path, const std::string& why) {
    throw tenbin::error(errc::io_error, path + ": " + why);
}

// A source whose first bytes were already read to look at them (`first`
// must outlive it).
class peeked_source final : public source {
public:
    peeked_source(source& inner, bytes_view first) : inner_(inner), first_(first) {}
    std::size_t read_some(mutable_bytes out) override {
        if (first_.empty()) return inner_.read_some(out);
        const std::size_t n = std::min(out.size(), first_.size());
        std::copy_n(first_.begin(), n, out.begin());
        first_ = first_.subspan(n);
        return n;
    }

private:
    source& inner_;
    bytes_view first_;  // what is left of them
};

// Whether `head` starts a zstd stream: a zstd frame, or a skippable frame
// (magic 0x184D2A50 to 0x184D2A5F, little-endian), which pzstd writes first.
bool zstd_start(bytes_view head) {
    if (head.size() < 4) return false;
    const auto b = [&](std::size_t i) { return std::to_integer<unsigned>(head[i]); };
    const bool skippable = (b(0) & 0xf0) == 0x50 && b(1) == 0x2a && b(2) == 0x4d && b(3) == 0x18;
    return skippable || (b(0) == 0x28 && b(1) == 0xb5 && b(2) == 0x2f && b(3) == 0xfd);
}

// Streams a descriptor to the end: pipes, FIFOs, character devices. A zstd
// stream (.ten.zst piped in) is told by its magic and decompressed.
std::vector<tensor> read_fd(int fd, const limits& lim) {
    fd_source in(fd);
    std::byte head[4];
    std::size_t got = 0;
    while (got < sizeof head) {
        const std::size_t n = in.read_some(mutable_bytes(head).subspan(got));
        if (n == 0) break;
        got += n;
    }
    peeked_source whole(in, bytes_view(head, got));
    if (zstd_start(bytes_view(head, got))) {
#if TENBIN_HAS_ZSTD
        zstd_source unpacked(whole);
        return read(unpacked, {.decode = {.limits = lim}});
#else
        throw tenbin::error(errc::unsupported, "zstd input needs a tenbin built with libzstd");
#endif
    }
    return read(whole, {.decode = {.limits = lim}});
}

// The format the first bytes of a file are in, as its extension; empty
// when they say none (or cannot be read).
std::string sniffed_format(const std::string& path) {
    // Not opened when it is no regular file: a FIFO would block, and its
    // bytes are read once.
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return {};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return {};
    unsigned char head[512] = {};
    const ssize_t n = ::pread(fd, head, sizeof head, 0);
    struct stat st {};
    const bool sized = ::fstat(fd, &st) == 0;
    ::close(fd);
    if (n < 4 || !sized) return {};
    const auto starts = [&](std::string_view magic) {
        return static_cast<std::size_t>(n) >= magic.size() && std::memcmp(head, magic.data(), magic.size()) == 0;
    };
    if (starts("~TenBin~")) return ".ten";
    if (starts("\x93NUMPY")) return ".npy";
    if (starts("PK\x03\x04") || starts("PK\x05\x06")) return ".npz";
    if (zstd_start(bytes_view(reinterpret_cast<const std::byte*>(head), static_cast<std::size_t>(n))))
        return ".ten.zst";
    if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return ".tar";
    // safetensors: a little-endian header length, then the JSON header.
    std::uint64_t length = 0;
    for (int i = 7; i >= 0 && n >= 9; --i) length = length << 8 | head[i];
    if (n >= 9 && head[8] == '{' && length >= 2 && length <= static_cast<std::uint64_t>(st.st_size) - 8)
        return ".safetensors";
    return {};
}

// The format a file's name says, as its extension (".ten" for any name
// not another format's: such files are read as .ten).
std::string named_format(const std::string& path) {
    if (is_shard(path)) return ".tar";
    switch (format_of(path).value_or(file_format::ten)) {
    case file_format::npy: return ".npy";
    case file_format::npz: return ".npz";
    case file_format::safetensors: return ".safetensors";
    case file_format::ten: break;
    }
    return path.ends_with(".zst") ? ".ten.zst" : ".ten";
}

}  // namespace

void rethrow_with_format_hint(const std::string& path) {
    try {
        throw;
    } catch (const usage_error&) {
        throw;
    } catch (const tenbin::error& e) {
        const std::string looks = path == "-" ? std::string() : sniffed_format(path);
        if (looks.empty() || looks == named_format(path)) throw;
        throw tenbin::error(e.code(), std::string(e.what()) + "; this looks like a " + looks +
                                          " file, whatever its name says (rename it to read it as one)");
    }
}

std::vector<tensor> load_message(const std::string& path, const limits& lim) {
    if (path == "-") return read_fd(STDIN_FILENO, lim);
    try {
        std::error_code ec;
        const auto st = std::filesystem::status(path, ec);
        if (std::filesystem::is_directory(st)) throw_io(path, "is a directory");
        if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
            // Not mappable: read it as a stream.
            const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) throw_io(path, std::generic_category().message(errno));
            struct closer {
                int fd;
                ~closer() { ::close(fd); }
            } guard{fd};
            return read_fd(fd, lim);
        }
        file_options opt;
        opt.nocheck = true;  // .ten, .bin or anything else: the layout is the same
        opt.decode.limits = lim;
        return load_mmap(path, opt);
    } catch (const tenbin::error&) {
        rethrow_with_format_hint(path);
    }
}

std::vector<std::vector<tensor>> load_messages(const std::string& path, std::vector<std::string>* names) {
    std::vector<std::vector<tensor>> out;
    if (is_shard(path)) {
        for (shard_message& m : read_shard(path)) {
            out.push_back(std::move(m.tensors));
            if (names) names->push_back(path + ":" + m.name);
        }
        if (out.empty()) throw tenbin::error(errc::bad_argument, path + ": the shard holds no .ten member");
        return out;
    }
    if (const auto f = format_of(path); f && *f != file_format::ten) {
        // Names become infos, as in a .ten file; one that cannot is refused,
        // never cut.
        const named_file file = load_named(path);
        try {
            out.push_back(to_tensors(file.tensors));
        } catch (const tenbin::error& e) {
            throw tenbin::error(e.code(), path + ": " + e.what() + " (tenbin convert " + path +
                                              " OUT.ten --infos short gives it a short one)");
        }
    } else {
        out.push_back(load_message(path));
    }
    if (names) names->push_back(path);
    return out;
}

named_file load_named(const std::string& path, const limits& lim) {
    try {
        if (format_of(path) != file_format::safetensors) return {tenbin::load_any(path, {.limits = lim}), {}};
        safetensors_contents st = load_safetensors_with_metadata(path, {.limits = lim});
        return {std::move(st.tensors), std::move(st.metadata)};
    } catch (const tenbin::error&) {
        rethrow_with_format_hint(path);
    }
}

// ---- ZeroMQ sockets -----------------------------------------------------------

int timeout_ms(double seconds) {
    if (!(seconds > 0)) return -1;
    const double ms = std::ceil(seconds * 1000.0);
    return ms >= static_cast<double>(INT_MAX) ? -1 : static_cast<int>(ms);
}

std::string seconds_text(double seconds) {
    char text[64];
    std::snprintf(text, sizeof text, "%.6f", seconds);
    std::string out = text;
    if (out.find('.') != std::string::npos) {
        out.erase(out.find_last_not_of('0') + 1);
        if (out.back() == '.') out.pop_back();
    }
    return out + " s";
}

bool about_one_message(const tenbin::error& e) noexcept {
    return e.code() != errc::io_error && e.code() != errc::closed && e.code() != errc::bad_argument;
}

void check_tensorcom_flag(const std::vector<tensor>& tensors, const std::string& where) {
    try {
        check_tensorcom(tensors);
    } catch (const tenbin::error& e) {
        throw tenbin::error(errc::bad_argument, where + ": " + e.what() + " (refused by --tensorcom)");
    }
}

// ---- checking options ---------------------------------------------------------

namespace {

CLI::Validator number_check(bool zero_allowed) {
    return CLI::Validator(
        [zero_allowed](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value))
                return "'" + text + "' is not a number";
            if (value < 0 || (!zero_allowed && value == 0))
                return "'" + text + "' is out of range: give a number " +
                       (zero_allowed ? "of 0 or more" : "greater than 0");
            return {};
        },
        zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

const CLI::Validator nonnegative = number_check(true);
const CLI::Validator positive = number_check(false);

void add_file_max_bytes(CLI::App& app, std::uint64_t& max_bytes) {
    app.add_option("--max-bytes", max_bytes,
                   "Tensor bytes one file may carry (e.g. 64MiB; k, M, G are powers of 1024);\n"
                   "a file over it is refused as limit_exceeded before its tensors are allocated\n"
                   "(a small .ten.zst may inflate to gigabytes)")
        ->transform(CLI::AsSizeValue(false))
        ->check(positive)
        ->capture_default_str();
}

}  // namespace tenbin::cli
