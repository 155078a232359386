// tenbin: the core (dtypes, buffers, tensors, codec). No ZeroMQ, no files.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/codec.hpp>
#include <tenbin/dtype.hpp>
#include <tenbin/error.hpp>
#include <tenbin/tensor.hpp>
