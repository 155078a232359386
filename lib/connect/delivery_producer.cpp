// The producer's delivery thread (see delivery.hpp).
#include "connect/connect_detail.hpp"
#include "connect/delivery_engine.hpp"
#include "core/codec_detail.hpp"

#include <algorithm>
#include <deque>
#include <memory_resource>

namespace tenbin::detail {

namespace {

batch_id id_of(const stream_position& p) { return {p.epoch, p.seq}; }

class producer_engine final : public delivery_engine {
public:
    producer_engine(zmq::context_t& context, zmq::socket_ref socket, link& l, delivery_options opt)
        : delivery_engine(context, socket, l, std::move(opt)),
          // A restarted producer first hears what its consumers have: those
          // connected say hello (or answer ours) within two heartbeats.
          assign_from_(clock::now() + 2 * opt_.heartbeat) {
        begin();
    }
    ~producer_engine() override { stop(std::chrono::milliseconds(0)); }

    bool send(tensor_span tensors, const stream_position& pos,
              std::optional<std::chrono::milliseconds> timeout) override {
        const bool small = data_bytes(tensors) <= direct_bytes;
        std::vector<tensor> large;
        if (!small) large = keep(tensors);  // until acknowledged (borrowed bytes copied outside the lock)
        std::unique_lock lock(mutex_);
        const auto room = [&] { return stopping_ || inbox_.size() < inbox_bound; };
        if (timeout) {
            if (!changed_.wait_for(lock, *timeout, room)) return false;
        } else {
            changed_.wait(lock, room);
        }
        if (stopping_) throw error(errc::closed, "cannot send: the connection is closing");
        batch b = spare();
        b.position = pos;
        if (small) {
            keep_into(tensors, b.tensors);
        } else {
            b.tensors = std::move(large);
        }
        // A small batch goes straight to a consumer with credit when nothing
        // waits before it: the thread's hop costs more than the batch (perf).
        // A large one is the thread's to send (over +shm, to copy) while
        // this thread makes the next.
        if (small && inbox_.empty() && redeliver_.empty() && marks_.empty()) {
            const auto now = clock::now();
            // Acknowledgements that came meanwhile are read when credit
            // runs out, every few batches and every millisecond (it costs a
            // syscall): a send may have taken the thread's wake-up for them.
            placed p = place(b, now);
            if (p == placed::nowhere) {
                receive_waiting(now);
                checked_ = now;
                p = place(b, now);
            } else if (++direct_ % 8 == 0 || now - checked_ >= std::chrono::milliseconds(1)) {
                receive_waiting(now);
                checked_ = now;
            }
            // The thread's turn sends the pack if no batch fills it: one within a millisecond.
            if (std::exchange(pack_begun_, false) && napping_) wake();
            if (p != placed::nowhere) return true;
        }
        // The thread is due already when the inbox has batches: it takes them all.
        const bool first = inbox_.empty();
        inbox_.push_back(std::move(b));
        lock.unlock();
        if (first) wake();
        return true;
    }

    void mark(const stream_position& end) override {
        {
            std::lock_guard lock(mutex_);
            marks_.push_back(end);
        }
        wake();
    }

    std::optional<tracked> receive(std::optional<std::chrono::milliseconds>) override {
        throw error(errc::bad_argument, "an acked producer does not receive");
    }
    void seed(const stream_state&) override {}

