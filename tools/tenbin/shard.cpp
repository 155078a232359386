// tenbin tool: webdataset shards of messages (see shard.hpp).
#include "shard.hpp"
#include "common.hpp"

#include <tenbin/io.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tenbin::cli {

namespace {

constexpr std::size_t block = 512;
constexpr std::size_t record = 10240;  // tar(1)'s default blocking: 20 blocks

// Field offsets and sizes of a ustar header.
constexpr std::size_t name_at = 0, name_size = 100;
constexpr std::size_t mode_at = 100, uid_at = 108, gid_at = 116;
constexpr std::size_t size_at = 124, size_size = 12;
constexpr std::size_t mtime_at = 136;
constexpr std::size_t checksum_at = 148, checksum_size = 8;
constexpr std::size_t type_at = 156;
constexpr std::size_t magic_at = 257;
constexpr std::size_t prefix_at = 345, prefix_size = 155;

[[noreturn]] void fail(errc code, const std::string& what) { throw tenbin::error(code, what); }

// `value` in octal, `width - 1` digits and a NUL, into `field`.
void put_octal(char* field, std::size_t width, std::uint64_t value) {
    for (std::size_t i = width - 1; i-- > 0; value >>= 3) field[i] = static_cast<char>('0' + (value & 7));
    field[width - 1] = '\0';
}

// The header's checksum: its bytes summed with the checksum field as
// spaces. POSIX says unsigned; old tars summed signed chars, so both are
// accepted when reading.
std::uint64_t checksum(const unsigned char* h, bool as_signed) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < block; ++i) {
        const bool in_field = i >= checksum_at && i < checksum_at + checksum_size;
        const int c = in_field ? ' ' : as_signed ? static_cast<signed char>(h[i]) : h[i];
        sum += static_cast<std::uint64_t>(static_cast<std::int64_t>(c));
    }
    return sum;
}

// An octal field: optional leading spaces, digits, then NUL or spaces.
// Base-256 sizes (GNU, for members of 8 GiB and more) are refused.
std::uint64_t read_octal(const unsigned char* field, std::size_t width, const std::string& what) {
    std::size_t i = 0;
    while (i < width && field[i] == ' ') ++i;
    std::uint64_t value = 0;
    std::size_t digits = 0;
    for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i, ++digits) {
        if (value >> 60) fail(errc::bad_header, what + " overflows");
        value = value * 8 + (field[i] - '0');
    }
    for (; i < width; ++i)
        if (field[i] != '\0' && field[i] != ' ') fail(errc::bad_header, what + " is not an octal number");
    if (digits == 0) fail(errc::bad_header, what + " is empty");
    return value;
}

// A NUL-terminated field of at most `width` bytes.
std::string field_text(const unsigned char* field, std::size_t width) {
    const auto* end = static_cast<const unsigned char*>(std::memchr(field, 0, width));
    return std::string(reinterpret_cast<const char*>(field), end ? static_cast<std::size_t>(end - field) : width);
}

}  // namespace

bool is_shard(std::string_view path) { return path.size() > 4 && path.ends_with(".tar"); }

namespace {

// "a FIFO", "a symbolic link", ...: what a file that is no regular file is.
std::string kind_of(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    return "no regular file";
}

// Refuses a target that is there and is no regular file (looked at, not
// followed or opened).
void check_target(const std::string& path, bool replace) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        fail(errc::io_error, path + ": " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        fail(errc::bad_argument, "'" + path + "' is " + kind_of(st.st_mode) +
                                     ", not a regular file: a shard is never written over one");
    if (!replace) fail(errc::bad_argument, "'" + path + "' exists; use --force to replace it");
}

}  // namespace

shard_writer::shard_writer(std::string path, bool replace)
    : path_(std::move(path)), part_(path_ + ".part"), replace_(replace) {
    check_target(path_, replace_);
    // Exclusive, and not through a link: a second recorder on this path, or
    // a link planted here, is refused, never mixed in or followed.
    fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == EEXIST)
        fail(errc::io_error, part_ + " exists: another tenbin recv --save is recording to " + path_ +
                                 " (or one was killed; remove it)");
    if (fd_ < 0) fail(errc::io_error, part_ + ": cannot create: " + std::strerror(errno));
}

shard_writer::~shard_writer() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(part_.c_str());
}

