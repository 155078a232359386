// tenbin: the prefetching loader: a background thread receives, decodes and
// transforms into a bounded queue, so that receiving overlaps the
// consumer's work.
#pragma once

#include <tenbin/connection.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

TENBIN_API_BEGIN
namespace tenbin {

/// How a loader receives and queues.
struct loader_options {
    /// How the loader's connection is opened (its recv_timeout bounds
    /// next(), which then returns nothing).
    connection_options connection{};
    /// Bounds on the decoded messages waiting for the consumer. The queue
    /// accepts a message that exceeds `queue_bytes` only when it is empty,
    /// so one oversized message cannot stall the loader. A full queue is
    /// refilled once the consumer has taken it down to half (in one go:
    /// each refill wakes the loader thread once), so small messages want
    /// a deep queue; `queue_bytes` bounds it for large ones. Messages
    /// already waiting on the socket are queued 64 at a time, however deep
    /// the queue.
    std::size_t queue_messages = 64;
    /// Bound on the tensor bytes waiting in the queue.
    std::uint64_t queue_bytes = std::uint64_t{512} << 20;
    /// Run on the loader thread on each received batch before queueing.
    /// Whatever it throws is raised from next() in that batch's place (not
    /// counted as malformed, whatever `skip_malformed` says), and the
    /// loader goes on with the next batch. close() does not interrupt a
    /// transform that is running: the destructor waits for it to return,
    /// so a transform that can block long (on the consumer, say) makes
    /// destruction wait as long.
    std::function<std::vector<tensor>(std::vector<tensor>)> transform{};
    /// Malformed messages are skipped (counted in `malformed()`) instead of
    /// being raised from next(). Raising is the default.
    bool skip_malformed = false;
    /// Calls reuse_large_allocations() when the loader starts.
    bool reuse_allocations = true;
};

/// A prefetching receiver: a background thread receives, decodes and
/// transforms into a bounded queue; the consumer takes batches with next()
/// or range-for. Fan-in comes from the URLs (many publishers or pushers on
/// one socket). Errors on the loader thread reach the consumer in order: a
/// malformed message or a transform's exception is raised from next() (and
/// the loader goes on); a fatal error (the socket failing) is raised after
/// every batch received before it, and ends the loader. Several threads
/// may call next() at once: each batch goes to one of them.
///
/// A consumer that finds the queue empty while the thread is not reading
/// receives on its own thread instead (plain sockets, no transform; not
/// acked or `+shm`), so that a message wakes one thread rather than two;
/// the thread takes over again once the consumer has been away for about
/// a millisecond. Batches come in order whoever received them.
class loader {
public:
    /// Starts the loader thread on the URLs (each brace-expanded) and waits
    /// until its socket is bound/connected. Throws bad_url (also for URLs
    /// of a socket that cannot receive, zpush and zpub, or that must also
    /// send: req, rep, router), or error(io_error) naming the endpoint when
    /// it is refused (address in use...), as `connection`. Without a context
    /// given, one is chosen as for `connection`.
    loader(std::span<const std::string> urls, loader_options opt = {});
    /// The same on one URL.
    explicit loader(std::string_view url, loader_options opt = {});
    /// The same on the caller's context, which the loader keeps alive.
    loader(std::shared_ptr<zmq::context_t> context, std::span<const std::string> urls,
           loader_options opt = {});
    /// Stops the thread and discards what is queued. Waits at most about
    /// 50 ms for the thread, plus the transform running, if any.
    ~loader();
    /// Takes over the other's thread and queue; the moved-from loader has
    /// none (only destruction and assignment are valid on it).
    loader(loader&&) noexcept;
    /// Stops this loader (as the destructor does) and takes over the other's.
    loader& operator=(loader&&) noexcept;
    loader(const loader&) = delete;
    loader& operator=(const loader&) = delete;