    std::vector<consumer_info> consumers() const override {
        std::lock_guard lock(mutex_);
        std::vector<consumer_info> out;
        const auto wall = std::chrono::system_clock::now();
        const auto now = clock::now();
        for (const auto& [rid, c] : consumers_) {
            consumer_info i;
            i.name = c.name;
            i.connected_since = c.since;
            i.last_heard = wall - std::chrono::duration_cast<std::chrono::system_clock::duration>(now - c.heard);
            i.in_flight = c.in_flight.size();
            i.credits = c.window > i.in_flight ? c.window - i.in_flight : 0;
            i.acknowledged = c.acknowledged;
            i.redelivered = c.redelivered;
            out.push_back(std::move(i));
        }
        return out;
    }
    delivery_counters counters() const override {
        std::lock_guard lock(mutex_);
        return counters_;
    }

private:
    // Batches waiting for a consumer (the user's send returns once one is
    // here: a queue on this side, towards nobody).
    static constexpr std::size_t inbox_bound = 16;
    static constexpr std::uint64_t direct_bytes = 64 * 1024;  // a batch sent on the user's thread, at most
    bool blocked_ = false;  // the last batch found its consumer's queue full
    std::uint64_t direct_ = 0;  // batches the user's thread gave a consumer
    clock::time_point checked_{};  // when it last read what came
    std::map<std::string, clock::time_point> asked_;  // our last hello to a consumer we connected to
    // A batch this small, to a consumer with batches in hand (two or more
    // unacknowledged), waits in that consumer's pack: one ZeroMQ message
    // for many (perf: a message costs more than a small batch). The pack
    // goes once it holds as many as the consumer had in hand when it began
    // (it is done about when they are), pack_batches or pack_bytes, when
    // the consumer's credit is used up, before anything else to it, or a
    // turn after pack_wait (a producer that paused).
    static constexpr std::uint64_t pack_batch_bytes = 16 * 1024;
    static constexpr std::size_t pack_batches = 256, pack_bytes = 256 * 1024;
    static constexpr auto pack_wait = std::chrono::microseconds(500);
    // A confirmation goes at once; a large batch to the same consumer
    // waits `settle` after it when that consumer's user held the batches
    // it acknowledged a while (a trainer's step: its ack says) and it has
    // others to take next. Else the batch's transfer (or copy into shared
    // memory) keeps the cores busy, and the consumer's thread that waits
    // for the confirmation runs only once it is done (perf: on two cores a
    // trainer's take waited 500 us for it instead of 100). A consumer that
    // drops each batch at once drains its window: its batches go at once.
    static constexpr auto settle = std::chrono::microseconds(400);
    clock::time_point settled_ = clock::time_point::max();  // the next end of a settle a batch waits for
    bool pack_begun_ = false;  // by the user's thread: the thread is woken to see to it

    struct batch {
        std::vector<tensor> tensors;
        stream_position position;
        bool again = false;  // given to a consumer that was lost
    };
    struct consumer : peer_base {
        explicit consumer(std::pmr::memory_resource* nodes) : in_flight(nodes) {}
        std::size_t window = 0;
        std::pmr::map<batch_id, batch> in_flight;
        std::uint64_t acknowledged = 0, redelivered = 0;
        std::uint64_t acks_had = 0;  // in ack messages, bad ones too: confirmed back
        bool packs = false;          // it takes packs (its hello says)
        bool unconfirmed = false;    // it wants no confirmations (its hello says)
        bool reports_taken = false;  // its heartbeats count the batches its user took (its hello says)
        std::uint64_t given = 0, taken = 0;  // batches given to it, and taken by its user (its last word), since its hello
        pack_writer pack;            // batches given to it, not sent yet
        clock::time_point pack_since{};
        std::size_t pack_most = 0;  // the batches it had in hand when the pack began
        // What could not go yet (its queue was full), sent before any batch:
        // a confirmation of acks_had, end marks.
        bool confirm_owed = false;
        std::deque<stream_position> marks_owed;
        bool told_end = false;  // the stream's end was given to it
        clock::time_point settle_until{};  // large batches wait for it (see settle)
        std::size_t free() const { return window > in_flight.size() ? window - in_flight.size() : 0; }
        bool owes() const { return confirm_owed || !marks_owed.empty(); }
    };