void shard_writer::put(const char* data, std::size_t size) {
    for (std::size_t done = 0; done < size;) {
        const ssize_t n = ::write(fd_, data + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(errc::io_error, part_ + ": write failed: " + std::strerror(errno));
        done += static_cast<std::size_t>(n);
    }
    written_ += size;
}

void shard_writer::add(tensor_span tensors) {
    const buffer bytes = encode_buffer(tensors);
    char name[32];
    std::snprintf(name, sizeof name, "%06zu.ten", count_);
    std::array<char, block> h{};
    std::memcpy(h.data() + name_at, name, std::strlen(name));
    put_octal(h.data() + mode_at, 8, 0644);
    put_octal(h.data() + uid_at, 8, 0);
    put_octal(h.data() + gid_at, 8, 0);
    // A frame is below 2 GiB; 11 octal digits hold 8 GiB.
    if (bytes.size() >> 33) fail(errc::bad_argument, "message " + std::to_string(count_) + " is too large for ustar");
    put_octal(h.data() + size_at, size_size, bytes.size());
    // The time it was recorded, as tar(1) dates a member by its file.
    put_octal(h.data() + mtime_at, 12, static_cast<std::uint64_t>(std::max<std::time_t>(0, std::time(nullptr))));
    h[type_at] = '0';
    std::memcpy(h.data() + magic_at, "ustar\0" "00", 8);
    // Six octal digits, a NUL and a space, as POSIX has it.
    const std::uint64_t sum = checksum(reinterpret_cast<const unsigned char*>(h.data()), false);
    put_octal(h.data() + checksum_at, 7, sum);
    h[checksum_at + 7] = ' ';
    put(h.data(), block);
    put(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    static const std::array<char, block> zeros{};
    if (bytes.size() % block) put(zeros.data(), block - bytes.size() % block);
    ++count_;
}

void shard_writer::finish() {
    static const std::array<char, block> zeros{};
    put(zeros.data(), block);
    put(zeros.data(), block);
    while (written_ % record) put(zeros.data(), block);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail(errc::io_error, part_ + ": closing failed: " + std::strerror(errno));
    // What the target became while recording is looked at again; without
    // --force, one that appeared is not replaced.
    if (replace_) check_target(path_, true);
    if (::renameat2(AT_FDCWD, part_.c_str(), AT_FDCWD, path_.c_str(), replace_ ? 0 : RENAME_NOREPLACE) != 0) {
        const int err = errno;
        done_ = true;  // the recording stays where it is
        fail(errc::io_error, path_ + ": " + std::strerror(err) + "; the recording stays in " + part_);
    }
    done_ = true;
}

namespace {

std::vector<shard_message> read_members(const std::string& path, std::size_t* skipped) {
    const buffer file = map_file(path);
    const auto* bytes = reinterpret_cast<const unsigned char*>(file.data());
    const std::size_t size = file.size();
    std::vector<shard_message> out;
    std::size_t others = 0;
    if (size < block) fail(errc::truncated, path + ": " + std::to_string(size) + " bytes, too short for a tar file");
    std::uint64_t at = 0;
    while (at + block <= size) {
        const unsigned char* h = bytes + at;
        const std::string where = path + ": header at byte " + std::to_string(at);
        if (std::all_of(h, h + block, [](unsigned char c) { return c == 0; })) break;  // the end
        // "ustar\0" (POSIX) or "ustar " (old GNU).
        if (std::memcmp(h + magic_at, "ustar", 5) != 0)
            fail(errc::bad_header, where + " is no ustar header (not a tar file?)");
        const std::uint64_t stored = read_octal(h + checksum_at, checksum_size, where + ": checksum");
        if (stored != checksum(h, false) && stored != checksum(h, true))
            fail(errc::bad_header, where + " has a bad checksum");
        const std::uint64_t length = read_octal(h + size_at, size_size, where + ": size");
        const std::uint64_t start = at + block;
        if (length > size - start)
            fail(errc::truncated, where + ": a member of " + std::to_string(length) + " bytes runs past the end (" +
                                      std::to_string(size) + " bytes)");
        const char type = static_cast<char>(h[type_at]);
        std::string name = field_text(h + name_at, name_size);
        if (const std::string prefix = field_text(h + prefix_at, prefix_size); !prefix.empty())
            name = prefix + "/" + name;
        if ((type == '0' || type == '\0') && name.ends_with(".ten")) {
            shard_message m{name, {}};
            try {
                m.tensors = decode_buffer(file.slice(static_cast<std::size_t>(start), static_cast<std::size_t>(length)));
            } catch (const tenbin::error& e) {
                fail(e.code(), path + ": member " + name + ": " + e.what());
            }
            out.push_back(std::move(m));
        } else if (type == '0' || type == '\0') {
            ++others;
        }
        // Whatever else (directories, links, pax and GNU headers) is skipped.
        at = start + (length + block - 1) / block * block;
    }
    if (skipped) *skipped = others;
    return out;
}

}  // namespace

std::vector<shard_message> read_shard(const std::string& path, std::size_t* skipped) {
    try {
        return read_members(path, skipped);
    } catch (const tenbin::error&) {
        rethrow_with_format_hint(path);
    }
}

}  // namespace tenbin::cli
