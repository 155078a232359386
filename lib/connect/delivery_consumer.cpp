// The consumer's delivery thread (see delivery.hpp).
#include "connect/delivery_engine.hpp"

#include "base/os_error.hpp"
#include "connect/connect_detail.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace tenbin::detail {

namespace {

// Where ack tokens put what they acknowledge: the thread sends it on its
// next turn, woken by the token. Outlives the thread (a tensor the user
// keeps may drop its token after the connection closed).
struct ack_sink {
    std::mutex mutex;
    bool open = true;
    int wake_fd = -1;
    struct entry {
        std::size_t source;  // the consumer's sources_ (perf: no strings copied a batch)
        batch_id id;
        std::uint16_t held_us = 0;  // how long the user held it (on_release)
    };
    std::vector<entry> pending;
    // The thread sleeps a whole turn: an acknowledgement wakes it. Else it
    // comes within a millisecond anyway (it sent some lately), or the
    // user's thread sends them: no wake-up a batch (perf).
    bool dozing = true;
};

}  // namespace

// Acknowledges its batch when the last holder drops it, or before, when
// told (once: not copied).
struct ack_token {
    std::shared_ptr<ack_sink> sink;
    ack_sink::entry what;
    mutable std::atomic<bool> withheld{false};
    mutable std::atomic<bool> sent{false};
    // When the user took it (steady clock, ns; 0: not said).
    mutable std::atomic<std::int64_t> taken_at{0};
    ack_token(std::shared_ptr<ack_sink> s, ack_sink::entry w) : sink(std::move(s)), what(w) {}
    ack_token(const ack_token&) = delete;
    ack_token& operator=(const ack_token&) = delete;
    ~ack_token() { send(); }

    static std::int64_t now_ns() noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    void send() const noexcept {
        if (withheld.load(std::memory_order_relaxed) || sent.exchange(true)) return;
        ack_sink::entry e = what;
        if (const std::int64_t at = taken_at.load(std::memory_order_relaxed); at != 0) {
            const std::int64_t held_ns = now_ns() - at;
            e.held_us = static_cast<std::uint16_t>(std::clamp<std::int64_t>(held_ns / 1000, 0, UINT16_MAX));
        }
        std::lock_guard lock(sink->mutex);
        if (!sink->open) return;
        // A wake-up is due already when others wait: the thread takes them all.
        const bool first = sink->pending.empty();
        sink->pending.push_back(e);
        if (!first || !sink->dozing) return;
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t r = ::write(sink->wake_fd, &one, sizeof one);
    }
};

void withhold(const ack_token& token) noexcept { token.withheld.store(true, std::memory_order_relaxed); }
void mark_taken(const ack_token& token) noexcept { token.taken_at.store(ack_token::now_ns(), std::memory_order_relaxed); }
void acknowledge_now(const ack_token& token) noexcept { token.send(); }

namespace {

// `t` with its bytes kept by `token` too: dropping the last tensor (or
// copy) of the batch acknowledges it.
tensor keep_with(const tensor& t, const std::shared_ptr<const void>& token) {
    const buffer& b = t.data();
    auto both = std::make_shared<std::pair<std::shared_ptr<const void>, buffer::keeper_type>>(token, b.keeper());
    buffer kept = buffer::share(std::move(both), {const_cast<std::byte*>(b.data()), b.size()}, false);
    return tensor(t.dtype(), shape_t(t.shape().begin(), t.shape().end()), std::move(kept), t.info());
}

class consumer_engine final : public delivery_engine {
public:
    consumer_engine(zmq::context_t& context, zmq::socket_ref socket, link& l, delivery_options opt)
        : delivery_engine(context, socket, l, std::move(opt)), sink_(std::make_shared<ack_sink>()) {
        user_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (user_fd_ < 0) throw os_error("eventfd for acked delivery");
        sink_->wake_fd = wake_fd();
        for (const std::string& rid : opt_.connected) producers_[rid].ours = true;
        if (opt_.resume_from) seed(*opt_.resume_from);
        begin();
    }
    ~consumer_engine() override {
        stop(std::chrono::milliseconds(0));
        {
            std::lock_guard lock(sink_->mutex);
            sink_->open = false;  // the wake-up descriptor goes with the engine
        }
        ::close(user_fd_);
    }