    void on_control(const std::string& rid, control c, clock::time_point now) override {
        auto it = consumers_.find(rid);
        switch (c.type) {
        case control_type::hello: {
            if (c.role != peer_role::consumer) {
                ++counters_.bad_messages;  // another producer, or nonsense
                return;
            }
            if (it != consumers_.end() && it->second.incarnation != c.incarnation) lose(it);  // it restarted
            it = consumers_.find(rid);
            if (it == consumers_.end()) {
                it = consumers_.try_emplace(rid, &in_flight_nodes_).first;
                it->second.since = std::chrono::system_clock::now();
            }
            consumer& k = it->second;
            k.name = c.name;
            k.incarnation = c.incarnation;
            k.window = c.window;
            k.packs = c.packs;
            k.unconfirmed = c.unconfirmed;
            k.reports_taken = c.reports_taken;
            k.beat = std::chrono::milliseconds(c.heartbeat_ms);
            k.given = k.taken = 0;  // it counts what it takes from its hello on
            k.heard = now;
            k.answered = true;
            if (const auto r = c.taken.find(opt_.name); r != c.taken.end()) done_.add(r->second);
            if (c.answer) {
                send_control(rid, hello(false));
                k.sent = now;
            }
            return;  // the stream's end, if it came, is the turn's to give
        }
        case control_type::heartbeat:
            if (it == consumers_.end()) {
                // A consumer of an earlier incarnation of ours: it says hello again when asked.
                send_control(rid, hello(true));
                return;
            }
            it->second.heard = now;
            it->second.taken = c.tally;
            return;
        case control_type::ack:
            if (it == consumers_.end()) {
                counters_.bad_acks += c.acks.size();
                return;
            }
            it->second.heard = now;
            it->second.acks_had += c.acks.size();
            it->second.confirm_owed = !it->second.unconfirmed;
            send_owed(rid, it->second);
            if (!it->second.unconfirmed && std::chrono::microseconds(c.held_us) >= 2 * settle &&
                it->second.in_flight.size() > c.acks.size() + 1)
                it->second.settle_until = now + settle;
            for (const batch_id& a : c.acks) {
                auto done = it->second.in_flight.extract(a);
                if (done.empty()) {
                    ++counters_.bad_acks;  // never sent to it, or acknowledged before
                    continue;
                }
                recycle(std::move(done.mapped()));
                done_.add(a);
                ++it->second.acknowledged;
                ++counters_.acknowledged;
            }
            return;
        case control_type::bye:
            if (it != consumers_.end()) lose(it);
            return;
        case control_type::confirm: ++counters_.bad_messages; return;
        }
    }

    void on_data(const std::string&, message&&, std::vector<zmq::message_t>&, clock::time_point) override {
        ++counters_.bad_messages;  // consumers send no batches
    }

    // A consumer gone: what it held goes first to the others.
    void lose(std::map<std::string, consumer>::iterator it) {
        ++counters_.consumers_lost;
        auto& held = it->second.in_flight;
        for (auto b = held.rbegin(); b != held.rend(); ++b) {
            b->second.again = true;
            redeliver_.push_front(std::move(b->second));
        }
        consumers_.erase(it);
    }

    // A batch to fill, from those acknowledged: its tensor list and its
    // producer's name keep their storage (perf: with
    // reuse_large_allocations() every thread shares one heap lock, and a
    // host's name is often too long for a string's own room).
    batch spare() {
        if (spares_.empty()) return {};
        batch b = std::move(spares_.back());
        spares_.pop_back();
        return b;
    }
    void recycle(batch&& b) {
        b.tensors.clear();  // the tensors' bytes go now
        b.again = false;
        if (spares_.size() < max_spares) spares_.push_back(std::move(b));
    }

    clock::time_point due() const override { return settled_; }
    // Also while something is owed: a ROUTER cannot say when a queue has room again.
    bool hurried() const override {
        return blocked_ || std::any_of(consumers_.begin(), consumers_.end(),
                                       [](const auto& k) { return k.second.owes() || !k.second.pack.empty(); });
    }

