"""tenbin: lists of tensors over ZeroMQ, streams and .ten files.

The Python face of the tenbin C++ library, and a drop-in for tensorcom's
``tenbin`` module and ``Connection``: ``from tensorcom import tenbin`` can
become ``import tenbin`` (same function names, signatures and wire format).

Zero-copy rules:

* Received and decoded tensors are NumPy arrays viewing the received frame,
  buffer or file mapping (no copy); the array's ``base`` keeps those bytes
  alive after the socket, connection or file is gone. They are read-only
  (over inproc the bytes may be the sender's memory): ``.copy()`` to write.
* Sending: a writable array is copied (the caller may refill it for the next
  message while ZeroMQ still sends); a read-only array, and an array from
  ``Connection.acquire`` or a ``TensorPool``, goes zero-copy (from 512
  bytes) and stays alive until ZeroMQ has sent it.
* Non-contiguous arrays are sent in logical (C) order, big-endian ones in
  little endian; uint32 and rank-0 arrays work both ways.

Errors raise ``tenbin.Error`` (attribute ``errc``: the C++ failure class) or
one of its subclasses (``tenbin.Timeout``, ``tenbin.BadMagic``, ...).
Importing tenbin changes nothing outside it (see ``reuse_large_allocations``).
"""

from ._tenbin import __version__, reuse_large_allocations
from ._errors import (BadArgument, BadCertificate, BadExtension, BadHeader, BadMagic, BadURL, Closed,
                      DataSizeMismatch, EpochEnd, ERRC, Error, InfoMismatch, IOFailure, LengthBeyondEnd, LimitExceeded,
                      Malformed, NegativeLength, Notice, OddChunkCount, StreamEnd, Timeout, Truncated,
                      UnknownDtype, Unsupported)
from ._codec import (decode_buffer, decode_list, encode_buffer, encode_list, load, load_mmap, read, save,
                     write)
from ._sockets import (sctp_recv, sctp_send, zrecv, zrecv_multipart, zrecv_single, zsend_multipart,
                       zsend_single)
from ._urls import brace_expand, parse_urls
from ._convert import to_dlpack, to_torch
from ._statistics import Statistics
from ._connection import Connection
from ._loader import Loader
from ._pool import TensorPool
from ._metrics import MetricsCollector, MetricsExporter
from ._compat import __getattr__  # TensorcomDataset on demand, former names

__all__ = [
    "__version__",
    # codec, streams, files
    "encode_buffer", "decode_buffer", "encode_list", "decode_list", "write", "read", "save", "load", "load_mmap",
    # sockets of the caller's
    "zsend_single", "zrecv_single", "zsend_multipart", "zrecv_multipart", "zrecv", "sctp_send", "sctp_recv",
    # connections
    "brace_expand", "parse_urls", "Connection", "Loader", "Statistics", "TensorPool", "TensorcomDataset",
    # metrics
    "MetricsExporter", "MetricsCollector",
    # conversion, memory
    "to_torch", "to_dlpack", "reuse_large_allocations",
    # errors
    "Error", "Malformed", "BadMagic", "Truncated", "LengthBeyondEnd", "NegativeLength", "UnknownDtype",
    "OddChunkCount", "DataSizeMismatch", "BadHeader", "LimitExceeded", "BadArgument", "InfoMismatch",
    "BadExtension", "IOFailure", "Timeout", "BadURL", "Unsupported", "BadCertificate", "Closed", "EpochEnd", "StreamEnd", "ERRC",
    "Notice",
]