    bool send(tensor_span, const stream_position&, std::optional<std::chrono::milliseconds>) override {
        throw error(errc::bad_argument, "an acked consumer does not send");
    }
    void mark(const stream_position&) override { throw error(errc::bad_argument, "an acked consumer does not send"); }

    // The user's thread reads the socket itself (the thread's hop costs
    // more than a small batch) and waits on it; the thread's turns, on a
    // timer from then on, wake it when they had something.
    std::optional<tracked> receive(std::optional<std::chrono::milliseconds> timeout) override {
        std::unique_lock lock(mutex_);
        user_reads_ = true;
        // Acknowledgements go a few at a time, and all before a wait (see read_until).
        if (!ended_ && taken_since_acks_ >= ack_batch()) send_acks();
        if (outbox_.empty()) {  // else no clock read (perf)
            const auto until = timeout ? clock::now() + *timeout : clock::time_point::max();
            if (!read_until(lock, until, [&] { return !outbox_.empty(); })) return std::nullopt;
            if (outbox_.empty()) throw error(errc::closed, "cannot receive: the connection is closing");
        }
        ++taken_since_acks_;
        took_ = opt_.ack == ack_mode::on_take;
        tracked t = std::move(outbox_.front());
        outbox_.pop_front();
        if (t.ack) {
            ++sources_[t.ack->what.source].taken;
            if (opt_.ack == ack_mode::on_release) mark_taken(*t.ack);  // a loader marks it again as its user takes it
        }
        return t;
    }

    // on_release: the producers confirmed every release so far, so that a
    // consumer killed while it works on the next batch is not sent again
    // those it was done with. A producer that does not answer within two
    // heartbeats (gone) is not waited for.
    void flush_acks() override {
        if (opt_.ack != ack_mode::on_release) return;
        std::unique_lock lock(mutex_);
        user_reads_ = true;
        if (ended_) return;
        send_acks();
        (void)read_until(lock, clock::now() + 2 * opt_.heartbeat, [&] {
            return std::all_of(producers_.begin(), producers_.end(),
                               [](const auto& p) { return !p.second.answered || p.second.confirmed >= p.second.acked; });
        });
    }

    void seed(const stream_state& taken) override {
        std::lock_guard lock(mutex_);
        for (const auto& [name, p] : taken.producers) done_[name].add(p);
    }

    std::vector<consumer_info> consumers() const override { return {}; }
    delivery_counters counters() const override {
        std::lock_guard lock(mutex_);
        return counters_;
    }

private:
    struct producer : peer_base {
        bool ours = false;  // this end connected to it: it waits for our hello
        bool lost = false;  // counted lost since last heard
        std::uint64_t acked = 0, confirmed = 0;  // acks sent to it, and those it confirmed
        clock::time_point asked{};  // our last hello
    };

    std::size_t ack_batch() const { return std::max<std::size_t>(1, opt_.credit / 4); }

    // Reads the socket on this thread (holding `lock`) until `done()`, the
    // thread's end, or `until`; false at the deadline.
    template <class Done>
    bool read_until(std::unique_lock<std::mutex>& lock, clock::time_point until, Done done) {
        for (;;) {
            if (done() || ended_) return true;
            receive_waiting(clock::now());
            if (done()) return true;
            const auto now = clock::now();
            if (now >= until) return false;
            const int ms = until == clock::time_point::max()
                               ? -1
                               : to_ms(std::chrono::ceil<std::chrono::milliseconds>(until - now));
            // The producer may be waiting for credit: what was taken is
            // acknowledged before this thread sleeps, not while it reads
            // batches that came (perf: a message each time).
            if (!ended_) send_acks();
            ++waiting_users_;
            lock.unlock();
            pollfd fds[2] = {{socket_fd(), POLLIN, 0}, {user_fd_, POLLIN, 0}};
            if (::poll(fds, 2, ms) > 0 && (fds[1].revents & POLLIN)) {
                std::uint64_t v;
                [[maybe_unused]] const ssize_t r = ::read(user_fd_, &v, sizeof v);
            }
            lock.lock();
            --waiting_users_;
        }
    }

