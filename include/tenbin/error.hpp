// tenbin: the error type of the library.
#pragma once

#include <tenbin/config.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

TENBIN_API_BEGIN
namespace tenbin {

/// The closed set of failure classes. The first eight are the classes of the
/// format's test manifest; `name(errc)` gives the spelling used there and by
/// the `tenbin` tool.
enum class errc {
    bad_magic = 1,       ///< a chunk does not start with "~TenBin~"
    truncated,           ///< input ends inside a chunk or inside a tensor
    length_beyond_end,   ///< a chunk length runs past the end of the input
    negative_length,     ///< a chunk length is negative as int64
    unknown_dtype,       ///< a header names a dtype outside the format
    odd_chunk_count,     ///< a header chunk/frame has no data after it
    data_size_mismatch,  ///< data bytes differ from what shape and dtype need
    bad_header,          ///< header malformed (size, ndim, dims, info bytes)
    limit_exceeded,      ///< input exceeds a configured `limits` field
    bad_argument,        ///< caller's input cannot be encoded (info, shape, size)
    info_mismatch,       ///< decoded infos differ from the expected ones
    bad_extension,       ///< save/load of a file not named *.ten without nocheck
    io_error,            ///< the operating system refused a read or write
    timeout,             ///< nothing arrived within the allowed time
    bad_url,             ///< a connection URL cannot be parsed
    unsupported,         ///< valid input this build or platform cannot handle
    bad_certificate,     ///< a CURVE certificate file is malformed or not private
    closed,              ///< the socket or its ZeroMQ context was closed meanwhile
};

/// "bad_magic", "truncated", ...: the manifest's spelling of a class.
std::string_view name(errc code) noexcept;
/// Whether `code` says the input was not valid tenbin data (bad_magic
/// through bad_header): one message, file or buffer was bad, and a
/// receiver can go on with the next.
bool is_malformed(errc code) noexcept;

/// Thrown by every tenbin function that fails. `what()` carries the numbers
/// needed to locate the problem (offset, tensor index, expected vs found).
/// A socket error inside libzmq is an io_error, and a socket or context
/// closed while a call used it is `closed`.
class error : public std::runtime_error {
public:
    /// An error of class `code`; `message` becomes `what()`.
    error(errc code, const std::string& message);
    /// The class of the failure.
    errc code() const noexcept { return code_; }

private:
    errc code_;
};

}  // namespace tenbin
TENBIN_API_END
