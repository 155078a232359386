// tenbin: tensors over message-oriented sockets (SCTP, SOCK_SEQPACKET).
#pragma once

#include <tenbin/core.hpp>
