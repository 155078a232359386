"""Message and byte counts of a connection or loader, as tensorcom's
Statistics."""

from __future__ import annotations

from ._public import public

from ._errors import Unsupported

__all__ = ["Statistics"]


@public
class Statistics:
    """Messages and bytes of a connection or loader, as tensorcom's
    Statistics: ``count``, ``total`` (tensor bytes), ``rate()``,
    ``throughput()``, ``recent_rate()``, ``recent_throughput()``,
    ``summary()``. A snapshot refreshed on each access."""

    def __init__(self, get, reset=None):
        self._fetch = get
        self._reset = reset

    def _get(self, key):
        return self._fetch()[key]

    @property
    def count(self) -> int:
        """Messages so far."""
        return self._get("count")

    @property
    def total(self) -> int:
        """Tensor bytes so far."""
        return self._get("total")

    def rate(self) -> float:
        """Messages per second since the start."""
        return self._get("rate")

    def throughput(self) -> float:
        """Bytes per second since the start."""
        return self._get("throughput")

    def recent_rate(self) -> float:
        """Messages per second over the recent window (``stats_horizon``)."""
        return self._get("recent_rate")

    def recent_throughput(self) -> float:
        """Bytes per second over the recent window."""
        return self._get("recent_throughput")

    def summary(self) -> str:
        """A one-line summary of the rates."""
        return self._get("summary")

    def reset(self) -> None:
        """Starts counting over (connections only)."""
        if self._reset is None:
            raise Unsupported("a loader's statistics cannot be reset")
        self._reset()

    def __repr__(self):
        return f"<tenbin.Statistics {self.summary()}>"
