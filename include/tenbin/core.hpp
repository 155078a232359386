// tenbin: the core (dtypes, buffers, tensors, codec, the tensor pool). No
// ZeroMQ, no files.
#pragma once

#include <tenbin/buffer.hpp>
#include <tenbin/codec.hpp>
#include <tenbin/dtype.hpp>
#include <tenbin/error.hpp>
#include <tenbin/pool.hpp>
#include <tenbin/position.hpp>
#include <tenbin/tensor.hpp>
