// tenbin tool: what the subcommands share (registration, tensor summaries,
// error lines, socket setup). Private to the tool.
//
// Adding a subcommand: write `foo.cpp` defining `subcommand add_foo(CLI::App&)`,
// declare it below and add one line to the table in main.cpp.
#pragma once

#include <tenbin/core.hpp>
#include <tenbin/formats.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tenbin::cli {

/// Exit statuses shared by the subcommands (CLI11 uses its own, >= 100, for
/// bad arguments).
enum exit_status : int {
    exit_ok = 0,
    exit_failed = 1,     ///< an input was unreadable or an operation failed
    exit_timeout = 2,    ///< nothing (or not enough) arrived in time
    exit_malformed = 3,  ///< a received message was not valid tenbin
    exit_usage = 64,     ///< wrong options or arguments (sysexits' EX_USAGE)
    exit_interrupted = 130,  ///< stopped by SIGINT (Ctrl-C), as shells report it
};

/// A registered subcommand: its CLI11 node and the work to do when the user
/// chose it (the options live in whatever the closure captured). `run`
/// returns the exit status; exceptions escaping it are reported by main.
struct subcommand {
    CLI::App* app = nullptr;
    std::function<int()> run;
};

subcommand add_info(CLI::App& parent);
subcommand add_send(CLI::App& parent);
subcommand add_recv(CLI::App& parent);
subcommand add_serve(CLI::App& parent);
subcommand add_monitor(CLI::App& parent);
subcommand add_stat(CLI::App& parent);
subcommand add_convert(CLI::App& parent);
subcommand add_show(CLI::App& parent);
subcommand add_keygen(CLI::App& parent);

// ---- describing tensors ---------------------------------------------------

/// Lowercase hex SHA-256 of `bytes` (OpenSSL EVP).
std::string sha256_hex(bytes_view bytes);

/// {"info", "dtype", "shape", "nbytes", "sha256"} in that order.
nlohmann::ordered_json describe(const tensor& t);
/// [describe(t) for each tensor].
nlohmann::ordered_json describe(const std::vector<tensor>& tensors);

/// One compact JSON line (invalid UTF-8 replaced, never throws on it).
std::string json_line(const nlohmann::ordered_json& j);

/// "[3, 5]"; "[]" for a scalar.
std::string shape_text(const shape_t& shape);

/// A readable table of the tensors (index, info, dtype, shape, nbytes,
/// sha256), each line starting with `indent`. With `names` (one per
/// tensor, as .npz and .safetensors files give them), a name column
/// replaces the info.
void print_table(std::ostream& out, const std::vector<tensor>& tensors, std::string_view indent = "  ",
                 const std::vector<std::string>* names = nullptr);

// ---- errors -----------------------------------------------------------------

/// A wrong argument found only when the command runs (a --synthetic spec,
/// a missing input): printed as the tenbin error it is, exit status 64.
struct usage_error : tenbin::error {
    explicit usage_error(const std::string& what) : tenbin::error(tenbin::errc::bad_argument, what) {}
};

/// The exit status for the exception being handled: exit_usage for a
/// usage_error or a URL that does not parse or fit the command (bad_url),
/// exit_failed otherwise. Call only inside a catch block.
int current_error_status();

/// The class name of the exception being handled: tenbin::name(code) for a
/// tenbin::error, "io_error" for system, filesystem and ZeroMQ errors,
/// "error" otherwise. Call only inside a catch block.
std::string current_error_class();
/// The message of the exception being handled, on one line.
std::string current_error_message();
/// Writes `WHERE: error: CLASS: message` (one line) to stderr for the
/// exception being handled. Call only inside a catch block.
void print_current_error(std::string_view where);

/// `text` with every line break and other control character replaced by a
/// space, so that an error message stays on one line.
std::string one_line(std::string_view text);

/// An error message of the library in the command line's words, on one
/// line: the C++ option it names (limits::max_bytes,
/// recv_options::envelope) becomes the tenbin option that sets it.
std::string cli_text(std::string_view text);

/// Of `candidates`, the one closest to `word` (edit distance at most a third
/// of its length, and at least 1 allowed); empty when none is close.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

/// `text` with control characters (a NUL inside an info, a line break or a
/// terminal escape in a name from an untrusted file) shown as \xNN, for
/// tables on a terminal.
std::string printable(std::string_view text);

// ---- loading ----------------------------------------------------------------

/// The tensors of a .ten file or single-part buffer under any name (mapped,
/// no copy); "-" reads standard input as a stream. Throws tenbin::error.
/// `lim` bounds what the file may make the tool allocate (--max-bytes).
std::vector<tensor> load_message(const std::string& path, const limits& lim = {});

/// The messages a file holds: each .ten member of a .tar shard, in order
/// (see shard.hpp), the tensors of a .npy, .npz or .safetensors file (their
/// names as infos: one too long is refused, saying how to shorten it), or the
/// one message of any other file (load_message). With `names`, one name per
/// message: "FILE:MEMBER" for a shard, FILE otherwise.
std::vector<std::vector<tensor>> load_messages(const std::string& path, std::vector<std::string>* names = nullptr);

/// Call inside a catch block: rethrows the exception being handled, a
/// tenbin::error (not a usage_error) with "; this looks like a .npz file"
/// added when the first bytes of `path` are another format's than its name
/// says.
[[noreturn]] void rethrow_with_format_hint(const std::string& path);

/// A file of a format `tenbin::format_of` knows: its named tensors, and a
/// .safetensors file's __metadata__ (empty for the other formats).
struct named_file {
    std::vector<named_tensor> tensors;
    safetensors_metadata metadata;
};
/// Loads `path` by its extension (`tenbin::load_any`), keeping the metadata.
named_file load_named(const std::string& path, const limits& lim = {});

/// Seconds as ZeroMQ milliseconds; 0 (or less) means "wait forever" (-1).
int timeout_ms(double seconds);

/// A duration as people write it: "2 s", "0.5 s", "0.0001 s" (no exponent,
/// no trailing zeros), for every message that names one.
std::string seconds_text(double seconds);

/// Whether `e`, thrown by a receive, is about one message (malformed, over
/// --max-bytes, ...), which a receiver reports before going on with the
/// next, rather than about the socket (closed, refused by the system),
/// which ends the command.
bool about_one_message(const tenbin::error& e) noexcept;

/// Throws bad_argument, naming `where` and --tensorcom, when a Python
/// tensorcom receiver could not decode `tensors` (tenbin::check_tensorcom).
void check_tensorcom_flag(const std::vector<tensor>& tensors, const std::string& where);

// ---- checking options ---------------------------------------------------------

/// CLI11 checks for number options (counts, seconds, rates): a finite
/// number >= 0 (shown as NONNEGATIVE) or > 0 (POSITIVE). Unlike CLI11's own
/// they refuse NaN, and say what is wrong in a few words.
extern const CLI::Validator nonnegative;
extern const CLI::Validator positive;

/// --max-bytes for the file commands (info, convert), as the receiving
/// socket commands have it: the tensor bytes one file may carry.
void add_file_max_bytes(CLI::App& app, std::uint64_t& max_bytes);

}  // namespace tenbin::cli
