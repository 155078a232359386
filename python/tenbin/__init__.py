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
  ``TensorPool``, goes zero-copy (from 512 bytes) and stays alive until
  ZeroMQ has sent it.
* Non-contiguous arrays are sent in logical (C) order, big-endian ones in
  little endian; uint32 and rank-0 arrays work both ways.

Errors raise ``tenbin.Error`` (attribute ``errc``: the C++ failure class) or
one of its subclasses (``tenbin.Timeout``, ``tenbin.BadMagic``, ...).
"""

from __future__ import annotations

import os as _os

from ._errors import *  # noqa: F401,F403
from ._errors import ERRC, Error, Malformed  # noqa: F401
from . import _tenbin

__all__ = [
    "encode_buffer", "decode_buffer", "encode_list", "decode_list", "write", "read",
    "save", "load", "load_mmap", "zsend_single", "zrecv_single", "zsend_multipart",
    "zrecv_multipart", "zrecv", "sctp_send", "sctp_recv", "Connection", "Loader",
    "Statistics", "TensorPool", "TensorcomDataset", "Error", "Malformed", "ERRC", "to_torch", "to_dlpack", "brace_expand", "parse_urls",
]


def encode_buffer(l, infos=None):
    """Encodes a list of arrays into one ``bytearray`` (the single-part form,
    the bytes of a .ten file).

    ``infos``: None, or one info (at most 8 ASCII characters) per array.
    Raises ``BadArgument`` for what the format cannot carry (a dtype outside
    f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8, an info too long).
    """
    return _tenbin.encode_buffer(l, infos)


def decode_buffer(buf, infos=False):
    """Decodes the single-part form (``bytes``, ``bytearray``, ``memoryview``,
    anything with the buffer protocol) into a list of arrays viewing ``buf``
    without a copy (they keep it alive; writable only if ``buf`` is).

    ``infos``: False gives the list; True gives ``(list, infos)``; a list of
    infos must match the decoded ones (else ``InfoMismatch``). Malformed
    input raises a ``Malformed`` subclass (``BadMagic``, ``Truncated``...).
    """
    return _tenbin.decode_buffer(buf, infos)


def encode_list(l, infos=None):
    """Encodes a list of arrays into frames ``[header_0, data_0, ...]``:
    headers as ``bytes``, data as uint8 arrays viewing each array's bytes
    (contiguous little-endian copies for arrays that are not)."""
    return _tenbin.encode_list(l, infos)


def decode_list(l, infos=False):
    """Decodes frames ``[header_0, data_0, ...]`` (bytes, memoryviews,
    ``zmq.Frame``) into arrays viewing the data frames. ``infos`` as in
    ``decode_buffer``."""
    return _tenbin.decode_list(l, infos)


def write(stream, l, infos=None):
    """Writes a list of arrays to a binary stream (``stream.write``)."""
    _tenbin.write(stream, l, infos)


def read(stream, n=999999, infos=False):
    """Reads at most ``n`` arrays from a binary stream (``readinto`` or
    ``read``); an empty list at end of input. The arrays own their memory."""
    return _tenbin.read(stream, n, infos)


def save(fname, *args, infos=None, nocheck=False):
    """Saves the arrays ``args`` to a .ten file (``.ten.zst``: zstd).

    Raises ``BadExtension`` for another name unless ``nocheck``. The file is
    replaced whole (a failed save leaves the old one)."""
    _tenbin.save(_os.fspath(fname), args, infos, nocheck)


def load(fname, infos=False, nocheck=False):
    """Loads a .ten file into arrays (one read; they share one buffer)."""
    return _tenbin.load(_os.fspath(fname), infos, nocheck, False)


def load_mmap(fname, infos=False, nocheck=False):
    """Loads a .ten file as read-only arrays viewing a memory mapping of it
    (no copy; the mapping lives while an array does). Do not truncate or
    rewrite the file in place meanwhile (``save`` over it is safe)."""
    return _tenbin.load(_os.fspath(fname), infos, nocheck, True)


_checked_libzmq = False


def _handle(socket):
    """The libzmq handle of a pyzmq socket, once pyzmq and tenbin are known
    to share one libzmq (else the handle would be meaningless here)."""
    global _checked_libzmq
    if not _checked_libzmq:
        import zmq
        mine, theirs = _tenbin.zmq_version(), zmq.zmq_version()
        libs = set()
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    path = line.split()[-1] if len(line.split()) >= 6 else ""
                    if "libzmq" in _os.path.basename(path):
                        libs.add(_os.path.realpath(path))
        except OSError:
            pass
        if mine != theirs or len(libs) > 1:
            raise Unsupported(  # noqa: F405
                f"pyzmq uses libzmq {theirs} and tenbin libzmq {mine} (libraries loaded: "
                f"{sorted(libs) or 'unknown'}): tenbin can use a pyzmq socket only when both use "
                "the same libzmq. Use tenbin.Connection instead, or build pyzmq against the "
                "system libzmq (Debian's python3-zmq does).", "unsupported")
        _checked_libzmq = True
    return socket.underlying


def zsend_single(socket, l, infos=None):
    """Sends arrays as one single-part message on a pyzmq socket.

    Blocks as the socket's send timeout says (``Timeout`` when it expires);
    Ctrl-C interrupts the wait."""
    _tenbin.zsend(_handle(socket), l, infos, False)


def zrecv_single(socket, infos=False):
    """Receives one single-part message from a pyzmq socket (a multipart
    message raises ``OddChunkCount``). Arrays view the received frame."""
    return _tenbin.zrecv(_handle(socket), infos, "single")


def zsend_multipart(socket, l, infos=None):
    """Sends arrays as one multipart message ``[header, data, ...]`` on a
    pyzmq socket: read-only arrays of 512 bytes or more go zero-copy,
    writable ones are copied (see the module's zero-copy rules)."""
    _tenbin.zsend(_handle(socket), l, infos, True)


def zrecv_multipart(socket, infos=False):
    """Receives one multipart message from a pyzmq socket. Arrays view the
    received frames (no copy). Waits as the socket's receive timeout says
    (``Timeout``); Ctrl-C raises KeyboardInterrupt."""
    return _tenbin.zrecv(_handle(socket), infos, "multipart")


def zrecv(socket, infos=False):
    """Receives one message in either form from a pyzmq socket."""
    return _tenbin.zrecv(_handle(socket), infos, "any")


def sctp_send(socket, dest, l, infos=None):
    """Sends arrays as one message holding ``encode_buffer(l)`` on a message
    socket (SCTP, or AF_UNIX SOCK_SEQPACKET/SOCK_DGRAM): gathered from the
    arrays' bytes, no copy. ``dest``: None on a connected socket, a
    ``(host, port)`` tuple or a unix socket path otherwise."""
    _tenbin.sctp_send(socket.fileno(), dest, l, infos, int(socket.family))


def sctp_recv(socket, infos=False, maxsize=100000000):
    """Receives one message from a message socket and decodes it. On a
    listening socket, accepts one connection first and receives from it
    (as tensorcom does). Larger messages than ``maxsize`` raise
    ``LimitExceeded``. The arrays are writable (memory of their own)."""
    import socket as _socket
    try:
        listening = socket.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN)
    except OSError:
        listening = 0
    if listening:
        client, _ = socket.accept()
        with client:
            return _tenbin.sctp_recv(client.fileno(), infos, maxsize)
    return _tenbin.sctp_recv(socket.fileno(), infos, maxsize)


