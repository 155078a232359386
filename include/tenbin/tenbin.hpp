// tenbin: everything.
#pragma once

#include <tenbin/connect.hpp>
#include <tenbin/core.hpp>
#include <tenbin/formats.hpp>
#include <tenbin/io.hpp>
#include <tenbin/sctp.hpp>
#include <tenbin/zmq.hpp>

// The optional parts this build has (see tenbin/config.hpp).
#include <tenbin/config.hpp>
#if TENBIN_HAS_ZSTD
#include <tenbin/zstd.hpp>
#endif
// Not tenbin/dlpack.hpp: it needs <dlpack/dlpack.h>, which a program using
// tenbin may not have; include it explicitly for DLPack.
