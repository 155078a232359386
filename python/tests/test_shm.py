"""+shm URLs through the C++ connection: a forked sender, arrays arriving
read-only from shared memory, valid after the sender is gone."""
import os
import sys

import numpy as np
import pytest

import tenbin

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="+shm needs Linux")


def test_push_pull_across_processes(tmp_path):
    url = f"zpull+shm://{tmp_path}/s"
    pull = tenbin.Connection(url)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            push = tenbin.Connection(url.replace("zpull", "zpush"))
            for k in range(5):
                push.send([np.full((1000,), k, dtype=np.float32), np.arange(10, dtype=np.int32)])
            push.close()
            code = 0
        finally:
            os._exit(code)
    got = [pull.recv() for _ in range(5)]
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # The sender is gone; the arrays still read what it sent.
    for k, (a, b) in enumerate(got):
        assert a.dtype == np.float32 and (a == k).all()
        assert (b == np.arange(10)).all()
        assert not a.flags.writeable


def mapping_of(address):
    """The path of the mapping holding `address` in this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5] if len(fields) > 5 else ""
    return None


def test_acquire_gives_the_connections_shared_memory(tmp_path):
    url = f"zpull+shm://{tmp_path}/s"
    pull = tenbin.Connection(url, timeout=20)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            push = tenbin.Connection(url.replace("zpull", "zpush"))
            for k in range(5):
                a = push.acquire((256, 1024), "float32")
                # Shared memory: a memfd segment, not the heap.
                if "memfd:" not in mapping_of(a.__array_interface__["data"][0]):
                    os._exit(3)
                a[...] = k
                push.send([a, np.arange(10, dtype=np.int32)])
                if a.flags.writeable:  # sent without a copy: no longer to refill
                    os._exit(4)
            if push.pool_stats["reuses"] + push.pool_stats["allocations"] < 5:
                os._exit(5)
            push.close()
            code = 0
        finally:
            os._exit(code)
    got = [pull.recv() for _ in range(5)]
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    for k, (a, b) in enumerate(got):
        assert a.shape == (256, 1024) and (a == k).all() and (b == np.arange(10)).all()
    with pytest.raises(tenbin.BadArgument, match="cannot send"):
        pull.acquire(10)
    pull.close()


def test_acquire_on_plain_connections_is_a_pool_of_their_own():
    rx = tenbin.Connection(f"zpull+inproc://acq{os.getpid()}", timeout=10)
    tx = tenbin.Connection(f"zpush+inproc://acq{os.getpid()}")
    for i in range(10):
        a = tx.acquire(1 << 16, "u1")
        a[:] = i
        tx.send([a])
        (got,) = rx.recv()
        assert got.__array_interface__["data"][0] == a.__array_interface__["data"][0]  # no copy
        assert got.min() == got.max() == i
        del a, got
    assert tx.pool_stats["reuses"] > 0
    rx.close()
    tx.close()