def brace_expand(pattern):
    """Expands braces as tensorcom URLs use them: ``"a{1..3}"`` gives
    ``["a1", "a2", "a3"]``."""
    return _tenbin.brace_expand(pattern)


def parse_urls(urls, kind=None, bind=None):
    """The endpoints of URLs as ``(kind, bind, address)`` tuples. A
    ``#topic`` is checked (pub and sub only, one topic for all) but not
    part of the tuples. Raises ``BadURL``."""
    if isinstance(urls, str):
        urls = [urls]
    return _tenbin.parse_urls(list(urls), kind, bind)


def to_dlpack(a):
    """A DLPack capsule ("dltensor") of array ``a`` without a copy, for any
    consumer's ``from_dlpack``: an array tenbin made (received, decoded,
    mapped) exports its tenbin buffer, which the capsule keeps alive, also
    when read-only (NumPy refuses to export those: DLPack cannot say
    read-only, so do not write through the result)."""
    return _tenbin.to_dlpack(a)


def to_torch(a):
    """A torch tensor on the same memory as array ``a`` (no copy, via
    DLPack). torch has no read-only tensors: do not write to one made from
    a received array (``.clone()`` it first)."""
    from ._torch import to_torch as f
    return f(a)


from ._connection import Connection, Loader, Statistics  # noqa: E402


class TensorPool:
    """Writable arrays for producers that send in a loop, on the C++
    ``tenbin::tensor_pool``: ``acquire`` gives a fresh writable array on a
    pool block nobody else holds, which is sent zero-copy (a writable array
    of your own is copied); the block returns to the pool, not to the
    allocator, once every holder (the array and its views, ZeroMQ's frames,
    a receiver over inproc) has released it. An array sent zero-copy becomes
    read-only (refilling it would change bytes ZeroMQ still sends): acquire
    a new array for every message.

    ``max_bytes`` and ``max_buffers`` bound what the pool holds; at a bound
    ``acquire`` waits for a release up to ``timeout`` seconds (None: as long
    as it takes; Ctrl-C interrupts it), then raises ``Timeout``. A reused
    block holds what its last user wrote: fill all of it. Thread-safe.
    """

    def __init__(self, max_bytes=1 << 30, max_buffers=1024, timeout=None):
        if not hasattr(_tenbin, "TensorPool"):
            raise Unsupported("this tenbin was built without tenbin::tensor_pool", "unsupported")  # noqa: F405
        self._pool = _tenbin.TensorPool(max_bytes, max_buffers, timeout)

    def acquire(self, shape, dtype="float32", timeout=None):
        """A writable, uninitialised, 64-byte-aligned C-order array of
        ``shape`` and ``dtype`` (one of the format's) on a pool block."""
        if isinstance(shape, int):
            shape = (shape,)
        return self._pool.acquire([int(d) for d in shape], dtype, "", timeout)

    def trim(self):
        """Gives every idle block back to the allocator."""
        self._pool.trim()

    @property
    def stats(self):
        """A snapshot: buffers, bytes, in_use, in_use_bytes, allocations,
        reuses, waits."""
        return self._pool.stats()


def __getattr__(name):
    # torch is optional and slow to import: TensorcomDataset loads it on use.
    if name == "TensorcomDataset":
        from ._torch import TensorcomDataset
        return TensorcomDataset
    raise AttributeError(f"module 'tenbin' has no attribute {name!r}")


for _c in (Connection, Loader, Statistics, TensorPool):
    _c.__module__ = __name__
del _c

import atexit as _atexit  # noqa: E402

# References ZeroMQ released are dropped by the next call; drop the last
# ones before the interpreter goes, and none after.
_atexit.register(_tenbin.finalize)
