"""torch conversion (zero-copy, via DLPack) and tensorcom's TensorcomDataset."""

from __future__ import annotations

import numpy as np
import torch
import torch.utils.dlpack
from torch.utils.data import IterableDataset, get_worker_info

from . import _tenbin
from ._errors import Error


def to_torch(a):
    """A torch tensor on the same memory as NumPy array ``a`` (no copy).

    Arrays tenbin made (received, decoded, mapped) export their tenbin
    buffer, which stays alive as long as the torch tensor; other arrays are
    kept alive by the tensor. torch has no read-only tensors: a tensor made
    from a received array must not be written to (``.clone()`` it).

    torch builds without uint16/uint32/uint64 get a widened copy of u2 and
    u4 arrays (int32, int64); u8 raises ``Unsupported`` there."""
    if not isinstance(a, np.ndarray):
        return a
    try:
        return torch.utils.dlpack.from_dlpack(_tenbin.to_dlpack(a))
    except (RuntimeError, BufferError) as e:
        wider = _WIDER.get(a.dtype.str[1:])
        if wider is None:
            raise Error(f"torch cannot hold {a.dtype} arrays: {e}", "unsupported") from e
        return torch.from_numpy(a.astype(wider))


# What this torch lacks, as what holds it.
_WIDER = {"u2": np.int32, "u4": np.int64}


def to_device(device):
    """A converter to torch tensors on ``device`` (copied there unless cpu)."""
    def f(a):
        t = to_torch(a)
        return t if device in (None, "cpu") else t.to(device)
    return f


class TensorcomDataset(IterableDataset):
    """tensorcom's TensorcomDataset: an IterableDataset yielding ``length``
    received batches (lists of torch tensors on the received memory, or of
    NumPy arrays with ``converters="numpy"``), from a ``tenbin.Loader`` on
    ``urls`` (keywords go to it).

    With ``DataLoader(num_workers=N > 1)`` every worker opens its own
    socket. That is correct only for URLs whose socket connects and takes
    its share of a PUSH (``zrpull://`` to producers that bind with
    ``zrpush://``): each batch then reaches one worker, and each yields
    ``length / N`` of them. ZeroMQ deals the batches round-robin to the
    workers' prefetching loaders, so the producers must keep sending (as a
    tensorcom server does); what a worker has prefetched beyond its share
    when the epoch ends is dropped, never given twice. Other URLs are refused in the workers (a bound
    ``zpull`` would be "address in use", a ``zsub`` would give every worker
    every batch). The Loader prefetches on a thread of its own already:
    ``num_workers=0`` is usually as fast.
    """

    def __init__(self, urls, length=1000000, converters="torch", **loader_options):
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        self.length = length
        self.converters = converters
        self.loader_options = loader_options
        self.con = None

    def __getstate__(self):  # a worker opens a socket of its own
        state = dict(self.__dict__)
        state["con"] = None
        return state

    def _share(self):
        info = get_worker_info()
        if info is None or info.num_workers <= 1:
            return self.length
        from . import parse_urls
        for kind, bind, address in parse_urls(self.urls):
            if kind != "pull" or bind:
                raise Error(
                    f"TensorcomDataset with DataLoader(num_workers={info.num_workers}): {address} is a "
                    f"{'bound' if bind else 'connecting'} {kind} socket, so "
                    + ("every worker would bind the same address (address in use)" if bind
                       else "every worker would receive every batch")
                    + ". Use zrpull:// URLs (each worker connects and takes its share; producers bind "
                    "with zrpush://), or num_workers=0 (the Loader prefetches on its own thread).",
                    "bad_argument")
        share = self.length // info.num_workers
        return share + (1 if info.id < self.length % info.num_workers else 0)

    def __iter__(self):
        n = self._share()
        if self.con is None:
            from ._connection import Loader
            self.con = Loader(self.urls, converters=self.converters, **self.loader_options)
        for _ in range(n):
            yield self.con.next()

    def __len__(self):
        return self.length
