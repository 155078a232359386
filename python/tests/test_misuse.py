"""What users get wrong, and what a careless or hostile stream does: a clear
tenbin.Error subclass every time, never a crash, a hang or a freed byte read.
CI runs these under ASan and UBSan too (.ci/sanitizers)."""
import io
import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tenbin
from conftest import free_port


def in_thread(f):
    """Runs f on a thread; returns the thread and what f returned or raised."""
    out = {}

    def run():
        try:
            out["value"] = f()
        except BaseException as e:  # noqa: B902 (what the thread raised is the result)
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, out


# ---- closing from another thread -------------------------------------------

def close_while_waiting(target, call):
    t, out = in_thread(call)
    time.sleep(0.3)  # blocked by now (the test holds either way)
    target.close()
    t.join(10)
    assert not t.is_alive(), "the blocked call did not return"
    return out


@pytest.mark.parametrize("rep", range(3))
def test_closing_a_connection_raises_closed_in_the_blocked_receive(rep):
    rx = tenbin.Connection(f"zpull://127.0.0.1:{free_port()}")
    out = close_while_waiting(rx, rx.recv)
    assert isinstance(out.get("error"), tenbin.Closed), out
    assert "was closed" in str(out["error"])
    with pytest.raises(tenbin.Closed):
        rx.recv()
    assert rx.closed and rx.stats.count == 0  # statistics stay readable


def test_closing_a_connection_raises_closed_in_the_blocked_send():
    tx = tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", send_timeout=None, linger=0)
    out = close_while_waiting(tx, lambda: tx.send([np.zeros(10, "f4")]))
    assert isinstance(out.get("error"), tenbin.Closed), out


def test_closing_a_connection_raises_closed_in_the_blocked_acquire():
    tx = tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", linger=0)
    held = [tx.acquire(1 << 20, "f4") for _ in range(256)]  # 1 GiB: the pool's bound
    out = close_while_waiting(tx, lambda: tx.acquire(1 << 20, "f4", timeout=None))
    assert isinstance(out.get("error"), tenbin.Closed), out
    assert held[0].nbytes == 4 << 20


def test_closing_a_loader_raises_closed_in_the_blocked_next():
    ld = tenbin.Loader(f"zpull://127.0.0.1:{free_port()}")
    out = close_while_waiting(ld, ld.next)
    assert isinstance(out.get("error"), tenbin.Closed), out
    assert list(ld) == []  # iteration ends there
    # Destroyed while another thread waits: that thread's loader stays valid.
    ld = tenbin.Loader(f"zpull://127.0.0.1:{free_port()}")
    t, out = in_thread(ld.next)
    time.sleep(0.3)
    ld.__exit__(None, None, None)
    t.join(10)
    assert isinstance(out.get("error"), tenbin.Closed), out


EXIT_CODE = """
import sys, threading, time, numpy as np, tenbin
port, what = int(sys.argv[1]), sys.argv[2]
if what == "loader":
    x = tenbin.Loader(f"zpull://127.0.0.1:{port}")
    wait = x.next
elif what == "send":
    x = tenbin.Connection(f"zpush://127.0.0.1:{port}", send_timeout=None)
    wait = lambda: x.send([np.zeros(3, "f4")])
else:
    x = tenbin.Connection(f"zpull://127.0.0.1:{port}")
    wait = x.recv
threading.Thread(target=wait, daemon=True).start()
time.sleep(0.3)
print("exiting", flush=True)
"""


@pytest.mark.parametrize("what", ["loader", "send", "recv"])
def test_interpreter_exit_with_a_daemon_thread_blocked(what):
    p = subprocess.run([sys.executable, "-c", EXIT_CODE, str(free_port()), what], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "exiting" and "terminate" not in p.stderr


# ---- no wait holds the GIL -------------------------------------------------

def progress_during(action):
    """Runs action on this thread while another counts; returns how long
    the action took and whether the counter moved while it ran."""
    stop, ticks = threading.Event(), []

    def count():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.05)
    start = time.monotonic()
    action()
    end = time.monotonic()
    stop.set()
    t.join()
    return end - start, any(start + 0.1 < x < end - 0.1 for x in ticks)


