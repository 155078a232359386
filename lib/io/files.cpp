// .ten files: save, load (one read into one buffer) and mappings.
#include <tenbin/config.hpp>
#include <tenbin/io.hpp>
#if TENBIN_HAS_ZSTD
#include <tenbin/zstd.hpp>
#endif

#include "core/chunk_plan.hpp"
#include "core/diagnostics.hpp"
#include "io/io_detail.hpp"
#include "base/atomic_file.hpp"
#include "base/fd.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tenbin {

namespace {
using detail::in_quotes;
using detail::str;

using detail::os_error;
using detail::unique_fd;

unique_fd open_file(const std::filesystem::path& p, int flags, mode_t mode = 0) {
    int fd;
    do fd = ::open(p.c_str(), flags | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) throw os_error("open " + in_quotes(p), errno);
    return unique_fd(fd);
}

struct stat stat_of(int fd, const std::filesystem::path& p) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw os_error("fstat " + in_quotes(p), errno);
    return st;
}

// Python's save/load assert that the name ends in ".ten"; so do we, on the
// whole name (a file called just ".ten" passes, as it does there), and
// accept its compressed form ".ten.zst" too.
void check_extension(const std::filesystem::path& p, bool nocheck) {
    if (nocheck) return;
    const std::string name = p.string();
    if (!std::string_view(name).ends_with(".ten") && !std::string_view(name).ends_with(".ten.zst"))
        throw error(errc::bad_extension,
                    in_quotes(p) + " does not end in .ten or .ten.zst (set file_options::nocheck to allow it)");
}

bool compressed(const std::filesystem::path& p, const file_options& opt) {
    switch (opt.compression) {
    case compression::none: return false;
    case compression::zstd: return true;
    case compression::automatic: break;
    }
    return std::string_view(p.native()).ends_with(".zst");
}

#if !TENBIN_HAS_ZSTD
[[noreturn]] void no_zstd(const std::filesystem::path& p) {
    throw error(errc::unsupported, in_quotes(p) + ": zstd compression needs a tenbin built with libzstd");
}
#endif

// Runs `f`; a tenbin error it throws gets the file name in front.
template <class F>
auto about_file(const std::filesystem::path& p, F&& f) {
    return detail::with_context([&] { return in_quotes(p); }, f);
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) noexcept {
    return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

// The largest file that can hold tensors within `lim`: their data, plus per
// tensor a header chunk of the highest rank, a data preamble and padding.
// Checked before allocating a buffer for the whole file.
std::uint64_t largest_file(const limits& lim) noexcept {
    const std::size_t rank = std::min(lim.max_rank, max_supported_rank);
    const std::uint64_t per_tensor = chunk_size(header_size(rank)) + chunk_preamble + chunk_padding - 1;
    return saturating_add(lim.max_bytes, saturating_mul(lim.max_tensors, per_tensor));
}

// A file streamed whole is one list, an empty one included: its infos are
// checked even then (read() takes an empty read for the end of a stream).
std::vector<tensor> read_whole(source& in, const file_options& opt) {
    std::vector<tensor> out = read(in, read_options{.decode = {.limits = opt.decode.limits}});
    if (opt.decode.expect_infos) check_infos(out, *opt.decode.expect_infos);
    return out;
}

// Files this process has mapped (map_file, load_mmap), by device and
// inode, with how many mappings of each are alive. Rewriting one of them in
// place would change the bytes of tensors that view it, or fault them.
class mapped_files {
public:
    using key = std::pair<dev_t, ino_t>;
    static mapped_files& of_process() {
        // Never destroyed: a mapping may outlive static destruction.
        static auto* files = new mapped_files;
        return *files;
    }
    void add(key k) {
        const std::lock_guard<std::mutex> lock(mutex_);
        ++count_[k];
    }
    void remove(key k) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = count_.find(k); it != count_.end() && --it->second == 0) count_.erase(it);
    }
    bool contains(key k) {
        const std::lock_guard<std::mutex> lock(mutex_);
        return count_.count(k) != 0;
    }