    // Sends what `k` is owed, in order; false while its queue is full.
    // A consumer waits for its confirmation before it takes another batch
    // (on_release): one lost would cost it two heartbeats.
    bool send_owed(const std::string& rid, consumer& k) {
        if (k.confirm_owed) {
            control confirm;
            confirm.type = control_type::confirm;
            confirm.confirmed = k.acks_had;
            if (send_control(rid, confirm) != sent::yes) return false;
            k.confirm_owed = false;
        }
        if (!k.marks_owed.empty() && !send_pack(rid, k)) return false;  // its batches first
        while (!k.marks_owed.empty()) {
            if (!give(rid, {}, k.marks_owed.front())) return false;
            k.marks_owed.pop_front();
        }
        return true;
    }

    void turn(clock::time_point now, bool probe) override {
        // Consumers this end connected to (they bind) wait for our hello.
        const auto retry = hello_retry();
        for (const std::string& rid : opt_.connected)
            if (auto& asked = asked_[rid]; !consumers_.count(rid) && now - asked >= retry) {
                send_control(rid, hello(true));
                asked = now;
            }
        for (auto it = consumers_.begin(); it != consumers_.end();) {
            auto here = it++;
            consumer& k = here->second;
            // A dropped connection refuses the probe (ROUTER_MANDATORY); a
            // full queue is no refusal: its consumer lives, and redelivering
            // what it holds would give those batches twice.
            const bool refused = probe && heartbeat(here->first, k, now) == sent::gone;
            if (refused || dead(k, now, 2)) lose(here);  // a trainer's batches move on within two beats
        }
        for (auto& [rid, k] : consumers_) send_owed(rid, k);
        for (auto& [rid, k] : consumers_)
            if (!k.pack.empty() && (now - k.pack_since >= pack_wait || stopping_) && !send_pack(rid, k)) blocked_ = true;
        assign(now);
        pack_begun_ = false;  // this turn's packs: hurried() brings the next turn
        give_marks(now);
        give_stream_end();
        for (auto& [rid, k] : consumers_)
            if (beat_due(k.sent, now)) heartbeat(rid, k, now);
    }

    sent heartbeat(const std::string& rid, consumer& k, clock::time_point now) {
        control c;
        c.type = control_type::heartbeat;
        c.incarnation = opt_.incarnation;
        c.tally = epochs_done_;
        k.sent = now;
        return send_control(rid, c);
    }

    // A producer hands out nothing for two heartbeats, so that restarted
    // consumers can say what they have; or, told whom to wait for, until
    // those said hello (what they have with it).
    bool may_assign(clock::time_point now) {
        if (audience_came_) return true;
        if (opt_.wait_for == 0 && opt_.wait_for_names.empty()) return now >= assign_from_;
        const auto came = [&](const std::string& name) {
            return std::any_of(consumers_.begin(), consumers_.end(),
                               [&](const auto& k) { return k.second.answered && k.second.name == name; });
        };
        const auto answered = std::count_if(consumers_.begin(), consumers_.end(),
                                            [](const auto& k) { return k.second.answered; });
        audience_came_ = static_cast<std::size_t>(answered) >= opt_.wait_for &&
                         std::all_of(opt_.wait_for_names.begin(), opt_.wait_for_names.end(), came);
        return audience_came_;
    }

    // Batches to consumers with credit, the lost ones' first.
    void assign(clock::time_point now) {
        blocked_ = false;
        settled_ = clock::time_point::max();
        for (;;) {
            std::deque<batch>& from = !redeliver_.empty() ? redeliver_ : inbox_;
            if (from.empty() || place(from.front(), now) == placed::nowhere) return;
            from.pop_front();  // room in the inbox: the turn's end tells the user's thread
        }
    }

