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