private:
    std::mutex mutex_;
    std::map<key, std::size_t> count_;
};

// An existing file is replaced by a new one renamed over it: the tensors
// being saved may be mapped from it (load_mmap, then save back), and
// readers, mappings included, keep the old file whole until they are done;
// no reader ever sees it half written, and a failed write leaves it as it
// was. A new file is made the same way, so that a failed write leaves
// nothing. Anything but a regular file (a pipe, a device), a dangling
// symlink, or a file with other hard links (which would keep the old
// bytes) is written in place, unless this process maps it: then only a new
// file is safe, and the other links keep the old bytes.
// The new file that replaces `path`, or nothing: write in place.
std::unique_ptr<detail::atomic_file> make_replacement(const std::filesystem::path& path) {
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (!exists && (errno != ENOENT || ::lstat(path.c_str(), &st) == 0)) return nullptr;
    if (exists && !S_ISREG(st.st_mode)) return nullptr;
    const bool mapped = exists && mapped_files::of_process().contains({st.st_dev, st.st_ino});
    if (exists && st.st_nlink != 1 && !mapped) return nullptr;
    // Writing in place is what a mapped file must not get.
    auto cannot = [&](const std::string& why) {
        if (mapped)
            throw error(errc::io_error, "save " + in_quotes(path) + ": this process maps it (load_mmap), so it can "
                                        "only be replaced by a new file, and " + why);
    };
    std::error_code ec;
    const std::filesystem::path target = exists ? std::filesystem::canonical(path, ec) : path;
    if (ec) {
        cannot("its real path is unknown: " + ec.message());
        return nullptr;
    }
    std::unique_ptr<detail::atomic_file> r;
    try {
        r = std::make_unique<detail::atomic_file>(target, exists ? 0600 : 0666);
    } catch (const error& e) {
        cannot(std::string("none can be made beside it: ") + e.what());
        return nullptr;
    }
    // The file it replaces keeps its permissions (and its owner, as far as
    // this process may set it).
    if (exists &&
        (::fchmod(r->fd(), st.st_mode & 07777) != 0 || (::fchown(r->fd(), st.st_uid, st.st_gid) != 0 && errno != EPERM))) {
        const error failed = os_error("the new file could not get the old one's permissions");
        r.reset();
        cannot(failed.what());
        return nullptr;
    }
    return r;
}

}  // namespace