    /// The next batch, waiting as long as it takes, or up to the
    /// connection's recv_timeout. Returns nothing when that timeout
    /// expired (as connection::recv does), at the end of an epoch of a
    /// numbered stream (epoch_ended() tells; the next call gives the next
    /// epoch's first batch), and once close() was called and the queue is
    /// drained (closed() tells).
    [[nodiscard]] std::optional<std::vector<tensor>> next();
    /// Like next(), but waits at most `timeout`, then returns nothing. A
    /// timeout past what the clock can count (milliseconds::max()) waits
    /// for ever.
    [[nodiscard]] std::optional<std::vector<tensor>> next(std::chrono::milliseconds timeout);
    /// Acked delivery, ack_mode::on_release: acknowledges the batch this
    /// thread took last from next() now, as if its tensors were all
    /// dropped; they stay valid (they keep their bytes themselves). For a
    /// loop that keeps its batch while it asks for the next (Python's for
    /// loop over a Loader calls this first): the batch it finished is then
    /// not processed again by another consumer if this one dies while it
    /// waits. Does nothing otherwise, nor twice (thread-safe).
    void release_last();
    /// Stops receiving (from any thread) and wakes a blocked next(). Queued
    /// batches can still be taken.
    void close();
    /// Whether close() was called, or a fatal error ended the loader and
    /// its queue is drained: next() returning nothing then is no timeout
    /// (thread-safe).
    bool closed() const;

    /// Numbered streams (see stream.hpp): the epoch the consumer is in,
    /// counted from the state it resumed from (thread-safe).
    std::uint64_t epoch() const;
    /// Whether the last next() that gave nothing ended an epoch.
    bool epoch_ended() const;
    /// Whether every producer ended its stream: next() gives nothing more.
    bool stream_ended() const;
    /// What the consumer has taken (batches still queued are not taken), to
    /// save with a checkpoint (thread-safe).
    stream_state state() const;
    /// Resumes from `s`, as connection::load_state does: batches at or
    /// before its positions, queued ones too, are dropped as duplicates
    /// (thread-safe). Batches may arrive before the call:
    /// connection_options::resume_from resumes before the first.
    void load_state(const stream_state& s);
    /// Gaps, duplicates and epochs counted so far (thread-safe).
    stream_counters stream_stats() const;

    /// Range-for over batches; ends at a timeout of next() (the
    /// connection's recv_timeout, as a connection's range-for does), at the
    /// end of an epoch, or once the loader is closed and drained: `for
    /// (int e = 0; e < epochs; ++e) for (auto& batch : loader) ...` trains
    /// epoch by epoch. Each batch is let go before the next is asked for
    /// (with acked on_release, acknowledged and confirmed first).
    using iterator = detail::batch_iterator<loader, &loader::next>;
    /// Takes the first batch (blocking as next() does).
    iterator begin() { return iterator(this); }
    /// The end of a range-for.
    std::default_sentinel_t end() { return {}; }

    /// A snapshot of the receive statistics (thread-safe).
    statistics stats() const;
    /// Batches waiting in the queue now (thread-safe).
    std::size_t queued_messages() const;
    /// Tensor bytes waiting in the queue now (thread-safe).
    std::uint64_t queued_bytes() const;
    /// The most messages and bytes that were ever queued at once.
    std::size_t peak_queued_messages() const;
    /// The most bytes ever queued at once (thread-safe).
    std::uint64_t peak_queued_bytes() const;
    /// Malformed messages received so far: skipped with skip_malformed,
    /// raised from next() otherwise (thread-safe).
    std::uint64_t malformed() const;
    /// What the loader and its connection count and time (see metrics.hpp:
    /// its queue, the consumer's waits in next(), its streams), readable
    /// from any thread. The first call turns the connection's timings on.
    std::shared_ptr<const metrics_source> metrics() const;
    /// The endpoints as bound/connected (a bound `*` port resolved).
    std::vector<endpoint> endpoints() const;
    /// CURVE handshakes refused so far (see connection::refused_handshakes;
    /// thread-safe).
    std::uint64_t refused_handshakes() const noexcept;

private:
    struct shared;
    std::shared_ptr<shared> s_;
};

}  // namespace tenbin
TENBIN_API_END
