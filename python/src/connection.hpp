// What the bindings of connections, loaders and pools share: the options
// of a connection as Python sets them (one property per keyword of
// tenbin.Connection and tenbin.Loader, times in seconds), and the snapshots
// they give as dicts and lists.
#pragma once

#include "common.hpp"

#include <tenbin/connection.hpp>

#include <string>
#include <vector>

namespace tenbin_py {

struct py_options {
    tenbin::connection_options options;
    // The certificate files as given (the options hold their keys).
    py::object curve_cert = py::none(), curve_server = py::none(), curve_allow = py::none();

    // The options to open a connection with: CURVE's files checked together.
    tenbin::connection_options checked() const;
};

// Python's truth of `v`.
bool truth(const py::handle& v);
// A socket kind by name ("push", ...), None for none; BadArgument else.
std::optional<tenbin::socket_kind> kind_arg(const py::handle& v);

// "zpull://host:1" or "zpull://host:1 and 3 more": the URLs in messages.
std::string urls_text(const std::vector<std::string>& urls);

// The endpoints as (kind, bind, address) tuples.
py::list endpoints_list(const std::vector<tenbin::endpoint>& eps);
// A statistics snapshot as a dict (tenbin.Statistics reads it).
py::dict stats_dict(const tenbin::statistics& s);
// A consumer's stream counters as a dict (stream_stats()).
py::dict stream_stats_dict(const tenbin::stream_counters& n);
// A pool's counts as a dict (TensorPool.stats, Connection.pool_stats).
py::dict pool_stats_dict(const tenbin::pool_stats& st);

}  // namespace tenbin_py
