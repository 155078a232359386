"""The codec, streams and .ten files: tensorcom's tenbin functions on NumPy
arrays."""

from __future__ import annotations

from ._public import public

import os

from . import _tenbin
from ._errors import BadArgument

__all__ = ["encode_buffer", "decode_buffer", "encode_list", "decode_list", "write", "read", "save", "load",
           "load_mmap"]


@public
def encode_buffer(l, infos=None):
    """Encodes a list of arrays into one ``bytearray`` (the single-part form,
    the bytes of a .ten file).

    ``infos``: None, or one info (at most 8 ASCII characters) per array.
    Raises ``BadArgument`` for what the format cannot carry (a dtype outside
    f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8, an info too long) and for what is not
    a list of arrays (one array, a dict).
    """
    return _tenbin.encode_buffer(l, infos)


@public
def decode_buffer(buf, infos=False):
    """Decodes the single-part form (``bytes``, ``bytearray``, ``memoryview``,
    anything with the buffer protocol) into a list of arrays viewing ``buf``
    without a copy (they keep it alive; writable only if ``buf`` is).

    ``infos``: False gives the list; True gives ``(list, infos)``; a list of
    infos must match the decoded ones (else ``InfoMismatch``). Malformed
    input raises a ``Malformed`` subclass (``BadMagic``, ``Truncated``...).
    """
    return _tenbin.decode_buffer(buf, infos)


@public
def encode_list(l, infos=None):
    """Encodes a list of arrays into frames ``[header_0, data_0, ...]``:
    headers as ``bytes``, data as uint8 arrays viewing each array's bytes
    (contiguous little-endian copies for arrays that are not)."""
    return _tenbin.encode_list(l, infos)


@public
def decode_list(l, infos=False):
    """Decodes frames ``[header_0, data_0, ...]`` (bytes, memoryviews,
    ``zmq.Frame``) into arrays viewing the data frames. ``infos`` as in
    ``decode_buffer``."""
    return _tenbin.decode_list(l, infos)


@public
def write(stream, l, infos=None):
    """Writes a list of arrays to a binary stream (``stream.write``).

    ``write`` gets memoryviews of the arrays' bytes (headers as ``bytes``),
    released once it returns: a stream that keeps one must copy it (using
    it later raises ValueError, as with Python's own io)."""
    _tenbin.write(stream, l, infos)


@public
def read(stream, n=999999, infos=False):
    """Reads at most ``n`` arrays from a binary stream (``readinto`` or
    ``read``); an empty list at end of input. The arrays own their memory.

    ``readinto`` gets a memoryview of a scratch buffer, released once it
    returns; one claiming more bytes than it was given raises
    ``IOFailure``."""
    if n < 1:
        raise BadArgument(f"n={n!r}: read at least one array (an empty list means end of input)")
    return _tenbin.read(stream, n, infos)


@public
def save(fname, *args, infos=None, nocheck=False):
    """Saves the arrays ``args`` to a .ten file (``.ten.zst``: zstd).

    Raises ``BadExtension`` for another name unless ``nocheck``. The file is
    replaced whole (a failed save leaves the old one)."""
    _tenbin.save(os.fspath(fname), args, infos, nocheck)


@public
def load(fname, infos=False, nocheck=False):
    """Loads a .ten file into arrays (one read; they share one buffer)."""
    return _tenbin.load(os.fspath(fname), infos, nocheck, False)


@public
def load_mmap(fname, infos=False, nocheck=False):
    """Loads a .ten file as read-only arrays viewing a memory mapping of it
    (no copy; the mapping lives while an array does). Do not truncate or
    rewrite the file in place meanwhile (``save`` over it is safe)."""
    return _tenbin.load(os.fspath(fname), infos, nocheck, True)