@pytest.mark.parametrize("how", ["close", "del"])
def test_a_lingering_close_does_not_hold_the_gil(how):
    import socket
    # A peer that accepts the connection and never speaks: messages queue
    # towards it, and closing lingers for them.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        holder = {"c": tenbin.Connection(f"zpush://127.0.0.1:{port}", immediate=False, linger=1)}
        holder["c"].send([np.zeros(1000, "f4")])

        def action():
            if how == "close":
                holder["c"].close()
            else:
                del holder["c"]

        took, moved = progress_during(action)
    assert took > 0.5, "closing did not linger: the test saw nothing"
    assert moved, "another thread could not run while the connection closed"


# ---- streams ---------------------------------------------------------------

class Collector:
    """A lazy stream: keeps what write() gets, and views derived from it."""

    def __init__(self):
        self.given, self.derived = [], []

    def write(self, b):
        self.given.append(b)
        self.derived.append(np.frombuffer(b, "u1"))


def test_write_releases_the_views_it_hands_to_the_stream():
    xs = [np.arange(1000, dtype="f4"), np.array(3, "u4"), np.zeros((2, 0), "i2")]
    s = Collector()
    tenbin.write(s, xs)
    views = [b for b in s.given if isinstance(b, memoryview)]
    assert views  # the arrays' bytes went as memoryviews
    for b in views:
        with pytest.raises(ValueError):
            bytes(b)
    del xs
    # What the stream derived keeps its memory alive: valid, unchanged.
    expected = bytes(tenbin.encode_buffer([np.arange(1000, dtype="f4"), np.array(3, "u4"), np.zeros((2, 0), "i2")]))
    assert b"".join(d.tobytes() for d in s.derived) == expected


class Keeper(io.BytesIO):
    """A stream that keeps the buffers readinto() got, and writes through
    them later."""

    def __init__(self, data):
        super().__init__(data)
        self.kept = []

    def readinto(self, b):
        self.kept.append(b)
        return super().readinto(b)


def test_read_releases_the_views_and_later_writes_change_nothing():
    xs = [np.arange(300, dtype="f4"), np.array(7, "u4")]
    k = Keeper(bytes(tenbin.encode_buffer(xs)))
    ys = tenbin.read(k)
    for b in k.kept:
        with pytest.raises(ValueError):
            b[0] = 1
    assert all(np.array_equal(x, y) for x, y in zip(xs, ys))


def test_read_refuses_a_readinto_claiming_more_than_it_was_given():
    class Liar(io.BytesIO):
        def readinto(self, b):
            super().readinto(b)
            return len(b) + 10

    with pytest.raises(tenbin.IOFailure, match="claims"):
        tenbin.read(Liar(bytes(tenbin.encode_buffer([np.zeros(10, "f4")]))))

    class Wrong(io.BytesIO):
        def readinto(self, b):
            return "many"

    with pytest.raises(tenbin.IOFailure, match="not a count"):
        tenbin.read(Wrong(b"x" * 100))


# ---- times -----------------------------------------------------------------

def send_later(url, seconds):
    def send():
        time.sleep(seconds)
        with tenbin.Connection(url) as tx:
            tx.send([np.arange(4, dtype="f4")])
    t = threading.Thread(target=send)
    t.start()
    return t


@pytest.mark.parametrize("timeout", [math.inf, 1e10, 1e300])
def test_infinite_and_huge_timeouts_wait(timeout):
    port = free_port()
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=timeout)
    rx = tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", timeout=timeout)
    t = send_later(f"zpush://127.0.0.1:{port}", 0.3)
    assert ld.next()[0][3] == 3
    t.join()
    t = send_later(rx.endpoints[0][2].replace("tcp://", "zpush://"), 0.3)
    assert rx.recv(timeout=timeout)[0][3] == 3
    t.join()
    pool = tenbin.TensorPool(timeout=timeout)
    assert pool.acquire(4).shape == (4,)
    ld.close()
    rx.close()


