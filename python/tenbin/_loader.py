"""The C++ prefetching loader, as Loader."""

from __future__ import annotations

from ._public import public

from . import _tenbin
from ._convert import converters_of, listify, transform_with
import json

from ._errors import Closed, EpochEnd, Timeout
from ._options import DEFAULTS, OPTION_KEYWORDS, checked_keywords, connection_options
from ._statistics import Statistics
from ._streams import state_json, stream_end
from ._urls import describe_endpoints, url_list

__all__ = ["Loader"]

_SENDING = ("send_timeout", "send_hwm", "linger", "pub_nodrop", "immediate", "tensorcom_compatible",
            "shm_pool_bytes", "shm_lease", "shm_max_peers", "shm_max_held_bytes", "shm_laggard_after", "multipart", "infos", "allow64", "producer", "stream", "wait_for",
            "wait_for_names", "replay_window")


@public
class Loader:
    """The C++ prefetching receiver: a background thread receives and
    decodes into a bounded queue (``queue_messages`` batches, at most
    ``queue_bytes`` of tensor data); ``next()`` and iteration take batches
    as read-only arrays viewing the received frames.

    ``url``: one or more receiving URLs (zpull, zrpull, zsub, zrsub, with
    ``+ipc``, ``+inproc`` or ``+shm``; braces expand: fan-in from many
    producers into one socket; ``#topic`` as for Connection).

    Timeouts, one rule: ``next()`` raises ``Timeout`` when no batch came
    within ``timeout`` seconds (None or ``math.inf``: for ever), and
    ``Closed`` once the loader is closed and its queue drained; iteration
    (``for batch in loader``) ends at either, as the C++ loader's range-for
    does. The message names the URL and the seconds.

    ``skip_malformed``: count and skip bad messages instead of raising them
    (in order) from ``next()``. ``batch_transforms``, ``converters``,
    ``device``: as Connection's (tensorcom's rule: function ``i % len``
    applies to item ``i``); they run in ``next()``, on the caller's thread.
    (The C++ loader's ``transform`` runs on the loader thread; a Python
    function there would hold the GIL against the consumer, so it is not
    offered.) ``reuse_allocations``: calls ``tenbin.reuse_large_allocations()``
    when the loader starts (process-wide; see there). The other keywords
    are Connection's receiving ones.

    A numbered stream (producers given ``producer=``, ``tenbin serve
    --producer``): ``next()`` raises ``EpochEnd`` at an epoch's end
    (``StreamEnd`` at the stream's) and iteration stops there, so ``for
    epoch in range(E): for batch in loader:`` trains epoch by epoch; a batch
    of the next epoch prefetched meanwhile is kept for the next loop.
    ``state_dict()`` / ``load_state_dict()`` save and resume the position
    (torch's convention); ``resume_from=`` a saved ``state_dict()`` resumes
    before the first batch can arrive; ``stream_epoch``, ``stream_stats()``. The stream
    keywords ``epoch_timeout``, ``expect_producers``, ``rank``,
    ``world_size``, ``drop_last`` and acked delivery's ``acked``,
    ``credit``, ``ack``, ``ack_heartbeat``, ``name`` are Connection's.
    With ``ack="release"`` a ``for`` loop acknowledges each batch as it
    asks for the next, though the loop still holds it (its arrays stay
    valid): exactly once, without ``del batch``.

    ``next()`` holds no GIL while it waits; Ctrl-C raises KeyboardInterrupt
    within about 50 ms. Several threads may call ``next()``; each batch goes
    to one. ``close()`` (from any thread) stops receiving: batches queued
    can still be taken, then ``next()`` raises ``Closed``.
    """

    @checked_keywords({k: "it is for connections that send, and a Loader only receives" for k in _SENDING})
    def __init__(self, url, *, queue_messages=64, queue_bytes=512 << 20, skip_malformed=False, timeout=None,
                 batch_transforms=None, converters=None, device=None, reuse_allocations=True,
                 recv_hwm=DEFAULTS.recv_hwm, kind=None, bind=None, topic="", expect_infos=None,
                 max_tensors=DEFAULTS.max_tensors, max_rank=DEFAULTS.max_rank, max_bytes=DEFAULTS.max_bytes,
                 heartbeat=None, stats_horizon=DEFAULTS.stats_horizon, curve_cert=None, curve_server=None,
                 curve_allow=None, epoch_timeout=DEFAULTS.epoch_timeout, expect_producers=0, rank=0, world_size=1,
                 drop_last=True, acked=False, credit=DEFAULTS.credit, ack="release",
                 ack_heartbeat=DEFAULTS.ack_heartbeat, name=None, shm_claim_timeout=None,
                 shm_max_senders=DEFAULTS.shm_max_senders, shm_max_mappings=DEFAULTS.shm_max_mappings,
                 shm_max_mapped_bytes=DEFAULTS.shm_max_mapped_bytes, count_peers=False, resume_from=None,
                 on_notice=None):
        given = locals()
        self._urls = url_list(url)
        options, notice = connection_options(**{k: given[k] for k in OPTION_KEYWORDS if k in given})
        # Only an acked loader with ack="release" has a batch to let go (perf:
        # a for loop asks each batch).
        self._releases = options.acked and options.ack == "release"
        self.batch_transforms = listify(batch_transforms)
        self.converters = converters_of(converters, device)
        self._loader = _tenbin.Loader(self._urls, options, int(queue_messages), int(queue_bytes),
                                      bool(skip_malformed), bool(reuse_allocations), notice)
        self.stats = Statistics(self._loader.stats)

    def next(self, timeout=None):
        """The next batch (a list of arrays). Raises ``Timeout`` after
        ``timeout`` seconds (default: the loader's), ``Closed`` once closed
        and drained, ``EpochEnd`` at the end of a numbered stream's epoch
        (the next call gives the next epoch's first batch), ``StreamEnd``
        once every producer ended its stream, or the error of a malformed
        message."""
        batch = self._loader.next(timeout)
        if batch is None:
            raise stream_end(self._loader, self._urls)
        if self.batch_transforms:
            batch = transform_with(batch, self.batch_transforms)
        if self.converters:
            batch = transform_with(batch, self.converters)
        return batch

    def __iter__(self):
        return self

    def __next__(self):
        # A for loop holds its batch while it asks for the next: done with
        # it, all the same (with ack="release", acknowledged before the wait).
        if self._releases:
            self._loader.release_last()
        try:
            return self.next()
        except (Timeout, Closed, EpochEnd):
            raise StopIteration from None

    def close(self):
        """Stops receiving (from any thread); queued batches can still be
        taken."""
        self._loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._loader.destroy()

    @property
    def stream_epoch(self) -> int:
        """The numbered stream's epoch this loader's consumer is in
        (counted from the state it resumed from)."""
        return self._loader.epoch()

    def epoch_ended(self) -> bool:
        """Whether the last ``next()`` that gave nothing ended an epoch."""
        return self._loader.epoch_ended()

    def stream_ended(self) -> bool:
        """Whether every producer ended its stream."""
        return self._loader.stream_ended()

    def state_dict(self):
        """What was taken (by ``next()``; batches still queued are not) of
        the streams, to save with a checkpoint: a plain dict, picklable and
        JSON-able (``{"epoch": E, "producers": {name: {"epoch", "next",
        "taken", "finished"}}}``). Readable after the loader is closed."""
        return json.loads(self._loader.state())

    def load_state_dict(self, state):
        """Resumes from ``state`` (a ``state_dict()`` saved before, by this
        process or another): batches it says were taken, queued ones too,
        are dropped as duplicates, the others come once; the epoch is its
        epoch. Give it before the producers replay (right after creating the
        loader), or better as ``Loader(..., resume_from=state)``, in place
        before any batch. ``BadArgument`` for a dict that is no state."""
        self._loader.load_state(state_json(state))

    def stream_stats(self):
        """What this loader counted of its streams: gaps, duplicates,
        late, epochs, producers_timed_out, dropped_remainder, padded,
        after_end."""
        return self._loader.stream_stats()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._loader.closed()

    @property
    def queued_messages(self) -> int:
        """Batches waiting in the queue now."""
        return self._loader.queued_messages()

    @property
    def queued_bytes(self) -> int:
        """Tensor bytes waiting in the queue now."""
        return self._loader.queued_bytes()

    @property
    def malformed(self) -> int:
        """Malformed messages received so far."""
        return self._loader.malformed()

    @property
    def refused_handshakes(self) -> int:
        """CURVE handshakes refused so far."""
        return self._loader.refused_handshakes()

    def metrics(self):
        """Everything the loader and its connection count and time, as
        ``Connection.metrics()`` gives it (``tenbin_receive_wait_seconds``:
        the time ``next()`` and iteration waited for each batch); once
        closed, the last counts."""
        return _tenbin.read_metrics([self._metrics_source()])

    def _metrics_source(self):
        return self._loader.metrics()

    @property
    def endpoints(self):
        """The endpoints as ``(kind, bind, address)``."""
        return self._loader.endpoints()

    def __repr__(self):
        eps = self._loader.endpoints()
        kind = eps[0][0] if eps else "?"
        where = describe_endpoints(eps)
        state = " (closed)" if self._loader.closed() else f", {self._loader.queued_messages()} batches queued"
        return f"<tenbin.Loader {kind} {where}{state}>"
