"""tenbin's exceptions: one class, `Error`, and a subclass per failure class."""

from __future__ import annotations

__all__ = ["Error"]


class Error(Exception):
    """Raised by every tenbin function that fails.

    ``errc`` is the C++ library's failure class (``tenbin::errc``) as a name:
    "bad_magic", "truncated", "timeout", ... Each class also has a subclass
    to catch: ``BadMagic``, ``Truncated``, ``Timeout``... (see ``ERRC``).
    ``Malformed`` is the base of the classes of malformed input.
    """

    errc: str = ""

    def __init__(self, message: str = "", errc: str | None = None):
        super().__init__(message)
        if errc is not None:
            self.errc = errc


class Malformed(Error):
    """Input that is not valid tenbin data (a bad message, file or buffer)."""


# errc name -> (class name, base classes); the order of tenbin::errc.
_spec = [
    ("bad_magic", "BadMagic", (Malformed,)),
    ("truncated", "Truncated", (Malformed,)),
    ("length_beyond_end", "LengthBeyondEnd", (Malformed,)),
    ("negative_length", "NegativeLength", (Malformed,)),
    ("unknown_dtype", "UnknownDtype", (Malformed,)),
    ("odd_chunk_count", "OddChunkCount", (Malformed,)),
    ("data_size_mismatch", "DataSizeMismatch", (Malformed,)),
    ("bad_header", "BadHeader", (Malformed,)),
    ("limit_exceeded", "LimitExceeded", (Error,)),
    ("bad_argument", "BadArgument", (Error, ValueError)),
    ("info_mismatch", "InfoMismatch", (Error,)),
    ("bad_extension", "BadExtension", (Error, ValueError)),
    ("io_error", "IOError", (Error, OSError)),
    ("timeout", "Timeout", (Error, TimeoutError)),
    ("bad_url", "BadURL", (Error, ValueError)),
    ("unsupported", "Unsupported", (Error,)),
    ("bad_certificate", "BadCertificate", (Error, ValueError)),
    ("closed", "Closed", (Error,)),
]

_classes: dict[str, type] = {}
ERRC: dict[str, type] = {}
for _name, _cls, _bases in _spec:
    _c = type(_cls, _bases, {"errc": _name, "__doc__": f"tenbin.Error with errc == {_name!r}.",
                             "__module__": "tenbin"})
    # OSError and friends take other constructor arguments; keep Error's.
    _c.__init__ = Error.__init__
    _classes[_name] = _c
    ERRC[_name] = _c
    globals()[_cls] = _c
    __all__.append(_cls)
__all__ += ["Malformed", "ERRC"]
Error.__module__ = "tenbin"
Malformed.__module__ = "tenbin"
