// Acked delivery under faults, with processes of the fault peer: trainers
// killed (SIGKILL) mid-batch and restarted from their saved state, and a
// producer killed and restarted; every batch is processed once in all.
#include "faults/process.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using faults::process;

namespace {

constexpr int batches = 2000;

struct trainer {
    std::string state;  // its checkpoint: what it processed, and its loader's state
    std::optional<process> p;
};

std::vector<std::string> trainer_args(const std::string& url, const trainer& t) {
    return {faults::peer_path(), "trainer", url, "--state", t.state, "--work-ms", "4",
            "--idle-ms", "30000", "--heartbeat-ms", "200"};
}

// How often each batch was processed, by every trainer's checkpoint.
std::map<int, int> processed(const std::vector<trainer>& trainers) {
    std::map<int, int> n;
    for (const trainer& t : trainers) {
        const nlohmann::json checkpoint = nlohmann::json::parse(std::ifstream(t.state));
        for (int v : checkpoint["processed"]) ++n[v];
    }
    return n;
}

void check_each_once(const std::map<int, int>& n) {
    int missing = 0, repeated = 0;
    for (int v = 0; v < batches; ++v) {
        const auto it = n.find(v);
        if (it == n.end()) ++missing;
        else if (it->second > 1) ++repeated;
    }
    CHECK(missing == 0);
    CHECK(repeated == 0);
    CHECK(n.size() == static_cast<std::size_t>(batches));
}

std::string fresh_name(const test_support::temp_dir& dir, const std::string& what) {
    static int n = 0;
    return (dir.path() / (what + std::to_string(n++))).string();
}

}  // namespace

TEST_CASE("acked: trainers killed mid-batch and restarted from their state; every batch processed once, the producer bounded") {
    for (const char* transport : {"tcp", "shm"}) {
        CAPTURE(transport);
        const test_support::temp_dir dir("tenbin-acked");
        const bool shm = std::string(transport) == "shm";
        const std::string bind = shm ? "zrpush+shm://" + fresh_name(dir, "s") : "zrpush://127.0.0.1:*";
        process producer({faults::peer_path(), "producer", bind, "--count", std::to_string(batches),
                          "--heartbeat-ms", "200"});
        const auto endpoint = producer.expect("endpoint ", 10s);
        REQUIRE(endpoint);
        const std::string at = endpoint->substr(9);
        const std::string url = shm ? "zrpull+shm://" + at.substr(6) : "zrpull://" + at.substr(6);
        std::vector<trainer> trainers(4);
        for (trainer& t : trainers) {
            t.state = fresh_name(dir, "state");
            t.p.emplace(trainer_args(url, t));
        }
        // Kill one trainer after another while it works on a batch, and
        // start it again from its saved state.
        for (int kill = 0; kill < 6; ++kill) {
            std::this_thread::sleep_for(250ms);
            trainer& t = trainers[static_cast<std::size_t>(kill) % trainers.size()];
            // Held in the work of its next batch, so the kill lands there,
            // before it records the batch (a kill just after would leave a
            // batch recorded and not yet acknowledged: processed twice).
            const std::string hold = t.state + ".hold";
            std::ofstream{hold};
            const bool held = t.p->expect("held ", 10s).has_value();
            if (held) t.p->kill();
            std::filesystem::remove(hold);
            if (!held) break;  // done already
            t.p.emplace(trainer_args(url, t));
        }
        for (trainer& t : trainers) {
            CHECK(t.p->expect("end", 60s));
            CHECK(t.p->wait(10s) == 0);
        }
        const auto stats = producer.expect("stats ", 30s);
        REQUIRE(stats);
        MESSAGE(*stats);
        CHECK(stats->find("redelivered=0 ") == std::string::npos);  // the kills took batches back
        CHECK(producer.wait(10s) == 0);
        check_each_once(processed(trainers));
        // 2,000 batches of 4 KiB went through; what stays in the producer
        // is a credit's worth per trainer.
        CHECK(producer.max_rss() < (200L << 20));
    }
}

TEST_CASE("acked: a producer killed and restarted mid-stream replays; the trainers carry on, nothing lost or repeated") {
    const test_support::temp_dir dir("tenbin-acked");
    std::optional<process> producer;
    producer.emplace(std::vector<std::string>{faults::peer_path(), "producer", "zrpush://127.0.0.1:*", "--count",
                                              std::to_string(batches), "--heartbeat-ms", "200"});
    const auto endpoint = producer->expect("endpoint ", 10s);
    REQUIRE(endpoint);
    const std::string at = endpoint->substr(9);
    std::vector<trainer> trainers(2);
    for (trainer& t : trainers) {
        t.state = fresh_name(dir, "state");
        t.p.emplace(trainer_args("zrpull://" + at.substr(6), t));
    }
    // About a third in, the producer dies; the same one starts again on
    // its address and replays from its first batch.
    for (int i = 0; i < 300; ++i) REQUIRE(trainers[static_cast<std::size_t>(i % 2)].p->expect("processing ", 10s));
    producer->kill();
    producer.emplace(std::vector<std::string>{faults::peer_path(), "producer", "zrpush://" + at.substr(6), "--count",
                                              std::to_string(batches), "--heartbeat-ms", "200"});
    for (trainer& t : trainers) {
        CHECK(t.p->expect("end", 60s));
        CHECK(t.p->wait(10s) == 0);
    }
    const auto stats = producer->expect("stats ", 30s);
    REQUIRE(stats);
    MESSAGE(*stats);
    CHECK(stats->find("skipped=0") == std::string::npos);  // what the trainers had was not sent again
    check_each_once(processed(trainers));
}
