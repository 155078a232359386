// Helpers shared by the tests: the Python vectors, hashing, files, tensors
// to send and the checks of what came back.
#pragma once

#include <tenbin/core.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace test_support {

namespace fs = std::filesystem;

// The folder of the Python implementation's vectors (set by meson test).
inline fs::path vectors_dir() {
    const char* dir = std::getenv("TENBIN_VECTORS");
    if (!dir) throw std::runtime_error("TENBIN_VECTORS is not set; run the tests with meson test");
    return dir;
}

inline nlohmann::json manifest() {
    std::ifstream in(vectors_dir() / "MANIFEST.json");
    return nlohmann::json::parse(in);
}

// A whole file in fresh 64-byte-aligned storage.
inline tenbin::buffer read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path.string());
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return tenbin::buffer::copy(std::as_bytes(std::span(bytes)));
}

// The frames of a multipart vector folder: 000.bin, 001.bin, ...
inline std::vector<tenbin::buffer> read_frames(const nlohmann::json& entry) {
    std::vector<tenbin::buffer> frames;
    for (const auto& f : entry["frames"]) frames.push_back(read_file(vectors_dir() / f["path"].get<std::string>()));
    return frames;
}

inline std::string sha256_hex(tenbin::bytes_view bytes) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr))
        throw std::runtime_error("EVP_Digest failed");
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

// prefix + i, such as "t3". Built by appending: GCC 12 warns (falsely,
// -Wrestrict) on "literal" + std::to_string(i) in optimised builds.
inline std::string numbered(std::string_view prefix, std::size_t i) {
    return std::string(prefix).append(std::to_string(i));
}

inline bool same_bytes(tenbin::bytes_view a, tenbin::bytes_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// A fresh tensor whose bytes differ per position and per `seed`; no run
// of 256 bytes repeats before 64 KiB, so parts put back in the wrong order
// show. tests/peers/formats_peer.py makes the same bytes.
inline tenbin::tensor patterned(tenbin::dtype t, tenbin::shape_t shape, std::string info = {}, unsigned seed = 0) {
    tenbin::tensor out = tenbin::tensor::zeros(t, std::move(shape), std::move(info));
    const tenbin::mutable_bytes b = out.mutable_bytes();
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 37 + (i >> 8) * 101 + seed * 11 + 5);
    return out;
}

// `got` holds what `want` holds (dtype, shape, bytes), in memory aligned
// for its dtype as every decoded tensor is. Infos are checked by the
// list form (a named format's infos carry names).
inline void check_same(const tenbin::tensor& got, const tenbin::tensor& want) {
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(same_bytes(got.data().bytes(), want.data().bytes()));
    CHECK(got.data().aligned_to(tenbin::itemsize(got.dtype())));
}

// The lists hold the same tensors, infos included.
inline void check_same(const std::vector<tenbin::tensor>& got, const std::vector<tenbin::tensor>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].info() == want[i].info());
        check_same(got[i], want[i]);
    }
}

// The bytes of a whole file.
inline std::vector<std::byte> file_bytes(const fs::path& path) {
    const tenbin::buffer b = read_file(path);
    return {b.data(), b.data() + b.size()};
}

// The byte counted_tensor writes at offset `i`.
inline unsigned char counted_pattern(std::size_t i) { return static_cast<unsigned char>(i * 31 + 7); }

// Memory of `n` patterned bytes, owned by the tensor, whose release bumps
// `released`; `where` (if given) receives its address.
inline tenbin::tensor counted_tensor(std::size_t n, std::atomic<int>& released, void** where = nullptr,
                                     std::string info = "zc") {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);  // a size aligned_alloc accepts
    REQUIRE(p);
    auto* bytes = static_cast<unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = counted_pattern(i);
    if (where) *where = p;
    tenbin::buffer b = tenbin::buffer::adopt(p, n, [p, &released] {
        std::free(p);
        released.fetch_add(1);
    });
    return tenbin::tensor(tenbin::dtype::f4, {static_cast<std::int64_t>(n / 4)}, std::move(b), std::move(info));
}

