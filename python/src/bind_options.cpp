// ConnectionOptions: tenbin::connection_options as Python sets it, one
// property per keyword of tenbin.Connection and tenbin.Loader (times in
// seconds), each value checked as it is set.
#include "arrays.hpp"
#include "connection.hpp"

#include <tenbin/security.hpp>

#include <climits>

namespace tenbin_py {

bool truth(const py::handle& v) {
    const int t = PyObject_IsTrue(v.ptr());
    if (t < 0) throw py::error_already_set();
    return t != 0;
}

std::optional<tenbin::socket_kind> kind_arg(const py::handle& v) {
    if (v.is_none()) return std::nullopt;
    const auto k = py::isinstance<py::str>(v) ? tenbin::parse_socket_kind(v.cast<std::string>()) : std::nullopt;
    if (!k)
        raise_error(tenbin::errc::bad_argument,
                    "kind=" + py::repr(v).cast<std::string>() + ": one of push, pull, pub, sub, req, rep, dealer, router, pair");
    return k;
}

tenbin::connection_options py_options::checked() const {
    if (options.curve && options.curve->keys.public_key.empty())
        raise_error(tenbin::errc::bad_argument,
                    std::string("CURVE needs this side's secret certificate: give curve_cert beside ") +
                        (curve_allow.is_none() ? "curve_server" : "curve_allow") +
                        " (tenbin keygen, or zmq.auth.create_certificates, writes one)");
    return options;
}

namespace {

std::uint64_t int_arg(const py::handle& v, const char* keyword, std::uint64_t most = UINT64_MAX) {
    const auto refuse = [&](const std::string& why) {
        raise_error(tenbin::errc::bad_argument, std::string(keyword) + "=" + py::repr(v).cast<std::string>() + ": " + why);
    };
    if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) refuse("an integer is needed");
    const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    if (PyObject_RichCompareBool(i.ptr(), py::int_(0).ptr(), Py_LT) == 1) refuse("must not be negative");
    const unsigned long long n = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred() || n > most) {
        PyErr_Clear();
        refuse("at most " + std::to_string(most));
    }
    return n;
}

std::string path_arg(const py::handle& v) {
    return py::module_::import("os").attr("fspath")(v).cast<std::string>();
}

py::object seconds_of(std::optional<std::chrono::milliseconds> t) {
    if (!t) return py::none();
    return py::float_(static_cast<double>(t->count()) / 1000.0);
}

tenbin::curve_options& curve_of(tenbin::connection_options& o) {
    if (!o.curve) o.curve.emplace();
    return *o.curve;
}

}  // namespace

