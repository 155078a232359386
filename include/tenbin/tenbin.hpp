// tenbin: everything.
#pragma once

#include <tenbin/connect.hpp>
#include <tenbin/core.hpp>
#include <tenbin/io.hpp>
#include <tenbin/sctp.hpp>
#include <tenbin/zmq.hpp>