    bool watches_socket() const override { return !user_reads_; }
    // Acks go within a millisecond of their token, sent by a turn woken
    // by the first (the thread dozes) or the next (it sent some lately).
    // While the user's thread takes batches on_take, it sends them itself,
    // a few at a time and before it waits: tokens wake no one then, and a
    // turn each look_every sends those it left (perf: at small batches the
    // wake-ups, and acks sent one at a time, held back the credit).
    // on_release keeps the prompt acks: a batch released during the
    // user's step is confirmed before its next take, which waits for that.
    static constexpr auto look_every = std::chrono::milliseconds(5);
    bool hurried() const override { return acks_lately_ && !took_lately_; }
    clock::time_point due() const override { return took_lately_ ? next_look_ : clock::time_point::max(); }
    // A turn that read something (it may have taken the socket's wake-up
    // from a waiting user), or the end, wakes the users waiting (they wait
    // on the socket and user_fd_, not on changed_).
    void notify() override {
        const bool news = std::exchange(news_, false);
        if (waiting_users_ > 0 && (news || ended_)) {
            const std::uint64_t one = 1;
            [[maybe_unused]] const ssize_t r = ::write(user_fd_, &one, sizeof one);
        }
    }

    control hello_with_positions(bool answer) const {
        control c = hello(answer);
        for (const auto& [name, set] : done_) {
            if (c.taken.size() == max_reported_producers) break;
            c.taken[name] = set.report();
        }
        return c;
    }

    // Our heartbeats count what the user took from `rid` from this hello on
    // (the producer counts what it gave us from there: at the stream's
    // end, whether what we hold is the user's).
    void say_hello(const std::string& rid, bool answer) {
        for (source& s : sources_)
            if (s.rid == rid) s.taken = 0;
        send_control(rid, hello_with_positions(answer));
    }
    std::uint64_t taken_of(const std::string& rid) const {
        std::uint64_t n = 0;
        for (const source& s : sources_)
            if (s.rid == rid) n += s.taken;
        return n;
    }

    void on_control(const std::string& rid, control c, clock::time_point now) override {
        auto it = producers_.find(rid);
        switch (c.type) {
        case control_type::hello: {
            if (c.role != peer_role::producer) {
                ++counters_.bad_messages;
                return;
            }
            producer& p = producers_[rid];
            // A producer that asks for our hello has no record of us (it
            // restarted, or took us for dead while we stalled): it counts
            // our acks afresh from our answer, and so do we, or each
            // release would wait in vain for a confirmation.
            if (p.incarnation != c.incarnation || c.answer) p.acked = p.confirmed = 0;
            p.incarnation = c.incarnation;
            p.name = c.name;
            p.beat = std::chrono::milliseconds(c.heartbeat_ms);
            p.heard = now;
            p.answered = true;
            p.lost = false;
            if (c.answer) {
                say_hello(rid, false);
                p.sent = now;
            }
            return;
        }
        case control_type::heartbeat:
            if (it == producers_.end() || !it->second.answered) {
                say_hello(rid, true);  // a producer that does not know us
                return;
            }
            it->second.heard = now;
            if (c.tally > 0 && !it->second.name.empty()) done_[it->second.name].add_epochs_before(c.tally);
            return;
        case control_type::bye:
            if (it == producers_.end()) return;
            if (it->second.ours) {
                it->second.answered = false;  // it may come back: say hello again
            } else {
                producers_.erase(it);
            }
            ++counters_.producers_lost;
            return;
        case control_type::confirm:
            if (it != producers_.end()) it->second.confirmed = std::max(it->second.confirmed, c.confirmed);
            news_ = true;
            return;
        case control_type::ack: ++counters_.bad_messages; return;
        }
    }

