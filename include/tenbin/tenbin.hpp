// tenbin: everything.
#pragma once

#include <tenbin/core.hpp>
#include <tenbin/io.hpp>
#include <tenbin/sctp.hpp>
#include <tenbin/zmq.hpp>
