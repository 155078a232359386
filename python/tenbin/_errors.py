"""tenbin's exceptions: `Error`, and one subclass per failure class of the C++
library (``tenbin::errc``), named in ``ERRC``; and `Notice`, the warning of
what a connection says once."""

from __future__ import annotations

from ._public import public

__all__ = [
    "Error", "Malformed", "BadMagic", "Truncated", "LengthBeyondEnd", "NegativeLength", "UnknownDtype",
    "OddChunkCount", "DataSizeMismatch", "BadHeader", "LimitExceeded", "BadArgument", "InfoMismatch",
    "BadExtension", "IOFailure", "Timeout", "BadURL", "Unsupported", "BadCertificate", "Closed", "EpochEnd",
    "StreamEnd", "ERRC", "Notice",
]


@public
class Error(Exception):
    """Raised by every tenbin function that fails.

    ``errc`` is the C++ library's failure class (``tenbin::errc``) as a name:
    "bad_magic", "truncated", "timeout", ... Catch the subclass of a class
    (``BadMagic``, ``Truncated``, ``Timeout``...; ``ERRC`` maps each name to
    its subclass); ``Malformed`` is the base of the classes of malformed
    input.
    """

    errc: str = ""

    # OSError and TimeoutError, bases of some subclasses, take other
    # constructor arguments: every subclass keeps this one.
    def __init__(self, message: str = "", errc: str | None = None):
        super().__init__(message)
        if errc is not None:
            self.errc = errc


@public
class Malformed(Error):
    """Input that is not valid tenbin data (a bad message, file or buffer):
    the next one may be good."""


@public
class BadMagic(Malformed):
    """A chunk does not start with "~TenBin~"."""
    errc = "bad_magic"


@public
class Truncated(Malformed):
    """The input ends inside a chunk or inside a tensor."""
    errc = "truncated"


@public
class LengthBeyondEnd(Malformed):
    """A chunk's length runs past the end of the input."""
    errc = "length_beyond_end"


@public
class NegativeLength(Malformed):
    """A chunk's length is negative."""
    errc = "negative_length"


@public
class UnknownDtype(Malformed):
    """A header names a dtype outside the format."""
    errc = "unknown_dtype"


@public
class OddChunkCount(Malformed):
    """A header has no data after it (or a multipart message came where a
    single-part one was expected)."""
    errc = "odd_chunk_count"


@public
class DataSizeMismatch(Malformed):
    """The data's size differs from what its header's shape and dtype need."""
    errc = "data_size_mismatch"


@public
class BadHeader(Malformed):
    """A malformed header (size, rank, dimensions, info bytes)."""
    errc = "bad_header"


@public
class LimitExceeded(Error):
    """Input beyond a limit (``max_tensors``, ``max_rank``, ``max_bytes``,
    ...); the message names the limit to raise."""
    errc = "limit_exceeded"


@public
class BadArgument(Error, ValueError, TypeError):
    """An argument tenbin cannot use: a value (a dtype without a tenbin
    code, an info too long, a negative timeout) or a type (a dict where a
    list of arrays belongs). Also a ValueError and a TypeError, so Python's
    usual ``except`` clauses catch it."""
    errc = "bad_argument"


@public
class InfoMismatch(Error):
    """Decoded infos differ from the expected ones."""
    errc = "info_mismatch"


@public
class BadExtension(Error, ValueError):
    """A file name not ending in .ten (or .ten.zst) without ``nocheck=True``."""
    errc = "bad_extension"


@public
class IOFailure(Error, OSError):
    """The operating system or ZeroMQ refused a read, a write, a bind or a
    connect. (``tenbin.IOError``, its former name, shadowed the builtin; it
    still works, with a DeprecationWarning.)"""
    errc = "io_error"


@public
class Timeout(Error, TimeoutError):
    """Nothing arrived (or nothing could be sent) within the time allowed."""
    errc = "timeout"


@public
class BadURL(Error, ValueError):
    """A connection URL that cannot be parsed or used."""
    errc = "bad_url"


@public
class Unsupported(Error):
    """Valid input this build or platform cannot handle."""
    errc = "unsupported"


@public
class BadCertificate(Error, ValueError):
    """A CURVE certificate file that is malformed, or a secret one others
    can read."""
    errc = "bad_certificate"


@public
class Closed(Error):
    """The connection, loader or socket was closed (perhaps by another
    thread while this call waited)."""
    errc = "closed"


@public
class EpochEnd(Error):
    """A numbered stream's epoch ended: ``recv()`` or ``next()`` has
    nothing more of it, and the next call gives the next epoch's first
    batch. Iteration ends here (``for batch in loader`` is one epoch)."""


@public
class StreamEnd(EpochEnd):
    """Every producer of a numbered stream ended it: nothing more comes. An
    ``EpochEnd`` too: the stream's end also ends the epoch it is in."""


ERRC: dict[str, type[Error]] = {
    c.errc: c for c in (BadMagic, Truncated, LengthBeyondEnd, NegativeLength, UnknownDtype, OddChunkCount,
                        DataSizeMismatch, BadHeader, LimitExceeded, BadArgument, InfoMismatch, BadExtension,
                        IOFailure, Timeout, BadURL, Unsupported, BadCertificate, Closed)
}


@public
class Notice(UserWarning):
    """What a connection or loader says once, as a warning: something it did
    that the caller would not otherwise see (messages of a longer topic
    passed over, ...). Give ``on_notice`` a function to get them otherwise."""

