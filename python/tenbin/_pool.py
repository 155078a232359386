"""TensorPool: writable arrays that are sent without a copy."""

from __future__ import annotations

from ._public import public

from . import _tenbin

__all__ = ["TensorPool"]


@public
class TensorPool:
    """Writable arrays for producers that send in a loop, on the C++
    ``tenbin::tensor_pool``: ``acquire`` gives a fresh writable array on a
    pool block nobody else holds, which is sent zero-copy (a writable array
    of your own is copied); the block returns to the pool, not to the
    allocator, once every holder (the array and its views, ZeroMQ's frames,
    a receiver over inproc) has released it. An array sent zero-copy becomes
    read-only (refilling it would change bytes ZeroMQ still sends): acquire
    a new array for every message. (``Connection.acquire`` gives the same
    from the connection's own pool, shared memory over ``+shm``.)

    ``max_bytes`` and ``max_buffers`` bound what the pool holds; at a bound
    ``acquire`` waits for a release up to ``timeout`` seconds (None: as long
    as it takes; Ctrl-C interrupts it), then raises ``Timeout``. A reused
    block holds what its last user wrote: fill all of it. Thread-safe.
    """

    def __init__(self, max_bytes=1 << 30, max_buffers=1024, timeout=None):
        self._pool = _tenbin.TensorPool(max_bytes, max_buffers, timeout)

    def acquire(self, shape, dtype="float32", timeout=None):
        """A writable, uninitialised, 64-byte-aligned C-order array of
        ``shape`` and ``dtype`` (one of the format's) on a pool block."""
        if isinstance(shape, int):
            shape = (shape,)
        return self._pool.acquire([int(d) for d in shape], dtype, "", timeout)

    def trim(self):
        """Gives every idle block back to the allocator."""
        self._pool.trim()

    @property
    def stats(self):
        """A snapshot: buffers, bytes, in_use, in_use_bytes, allocations,
        reuses, waits."""
        return self._pool.stats()

    def __repr__(self):
        st = self._pool.stats()
        return f"<tenbin.TensorPool {st['in_use']} of {st['buffers']} blocks in use, {st['bytes']} bytes held>"
