// A consumer's stream state as JSON, for checkpoints and the CLI.
#include <tenbin/error.hpp>
#include <tenbin/stream.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tenbin {

std::string to_json(const stream_state& state) {
    nlohmann::ordered_json j;
    j["epoch"] = state.epoch;
    j["producers"] = nlohmann::ordered_json::object();
    for (const auto& [name, p] : state.producers)
        j["producers"][name] = {{"epoch", p.epoch}, {"next", p.next}, {"taken", p.taken}, {"finished", p.finished}};
    return j.dump();
}

stream_state stream_state_from_json(std::string_view text) {
    const auto bad = [](const std::string& why) { return error(errc::bad_argument, "a stream state: " + why); };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw bad(std::string("not JSON (") + e.what() + ")");
    }
    auto number = [&](const nlohmann::json& parent, const char* key, const std::string& where) {
        if (!parent.is_object() || !parent.contains(key) || !parent[key].is_number_unsigned())
            throw bad(where + "\"" + key + "\" is not a non-negative integer");
        return parent[key].get<std::uint64_t>();
    };
    stream_state s;
    s.epoch = number(j, "epoch", "");
    if (!j.contains("producers") || !j["producers"].is_object()) throw bad("\"producers\" is not an object");
    for (const auto& [name, p] : j["producers"].items()) {
        const std::string where = "producer '" + name + "': ";
        producer_state ps;
        ps.epoch = number(p, "epoch", where);
        ps.next = number(p, "next", where);
        if (p.contains("taken")) {
            if (!p["taken"].is_array()) throw bad(where + "\"taken\" is not a list");
            for (const auto& k : p["taken"]) {
                if (!k.is_number_unsigned()) throw bad(where + "\"taken\" holds something other than integers");
                ps.taken.push_back(k.get<std::uint64_t>());
            }
            std::sort(ps.taken.begin(), ps.taken.end());
        }
        if (p.contains("finished")) {
            if (!p["finished"].is_boolean()) throw bad(where + "\"finished\" is not true or false");
            ps.finished = p["finished"].get<bool>();
        }
        s.producers.emplace(name, std::move(ps));
    }
    return s;
}

}  // namespace tenbin