    void on_data(const std::string& rid, message&& m, std::vector<zmq::message_t>& body,
                 clock::time_point now) override {
        if (auto it = producers_.find(rid); it != producers_.end()) it->second.heard = now;
        if (!m.position && body.size() == 1 && is_pack_frame({body[0].data<std::byte>(), body[0].size()})) {
            // Its batches keep the frame (no copy).
            auto kept = std::make_shared<zmq::message_t>(std::move(body[0]));
            try {
                read_pack(buffer::share(kept, {kept->data<std::byte>(), kept->size()}, false), opt_.decode,
                          [&](pack_entry&& e) {
                              if (!e.fault) return take(rid, std::move(*e.position), std::move(e.tensors));
                              ++counters_.bad_messages;
                              if (e.position) acknowledge(rid, *e.position);
                          });
            } catch (const error&) {
                ++counters_.bad_messages;  // the batches after the fault come again: a bad pack's are not acknowledged
            }
            return;
        }
        if (!m.position) {
            ++counters_.bad_messages;  // acked producers number their batches
            return;
        }
        std::optional<std::vector<tensor>> tensors;
        try {
            tensors = link_.decode(body, opt_.decode);
            if (!tensors) return;  // given up by its sender before we claimed it: it comes again
        } catch (const error&) {
            ++counters_.bad_messages;
            acknowledge(rid, *m.position);
            return;
        }
        take(rid, std::move(*m.position), std::move(*tensors));
    }

    // A batch or end mark received from `rid`, to the user.
    void take(const std::string& rid, stream_position&& pos, std::vector<tensor>&& tensors) {
        tracked t;
        t.tensors = std::move(tensors);
        if (pos.kind == stream_position::mark::batch) {
            // Reported as had from now on: it is this consumer's to take
            // (a restarted producer must not give it to another meanwhile).
            const std::size_t from = source_of(rid, pos.producer);
            sources_[from].done->add(batch_id{pos.epoch, pos.seq});
            auto token = std::make_shared<const ack_token>(sink_, ack_sink::entry{from, {pos.epoch, pos.seq}});
            if (opt_.ack == ack_mode::on_release)
                for (tensor& x : t.tensors) x = keep_with(x, token);
            t.ack = token;  // on_release: until taken, and for an empty batch, which has no tensor to hold it
        }
        t.bytes = data_bytes(t.tensors);
        t.position = std::move(pos);
        outbox_.push_back(std::move(t));
        news_ = true;
    }

    // A batch that did not decode: had, and acknowledged (it would only come back bad).
    void acknowledge(const std::string& rid, const stream_position& pos) {
        const ack_sink::entry e{source_of(rid, pos.producer), {pos.epoch, pos.seq}};
        sources_[e.source].done->add(e.id);
        std::lock_guard lock(sink_->mutex);
        sink_->pending.push_back(e);
    }

    // The index in sources_ of batches from `rid` numbered by `producer`.
    std::size_t source_of(const std::string& rid, const std::string& producer) {
        const auto is = [&](const source& s) { return s.rid == rid && s.producer == producer; };
        if (last_source_ < sources_.size() && is(sources_[last_source_])) return last_source_;
        const auto it = std::find_if(sources_.begin(), sources_.end(), is);
        last_source_ = static_cast<std::size_t>(it - sources_.begin());
        if (it == sources_.end()) sources_.push_back({rid, producer, &done_[producer]});
        return last_source_;
    }

