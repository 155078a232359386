// tenbin: connections, statistics and the prefetching loader, as Python
// tensorcom offers them, on URLs (see url.hpp). One header per concept:
// connection.hpp, statistics.hpp, loader.hpp; this one includes them all.
#pragma once

#include <tenbin/connection.hpp>
#include <tenbin/loader.hpp>
#include <tenbin/metrics.hpp>
#include <tenbin/statistics.hpp>
#include <tenbin/stream.hpp>