@pytest.mark.parametrize("bad", [math.nan, -1, -math.inf, "3", True])
def test_bad_timeouts_are_value_errors(bad):
    with pytest.raises(ValueError, match="timeout="):
        tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", timeout=bad)
    with pytest.raises(ValueError, match="timeout="):
        tenbin.Loader(f"zpull://127.0.0.1:{free_port()}", timeout=bad)
    with tenbin.Connection(f"zpull://127.0.0.1:{free_port()}") as rx:
        with pytest.raises(tenbin.BadArgument, match="timeout="):
            rx.recv(timeout=bad)
    with pytest.raises(tenbin.BadArgument, match="linger="):
        tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", linger=bad)


def test_timeouts_name_the_url_and_the_seconds():
    url = f"zpull://127.0.0.1:{free_port()}"
    with tenbin.Connection(url, timeout=0.25) as rx:
        with pytest.raises(tenbin.Timeout, match=f"0.25 s on {url}"):
            rx.recv()
    with tenbin.Loader(url, timeout=0.2) as ld:
        with pytest.raises(tenbin.Timeout, match=f"0.2 s on {url}"):
            ld.next()
        with pytest.raises(tenbin.Timeout, match="0.1 s"):
            ld.next(timeout=0.1)


def test_nothing_arriving_says_what_the_socket_needs_at_the_other_end():
    """The usual reasons nothing arrives: a SUB pointed at a PUSH producer,
    both ends connecting, a SUB that joined after the PUB sent. The timeout
    says what this end made and what it needs at the other end."""
    port = free_port()
    with tenbin.Connection(f"zpush://127.0.0.1:{port}", bind=True, send_timeout=0.3), \
         tenbin.Connection(f"zsub://127.0.0.1:{port}", timeout=0.3) as sub:
        with pytest.raises(tenbin.Timeout, match="this SUB socket connected to tcp://127.0.0.1:%d needs a PUB that "
                                                 "binds there, and gets only what the PUB sends after it joined" % port):
            sub.recv()
    # Both ends connecting: each says it needs a peer that binds.
    with tenbin.Loader(f"zpull://127.0.0.1:{port}", bind=False, timeout=0.3) as pull, \
         tenbin.Connection(f"zpush://127.0.0.1:{port}", send_timeout=0.3) as push:
        with pytest.raises(tenbin.Timeout, match="this PULL socket connected to .* needs a PUSH that binds there"):
            pull.next()
        with pytest.raises(tenbin.Timeout, match=r"\(no receiver\?\).*this PUSH socket connected to .* needs a "
                                                 "PULL that binds there"):
            push.send([np.zeros(3, "f4")])


def test_iteration_ends_at_a_timeout_and_next_raises():
    port = free_port()
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=0.5)
    rx = tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", timeout=0.5)
    with tenbin.Connection(f"zpush://127.0.0.1:{port}") as tx, \
         tenbin.Connection(rx.endpoints[0][2].replace("tcp://", "zpush://")) as tx2:
        for i in range(3):
            tx.send([np.full(2, i, "i4")])
            tx2.send([np.full(2, i, "i4")])
        assert [int(b[0][0]) for b in ld] == [0, 1, 2]
        assert [int(b[0][0]) for b in rx] == [0, 1, 2]
    with pytest.raises(tenbin.Timeout):
        ld.next()
    ld.close()
    rx.close()


# ---- sending to nobody -----------------------------------------------------

