"""Sockets of the caller's: tensorcom's functions on pyzmq sockets, and on
message sockets (SCTP, AF_UNIX SOCK_SEQPACKET)."""

from __future__ import annotations

from ._public import public

import os
import socket as _socket

from . import _tenbin
from ._errors import Unsupported

__all__ = ["zsend_single", "zrecv_single", "zsend_multipart", "zrecv_multipart", "zrecv", "sctp_send",
           "sctp_recv"]

_same_libzmq = False


def _libzmq_paths():
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and "libzmq" in os.path.basename(fields[-1]):
                    paths.add(os.path.realpath(fields[-1]))
    except OSError:
        pass
    return paths


def _handle(socket):
    """The libzmq handle of a pyzmq socket, once pyzmq and tenbin are known
    to share one libzmq (else the handle would be meaningless here)."""
    global _same_libzmq
    if not _same_libzmq:
        import zmq
        mine, theirs = _tenbin.zmq_version(), zmq.zmq_version()
        libs = _libzmq_paths()
        if mine != theirs or len(libs) > 1:
            raise Unsupported(
                f"pyzmq uses libzmq {theirs} and tenbin libzmq {mine} (libraries loaded: "
                f"{sorted(libs) or 'unknown'}): tenbin can use a pyzmq socket only when both use "
                "the same libzmq. Use tenbin.Connection instead, or build pyzmq against the "
                "system libzmq (Debian's python3-zmq does).")
        _same_libzmq = True
    return socket.underlying


@public
def zsend_single(socket, l, infos=None):
    """Sends arrays as one single-part message on a pyzmq socket.

    Blocks as the socket's send timeout says (``Timeout`` when it expires);
    Ctrl-C interrupts the wait, and closing the socket from another thread
    raises ``Closed``."""
    _tenbin.zsend(socket, _handle(socket), l, infos, False)


@public
def zrecv_single(socket, infos=False):
    """Receives one single-part message from a pyzmq socket (a multipart
    message raises ``OddChunkCount``). Arrays view the received frame."""
    return _tenbin.zrecv(socket, _handle(socket), infos, "single")


@public
def zsend_multipart(socket, l, infos=None):
    """Sends arrays as one multipart message ``[header, data, ...]`` on a
    pyzmq socket: read-only arrays of 512 bytes or more go zero-copy,
    writable ones are copied (see the package's zero-copy rules)."""
    _tenbin.zsend(socket, _handle(socket), l, infos, True)


@public
def zrecv_multipart(socket, infos=False):
    """Receives one multipart message from a pyzmq socket. Arrays view the
    received frames (no copy). Waits as the socket's receive timeout says
    (``Timeout``); Ctrl-C raises KeyboardInterrupt."""
    return _tenbin.zrecv(socket, _handle(socket), infos, "multipart")


@public
def zrecv(socket, infos=False):
    """Receives one message in either form from a pyzmq socket."""
    return _tenbin.zrecv(socket, _handle(socket), infos, "any")


@public
def sctp_send(socket, dest, l, infos=None):
    """Sends arrays as one message holding ``encode_buffer(l)`` on a message
    socket (SCTP, or AF_UNIX SOCK_SEQPACKET/SOCK_DGRAM): gathered from the
    arrays' bytes, no copy. ``dest``: None on a connected socket, a
    ``(host, port)`` tuple or a unix socket path otherwise."""
    _tenbin.sctp_send(socket.fileno(), dest, l, infos, int(socket.family))


@public
def sctp_recv(socket, infos=False, maxsize=100000000):
    """Receives one message from a message socket and decodes it. On a
    listening socket, accepts one connection first and receives from it
    (as tensorcom does). Larger messages than ``maxsize`` raise
    ``LimitExceeded``. The arrays are writable (memory of their own)."""
    try:
        listening = socket.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN)
    except OSError:
        listening = 0
    if listening:
        client, _ = socket.accept()
        with client:
            return _tenbin.sctp_recv(client.fileno(), infos, maxsize)
    return _tenbin.sctp_recv(socket.fileno(), infos, maxsize)