// `t` holds the bytes counted_tensor wrote.
inline bool holds_pattern(const tenbin::tensor& t) {
    const auto bytes = t.data().bytes();
    for (std::size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] != std::byte(counted_pattern(i))) return false;
    return true;
}

// Polls `done` until it holds (true) or `limit` passes (false): for what
// another thread or process does at its own pace.
template <class F>
bool eventually(F&& done, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Writes the low `width` bytes of `v`, little-endian, at bytes[at...].
inline void store_le(std::span<std::byte> bytes, std::size_t at, std::size_t width, std::uint64_t v) {
    for (std::size_t i = 0; i < width; ++i) bytes[at + i] = static_cast<std::byte>(v >> (8 * i));
}

// Little-endian int64 words, as headers and chunk preambles hold them.
inline std::vector<std::byte> le64(std::span<const std::int64_t> words) {
    std::vector<std::byte> out(8 * words.size());
    std::size_t i = 0;
    for (std::int64_t w : words) std::memcpy(out.data() + 8 * i++, &w, 8);
    return out;
}
inline std::vector<std::byte> le64(std::initializer_list<std::int64_t> words) {
    return le64(std::span<const std::int64_t>(words.begin(), words.size()));
}

// An str64 word: the first 8 bytes of `s` (any bytes at all), NUL padded.
inline std::int64_t str64(std::string_view s) {
    std::int64_t v = 0;
    std::memcpy(&v, s.data(), std::min<std::size_t>(s.size(), 8));
    return v;
}

// A fresh directory under the system's temporary one, removed with
// everything in it (files, ipc socket files) when it goes out of scope.
class temp_dir {
public:
    explicit temp_dir(std::string_view prefix = "tenbin-test") {
        std::string name = (fs::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
        if (!::mkdtemp(name.data())) throw std::runtime_error("mkdtemp failed: " + name);
        path_ = name;
    }
    ~temp_dir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    fs::path operator/(const std::string& name) const { return path_ / name; }
    const fs::path& path() const noexcept { return path_; }

private:
    fs::path path_;
};

// The error classes a malformed manifest entry allows.
inline std::vector<std::string> allowed_errors(const nlohmann::json& entry) {
    std::vector<std::string> out{entry["error"].get<std::string>()};
    for (const auto& e : entry["acceptable_errors"]) out.push_back(e.get<std::string>());
    return out;
}

// Runs `f` and returns the class name of the tenbin::error it throws, or
// "no error".
template <class F>
std::string error_class(F&& f) {
    try {
        f();
    } catch (const tenbin::error& e) {
        return std::string(tenbin::name(e.code()));
    }
    return "no error";
}

// What the tenbin::error thrown by `f` says, or "no error".
template <class F>
std::string error_what(F&& f) {
    try {
        f();
    } catch (const tenbin::error& e) {
        return e.what();
    }
    return "no error";
}

// The same as "class: what()", to check class and text at once.
template <class F>
std::string error_text(F&& f) {
    try {
        f();
    } catch (const tenbin::error& e) {
        return std::string(tenbin::name(e.code())) + ": " + e.what();
    }
    return "no error";
}

// Runs `f` with writes past `bytes` of any file failing with EFBIG (as a
// full disk would make them fail: SIGXFSZ ignored), and returns what it
// returns.
template <class F>
auto with_file_size_limit(rlim_t bytes, F&& f) {
    struct sigaction ignore {}, old_action {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &old_action);
    rlimit old_limit{};
    ::getrlimit(RLIMIT_FSIZE, &old_limit);
    rlimit small = old_limit;
    small.rlim_cur = bytes;
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) throw std::runtime_error("setrlimit(RLIMIT_FSIZE) failed");
    struct restore {
        rlimit limit;
        struct sigaction action;
        ~restore() {
            ::setrlimit(RLIMIT_FSIZE, &limit);
            ::sigaction(SIGXFSZ, &action, nullptr);
        }
    } restore_at_end{old_limit, old_action};
    return f();
}

}  // namespace test_support