def test_send_without_a_receiver_times_out_and_says_why():
    import inspect
    assert inspect.signature(tenbin.Connection).parameters["send_timeout"].default == 30  # the CLI's
    url = f"zpush://127.0.0.1:{free_port()}"
    with tenbin.Connection(url, send_timeout=0.3, linger=0) as tx:
        with pytest.raises(tenbin.Timeout, match=r"0.3 s on .*\(no receiver\?\)"):
            tx.send([np.zeros(3, "f4")])


def test_send_after_every_receiver_left_times_out_and_says_why():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    with tenbin.Connection(f"zpush://127.0.0.1:{port}", send_timeout=0.3, linger=0) as tx:
        tx.send([np.zeros(3, "f4")])
        rx.recv()
        rx.close()
        with pytest.raises(tenbin.Timeout, match="no receiver"):
            for _ in range(1000):  # what fits the queues first
                tx.send([np.zeros(3, "f4")])


# ---- what is not a list of arrays ------------------------------------------

@pytest.mark.parametrize("sample, says", [
    ({"image": np.zeros(3, "f4")}, "got a dict"),
    (np.zeros((2, 3), "f4"), "single numpy.ndarray of shape (2, 3)"),
    ("abc", "got a str"),
    (5, "got an int"),
    ([[[1, 2], [3]]], "ragged nested list"),
    ([np.zeros(3, bool)], "dtype bool has no tenbin code"),
    ([np.zeros(3, "c8")], "dtype complex64 has no tenbin code"),
])
def test_what_is_not_a_list_of_arrays_gets_a_clear_error(sample, says):
    for f in (tenbin.encode_buffer, tenbin.encode_list, lambda l: tenbin.write(io.BytesIO(), l)):
        with pytest.raises(tenbin.BadArgument) as e:
            f(sample)
        assert says in str(e.value) and isinstance(e.value, (ValueError, TypeError))
    with tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", linger=0) as tx:
        with pytest.raises(tenbin.BadArgument, match=says.replace("(", r"\(").replace(")", r"\)")):
            tx.send(sample)


def test_a_bfloat16_tensor_gets_the_no_tenbin_code_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(tenbin.BadArgument, match="torch.bfloat16 has no tenbin code"):
        tenbin.encode_buffer([torch.zeros(3), torch.zeros(3, dtype=torch.bfloat16)])
    assert tenbin.decode_buffer(tenbin.encode_buffer([torch.arange(3)]))[0].tolist() == [0, 1, 2]


# ---- messages in Python's words --------------------------------------------

def test_messages_name_python_keywords(tmp_path):
    with tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", linger=0) as tx:
        with pytest.raises(tenbin.BadArgument) as e:
            tx.send([np.zeros(3, "f8")])
    assert "allow64=True" in str(e.value) and "::" not in str(e.value)
    with pytest.raises(tenbin.BadExtension) as e:
        tenbin.save(tmp_path / "x.bin", np.zeros(3, "f4"))
    assert "nocheck=True" in str(e.value) and "::" not in str(e.value)
    with pytest.raises(tenbin.LimitExceeded) as e:
        tenbin.decode_buffer(tenbin.encode_buffer([np.zeros((1,) * 17, "f4")]))
    assert "max_rank" in str(e.value) and "::" not in str(e.value)


def test_errors_of_the_python_layer_are_the_documented_classes(tmp_path):
    with pytest.raises(ValueError):
        tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", converters="bogus")
    with pytest.raises(tenbin.BadArgument):
        tenbin.read(io.BytesIO(b""), n=0)
    with tenbin.Loader(f"zpull://127.0.0.1:{free_port()}") as ld:
        with pytest.raises(tenbin.Unsupported):
            ld.stats.reset()
    import zmq.auth
    zmq.auth.create_certificates(str(tmp_path), "client")
    with pytest.raises(tenbin.BadArgument, match="curve_cert"):
        tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", curve_allow=tmp_path)
    with pytest.raises(tenbin.BadArgument, match="kind="):
        tenbin.Connection("tcp://127.0.0.1:1", kind="pusher")
