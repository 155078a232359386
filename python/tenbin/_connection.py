"""tensorcom's Connection, on the C++ ``tenbin::connection``."""

from __future__ import annotations

from ._public import public

from . import _tenbin
from ._convert import converters_of, listify, transform_with
import json

from ._errors import BadArgument, Closed, EpochEnd, Timeout
from ._options import DEFAULTS, OPTION_KEYWORDS, SEND_TIMEOUT, checked_keywords, connection_options
from ._statistics import Statistics
from ._streams import state_json, stream_end
from ._urls import describe_endpoints, url_list

__all__ = ["Connection"]


@public
class Connection:
    """Sends or receives lists of arrays on one ZeroMQ socket: tensorcom's
    Connection, backed by the C++ ``tenbin::connection``.

    ``url``: a tensorcom URL (``zpush://host:port``, ``zpull://...``,
    ``zpub``/``zsub`` and the reversed ``zr*`` schemes, ``+ipc``/``+inproc``
    and ``+shm`` transports), or a list of them; braces expand into
    endpoints of ONE socket (``zsub://host:78{80..83}``: fan-in from every
    publisher). A ``#topic`` fragment subscribes a zsub to that topic (and
    makes a zpub send it as a frame of its own in front of each message).

    tensorcom's arguments: ``epoch`` (``len()``), ``total`` (stop iterating
    after that many samples), ``multipart`` (send form; receiving accepts
    both), ``infos`` (infos to send), ``device`` (torch device of received
    tensors; None = NumPy), ``allow64`` (send f8/i8/u8),
    ``batch_transforms`` and ``converters`` (functions on each received
    item, see below), ``batch_count``, ``report``, ``stats_horizon``.
    ``raw`` and ``noexpand`` are accepted and ignored (braces always
    expand).

    ``converters``: ``"torch"`` gives torch tensors on the received memory
    without a copy, in the sent dtype and layout; ``"tensorcom"`` does what
    tensorcom's ``"torch"`` did (float32 and int64 copies, image batches
    channels first); ``"numpy"`` or None leaves NumPy arrays; or functions.

    Times are in seconds (None or ``math.inf``: for ever):
    ``timeout`` (how long ``recv`` waits before raising ``Timeout``;
    iteration ends there instead), ``send_timeout`` (how long ``send`` waits
    for a receiver to take the message, then raises ``Timeout``; 30),
    ``linger`` (how long ``close`` waits to deliver queued messages; 10),
    ``heartbeat`` (ZMTP pings noticing a dead peer; off).

    The socket: ``send_hwm``, ``recv_hwm`` (high-water marks in messages;
    16: 1000, pyzmq's default, streams small messages about twice as fast,
    holding more), ``kind`` and ``bind`` (for plain ZeroMQ URLs), ``topic``,
    ``pub_nodrop`` (a pub waits for slow subscribers instead of dropping),
    ``immediate`` (queue only to connected peers). What it accepts:
    ``expect_infos``, ``max_tensors``, ``max_rank``, ``max_bytes``;
    ``tensorcom_compatible`` refuses to send what a Python tensorcom
    receiver cannot decode. ``+shm``: ``shm_pool_bytes`` (shared memory the
    sender may hold), ``shm_lease`` (seconds a receiver may hold a message);
    against hostile or stalled peers (see the shared-memory docs): a
    sender's ``shm_max_peers``, ``shm_max_held_bytes``, ``shm_laggard_after``
    (seconds), a receiver's ``shm_claim_timeout`` (seconds; None: the
    receive timeout, or 30), ``shm_max_senders``, ``shm_max_mappings``,
    ``shm_max_mapped_bytes``. ``count_peers`` counts the connected peers for
    the metrics.

    CURVE security, as the ``tenbin`` tool's ``--curve-*`` options (the
    files are ZeroMQ certificates, as ``tenbin keygen`` or pyzmq's
    ``zmq.auth.create_certificates`` write them): ``curve_cert`` (this
    side's secret certificate, mode 0600), ``curve_server`` (the server's
    public certificate, on the side that connects), ``curve_allow`` (a
    folder of the public certificates of the clients allowed in, on the side
    that binds; without it any client holding a key pair).

    Numbered streams (see the Python guide's "Epochs and resume"), sending:
    ``producer`` (a name, stable across restarts, under which the messages
    are numbered: epoch and sequence), ``stream`` (number them under a
    made-up name); ``end_epoch()``, ``end_stream()``, ``position()``,
    ``seek()``. Receiving: ``recv()`` raises ``EpochEnd`` at an epoch's end
    (``StreamEnd`` at the stream's) and iteration stops there, so ``for
    batch in connection`` is one epoch and the next loop the next one;
    ``epoch_timeout`` (seconds a producer that has not ended an epoch the
    others ended may stay silent; 30), ``expect_producers`` (producers an
    epoch waits for), ``rank``, ``world_size``, ``drop_last`` (each of
    ``world_size`` consumers takes the batches whose sequence number is its
    rank modulo the world size, as many per epoch: the remainder dropped,
    or short ranks padded); ``state_dict()``, ``load_state_dict()``
    (``resume_from=`` a saved state does it as the connection opens). The
    stream's epoch is ``stream_epoch``: ``epoch`` stays tensorcom's (the
    length ``len()`` gives).

    Acknowledged delivery, zpush/zpull on both ends: ``acked=True``;
    consumers take ``credit`` batches at most before acknowledging them
    (at least 2 with ``ack="release"``: a for loop keeps its batch while
    it asks for the next), ``ack="release"`` (when the batch's arrays are
    all dropped, so a batch being worked on by a consumer that dies goes
    to another) or ``"take"`` (when ``recv`` gives it); ``ack_heartbeat``
    (seconds; a consumer silent for two is dead to its producer, a
    producer for three to its consumers; each end counts the longer of
    its own and its peer's; 1); ``name`` (this end's name, as its
    producers and metrics see it); ``wait_for``, ``wait_for_names`` (a
    producer hands out its first batch once those consumers said hello,
    not after two heartbeats). A producer's ``consumers()`` and
    ``delivery_stats()``.
    PUB: ``wait_for`` (the first send waits, at most ``send_timeout``, for
    that many subscribers), ``wait_for_names`` (named ones), ``replay_window``
    (a late subscriber gets the first batches of the current epoch);
    ``subscribers()``, ``subscriber_names()``.

    ``on_notice``: a function given what the connection says once (a
    message of a longer topic passed over, ...); by default a
    ``tenbin.Notice`` warning.

    Blocking calls release the GIL and are interrupted by Ctrl-C
    (KeyboardInterrupt) within about 50 ms. Use a connection from one thread
    at a time; ``close()`` may come from another, and the call it interrupts
    raises ``Closed``. Errors raise ``tenbin.Error`` subclasses; a mistyped
    keyword raises ``BadArgument`` naming the closest one.
    """

    @checked_keywords()
    def __init__(self, url=None, epoch=100000, total=-1, multipart=True, infos=None, device=None,
                 allow64=False, raw=False, batch_transforms=None, batch_count=True, converters=None,
                 report=-1, stats_horizon=DEFAULTS.stats_horizon, noexpand=False, *, timeout=None,
                 send_timeout=SEND_TIMEOUT, linger=DEFAULTS.linger, send_hwm=DEFAULTS.send_hwm,
                 recv_hwm=DEFAULTS.recv_hwm, kind=None, bind=None, topic="", expect_infos=None,
                 max_tensors=DEFAULTS.max_tensors, max_rank=DEFAULTS.max_rank, max_bytes=DEFAULTS.max_bytes,
                 tensorcom_compatible=False, pub_nodrop=False, immediate=DEFAULTS.immediate, heartbeat=None,
                 shm_pool_bytes=DEFAULTS.shm_pool_bytes, shm_lease=DEFAULTS.shm_lease,
                 shm_max_peers=DEFAULTS.shm_max_peers, shm_max_held_bytes=DEFAULTS.shm_max_held_bytes,
                 shm_laggard_after=DEFAULTS.shm_laggard_after, shm_claim_timeout=None,
                 shm_max_senders=DEFAULTS.shm_max_senders, shm_max_mappings=DEFAULTS.shm_max_mappings,
                 shm_max_mapped_bytes=DEFAULTS.shm_max_mapped_bytes, count_peers=False, curve_cert=None,
                 curve_server=None, curve_allow=None, producer=None, stream=False,
                 epoch_timeout=DEFAULTS.epoch_timeout, expect_producers=0, rank=0, world_size=1, drop_last=True,
                 acked=False, credit=DEFAULTS.credit, ack="release", ack_heartbeat=DEFAULTS.ack_heartbeat,
                 name=None, wait_for=0, wait_for_names=None, replay_window=0, resume_from=None,
                 on_notice=None):
        given = locals()
        self._options, self._on_notice = connection_options(
            **{k: given[k] for k in OPTION_KEYWORDS if k in given})
        self.multipart = multipart
        self.infos = infos
        self.device = device
        self.allow64 = allow64
        self.raw = raw
        self.epoch = epoch
        self.total = total
        self.batch_transforms = listify(batch_transforms)
        self.batch_count = batch_count
        self.converters = converters_of(converters, device)
        self.report = report
        self.count = 0
        self.sampler = None  # DataLoader compatibility, as tensorcom
        self.batch_sampler = None
        self.batch_size = 1
        self._urls = []
        self._conn = None
        if url is not None:
            self.connect(url)

    def connect(self, url, topic=""):
        """Binds or connects to ``url`` (a URL or a list; braces expand),
        opening the socket on the first call; later calls add endpoints to
        the same socket (same kind, transport and topic, else ``BadURL``).
        ``topic`` or a ``#topic`` fragment: see the class; one socket has one
        topic (another one raises ``BadURL`` for a fragment, ``BadArgument``
        for ``topic``)."""
        urls = url_list(url)
        if self._conn is None:
            if topic:
                if self._options.topic and self._options.topic != topic:
                    raise BadArgument(f"topic {topic!r} differs from the connection's {self._options.topic!r}")
                self._options.topic = topic
            self._conn = _tenbin.Connection(urls, self._options, self._on_notice)
        else:
            self._conn.add(urls, topic)
        self._urls += urls

    def _open(self):
        if self._conn is None:
            raise Closed("the connection is not connected (give a url, or call connect)")
        return self._conn

    @property
    def stats(self):
        """Messages and bytes sent or received (tensorcom's Statistics)."""
        conn = self._open()
        return Statistics(conn.stats, conn.reset_stats)

    @property
    def endpoints(self):
        """The endpoints as ``(kind, bind, address)``; a tcp bind to port 0
        or ``*`` shows the port chosen."""
        return self._open().endpoints()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (or the connection never opened)."""
        return self._conn is None or self._conn.closed()

    @property
    def other_topics(self) -> int:
        """Messages passed over because their topic is longer than this
        subscriber's (ZeroMQ's subscriptions match prefixes)."""
        return self._open().other_topics()

    @property
    def refused_handshakes(self) -> int:
        """CURVE handshakes refused so far (either side's doing)."""
        return self._open().refused_handshakes()

    def metrics(self):
        """Everything the connection counts and times, as Prometheus
        families: ``{name: {"name", "type", "help", "samples"}}``, a sample
        ``{"labels", "value"}`` or a histogram's ``{"labels", "buckets",
        "sum", "count"}`` (the docs' Metrics page lists them). The first
        call turns the timings on; once closed, the last counts."""
        return _tenbin.read_metrics([self._metrics_source()])

    def _metrics_source(self):
        return self._open().metrics()

    def close(self):
        """Closes the socket, waiting at most ``linger`` seconds for queued
        messages to go out (tensorcom drops them at once). From another
        thread, a call waiting on the connection raises ``Closed``. Statistics
        and endpoints stay readable."""
        if self._conn is not None:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data, *, allow64=False):
        """Sends one list of arrays. Writable arrays are copied; read-only
        ones and arrays from ``acquire()`` or a ``TensorPool`` go zero-copy
        (see the package). Waits while no receiver takes the message, at
        most ``send_timeout`` seconds, then raises ``Timeout`` (no
        receiver?). A single array, a dict or an item NumPy cannot hold
        raises ``BadArgument``."""
        self._open().send(data, bool(allow64 or self.allow64))

    def write(self, data):
        """Alias for send."""
        self.send(data)

    def acquire(self, shape, dtype="float32", timeout=None):
        """A writable array of ``shape`` and ``dtype`` to fill and send
        without a copy: on a ``+shm`` connection, a block of its shared
        memory (the receiver maps it: no byte is copied between the
        processes); on others, a block of a pool of its own, as
        ``TensorPool`` gives. Uninitialised (a reused block holds what was
        sent before): fill all of it. Sent, it turns read-only: acquire a
        new one for each message. Waits while the pool is full (messages not
        yet released by receivers), at most ``timeout`` seconds (default:
        ``send_timeout``), then raises ``Timeout``."""
        if isinstance(shape, int):
            shape = (shape,)
        return self._open().acquire([int(d) for d in shape], dtype, "", timeout)

    @property
    def pool_stats(self):
        """What the pool of ``acquire()`` holds: buffers, bytes, in_use,
        in_use_bytes, allocations, reuses, waits."""
        return self._open().pool_stats()

    def recv(self, timeout=None):
        """Receives one list (either wire form) as read-only arrays viewing
        the received frames, then applies batch_transforms and converters.
        Raises ``Timeout`` after ``timeout`` seconds (default: the
        connection's), ``Closed`` once closed, a ``Malformed`` subclass for
        a bad message (the connection stays usable). A numbered stream:
        ``EpochEnd`` at the end of an epoch (the next call gives the next
        epoch's first batch), ``StreamEnd`` once every producer ended its
        stream. A message already waiting is taken without releasing the
        GIL."""
        conn = self._conn or self._open()
        data = conn.recv(timeout)
        if data is None:
            raise stream_end(conn, self._urls)
        if self.batch_transforms:
            data = transform_with(data, self.batch_transforms)
        if self.converters:
            data = transform_with(data, self.converters)
        if data:
            shape = getattr(data[0], "shape", ())
            self.batch_size = shape[0] if shape else 1
        return data

    def batchsize(self, xs):
        """Samples in a batch: ``len(xs[0])`` with batch_count, else 1."""
        if self.batch_count and xs and getattr(xs[0], "ndim", 1) > 0:
            return len(xs[0])
        return 1

    def serve(self, source, *, report=-1):
        """Sends every list ``source`` yields; prints statistics every
        ``report`` samples."""
        count, next_report = 0, 0
        for sample in source:
            self.send(sample)
            if report > 0 and count >= next_report:
                print("count", count, self.stats.summary())
                next_report += report
            count += self.batchsize(sample)

    def items(self, report=-1):
        """Yields received lists; ends after ``total`` samples if given, at
        a receive timeout (``timeout``), at the end of a numbered stream's
        epoch, or once closed."""
        next_report = 0
        report = report if report > 0 else self.report
        while True:
            if self.total > 0 and self.count >= self.total:
                return
            try:
                result = self.recv()
            except (Timeout, Closed, EpochEnd):
                return
            if report > 0 and self.count >= next_report:
                print("count", self.count, self.stats.summary())
                next_report += report
            self.count += self.batchsize(result)
            yield result
            # Not held while the next is awaited: a batch the loop's body
            # dropped is acknowledged (ack="release") before it waits.
            del result

    def __iter__(self):
        return self.items()

    # ---- numbered streams, sending

    def end_epoch(self):
        """Ends this producer's epoch (an end mark after its batches) and
        begins the next. Needs ``producer`` or ``stream``; waits as ``send``
        does."""
        self._open().end_epoch()

    def end_stream(self):
        """Ends this producer's stream: consumers' iteration ends for good
        (``StreamEnd``) once every producer ended its own."""
        self._open().end_stream()

    def position(self):
        """Where the next message sent stands, ``(producer, epoch, seq)``;
        None unless the connection numbers its messages."""
        return self._open().position()

    def seek(self, epoch, seq):
        """Numbers the next message ``seq`` of ``epoch``: a producer that
        replays its data resumes the numbering where its consumers are."""
        self._open().seek(int(epoch), int(seq))

    # ---- numbered streams, receiving

    @property
    def stream_epoch(self) -> int:
        """The numbered stream's epoch this consumer is in (counted from
        the state it resumed from); ``epoch`` is tensorcom's length."""
        return self._open().epoch()

    def epoch_ended(self) -> bool:
        """Whether the last receive that gave nothing ended an epoch."""
        return self._open().epoch_ended()

    def stream_ended(self) -> bool:
        """Whether every producer ended its stream."""
        return self._open().stream_ended()

    def state_dict(self):
        """What this consumer has taken of its streams, to resume from: a
        plain dict (picklable, JSON-able) ``{"epoch": E, "producers":
        {name: {"epoch", "next", "taken", "finished"}}}``. Readable after
        ``close()``."""
        return json.loads(self._open().state())

    def load_state_dict(self, state):
        """Resumes from ``state`` (a ``state_dict()`` saved before): the
        batches it says were taken are dropped as duplicates when they come
        again, and the epoch is its epoch. ``BadArgument`` for a dict that
        is no state."""
        self._open().load_state(state_json(state))

    def stream_stats(self):
        """What this consumer counted of its streams: gaps, duplicates,
        late, epochs, producers_timed_out, dropped_remainder, padded,
        after_end."""
        return self._open().stream_stats()

    # ---- acked delivery and publishing

    def delivery_stats(self):
        """An acked connection's counts: sent, acknowledged, redelivered,
        skipped, consumers_lost, producers_lost, bad_acks, bad_messages."""
        return self._open().delivery_stats()

    def consumers(self):
        """An acked producer's consumers, one dict each: name,
        connected_since and last_heard (Unix times), credits, in_flight,
        acknowledged, redelivered."""
        return self._open().consumers()

    def subscribers(self) -> int:
        """A PUB with ``wait_for``, ``wait_for_names`` or ``replay_window``:
        the subscribers joined so far."""
        return self._open().subscribers()

    def subscriber_names(self):
        """The names of the named subscribers joined (see subscribers)."""
        return self._open().subscriber_names()

    def __len__(self):
        """The ``epoch`` given (for frameworks that ask a length)."""
        return self.epoch

    def __repr__(self):
        if self._conn is None:
            return "<tenbin.Connection, not connected>"
        eps = self._conn.endpoints()
        kind = eps[0][0] if eps else "?"
        where = describe_endpoints(eps)
        return f"<tenbin.Connection {kind} {where}{' (closed)' if self._conn.closed() else ''}>"