    // Gives `b` to the consumer with the most credit (it moves into that
    // consumer's in-flight batches), or skips it as had already.
    enum class placed { given, skipped, nowhere };
    placed place(batch& b, clock::time_point now) {
        if (!may_assign(now)) return placed::nowhere;
        const batch_id id = id_of(b.position);
        if (done_.contains(id)) {
            ++counters_.skipped;
            return placed::skipped;
        }
        // The consumer with the most credit; a tie goes to the first after
        // the last one given to, so that idle consumers take turns.
        auto best = consumers_.end();
        auto it = consumers_.upper_bound(last_given_);
        const std::uint64_t bytes = data_bytes(b.tensors);
        const bool large = bytes > direct_bytes;
        for (std::size_t n = 0; n < consumers_.size(); ++n, ++it) {
            if (it == consumers_.end()) it = consumers_.begin();
            const consumer& k = it->second;
            if (!k.answered || k.free() == 0 || k.owes()) continue;
            if (large && now < k.settle_until) {
                settled_ = std::min(settled_, k.settle_until);
                continue;
            }
            if (best == consumers_.end() || k.free() > best->second.free()) best = it;
        }
        if (best == consumers_.end()) return placed::nowhere;  // nobody asks now
        last_given_ = best->first;
        consumer& k = best->second;
        if (k.packs && bytes <= pack_batch_bytes && k.in_flight.size() >= 2) {
            if (k.pack.empty()) {
                k.pack_since = now;
                k.pack_most = std::min(pack_batches, k.in_flight.size());
                pack_begun_ = true;
            }
            k.pack.append(b.tensors, b.position);
            if (k.pack.count() == 1) k.pack.expect(std::min(k.pack_most, pack_bytes / k.pack.frame().size() + 1));
            const bool full = k.pack.count() >= k.pack_most || k.pack.frame().size() >= pack_bytes || k.free() == 1;
            if (full && !send_pack(best->first, k)) blocked_ = true;  // in the pack, sent by the thread
        } else if (!send_pack(best->first, k) || !give(best->first, b.tensors, b.position)) {
            // Full towards it (its ZeroMQ queue): the thread tries again soon.
            blocked_ = true;
            return placed::nowhere;
        }
        ++counters_.sent;
        ++k.given;
        if (b.again) {
            ++counters_.redelivered;
            ++best->second.redelivered;
        }
        best->second.in_flight.emplace(id, std::move(b));
        return placed::given;
    }

    // False while its queue is full (or it is gone: its probe or silence tells).
    bool send_pack(const std::string& rid, consumer& k) {
        if (k.pack.empty()) return true;
        return send_frame(rid, [&] { return k.pack.release(); }) == sent::yes;
    }

    bool give(const std::string& rid, const std::vector<tensor>& tensors, const stream_position& pos) {
        const zmq::const_buffer to(rid.data(), rid.size());
        send_options so;
        so.flags = zmq::send_flags::dontwait;
        so.envelope = {&to, 1};
        so.position = &pos;
        try {
            return link_.send(socket_, tensors, so, std::chrono::milliseconds(0));
        } catch (const zmq::error_t& e) {
            if (e.num() == EHOSTUNREACH) return false;  // gone: its probe or silence tells
            throw;
        }
    }

    // An end mark to `k`, after what it is owed (kept until its queue has room).
    void give_mark(const std::string& rid, consumer& k, const stream_position& m) {
        k.marks_owed.push_back(m);
        send_owed(rid, k);
    }

    // Whether a batch of `epoch` or one before is still to be sent (`sent`:
    // or to be acknowledged).
    bool open(std::uint64_t epoch, bool sent) const {
        const auto of = [epoch](const batch& b) { return b.position.epoch <= epoch; };
        if (std::any_of(inbox_.begin(), inbox_.end(), of) || std::any_of(redeliver_.begin(), redeliver_.end(), of))
            return true;
        if (!sent) return false;
        for (const auto& [rid, k] : consumers_)
            for (const auto& [id, b] : k.in_flight)
                if (id.epoch <= epoch) return true;
        return false;
    }

