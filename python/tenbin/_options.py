"""Keyword arguments: the options of a connection (one keyword per field of
the C++ ``tenbin::connection_options``; times in seconds) and the check that
turns a mistyped keyword into a suggestion."""

from __future__ import annotations

import difflib
import functools
import inspect
import warnings

from . import _tenbin
from ._errors import BadArgument, Notice
from ._streams import state_json

# The library's defaults, which the signatures show.
DEFAULTS = _tenbin.ConnectionOptions()
# The keywords that set connection options: one per property of
# ConnectionOptions, and where notices go.
OPTION_KEYWORDS = tuple(n for n in dir(_tenbin.ConnectionOptions) if not n.startswith("_")) + ("on_notice",)
# tenbin's Python default: a send that no receiver takes ends (the CLI's).
SEND_TIMEOUT = 30.0


def connection_options(on_notice=None, **keywords):
    """The ``_tenbin.ConnectionOptions`` of keyword arguments (each checked
    by the extension as it is set), and the function notices go to."""
    options = _tenbin.ConnectionOptions()
    for name, value in keywords.items():
        if name == "resume_from" and value is not None and not isinstance(value, str):
            value = state_json(value)
        setattr(options, name, value)
    return options, on_notice if on_notice is not None else warn_notice


def warn_notice(message):
    # From the extension inside a method the caller called: the warning
    # points at the caller's line.
    warnings.warn(message, Notice, stacklevel=3)


def checked_keywords(elsewhere=None):
    """Decorates ``__init__`` so that an unknown keyword raises
    ``BadArgument`` naming the closest known one ("did you mean"), and a
    keyword that belongs elsewhere (``elsewhere``: name -> why) says why.
    The signature stays the function's own."""
    def decorate(f):
        known = set(inspect.signature(f).parameters) - {"self"}
        owner = f.__qualname__.split(".")[0]

        @functools.wraps(f)
        def checked(*args, **kwargs):
            for name in kwargs:
                if name not in known:
                    raise BadArgument(unknown_keyword(owner, name, known, elsewhere or {}))
            return f(*args, **kwargs)
        return checked
    return decorate


def unknown_keyword(owner, name, known, elsewhere):
    if name in elsewhere:
        return f"{owner}() takes no {name}: {elsewhere[name]}"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{owner}() got an unexpected keyword argument {name!r}{hint}"
