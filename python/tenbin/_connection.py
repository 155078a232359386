"""tensorcom's Connection, and the C++ prefetching Loader."""

from __future__ import annotations

from . import _tenbin
from ._errors import Error


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
            raise Error("a loader's statistics cannot be reset", "unsupported")
        self._reset()


def _listify(x):
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _transform_with(sample, transformers):
    # tensorcom's rule: function i % len(transformers) applies to item i.
    if not transformers:
        return sample
    result = list(sample)
    n = len(transformers)
    for i in range(len(result)):
        f = transformers[i % n]
        if f is not None:
            result[i] = f(result[i])
    return result


def _converters(converters, device):
    if isinstance(converters, str):
        if converters == "numpy":
            return None
        if converters in ("torch", "torch_cuda"):
            from ._torch import to_torch, to_device
            if converters == "torch_cuda" or device not in (None, "cpu"):
                return [to_device(device or "cuda")]
            return [to_torch]
        raise Error(f"unknown converters {converters!r} (numpy, torch, torch_cuda or functions)", "bad_argument")
    conv = _listify(converters)
    if conv is None and device is not None:
        from ._torch import to_device
        conv = [to_device(device)]
    return conv


class Connection:
    """Sends or receives lists of arrays on one ZeroMQ socket: tensorcom's
    Connection, backed by the C++ ``tenbin::connection``.

    ``url``: a tensorcom URL (``zpush://host:port``, ``zpull://...``,
    ``zpub``/``zsub`` and the reversed ``zr*`` schemes, ``+ipc``/``+inproc``
    transports), or a list of them; braces expand into endpoints of ONE
    socket (``zsub://host:78{80..83}``: fan-in from every publisher). A
    ``#topic`` fragment subscribes a zsub to that topic (and makes a zpub
    send it as a frame of its own in front of each message).

    Arguments as tensorcom's: ``epoch`` (``len()``), ``total`` (stop
    iterating after that many samples), ``multipart`` (send form; receiving
    accepts both), ``infos`` (infos to send), ``device`` (torch device of
    received tensors; None = NumPy), ``allow64`` (send f8/i8/u8),
    ``batch_transforms`` and ``converters`` (functions on each received
    item; ``converters="torch"`` gives torch tensors on the received memory
    without a copy), ``batch_count``, ``report``, ``stats_horizon``.

    tenbin's options, as keywords: ``timeout`` (seconds recv waits before
    raising ``Timeout``; None = forever), ``send_timeout``, ``send_hwm``,
    ``recv_hwm`` (messages; 16: 1000, pyzmq's default, streams small
    messages about twice as fast, holding more), ``linger`` (seconds close waits to deliver
    queued messages; 10), ``topic``, ``kind``, ``bind``, ``expect_infos``,
    ``max_tensors``, ``max_rank``, ``max_bytes``, ``pub_nodrop``,
    ``immediate``, ``heartbeat``.

    CURVE security, as the ``tenbin`` tool's ``--curve-*`` options (the
    files are ZeroMQ certificates, as ``tenbin keygen`` or pyzmq's
    ``zmq.auth.create_certificates`` write them): ``curve_cert`` (this
    side's secret certificate, mode 0600), ``curve_server`` (the server's
    public certificate, on the side that connects), ``curve_allow`` (a
    folder of the public certificates of the clients allowed in, on the side
    that binds; without it any client holding a key pair). ``Loader`` takes
    the same.

    Blocking calls release the GIL and are interrupted by Ctrl-C
    (KeyboardInterrupt) within about 50 ms. Use a connection from one
    thread at a time. Errors raise ``tenbin.Error`` subclasses.
    """

    def __init__(self, url=None, epoch=100000, total=-1, multipart=True, infos=None, device=None,
                 allow64=False, raw=False, batch_transforms=None, batch_count=True, converters=None,
                 report=-1, stats_horizon=1000, noexpand=False, *, timeout=None, **options):
        self.multipart = multipart
        self.infos = infos
        self.device = device
        self.allow64 = allow64
        self.raw = raw
        self.epoch = epoch
        self.total = total
        self.batch_transforms = _listify(batch_transforms)
        self.batch_count = batch_count
        self.converters = _converters(converters, device)
        self.report = report
        self.count = 0
        self.sampler = None  # DataLoader compatibility, as tensorcom
        self.batch_sampler = None
        self.batch_size = 1
        self._options = dict(options, stats_horizon=stats_horizon, multipart=multipart, recv_timeout=timeout)
        if infos is not None:
            self._options["infos"] = list(infos)
        self._conn = None
        self.stats = Statistics(lambda: self._open().stats(), lambda: self._open().reset_stats())
        if url is not None:
            self.connect(url)

    def connect(self, url, topic=""):
        """Binds or connects to ``url`` (a URL or a list; braces expand),
        opening the socket on the first call; later calls add endpoints to
        the same socket (of the same kind). ``topic`` or a ``#topic``
        fragment: see the class; the library parses the URL, and one socket
        has one topic (a different one on a later call raises ``BadURL``
        for a fragment, ``BadArgument`` for ``topic``; a fragment on a
        push or pull URL raises ``BadURL``)."""
        urls = [url] if isinstance(url, str) else list(url)
        if self._conn is None:
            opts = dict(self._options)
            if topic:
                opts["topic"] = topic
            self._conn = _tenbin.Connection(urls, **opts)
        else:
            self._conn.add(urls, topic)

    def _open(self):
        if self._conn is None:
            raise Error("the connection is not connected (give a url, or call connect)", "bad_argument")
        return self._conn

    @property
    def endpoints(self):
        """The endpoints as ``(kind, bind, address)``; a tcp bind to port 0
        or ``*`` shows the port chosen."""
        return self._open().endpoints()

    def close(self):
        """Closes the socket, waiting at most ``linger`` seconds for queued
        messages to go out (tensorcom drops them at once)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data, *, allow64=False):
        """Sends one list of arrays. Writable arrays are copied, read-only
        ones and ``TensorPool`` arrays go zero-copy (see the package)."""
        self._open().send(data, bool(allow64 or self.allow64))

    def write(self, data):
        """Alias for send."""
        self.send(data)

    def recv(self, timeout=None):
        """Receives one list (either wire form) as read-only arrays viewing
        the received frames, then applies batch_transforms and converters.
        Raises ``Timeout`` after ``timeout`` seconds (default: the
        connection's), a ``Malformed`` subclass for a bad message (the
        connection stays usable). A message already waiting is taken
        without releasing the GIL; the GIL is released only to wait."""
        conn = self._conn if self._conn is not None else self._open()
        data = conn.recv(timeout)
        if self.batch_transforms:
            data = _transform_with(data, self.batch_transforms)
        if self.converters:
            data = _transform_with(data, self.converters)
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
        """Yields received lists; stops after ``total`` samples if given."""
        next_report = 0
        report = report if report > 0 else self.report
        while True:
            if self.total > 0 and self.count >= self.total:
                return
            result = self.recv()
            if report > 0 and self.count >= next_report:
                print("count", self.count, self.stats.summary())
                next_report += report
            self.count += self.batchsize(result)
            yield result

    def __iter__(self):
        return self.items()

    def __len__(self):
        """The ``epoch`` given (for frameworks that ask a length)."""
        return self.epoch


class Loader:
    """The C++ prefetching receiver: a background thread receives and
    decodes into a bounded queue (``queue_messages`` batches, at most
    ``queue_bytes`` of tensor data); ``next()`` and iteration take batches
    as read-only arrays viewing the received frames.

    ``url``: one or more receiving URLs (zpull, zrpull, zsub, zrsub; braces
    expand: fan-in from many producers into one socket; ``#topic`` as for
    Connection). ``timeout``: seconds ``next()`` waits before raising
    ``Timeout`` (None = forever). ``skip_malformed``: count and skip bad
    messages instead of raising them (in order) from ``next()``.
    ``batch_transforms``, ``converters``, ``device``: as Connection's
    (tensorcom's rule: function ``i % len`` applies to item ``i``); they run
    in ``next()``, on the caller's thread. (The C++ loader's ``transform``
    runs on the loader thread; a Python function there would hold the GIL
    against the consumer, so it is not exposed.) Other keywords are the
    connection options of Connection.

    ``next()`` holds no GIL while it waits; Ctrl-C raises KeyboardInterrupt
    within about 50 ms. Several threads may call ``next()``; each batch goes
    to one. ``close()`` stops receiving; batches queued can still be taken.
    """

    def __init__(self, url, *, queue_messages=64, queue_bytes=512 << 20, skip_malformed=False,
                 timeout=None, batch_transforms=None, converters=None, device=None, reuse_allocations=True,
                 **options):
        urls = [url] if isinstance(url, str) else list(url)
        self.batch_transforms = _listify(batch_transforms)
        self.converters = _converters(converters, device)
        self._loader = _tenbin.Loader(urls, queue_messages, queue_bytes, skip_malformed, reuse_allocations,
                                      recv_timeout=timeout, **options)
        self.stats = Statistics(self._loader.stats)

    def next(self, timeout=None):
        """The next batch (a list of arrays), or None once closed and
        drained. Raises ``Timeout`` after ``timeout`` seconds (default: the
        loader's), or the error of a malformed message."""
        batch = self._loader.next(timeout)
        if batch is None:
            return None
        if self.batch_transforms:
            batch = _transform_with(batch, self.batch_transforms)
        if self.converters:
            batch = _transform_with(batch, self.converters)
        return batch

    def __iter__(self):
        return self

    def __next__(self):
        batch = self.next()
        if batch is None:
            raise StopIteration
        return batch

    def close(self):
        """Stops receiving; queued batches can still be taken."""
        self._loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        self._loader.destroy()

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
    def endpoints(self):
        """The endpoints as ``(kind, bind, address)``."""
        return self._loader.endpoints()
