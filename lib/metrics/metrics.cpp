#include <tenbin/error.hpp>
#include <tenbin/metrics.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tenbin {

namespace {

// Prometheus' metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names the same
// without ':', and those starting with "__" are reserved.
bool name_char(char c, bool first, bool colon) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    return letter || (!first && c >= '0' && c <= '9');
}

bool valid_name(std::string_view s, bool colon) {
    if (s.empty()) return false;
    for (std::size_t i = 0; i < s.size(); ++i)
        if (!name_char(s[i], i == 0, colon)) return false;
    return true;
}

void check_labels(std::string_view family, const metric_labels& labels) {
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const std::string& n = labels[i].first;
        if (!valid_name(n, false) || n.rfind("__", 0) == 0 || n == "le")
            throw error(errc::bad_argument, "metric " + std::string(family) + ": '" + n +
                                                "' is not a label name Prometheus takes ([a-zA-Z_][a-zA-Z0-9_]*, "
                                                "not __... nor le)");
        for (std::size_t j = 0; j < i; ++j)
            if (labels[j].first == n)
                throw error(errc::bad_argument, "metric " + std::string(family) + ": label '" + n + "' given twice");
    }
}

// Whether `have` has every label of `want`.
bool has_labels(const metric_labels& have, const metric_labels& want) {
    return std::all_of(want.begin(), want.end(),
                       [&](const auto& l) { return std::find(have.begin(), have.end(), l) != have.end(); });
}

bool same_labels(const metric_labels& a, const metric_labels& b) {
    return a.size() == b.size() && has_labels(a, b);
}

std::string_view type_name(metric_type t) {
    switch (t) {
    case metric_type::counter: return "counter";
    case metric_type::gauge: return "gauge";
    case metric_type::histogram: return "histogram";
    }
    return "untyped";
}

// A number as Prometheus reads it: integers exactly, others in the
// shortest form that reads back the same; +Inf, -Inf, NaN.
void put_number(std::string& out, double v) {
    if (std::isnan(v)) {
        out += "NaN";
        return;
    }
    if (std::isinf(v)) {
        out += v > 0 ? "+Inf" : "-Inf";
        return;
    }
    char buf[32];
    const auto r = std::abs(v) < 1e15 && v == std::floor(v)
                       ? std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v))
                       : std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void put_count(std::string& out, std::uint64_t n) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, n).ptr);
}

