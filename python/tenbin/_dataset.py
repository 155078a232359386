"""tensorcom's TensorcomDataset: a torch IterableDataset on a Loader."""

from __future__ import annotations

from ._public import public

import sys

import torch.distributed
from torch.utils.data import IterableDataset, get_worker_info

from ._errors import BadArgument, Closed, EpochEnd, Timeout
from ._loader import Loader
from ._urls import parse_urls, url_list

__all__ = ["TensorcomDataset"]


def _batching_caller():
    """The DataLoader fetcher that called ``iter()`` on a dataset, if it
    batches (collates several of its items into one)."""
    frame = sys._getframe(2)
    owner = frame.f_locals.get("self") if frame is not None else None
    return owner if getattr(owner, "auto_collation", False) else None


@public
class TensorcomDataset(IterableDataset):
    """tensorcom's TensorcomDataset: an IterableDataset yielding ``length``
    received batches (lists of torch tensors on the received memory, or of
    NumPy arrays with ``converters="numpy"``; ``"tensorcom"`` for
    tensorcom's float32/int64 channels-first copies), from a
    ``tenbin.Loader`` on ``urls`` (keywords go to it). Iteration ends early
    at the Loader's ``timeout``.

    Its items are batches already: give ``DataLoader`` ``batch_size=None``.
    DataLoader's default ``batch_size=1`` would add a leading dimension of 1
    to every tensor, so it is refused (``BadArgument``) when iteration
    starts.

    With ``DataLoader(num_workers=N > 1)`` every worker opens its own
    socket. That is correct only for URLs whose socket connects and takes
    its share of a PUSH (``zrpull://`` to producers that bind with
    ``zrpush://``): each batch then reaches one worker, and each yields
    ``length / N`` of them. ZeroMQ deals the batches round-robin to the
    workers' prefetching loaders, so the producers must keep sending (as a
    tensorcom server does); what a worker has prefetched beyond its share
    when the epoch ends is dropped, never given twice. Other URLs are
    refused in the workers (a bound ``zpull`` would be "address in use", a
    ``zsub`` would give every worker every batch). The Loader prefetches on
    a thread of its own already: ``num_workers=0`` is usually as fast.

    A numbered stream (producers given ``producer=``): each ``iter()`` is
    one epoch, ending at the epoch's end (or after ``length`` batches).
    Distributed training: ``rank`` and ``world_size`` (default: the
    process group's, read from ``torch.distributed`` when iteration starts,
    if it is initialised) share the stream among the ranks, each taking
    the batches whose sequence number is its rank modulo the world size,
    and every rank as many per epoch (``drop_last``: drop the remainder,
    else pad short ranks), so that DistributedDataParallel does not hang at
    an epoch's end. Each rank must receive the whole stream: producers
    publish (``zpub://``, with ``wait_for`` the number of ranks) and ranks
    subscribe. ``state_dict()`` / ``load_state_dict()`` save and resume the
    position (see ``Loader``); one worker at most then.
    """

    def __init__(self, urls, length=1000000, converters="torch", *, rank=None, world_size=None, drop_last=True,
                 **loader_options):
        self.urls = url_list(urls)
        self.length = length
        self.converters = converters
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.loader_options = loader_options
        self.con = None
        self._resume = None

    def __getstate__(self):  # a worker opens a socket of its own
        state = dict(self.__dict__)
        state["con"] = None
        return state

    def _ranks(self):
        """The rank and world size: given, or the process group's."""
        rank, world_size = self.rank, self.world_size
        grouped = torch.distributed.is_available() and torch.distributed.is_initialized()
        if rank is None:
            rank = torch.distributed.get_rank() if grouped else 0
        if world_size is None:
            world_size = torch.distributed.get_world_size() if grouped else 1
        return rank, world_size

    def _share(self):
        info = get_worker_info()
        if info is None or info.num_workers <= 1:
            return self.length
        if self._ranks()[1] > 1 or self._resume is not None:
            raise BadArgument(
                f"TensorcomDataset with DataLoader(num_workers={info.num_workers}): a stream shared among ranks, "
                "or resumed from a state, is followed by one loader per rank; use num_workers=0 (the Loader "
                "prefetches on its own thread)")
        for kind, bind, address in parse_urls(self.urls):
            if kind != "pull" or bind:
                raise BadArgument(
                    f"TensorcomDataset with DataLoader(num_workers={info.num_workers}): {address} is a "
                    f"{'bound' if bind else 'connecting'} {kind} socket, so "
                    + ("every worker would bind the same address (address in use)" if bind
                       else "every worker would receive every batch")
                    + ". Use zrpull:// URLs (each worker connects and takes its share; producers bind "
                    "with zrpush://), or num_workers=0 (the Loader prefetches on its own thread).")
        share = self.length // info.num_workers
        return share + (1 if info.id < self.length % info.num_workers else 0)

    def __iter__(self):
        fetcher = _batching_caller()
        if fetcher is not None:
            raise BadArgument(
                "DataLoader(TensorcomDataset(...)) with a batch_size (DataLoader's default is 1) would stack "
                "the dataset's items, which are batches already, adding a leading dimension to every tensor: "
                "give DataLoader batch_size=None")
        return self._batches(self._share())

    def _open(self):
        if self.con is None:
            rank, world_size = self._ranks()
            options = dict(self.loader_options)
            if self._resume is not None:  # in place before the first batch
                options["resume_from"] = self._resume
            self.con = Loader(self.urls, converters=self.converters, rank=rank, world_size=world_size,
                              drop_last=self.drop_last, **options)
            self._resume = None
        return self.con

    def _batches(self, n):
        self._open()
        for _ in range(n):
            try:
                yield self.con.next()
            except (Timeout, Closed, EpochEnd):
                return

    def state_dict(self):
        """The Loader's ``state_dict()`` (what this rank took of its
        streams); before the first iteration, the state to resume from, if
        one was given, else an empty one."""
        if self.con is not None:
            return self.con.state_dict()
        return self._resume if self._resume is not None else {"epoch": 0, "producers": {}}

    def load_state_dict(self, state):
        """Resumes from ``state`` (a ``state_dict()`` saved before). In the
        main process (``num_workers=0``) it opens the Loader now, so that
        the state is in place before the producers send (call it after
        ``init_process_group``: the Loader takes the rank then); in a
        worker, when iteration opens it."""
        if self.con is None:
            self._resume = state
            if get_worker_info() is None:
                self._open()
        else:
            self.con.load_state_dict(state)

    def __len__(self):
        return self.length
