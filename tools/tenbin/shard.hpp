// tenbin tool: webdataset shards of messages. A shard is a POSIX ustar tar
// whose members are KEY.ten, one .ten file (the chunked form) per message,
// in order: what `tenbin recv --save` writes, `send`/`serve --file` replay
// and `info` lists. Private to the tool.
//
// Layout: per member a 512-byte header (name, octal size, checksum, "ustar"
// magic), the bytes, zeros up to a multiple of 512; then two zero blocks,
// the whole padded to a multiple of 10240 bytes as tar(1) writes it.
#pragma once

#include <tenbin/core.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin::cli {

/// Whether `path` names a tar shard (by its extension, .tar).
bool is_shard(std::string_view path);

/// Writes a shard member by member. The file appears under its name only
/// when finish() succeeds (written beside it as PATH.part, then renamed); a
/// writer destroyed before that removes what it wrote.
///
/// It trusts no path around it: PATH.part is created exclusively and never
/// through a symbolic link, so a second writer on the same path (or a link
/// planted there) is refused rather than mixed in or followed; PATH must be
/// a regular file or nothing (a FIFO, a device, a directory or a symbolic
/// link is never replaced).
class shard_writer {
public:
    /// Creates PATH.part. Throws bad_argument when PATH is no regular file,
    /// or exists and `replace` is false; io_error when PATH.part exists
    /// (another writer's, or a killed one's) or cannot be created.
    shard_writer(std::string path, bool replace);
    ~shard_writer();
    shard_writer(const shard_writer&) = delete;
    shard_writer& operator=(const shard_writer&) = delete;

    /// Adds `tensors` as the member KEY.ten, KEY the message's number in six
    /// digits (000000, 000001, ...), dated now. Throws io_error.
    void add(tensor_span tensors);
    /// Ends the archive and renames it into place (replacing PATH only when
    /// allowed, and never if it became something else than a regular file).
    /// Throws io_error, leaving PATH.part.
    void finish();
    /// Members written so far.
    std::size_t members() const noexcept { return count_; }

private:
    void put(const char* data, std::size_t size);

    std::string path_, part_;
    bool replace_;
    int fd_ = -1;
    std::size_t count_ = 0;
    std::uint64_t written_ = 0;
    bool done_ = false;
};

/// One message of a shard.
struct shard_message {
    std::string name;  ///< the member's name, e.g. "000000.ten"
    std::vector<tensor> tensors;
};

/// The messages of a shard, in order: each member whose name ends in .ten,
/// decoded (mapped, no copy). Directories, links and pax or GNU extension
/// headers are skipped, and so are members of other extensions (webdataset
/// samples may have them), counted in `skipped`. Throws bad_header
/// (a header that is no ustar header, a bad checksum or size), truncated
/// (a member past the end of the file) or io_error; the members' own
/// errors name the member.
std::vector<shard_message> read_shard(const std::string& path, std::size_t* skipped = nullptr);

}  // namespace tenbin::cli