// HELP text: backslash and line feed escaped.
void put_help(std::string& out, std::string_view s) {
    for (char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
}

// Label values: backslash, double quote and line feed escaped.
void put_label_value(std::string& out, std::string_view s) {
    for (char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
}

// {a="1",b="2"} (nothing without labels), `le` last when given.
void put_labels(std::string& out, const metric_labels& labels, const std::string* le = nullptr) {
    if (labels.empty() && !le) return;
    out += '{';
    bool first = true;
    auto one = [&](std::string_view name, std::string_view value) {
        if (!first) out += ',';
        first = false;
        out += name;
        out += "=\"";
        put_label_value(out, value);
        out += '"';
    };
    for (const auto& [n, v] : labels) one(n, v);
    if (le) one("le", *le);
    out += '}';
}

}  // namespace

metric_family& metric_set::family(std::string_view name, metric_type type, std::string_view help,
                                  std::span<const double> bounds) {
    for (metric_family& f : families_) {
        if (f.name != name) continue;
        if (f.type != type || f.help != help || !std::equal(bounds.begin(), bounds.end(), f.bounds.begin(), f.bounds.end()))
            throw error(errc::bad_argument, "metric " + std::string(name) + " is added again with another " +
                                                (f.type != type ? "type" : f.help != help ? "help" : "bucket bounds"));
        return f;
    }
    if (!valid_name(name, true))
        throw error(errc::bad_argument, "'" + std::string(name) +
                                            "' is not a metric name Prometheus takes ([a-zA-Z_:][a-zA-Z0-9_:]*)");
    if (type == metric_type::histogram) {
        if (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
            std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end() ||
            !std::all_of(bounds.begin(), bounds.end(), [](double b) { return std::isfinite(b); }))
            throw error(errc::bad_argument, "histogram " + std::string(name) +
                                                " needs finite bucket bounds in ascending order (+Inf is implied)");
    } else if (!bounds.empty()) {
        throw error(errc::bad_argument, "metric " + std::string(name) + ": only a histogram has bucket bounds");
    }
    metric_family& f = families_.emplace_back();
    f.name = name;
    f.help = help;
    f.type = type;
    f.bounds.assign(bounds.begin(), bounds.end());
    return f;
}

namespace {
metric_sample& new_sample(metric_family& f, metric_labels labels) {
    check_labels(f.name, labels);
    for (const metric_sample& s : f.samples)
        if (same_labels(s.labels, labels))
            throw error(errc::bad_argument, "metric " + f.name +
                                                " has two series of the same labels (two connections of one "
                                                "name on the same endpoints? give them names: "
                                                "connection_options::name)");
    metric_sample& s = f.samples.emplace_back();
    s.labels = std::move(labels);
    return s;
}
}  // namespace

void metric_set::add(std::string_view name, metric_type type, std::string_view help, metric_labels labels,
                     double value) {
    if (type == metric_type::histogram)
        throw error(errc::bad_argument, "histogram " + std::string(name) + ": add its buckets with add_histogram");
    new_sample(family(name, type, help), std::move(labels)).value = value;
}

void metric_set::add_histogram(std::string_view name, std::string_view help, std::span<const double> bounds,
                               metric_labels labels, std::vector<std::uint64_t> buckets, double sum) {
    metric_family& f = family(name, metric_type::histogram, help, bounds);
    if (buckets.size() != bounds.size() + 1 || !std::is_sorted(buckets.begin(), buckets.end()))
        throw error(errc::bad_argument, "histogram " + std::string(name) + ": " + std::to_string(buckets.size()) +
                                            " bucket counts for " + std::to_string(bounds.size()) +
                                            " bounds, or not cumulative (one per bound and the total, ascending)");
    metric_sample& s = new_sample(f, std::move(labels));
    s.buckets = std::move(buckets);
    s.sum = sum;
}

const metric_family* metric_set::find(std::string_view name) const noexcept {
    for (const metric_family& f : families_)
        if (f.name == name) return &f;
    return nullptr;
}

std::optional<double> metric_set::value(std::string_view name, const metric_labels& labels) const {
    const metric_family* f = find(name);
    if (!f || f->type == metric_type::histogram) return std::nullopt;
    for (const metric_sample& s : f->samples)
        if (has_labels(s.labels, labels)) return s.value;
    return std::nullopt;
}

const metric_sample* metric_set::histogram(std::string_view name, const metric_labels& labels) const {
    const metric_family* f = find(name);
    if (!f || f->type != metric_type::histogram) return nullptr;
    for (const metric_sample& s : f->samples)
        if (has_labels(s.labels, labels)) return &s;
    return nullptr;
}

metric_set collect(std::span<const std::shared_ptr<const metrics_source>> sources) {
    metric_set out;
    for (const auto& s : sources)
        if (s) s->collect(out);
    return out;
}

std::string to_prometheus_text(const metric_set& set) {
    std::string out;
    for (const metric_family& f : set.families()) {
        out += "# HELP ";
        out += f.name;
        out += ' ';
        put_help(out, f.help);
        out += "\n# TYPE ";
        out += f.name;
        out += ' ';
        out += type_name(f.type);
        out += '\n';
        for (const metric_sample& s : f.samples) {
            if (f.type != metric_type::histogram) {
                out += f.name;
                put_labels(out, s.labels);
                out += ' ';
                put_number(out, s.value);
                out += '\n';
                continue;
            }
            for (std::size_t i = 0; i < s.buckets.size(); ++i) {
                std::string le;
                if (i < f.bounds.size())
                    put_number(le, f.bounds[i]);
                else
                    le = "+Inf";
                out += f.name;
                out += "_bucket";
                put_labels(out, s.labels, &le);
                out += ' ';
                put_count(out, s.buckets[i]);
                out += '\n';
            }
            out += f.name;
            out += "_sum";
            put_labels(out, s.labels);
            out += ' ';
            put_number(out, s.sum);
            out += '\n';
            out += f.name;
            out += "_count";
            put_labels(out, s.labels);
            out += ' ';
            put_count(out, s.buckets.empty() ? 0 : s.buckets.back());
            out += '\n';
        }
    }
    return out;
}

}  // namespace tenbin
