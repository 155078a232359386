"""tensorcom's URLs: braces and endpoints, parsed by the library."""

from __future__ import annotations

from ._public import public

from . import _tenbin

__all__ = ["brace_expand", "parse_urls"]


@public
def brace_expand(pattern):
    """Expands braces as tensorcom URLs use them: ``"a{1..3}"`` gives
    ``["a1", "a2", "a3"]``."""
    return _tenbin.brace_expand(pattern)


@public
def parse_urls(urls, kind=None, bind=None):
    """The endpoints of URLs as ``(kind, bind, address)`` tuples. A
    ``#topic`` is checked (pub and sub only, one topic for all) but not
    part of the tuples. Raises ``BadURL``."""
    return _tenbin.parse_urls(url_list(urls), kind, bind)


def url_list(urls):
    """One URL or several, as a list of strings."""
    return [urls] if isinstance(urls, str) else [str(u) for u in urls]


def describe_endpoints(endpoints):
    """"bound to tcp://127.0.0.1:7880, connected to ..." for reprs."""
    text = ", ".join(f"{'bound to' if bind else 'connected to'} {address}" for _, bind, address in endpoints[:3])
    return text + (f" and {len(endpoints) - 3} more" if len(endpoints) > 3 else "")
