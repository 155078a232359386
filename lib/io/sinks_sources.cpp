// The sink and source adapters of io.hpp.
#include <tenbin/io.hpp>

#include "core/diagnostics.hpp"
#include "io/io_detail.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace tenbin {

namespace {

using detail::os_error;
using detail::str;

// Linux reads and writes at most this much per call anyway; asking for more
// only risks ssize_t overflow on other systems.
constexpr std::size_t max_io_call = 0x7ffff000;

#ifdef IOV_MAX
constexpr std::size_t iov_batch = IOV_MAX;
#else
constexpr std::size_t iov_batch = 1024;
#endif

// Waits until a non-blocking descriptor can take more bytes, so that an
// fd_sink works on it too instead of failing with EAGAIN.
void wait_writable(int fd) {
    pollfd p{fd, POLLOUT, 0};
    while (::poll(&p, 1, -1) < 0)
        if (errno != EINTR) throw os_error("poll on fd " + std::to_string(fd), errno);
}

void wait_readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0)
        if (errno != EINTR) throw os_error("poll on fd " + std::to_string(fd), errno);
}

}  // namespace

// ---- iostreams ------------------------------------------------------------

void ostream_sink::write(std::span<const bytes_view> pieces) {
    std::uint64_t done = 0;
    for (bytes_view p : pieces) {
        // ostream::write takes a streamsize; split pieces that would not fit.
        std::size_t at = 0;
        while (at < p.size()) {
            const std::size_t n = std::min(p.size() - at, max_io_call);
            os_.write(reinterpret_cast<const char*>(p.data() + at), static_cast<std::streamsize>(n));
            if (!os_)
                throw error(errc::io_error, "ostream write failed after " + str(done + at) + " bytes");
            at += n;
        }
        done += p.size();
    }
}

void ostream_sink::flush() {
    os_.flush();
    if (!os_) throw error(errc::io_error, "ostream flush failed");
}

namespace {
// failbit without eofbit: a file that did not open, or a failed operation.
// eofbit with it is a stream read to its end, which reads as empty.
void check_readable(const std::istream& is) {
    if (is.bad() || (is.fail() && !is.eof()))
        throw error(errc::io_error, std::string("istream is in a ") + (is.bad() ? "bad" : "failed") +
                                        " state (a file that did not open?)");
}
}  // namespace

istream_source::istream_source(std::istream& is) : is_(is) {
    check_readable(is_);
    // A stream that cannot seek (a pipe, std::cin) says -1 and stays as it was.
    if (!is_.good()) return;
    const std::istream::pos_type at = is_.tellg();
    if (at == std::istream::pos_type(-1)) return;
    if (is_.seekg(0, std::ios::end)) {
        const std::istream::pos_type end = is_.tellg();
        if (end != std::istream::pos_type(-1) && end >= at)
            remaining_ = static_cast<std::uint64_t>(end - at);
    }
    is_.clear();
    is_.seekg(at);
}

std::size_t istream_source::read_some(mutable_bytes out) {
    if (out.empty()) return 0;
    check_readable(is_);
    // At end of input read() sets eofbit and failbit; that is a normal end.
    is_.read(reinterpret_cast<char*>(out.data()),
             static_cast<std::streamsize>(std::min(out.size(), max_io_call)));
    const auto n = static_cast<std::size_t>(is_.gcount());
    if (is_.bad()) throw error(errc::io_error, "istream read failed after " + str(n) + " bytes");
    if (remaining_) *remaining_ -= std::min<std::uint64_t>(*remaining_, n);
    return n;
}

// ---- file descriptors -----------------------------------------------------

void fd_sink::write(std::span<const bytes_view> pieces) {
    std::vector<iovec> iov;
    iov.reserve(std::min(pieces.size(), iov_batch));
    std::size_t next = 0;  // first piece not yet in `iov`
    std::size_t first = 0;  // first entry of `iov` not yet fully written
    std::uint64_t written = 0;
    for (;;) {
        // Refill the batch once it is written out, skipping empty pieces.
        if (first == iov.size()) {
            iov.clear();
            first = 0;
            while (next < pieces.size() && iov.size() < iov_batch) {
                const bytes_view p = pieces[next++];
                if (!p.empty())
                    iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
            }
            if (iov.empty()) return;
        }
        const int count = static_cast<int>(iov.size() - first);
        const ssize_t n = ::writev(fd_, iov.data() + first, count);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_writable(fd_);
                continue;
            }
            throw os_error("writev to fd " + std::to_string(fd_) + " after " + str(written) + " bytes",
                           errno);
        }
        written += static_cast<std::uint64_t>(n);
        // A short write: drop the entries that went out, trim the partial one.
        auto left = static_cast<std::size_t>(n);
        while (first < iov.size() && left >= iov[first].iov_len) {
            left -= iov[first].iov_len;
            ++first;
        }
        if (left > 0) {
            iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + left;
            iov[first].iov_len -= left;
        }
    }
}

fd_source::fd_source(int fd) : fd_(fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw os_error("fstat of fd " + std::to_string(fd), errno);
    if (S_ISREG(st.st_mode)) {
        // Reading may start anywhere in the file: count from the current position.
        const off_t pos = ::lseek(fd, 0, SEEK_CUR);
        if (pos >= 0) {
            const auto size = static_cast<std::uint64_t>(st.st_size);
            const auto at = static_cast<std::uint64_t>(pos);
            remaining_ = at < size ? size - at : 0;
        }
    }
}

std::size_t fd_source::read_some(mutable_bytes out) {
    if (out.empty()) return 0;
    for (;;) {
        const ssize_t n = ::read(fd_, out.data(), std::min(out.size(), max_io_call));
        if (n >= 0) {
            const auto got = static_cast<std::size_t>(n);
            if (remaining_) *remaining_ -= std::min<std::uint64_t>(*remaining_, got);
            return got;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            wait_readable(fd_);
            continue;
        }
        throw os_error("read from fd " + std::to_string(fd_), errno);
    }
}

std::optional<std::uint64_t> fd_source::remaining() const { return remaining_; }

// ---- memory ---------------------------------------------------------------

void memory_sink::write(std::span<const bytes_view> pieces) {
    std::size_t total = 0;
    for (bytes_view p : pieces) total += p.size();
    bytes_.reserve(bytes_.size() + total);
    for (bytes_view p : pieces) bytes_.insert(bytes_.end(), p.begin(), p.end());
}

std::size_t memory_source::read_some(mutable_bytes out) {
    const std::size_t n = std::min(out.size(), bytes_.size() - pos_);
    if (n > 0) std::memcpy(out.data(), bytes_.data() + pos_, n);
    pos_ += n;
    return n;
}

// ---- counting layers ------------------------------------------------------

void counting_sink::write(std::span<const bytes_view> pieces) {
    inner_.write(pieces);
    // Counted after success: a failed write leaves an unknown number sent.
    for (bytes_view p : pieces) count_ += p.size();
}

std::size_t counting_source::read_some(mutable_bytes out) {
    const std::size_t n = inner_.read_some(out);
    count_ += n;
    return n;
}

}  // namespace tenbin
