"""+shm URLs through the C++ connection: a forked sender, arrays arriving
read-only from shared memory, valid after the sender is gone."""
import os
import sys

import numpy as np
import pytest

import tenbin
from conftest import stop

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


STOPPED_SENDER = r"""
import sys, time, numpy as np, tenbin
push = tenbin.Connection(sys.argv[1])
for k in range(3):
    push.send([np.full(1000, k, "f4")])
print("sent", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("receiver", ["connection", "loader"])
def test_a_sender_stopped_for_a_moment_loses_no_message(tmp_path, receiver):
    """A +shm sender that stops for a second (a debugger, an overloaded host)
    while a receiver waits with timeout=10: every message arrives. A claim
    waits as long as the receive timeout, never only the library's internal
    polling slice (which skipped the message)."""
    import signal
    import subprocess
    import threading

    url = f"zpull+shm://{tmp_path}/s"
    # A loader with room for one batch takes the first two messages and
    # leaves the third on the socket: it claims that one while the sender
    # is stopped. A connection claims each at recv().
    rx = tenbin.Connection(url, timeout=10) if receiver == "connection" else \
        tenbin.Loader(url, timeout=10, queue_messages=1)
    sender = subprocess.Popen([sys.executable, "-c", STOPPED_SENDER, url.replace("zpull", "zpush")],
                              stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert sender.stdout.readline() == b"sent\n"
        threading.Event().wait(0.5)
        stop(sender)
        resume = threading.Timer(1.0, sender.send_signal, (signal.SIGCONT,))
        resume.start()
        got = [rx.recv() if receiver == "connection" else rx.next() for _ in range(3)]
        resume.join()
        assert [int(b[0][0]) for b in got] == [0, 1, 2]
    finally:
        sender.send_signal(signal.SIGCONT)
        sender.kill()
        sender.wait()
        rx.close()


def test_closing_a_connection_ends_a_claim_its_silent_sender_never_answers(tmp_path):
    """close() from another thread while recv() waits for a stopped +shm
    sender's answer: recv raises Closed at once, not at the claim timeout."""
    import signal
    import subprocess
    import threading

    url = f"zpull+shm://{tmp_path}/s"
    rx = tenbin.Connection(url)
    sender = subprocess.Popen([sys.executable, "-c", STOPPED_SENDER, url.replace("zpull", "zpush")],
                              stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert sender.stdout.readline() == b"sent\n"
        threading.Event().wait(0.3)  # the messages reached this end
        stop(sender)
        raised = []

        def receive():
            try:
                rx.recv()
            except tenbin.Closed as e:
                raised.append(e)

        t = threading.Thread(target=receive)
        t.start()
        t.join(0.5)
        assert t.is_alive()  # in the claim
        rx.close()
        t.join(10)  # the claim timeout is 30 s
        assert not t.is_alive() and len(raised) == 1
    finally:
        sender.send_signal(signal.SIGCONT)
        sender.kill()
        sender.wait()