    void turn(clock::time_point now, bool) override {
        acks_lately_ = send_acks() > 0;
        took_lately_ = std::exchange(took_, false);
        if (took_lately_) next_look_ = now + look_every;
        {
            std::lock_guard lock(sink_->mutex);
            sink_->dozing = !acks_lately_ && !took_lately_;
        }
        const auto retry = hello_retry();
        for (auto& [rid, p] : producers_) {
            const bool silent = p.answered && dead(p, now, 3);
            if (silent && !p.lost) {
                ++counters_.producers_lost;
                p.lost = true;
                p.answered = false;
            }
            if (!p.answered) {
                // Until it answers: a producer not up yet, or up again.
                if (p.ours && now - p.asked >= retry) {
                    say_hello(rid, true);
                    p.asked = p.sent = now;
                }
                continue;
            }
            if (beat_due(p.sent, now)) {
                control c;
                c.type = control_type::heartbeat;
                c.incarnation = opt_.incarnation;
                c.tally = taken_of(rid);
                send_control(rid, c);
                p.sent = now;
            }
        }
    }

    // How many it sent.
    std::size_t send_acks() {
        std::vector<ack_sink::entry>& acks = sending_;
        {
            std::lock_guard lock(sink_->mutex);
            acks.swap(sink_->pending);  // both keep their storage (perf)
        }
        std::map<std::string, control> by_producer;
        for (const ack_sink::entry& e : acks) {
            const std::string& rid = sources_[e.source].rid;
            control& c = by_producer[rid];
            if (c.acks.empty()) c.acks.reserve(std::min(acks.size(), max_control_acks));
            c.type = control_type::ack;
            c.held_us = std::max(c.held_us, e.held_us);
            c.acks.push_back(e.id);
            if (c.acks.size() == max_control_acks) {
                send_ack(rid, c);
                c.acks.clear();
            }
        }
        for (auto& [rid, c] : by_producer)
            if (!c.acks.empty()) send_ack(rid, c);
        const std::size_t sent = acks.size();
        acks.clear();
        taken_since_acks_ = 0;
        return sent;
    }

    // A producer gone redelivers what it did not hear of: dropped here as a duplicate then.
    void send_ack(const std::string& rid, const control& c) {
        if (send_control(rid, c) != sent::yes) return;
        if (auto it = producers_.find(rid); it != producers_.end()) {
            // A new incarnation counts from what it confirms.
            if (it->second.acked < it->second.confirmed) it->second.acked = it->second.confirmed;
            it->second.acked += c.acks.size();
        }
    }

    void leave() override {
        send_acks();
        control bye;
        bye.type = control_type::bye;
        for (const auto& [rid, p] : producers_)
            if (p.answered) send_control(rid, bye);
        // What was received and not taken goes back with the goodbye: no ack for it.
        std::lock_guard lock(sink_->mutex);
        sink_->open = false;
    }

    std::shared_ptr<ack_sink> sink_;
    std::map<std::string, producer> producers_;  // by routing id
    std::deque<tracked> outbox_;
    int user_fd_ = -1;  // wakes users waiting in receive()
    bool user_reads_ = false;  // a user's thread reads the socket
    bool news_ = false;        // a batch or confirmation came
    int waiting_users_ = 0;
    std::size_t taken_since_acks_ = 0;
    bool acks_lately_ = false;  // the last turn sent some
    bool took_ = false;         // the user took a batch since the last turn (on_take)
    bool took_lately_ = false;  // before the last turn
    clock::time_point next_look_{};  // the next turn while the user takes
    std::map<std::string, position_set> done_;   // by producer name: what this consumer has
    std::vector<ack_sink::entry> sending_;       // send_acks' (its storage kept)
    // Where received batches came from: a routing id and a producer name
    // (acknowledgements go to the one, positions are the other's).
    struct source {
        std::string rid, producer;
        position_set* done;  // done_[producer] (a map's elements stay put)
        std::uint64_t taken = 0;  // batches the user took, since our last hello to rid
    };
    std::vector<source> sources_;
    std::size_t last_source_ = 0;
};

}  // namespace

std::unique_ptr<delivery> make_delivery_consumer(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                                 delivery_options opt) {
    return std::make_unique<consumer_engine>(context, socket, l, std::move(opt));
}

}  // namespace tenbin::detail