void bind_options(py::module_& m) {
    using O = py_options;
    py::class_<O> c(m, "ConnectionOptions");
    c.def(py::init<>());
    // Each property: the Python keyword, what reads it, what sets it.
#define TENBIN_BOOL(name, field)                                                                    \
    c.def_property(name, [](const O& o) { return o.options.field; },                               \
                   [](O& o, const py::handle& v) { o.options.field = truth(v); })
#define TENBIN_INT(name, field, most)                                                               \
    c.def_property(name, [](const O& o) { return static_cast<std::uint64_t>(o.options.field); },  \
                   [](O& o, const py::handle& v) { o.options.field = static_cast<decltype(o.options.field)>(int_arg(v, name, most)); })
    TENBIN_BOOL("multipart", multipart);
    TENBIN_BOOL("allow64", allow64);
    TENBIN_BOOL("tensorcom_compatible", tensorcom_compatible);
    TENBIN_BOOL("pub_nodrop", pub_nodrop);
    TENBIN_BOOL("immediate", immediate);
    TENBIN_INT("max_tensors", decode.limits.max_tensors, SIZE_MAX);
    TENBIN_INT("max_rank", decode.limits.max_rank, SIZE_MAX);
    TENBIN_INT("max_bytes", decode.limits.max_bytes, UINT64_MAX);
    TENBIN_INT("send_hwm", send_hwm, INT_MAX);
    TENBIN_INT("recv_hwm", recv_hwm, INT_MAX);
    TENBIN_INT("stats_horizon", stats_horizon, SIZE_MAX);
    TENBIN_INT("shm_pool_bytes", shm_pool_bytes, SIZE_MAX);
    TENBIN_INT("shm_max_peers", shm_max_peers, SIZE_MAX);
    TENBIN_INT("shm_max_held_bytes", shm_max_held_bytes, UINT64_MAX);
    TENBIN_INT("shm_max_senders", shm_max_senders, SIZE_MAX);
    TENBIN_INT("shm_max_mappings", shm_max_mappings, SIZE_MAX);
    TENBIN_INT("shm_max_mapped_bytes", shm_max_mapped_bytes, UINT64_MAX);
    TENBIN_BOOL("count_peers", count_peers);
    TENBIN_BOOL("stream", stream);
    TENBIN_INT("expect_producers", streams.expect_producers, SIZE_MAX);
    TENBIN_INT("rank", streams.rank, SIZE_MAX);
    TENBIN_INT("world_size", streams.world_size, SIZE_MAX);
    TENBIN_BOOL("drop_last", streams.drop_last);
    TENBIN_BOOL("acked", acked);
    TENBIN_INT("credit", credit, SIZE_MAX);
    TENBIN_INT("wait_for", wait_for, SIZE_MAX);
    TENBIN_INT("replay_window", replay_window, SIZE_MAX);
#undef TENBIN_BOOL
#undef TENBIN_INT
    c.def_property(
        "infos", [](const O& o) -> py::object { return o.options.infos.empty() ? py::none() : py::cast(o.options.infos); },
        [](O& o, const py::handle& v) { o.options.infos = strings_arg(v, "infos").value_or(std::vector<std::string>{}); });
    c.def_property(
        "expect_infos", [](const O& o) { return py::cast(o.options.decode.expect_infos); },
        [](O& o, const py::handle& v) { o.options.decode.expect_infos = strings_arg(v, "expect_infos"); });
    c.def_property(
        "wait_for_names", [](const O& o) { return py::cast(o.options.wait_for_names); },
        [](O& o, const py::handle& v) {
            o.options.wait_for_names = strings_arg(v, "wait_for_names").value_or(std::vector<std::string>{});
        });
    // A state_dict() as JSON (the Python side turns a dict into it).
    c.def_property(
        "resume_from",
        [](const O& o) -> py::object {
            return o.options.resume_from ? py::object(py::str(tenbin::to_json(*o.options.resume_from))) : py::none();
        },
        [](O& o, const py::handle& v) {
            if (v.is_none()) return o.options.resume_from.reset();
            if (!py::isinstance<py::str>(v))
                raise_error(tenbin::errc::bad_argument, "resume_from must be a state_dict() (or its JSON) or None");
            o.options.resume_from = tenbin::stream_state_from_json(v.cast<std::string>());
        });
    // Names: None for none (the library makes one up where it needs one).
    const auto name_property = [&](const char* keyword, std::string tenbin::connection_options::*field) {
        c.def_property(
            keyword,
            [field](const O& o) -> py::object {
                return (o.options.*field).empty() ? py::object(py::none()) : py::str(o.options.*field);
            },
            [field, keyword](O& o, const py::handle& v) {
                if (!v.is_none() && !py::isinstance<py::str>(v))
                    raise_error(tenbin::errc::bad_argument, std::string(keyword) + " must be a string or None");
                o.options.*field = v.is_none() ? std::string() : v.cast<std::string>();
            });
    };
    name_property("producer", &tenbin::connection_options::producer);
    name_property("name", &tenbin::connection_options::name);
    c.def_property(
        "ack",
        [](const O& o) { return o.options.ack == tenbin::ack_mode::on_take ? "take" : "release"; },
        [](O& o, const py::handle& v) {
            const std::string mode = py::isinstance<py::str>(v) ? v.cast<std::string>() : "";
            if (mode != "take" && mode != "release")
                raise_error(tenbin::errc::bad_argument, "ack=" + py::repr(v).cast<std::string>() +
                                                            ": \"release\" (when the batch's arrays are dropped) or "
                                                            "\"take\" (when recv or next gives it)");
            o.options.ack = mode == "take" ? tenbin::ack_mode::on_take : tenbin::ack_mode::on_release;
        });
    c.def_property(
        "kind",
        [](const O& o) -> py::object {
            return o.options.kind ? py::str(std::string(tenbin::name(*o.options.kind))) : py::object(py::none());
        },
        [](O& o, const py::handle& v) { o.options.kind = kind_arg(v); });
    c.def_property(
        "bind", [](const O& o) { return py::cast(o.options.bind); },
        [](O& o, const py::handle& v) { o.options.bind = v.is_none() ? std::nullopt : std::optional<bool>(truth(v)); });
    c.def_property(
        "topic", [](const O& o) { return o.options.topic; },
        [](O& o, const py::handle& v) {
            if (!py::isinstance<py::str>(v)) raise_error(tenbin::errc::bad_argument, "topic must be a string");
            o.options.topic = v.cast<std::string>();
        });
    c.def_property(
        "timeout", [](const O& o) { return seconds_of(o.options.recv_timeout); },
        [](O& o, const py::handle& v) { o.options.recv_timeout = seconds_arg(v, "timeout"); });
    c.def_property(
        "send_timeout", [](const O& o) { return seconds_of(o.options.send_timeout); },
        [](O& o, const py::handle& v) { o.options.send_timeout = seconds_arg(v, "send_timeout"); });
    c.def_property(
        "heartbeat", [](const O& o) { return seconds_of(o.options.heartbeat); },
        [](O& o, const py::handle& v) { o.options.heartbeat = seconds_arg(v, "heartbeat"); });
    c.def_property(
        "linger", [](const O& o) { return seconds_of(o.options.linger); },
        [](O& o, const py::handle& v) { o.options.linger = seconds_or_forever(v, "linger"); });
    c.def_property(
        "shm_lease", [](const O& o) { return seconds_of(o.options.shm_lease); },
        [](O& o, const py::handle& v) { o.options.shm_lease = seconds_or_forever(v, "shm_lease"); });
    c.def_property(
        "shm_laggard_after", [](const O& o) { return seconds_of(o.options.shm_laggard_after); },
        [](O& o, const py::handle& v) { o.options.shm_laggard_after = seconds_or_forever(v, "shm_laggard_after"); });
    c.def_property(
        "shm_claim_timeout", [](const O& o) { return seconds_of(o.options.shm_claim_timeout); },
        [](O& o, const py::handle& v) { o.options.shm_claim_timeout = seconds_arg(v, "shm_claim_timeout"); });
    c.def_property(
        "epoch_timeout", [](const O& o) { return seconds_of(o.options.streams.epoch_timeout); },
        [](O& o, const py::handle& v) { o.options.streams.epoch_timeout = seconds_or_forever(v, "epoch_timeout"); });
    c.def_property(
        "ack_heartbeat", [](const O& o) { return seconds_of(o.options.ack_heartbeat); },
        [](O& o, const py::handle& v) { o.options.ack_heartbeat = seconds_or_forever(v, "ack_heartbeat"); });
    // CURVE: certificate files, read when set (a bad one fails at once).
    c.def_property(
        "curve_cert", [](const O& o) { return o.curve_cert; },
        [](O& o, const py::handle& v) {
            if (v.is_none()) return;
            curve_of(o.options).keys = tenbin::load_secret_certificate(path_arg(v));
            o.curve_cert = py::reinterpret_borrow<py::object>(v);
        });
    c.def_property(
        "curve_server", [](const O& o) { return o.curve_server; },
        [](O& o, const py::handle& v) {
            if (v.is_none()) return;
            curve_of(o.options).server_key = tenbin::load_public_certificate(path_arg(v));
            o.curve_server = py::reinterpret_borrow<py::object>(v);
        });
    c.def_property(
        "curve_allow", [](const O& o) { return o.curve_allow; },
        [](O& o, const py::handle& v) {
            if (v.is_none()) return;
            curve_of(o.options).allowed_clients = tenbin::load_public_certificates(path_arg(v));
            o.curve_allow = py::reinterpret_borrow<py::object>(v);
        });
}

}  // namespace tenbin_py