void detail::write_file(const std::filesystem::path& path, const std::function<void(int fd)>& write) {
    if (const std::unique_ptr<atomic_file> r = make_replacement(path)) {
        write(r->fd());
        r->commit();
        return;
    }
    unique_fd f = open_file(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    write(f.get());
    // Errors of delayed writes (NFS, full disks) can surface only here.
    if (::close(f.release()) != 0) throw os_error("close " + in_quotes(path), errno);
}

void save(const std::filesystem::path& path, tensor_span tensors, const file_options& opt) {
    check_extension(path, opt.nocheck);
    // Encode the headers first, so that an unencodable list leaves any
    // existing file untouched.
    const detail::chunk_plan plan(tensors);
#if !TENBIN_HAS_ZSTD
    if (compressed(path, opt)) no_zstd(path);
#endif
    detail::write_file(path, [&](int fd) {
        about_file(path, [&] {
            fd_sink plain(fd);
#if TENBIN_HAS_ZSTD
            if (compressed(path, opt)) {
                zstd_sink z(plain, opt.zstd_level);
                z.write(plan.pieces());
                z.finish();
                return;
            }
#endif
            plain.write(plan.pieces());
        });
    });
}

std::vector<tensor> load(const std::filesystem::path& path, const file_options& opt) {
    check_extension(path, opt.nocheck);
    if (compressed(path, opt)) {
#if TENBIN_HAS_ZSTD
        unique_fd f = open_file(path, O_RDONLY);
        // Streamed: the decompressed size is not known up front, and read()
        // allocates only as bytes arrive, within the limits.
        return about_file(path, [&] {
            fd_source plain(f.get());
            zstd_source in(plain);
            return read_whole(in, opt);
        });
#else
        no_zstd(path);
#endif
    }
    unique_fd f = open_file(path, O_RDONLY);
    const struct stat st = stat_of(f.get(), path);
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        // A pipe or device has no size to read at once, nor has a file of
        // /proc (whose size says 0): read it as a stream.
        return about_file(path, [&] {
            fd_source in(f.get());
            return read_whole(in, opt);
        });
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > largest_file(opt.decode.limits))
        throw error(errc::limit_exceeded,
                    in_quotes(path) + ": file of " + str(size) + " bytes cannot fit limits::max_bytes = " +
                        str(opt.decode.limits.max_bytes) + " and limits::max_tensors = " +
                        str(opt.decode.limits.max_tensors));
    // A file that is no .ten at all is refused before a buffer of its size
    // is allocated and filled (a sparse file of gigabytes of zeros, say):
    // its first bytes give decode_buffer's own error for the whole file.
    if (std::byte head[sizeof chunk_magic]; size >= sizeof head) {
        ssize_t n;
        do n = ::pread(f.get(), head, sizeof head, 0);
        while (n < 0 && errno == EINTR);
        if (n == static_cast<ssize_t>(sizeof head) && std::memcmp(head, chunk_magic, sizeof head) != 0)
            about_file(path, [&] { (void)decode_buffer(buffer::borrow({head, sizeof head})); });
    }
    buffer all = buffer::allocate(static_cast<std::size_t>(size));
    std::byte* at = all.writable_bytes().data();
    std::size_t got = 0;
    while (got < all.size()) {
        const std::size_t want = std::min<std::size_t>(all.size() - got, 0x7ffff000);
        const ssize_t n = ::read(f.get(), at + got, want);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw os_error("read " + in_quotes(path) + " at offset " + str(got), errno);
        }
        if (n == 0)
            throw error(errc::io_error, in_quotes(path) + ": file shrank while being read (" + str(got) +
                                            " of " + str(size) + " bytes)");
        got += static_cast<std::size_t>(n);
    }
    return about_file(path, [&] { return decode_buffer(all, opt.decode); });
}

buffer map_file(const std::filesystem::path& path) {
    // O_NONBLOCK: opening a FIFO must fail below, not wait for a writer.
    unique_fd f = open_file(path, O_RDONLY | O_NONBLOCK);
    const struct stat st = stat_of(f.get(), path);
    if (!S_ISREG(st.st_mode))
        throw error(errc::io_error, "mmap " + in_quotes(path) + ": not a regular file");
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size == 0) return {};  // mmap refuses zero bytes
    // Counted before mapping, undone by the last buffer's unmap: until then
    // save() knows not to rewrite the file in place.
    const mapped_files::key file{st.st_dev, st.st_ino};
    mapped_files::of_process().add(file);
    auto unmap = [size, file](const void* q) noexcept {
        if (q) ::munmap(const_cast<void*>(q), size);
        mapped_files::of_process().remove(file);
    };
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.get(), 0);
    if (p == MAP_FAILED) {
        const int err = errno;
        unmap(nullptr);
        throw os_error("mmap " + in_quotes(path), err);
    }
    // The mapping outlives the descriptor. (If making the keeper throws, it
    // has called unmap.)
    buffer::keeper_type keeper(p, unmap);
    return buffer::share(std::move(keeper), {static_cast<std::byte*>(p), size}, false);
}

std::vector<tensor> load_mmap(const std::filesystem::path& path, const file_options& opt) {
    check_extension(path, opt.nocheck);
    // Compressed bytes cannot be viewed in place (see io.hpp).
    if (compressed(path, opt)) return load(path, opt);
    // A pipe or device cannot be mapped, nor can a file of /proc whose size
    // says 0: read them as load() does.
    if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode) &&
                           (!S_ISREG(st.st_mode) || st.st_size == 0))
        return load(path, opt);
    const buffer mapped = map_file(path);
    return about_file(path, [&] { return decode_buffer(mapped, opt.decode); });
}

}  // namespace tenbin
