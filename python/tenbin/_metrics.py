"""Metrics of connections and loaders for Prometheus: a standalone HTTP
exporter (the C++ ``tenbin::metrics_exporter``) and a collector for
``prometheus_client``, both serving the series the docs' Metrics page
lists."""

from __future__ import annotations

import weakref

from ._public import public

from . import _tenbin
from ._errors import BadArgument

__all__ = ["MetricsExporter", "MetricsCollector"]


def source_of(obj):
    """The C++ source of the metrics of ``obj``, a Connection or Loader."""
    get = getattr(obj, "_metrics_source", None)
    if get is None:
        raise BadArgument(f"a metrics source is a tenbin.Connection or tenbin.Loader, not {type(obj).__name__}")
    return get()


@public
class MetricsExporter:
    """An HTTP server of tenbin's metrics in Prometheus' text format, at
    ``GET /metrics`` (other paths answer 404), for a program that has no
    Prometheus endpoint of its own (one that has: ``MetricsCollector``).

    ``address``: ``"HOST:PORT"`` (a name, an IPv4 address, or an IPv6 one
    in brackets), or ``":PORT"`` / ``"PORT"`` for loopback (127.0.0.1); port
    0 takes a free one (see ``port``). Anyone who reaches the address reads
    the metrics (names, endpoints, counts; no tensor bytes): name an address
    other than loopback only where that is wanted. ``sources``:
    Connections and Loaders to serve (``add()`` serves more).

    It serves on threads of its own that never take the GIL, and keeps no
    source alive: a Connection or Loader's series stay while the object
    lives (its last counts once closed) and leave the scrape with it.
    Raises ``BadArgument`` for an address it cannot read or two sources
    with the same series (give them different ``name``\\ s), ``IOFailure``
    when it cannot listen there. ``close()`` (or the end of a ``with``
    block) stops it.
    """

    def __init__(self, address, sources=()):
        self._exporter = _tenbin.MetricsExporter(str(address), [source_of(s) for s in sources])

    def add(self, source):
        """Serves the metrics of ``source`` (a Connection or Loader) too,
        from the next scrape on."""
        self._exporter.add(source_of(source))

    @property
    def address(self) -> str:
        """Where it listens: ``"HOST:PORT"`` with the port it took."""
        return self._exporter.address()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._exporter.port()

    @property
    def scrapes(self) -> int:
        """Scrapes answered so far."""
        return self._exporter.scrapes()

    def wait_for_scrape(self, timeout=None) -> bool:
        """Waits until a scrape that began after this call has been answered
        (one begun earlier may have read older counts), at most
        ``timeout`` seconds (None: for ever); False when none came. For a
        program about to end: its last counts are read before it goes."""
        return self._exporter.wait_for_scrape(timeout)

    def text(self) -> str:
        """The text a scrape gets now."""
        return self._exporter.text()

    def close(self):
        """Stops listening (a scrape being answered ends first)."""
        self._exporter.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<tenbin.MetricsExporter http://{self.address}/metrics, {self.scrapes} scrapes>"


@public
class MetricsCollector:
    """tenbin's metrics for a ``prometheus_client`` registry (Debian's
    ``python3-prometheus-client``), so that a program that already serves
    its own metrics serves tenbin's in the same endpoint::

        prometheus_client.REGISTRY.register(tenbin.MetricsCollector(loader))

    ``sources``: Connections and Loaders (``add()`` adds more; one
    collector per registry, since a registry refuses two collectors of the
    same names). Each scrape reads the same families, names, labels, types
    and help as ``MetricsExporter`` serves (the same text, parsed by
    prometheus_client). As the exporter, it keeps no source alive: a
    Connection or Loader's series stay while the object lives and leave the
    scrape with it.
    """

    def __init__(self, *sources):
        self._sources = []  # (weak reference to the object, its metrics' source)
        for s in sources:
            self.add(s)

    def add(self, source):
        """Collects the metrics of ``source`` (a Connection or Loader) too.
        Raises ``BadArgument`` when one of its series has the name and
        labels of one already collected."""
        handle = source_of(source)
        _tenbin.metrics_text(self._handles() + [handle])  # raises on a clash
        self._sources.append((weakref.ref(source, self._forget), handle))

    def _forget(self, gone):
        self._sources = [(ref, handle) for ref, handle in self._sources if ref is not gone]

    def _handles(self):
        return [handle for _, handle in self._sources]

    def collect(self):
        """The families, as ``prometheus_client.Metric`` objects (what a
        registry calls on each scrape). Reads C++ counts only: a scrape
        never waits for a ``recv()`` or ``next()`` in progress."""
        from prometheus_client.parser import text_string_to_metric_families
        yield from text_string_to_metric_families(_tenbin.metrics_text(self._handles()))