    // An end mark goes to every consumer once its epoch's batches were all
    // handed out, after them (ZeroMQ keeps each consumer's order); one
    // redelivered later comes late. Heartbeats tell consumers which epochs
    // are acknowledged whole.
    void give_marks(clock::time_point now) {
        while (!marks_.empty() && !open(marks_.front().epoch, false)) {
            if (marks_.front().kind == stream_position::mark::stream_end) {
                ended_stream_ = marks_.front();
                ended_at_ = now;
            } else {
                for (auto& [rid, k] : consumers_) give_mark(rid, k, marks_.front());
            }
            given_.push_back(marks_.front().epoch);
            marks_.pop_front();
        }
        while (!given_.empty() && !open(given_.front(), true)) {
            epochs_done_ = given_.front() + 1;
            done_.add_epochs_before(epochs_done_);
            given_.pop_front();
        }
    }

    // The stream's end goes to a consumer once no batch is left that could
    // still come to it: a consumer told the end stops taking, and one that
    // died holding batches (found within two heartbeats) leaves them to
    // those still there. So it waits while another holds unacknowledged
    // batches its user has not taken: an on_take consumer's (acknowledged
    // as taken), an on_release one's until its heartbeat says its user
    // took all it was given (what the user holds then may be held until
    // the end: waiting for it would wait for ever). One of an earlier
    // version, which does not say, until it was heard after the end.
    void give_stream_end() {
        if (!ended_stream_ || !inbox_.empty() || !redeliver_.empty()) return;
        const auto unsettled = [&](const consumer& j) {
            if (j.in_flight.empty()) return false;
            if (j.unconfirmed) return true;
            return j.reports_taken ? j.taken < j.given : j.heard <= ended_at_;
        };
        for (auto& it : consumers_) {
            consumer& k = it.second;
            if (k.told_end || !k.answered) continue;
            const bool waits = std::any_of(consumers_.begin(), consumers_.end(),
                                           [&](const auto& j) { return &j.second != &k && unsettled(j.second); });
            if (waits) continue;
            give_mark(it.first, k, *ended_stream_);
            k.told_end = true;
        }
    }

    bool drained() const override {
        if (!inbox_.empty() || !redeliver_.empty() || !marks_.empty()) return false;
        return std::all_of(consumers_.begin(), consumers_.end(), [](const auto& k) { return k.second.in_flight.empty(); });
    }

    void leave() override {
        control bye;
        bye.type = control_type::bye;
        for (const auto& [rid, k] : consumers_) send_control(rid, bye);
    }

    // The in-flight batches' map nodes, reused (perf: no allocation a batch;
    // reuse_large_allocations() leaves one heap lock for every thread).
    std::pmr::unsynchronized_pool_resource in_flight_nodes_;
    static constexpr std::size_t max_spares = 1024;  // a window of the largest credits usual
    std::vector<batch> spares_;                  // see spare()
    std::map<std::string, consumer> consumers_;  // by routing id
    std::string last_given_;                     // the routing id place() chose last
    bool audience_came_ = false;                 // may_assign() said so once
    std::deque<batch> inbox_, redeliver_;
    std::deque<stream_position> marks_;
    std::deque<std::uint64_t> given_;  // epochs whose end mark went, not all acknowledged yet
    std::uint64_t epochs_done_ = 0;    // every batch of the epochs before was acknowledged
    std::optional<stream_position> ended_stream_;  // all handed out: told to consumers by give_stream_end
    clock::time_point ended_at_{};
    position_set done_;  // acknowledged, or reported by consumers
    clock::time_point assign_from_;
};

}  // namespace

std::unique_ptr<delivery> make_delivery_producer(zmq::context_t& context, zmq::socket_ref socket, link& l,
                                                 delivery_options opt) {
    return std::make_unique<producer_engine>(context, socket, l, std::move(opt));
}

}  // namespace tenbin::detail
