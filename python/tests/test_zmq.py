"""ZeroMQ: pyzmq sockets, Connection, Loader; interop with the C++ tool and
a tensorcom-style peer; zero-copy and memory; Ctrl-C."""
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import zmq

import tenbin
from tenbin import _tenbin

import tensorcom_peer as peer  # tests/peers/, the C++ interop tests' peer (see conftest)
from conftest import free_port, run_python


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


BATCH = [np.arange(3 * 32 * 32, dtype="f2").reshape(3, 32, 32), np.arange(8, dtype="i4"), np.array(7, "u4")]


@pytest.fixture
def pair():
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    pull.rcvtimeo = 10000
    yield push, pull
    push.close(linger=0)
    pull.close(linger=0)
    ctx.term()


def test_pyzmq_sockets_both_forms(pair):
    push, pull = pair
    tenbin.zsend_multipart(push, BATCH, infos=["a", "b", "c"])
    ys, infos = tenbin.zrecv_multipart(pull, infos=True)
    assert infos == ["a", "b", "c"] and all(same(x, y) for x, y in zip(BATCH, ys))
    tenbin.zsend_single(push, BATCH)
    assert all(same(x, y) for x, y in zip(BATCH, tenbin.zrecv_single(pull)))
    tenbin.zsend_single(push, BATCH)
    with pytest.raises(tenbin.OddChunkCount):  # the other form: refused, not misread
        tenbin.zrecv_multipart(pull)
    tenbin.zsend_multipart(push, BATCH)
    assert len(tenbin.zrecv(pull)) == 3
    pull.rcvtimeo = 100
    with pytest.raises(tenbin.Timeout) as e:
        tenbin.zrecv(pull)
    assert isinstance(e.value, TimeoutError) and e.value.errc == "timeout"


def test_tensorcom_style_peer_both_directions_both_forms(pair):
    push, pull = pair
    xs = [np.random.default_rng(1).random((4, 5)).astype("f4"), np.arange(3, dtype="u2")]
    # peer -> tenbin
    push.send_multipart(peer.encode_list(xs, ["p", "q"]))
    ys, infos = tenbin.zrecv_multipart(pull, infos=True)
    assert infos == ["p", "q"] and all(same(x, y) for x, y in zip(xs, ys))
    push.send(peer.encode_buffer(xs))
    assert all(same(x, y) for x, y in zip(xs, tenbin.zrecv_single(pull)))
    # tenbin -> peer
    tenbin.zsend_multipart(push, xs)
    assert all(same(x, y) for x, y in zip(xs, peer.decode_list(pull.recv_multipart())[0]))
    tenbin.zsend_single(push, xs)
    assert all(same(x, y) for x, y in zip(xs, peer.decode_buffer(pull.recv())[0]))
    # and tenbin's Connection against the peer's sockets
    port = free_port()
    c = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.disconnect(pull.getsockopt(zmq.LAST_ENDPOINT).decode())
    push.send_multipart(peer.encode_list(xs))
    assert all(same(x, y) for x, y in zip(xs, c.recv()))
    push.send(peer.encode_buffer(xs))
    assert all(same(x, y) for x, y in zip(xs, c.recv()))
    c.close()


def test_refuses_a_different_libzmq(pair, monkeypatch):
    push, _ = pair
    monkeypatch.setattr(tenbin._sockets, "_same_libzmq", False)
    monkeypatch.setattr(zmq, "zmq_version", lambda: "0.0.1")
    with pytest.raises(tenbin.Unsupported, match="same libzmq"):
        tenbin.zsend_multipart(push, BATCH)


def test_one_libzmq_is_mapped(pair):
    tenbin.zsend_multipart(pair[0], BATCH)
    tenbin.zrecv(pair[1])
    assert _tenbin.zmq_version() == zmq.zmq_version()
    libs = {os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps") if "libzmq" in line}
    assert len(libs) == 1, libs


def test_connection_roundtrip_both_forms_and_stats(port):
    for multipart in (True, False):
        port = free_port()
        with tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10) as rx, \
             tenbin.Connection(f"zpush://127.0.0.1:{port}", multipart=multipart, infos=["a", "b", "c"]) as tx:
            tx.send(BATCH)
            ys = rx.recv()
            assert all(same(x, y) for x, y in zip(BATCH, ys))
            assert rx.stats.count == 1 and rx.stats.total == sum(x.nbytes for x in BATCH)
            assert "msg" in rx.stats.summary()
            with pytest.raises(tenbin.BadArgument):  # 64-bit refused as tensorcom
                tx.send([np.zeros(3, "f8")] * 3)
            tx.send([np.zeros(3, "f8")] * 3, allow64=True)
            assert rx.recv()[0].dtype == np.float64
            assert len(rx) == 100000
    with pytest.raises(tenbin.Timeout):
        tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", timeout=0.1).recv()
    with pytest.raises(tenbin.BadURL):
        tenbin.Connection("zfoo://127.0.0.1:1")


def test_connection_items_serve_total_and_transforms():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", total=6, timeout=10,
                           batch_transforms=[lambda a: a * 2, None])
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    tx.serve([np.full((2,), i, "i4"), np.zeros(1, "f4")] for i in range(3))
    got = [b for b in rx]
    assert len(got) == 3 and [int(b[0][0]) for b in got] == [0, 2, 4]
    tx.close()
    rx.close()


def test_loader_batch_transforms_apply_per_item():
    port = free_port()
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10,
                       batch_transforms=[lambda a: a * 2, None, lambda a: a.sum()])
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    tx.send([np.full(2, 3, "i4"), np.ones(1, "f4"), np.arange(4, dtype="i2"), np.full(1, 5, "u1")])
    x, y, z, w = ld.next()
    assert x.tolist() == [6, 6] and y.tolist() == [1.0] and z == 6 and w.tolist() == [10]
    tx.close()
    ld.close()


def test_connect_adds_endpoints_and_brace_fan_in_from_three_producers():
    ports = [free_port() for _ in range(3)]
    url = "zpull://127.0.0.1:{%d,%d,%d}" % tuple(ports)
    loader = tenbin.Loader(url, timeout=20)
    assert len(loader.endpoints) == 3
    code = ("import sys, numpy as np, tenbin\n"
            "c = tenbin.Connection(sys.argv[1])\n"
            "for i in range(20): c.send([np.full(1000, int(sys.argv[2]) * 100 + i, 'i4')])\n"
            "c.close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"zpush://127.0.0.1:{p}", str(k)])
             for k, p in enumerate(ports)]
    seen = sorted(int(loader.next()[0][0]) for _ in range(60))
    assert seen == sorted(k * 100 + i for k in range(3) for i in range(20))
    for p in procs:
        assert p.wait(30) == 0
    loader.close()
    # Connection.connect on an open connection: one more endpoint, same socket.
    p1, p2 = free_port(), free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{p1}", timeout=10)
    rx.connect(f"zpull://127.0.0.1:{p2}")
    assert [e[2] for e in rx.endpoints] == [f"tcp://127.0.0.1:{p1}", f"tcp://127.0.0.1:{p2}"]
    tx = tenbin.Connection(f"zpush://127.0.0.1:{p2}")
    tx.send([np.ones(3, "f4")])
    assert rx.recv()[0].sum() == 3
    with pytest.raises(tenbin.BadURL):
        rx.connect(f"zpush://127.0.0.1:{free_port()}")


def test_topic_fragment_subscribes():
    port = free_port()
    pub = tenbin.Connection(f"zpub://127.0.0.1:{port}#train")
    sub = tenbin.Connection(f"zsub://127.0.0.1:{port}#train", timeout=0.2)
    other = tenbin.Connection(f"zsub://127.0.0.1:{port}#test", timeout=0.2)
    got = None
    for _ in range(50):  # subscriptions take a moment to reach the publisher
        pub.send([np.arange(4, dtype="f4")])
        try:
            got = sub.recv()
            break
        except tenbin.Timeout:
            pass
    assert got is not None and got[0][3] == 3
    with pytest.raises(tenbin.Timeout):
        other.recv(timeout=0.3)
    # The library parses the fragment: one socket, one topic.
    with pytest.raises(tenbin.BadURL):
        sub.connect(f"zsub://127.0.0.1:{free_port()}#test")
    with pytest.raises(tenbin.BadArgument):
        sub.connect(f"zsub://127.0.0.1:{free_port()}", topic="test")
    with pytest.raises(tenbin.BadArgument):
        tenbin.Connection(f"zsub://127.0.0.1:{port}#train", topic="test")
    with pytest.raises(tenbin.BadURL):
        tenbin.Connection(f"zpull://127.0.0.1:{port}#train")
    wrong = tenbin.Loader(f"zsub://127.0.0.1:{port}#test", timeout=0.2)
    right = tenbin.Loader(f"zsub://127.0.0.1:{port}#train", timeout=0.2)
    got = None
    for i in range(50):
        pub.send([np.full(2, i, dtype="f4")])
        try:
            got = right.next()
            break
        except tenbin.Timeout:
            pass
    assert got is not None and got[0][0] <= i
    with pytest.raises(tenbin.Timeout):
        wrong.next(timeout=0.3)
    for ld in (wrong, right):
        ld.close()
    for c in (pub, sub, other):
        c.close()


def test_malformed_message_raises_and_connection_goes_on(pair):
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.PUSH)
    s.connect(f"tcp://127.0.0.1:{port}")
    s.send(b"not tenbin at all, no magic here")
    s.send_multipart(peer.encode_list([np.ones(2, "f4")]))
    with pytest.raises(tenbin.BadMagic):
        rx.recv()
    assert rx.recv()[0].sum() == 2
    s.send_multipart([b"\0" * 24])
    with pytest.raises(tenbin.Malformed):
        rx.recv()
    s.close(linger=0)
    rx.close()
    # The loader: raised in order, or skipped and counted.
    port = free_port()
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10, skip_malformed=True)
    s = ctx.socket(zmq.PUSH)
    s.connect(f"tcp://127.0.0.1:{port}")
    s.send(b"garbage")
    s.send_multipart(peer.encode_list([np.ones(2, "f4")]))
    assert ld.next()[0].sum() == 2 and ld.malformed == 1
    s.close(linger=0)
    ld.close()


def test_received_arrays_view_frames_that_outlive_the_connection():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    big = np.arange(1 << 20, dtype="f4")
    tx.send([big])
    (a,) = rx.recv()
    assert not a.flags.owndata and not a.flags.writeable
    assert a.base is not None
    with pytest.raises(ValueError):
        a[0] = 1
    rx.close()
    tx.close()
    del rx, tx
    gc.collect()
    assert np.array_equal(a, big)  # the frame outlives socket and connection


def test_zero_copy_send_of_read_only_arrays_and_copies_of_writable_ones():
    name = f"inproc://zc{os.getpid()}"
    rx = tenbin.Connection(f"zpull+inproc://zc{os.getpid()}", timeout=10)
    tx = tenbin.Connection(f"zpush+inproc://zc{os.getpid()}")
    assert name
    ro = np.arange(1 << 16, dtype="f4")
    ro.flags.writeable = False
    ref = weakref.ref(ro)
    tx.send([ro])
    (got,) = rx.recv()
    # Over inproc, a zero-copy frame is the sender's memory itself.
    assert got.__array_interface__["data"][0] == ro.__array_interface__["data"][0]
    del ro
    gc.collect()
    assert ref() is not None  # kept alive by the frame the receiver holds
    assert got[-1] == (1 << 16) - 1
    del got
    gc.collect()
    _tenbin.drain()
    assert ref() is None  # released once ZeroMQ and the receiver let go
    # The naive loop: refill a writable array after each send.
    w = np.zeros(1 << 16, dtype="f4")
    for i in range(5):
        w[:] = i
        tx.send([w])
    w[:] = -1
    for i in range(5):
        (got,) = rx.recv()
        assert got.__array_interface__["data"][0] != w.__array_interface__["data"][0]
        assert got.min() == got.max() == i
    # A received array is forwarded without a copy: its frame is shared.
    ro2 = np.arange(1 << 16, dtype="f4")
    ro2.flags.writeable = False
    tx.send([ro2])
    (fwd,) = rx.recv()
    tx.send([fwd])
    (again,) = rx.recv()
    assert again.__array_interface__["data"][0] == ro2.__array_interface__["data"][0]
    # A writable array decoded from a bytearray is copied, as any writable one.
    buf = tenbin.encode_buffer([np.ones(1 << 14, "f4")])
    (dec,) = tenbin.decode_buffer(buf)
    assert dec.flags.writeable
    tx.send([dec])
    dec[:] = 5
    (got,) = rx.recv()
    assert got.max() == 1
    # A read-only view of a writable array is copied too: its owner may refill it.
    v = w[:]
    v.flags.writeable = False
    tx.send([v])
    w[:] = -2
    (got,) = rx.recv()
    assert got.__array_interface__["data"][0] != w.__array_interface__["data"][0] and got.max() == -1
    rx.close()
    tx.close()


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_bounded_over_10000_messages():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    ro = np.arange(4096, dtype="f4")
    ro.flags.writeable = False
    small = np.arange(16, dtype="i4")
    base = None
    for i in range(10000):
        tx.send([ro, small, np.array(i, "u4")])
        ys = rx.recv()
        assert int(ys[2]) == i
        if i == 1000:
            gc.collect()
            base = rss()
    gc.collect()
    grown = rss() - base
    assert grown < 16 << 20, f"RSS grew by {grown} bytes over 9000 messages"
    # every sent array's reference was given back
    _tenbin.drain()
    assert sys.getrefcount(ro) < 10
    rx.close()
    tx.close()


def test_interop_with_the_cpp_tool(tool, tmp_path):
    xs = [np.arange(60, dtype="f4").reshape(3, 20), np.array(9, "u4")]
    f = tmp_path / "x.ten"
    tenbin.save(str(f), *xs, infos=["img", "n"])
    for single in (False, True):
        # C++ tool -> tenbin.Connection
        port = free_port()
        rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=20)
        args = [tool, "send", f"zpush://127.0.0.1:{port}", "-f", str(f), "-n", "2"] + (["--single"] if single else [])
        p = subprocess.run(args, capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        for _ in range(2):
            ys, infos = tenbin.decode_buffer(tenbin.encode_buffer(rx.recv()), infos=True)
            assert all(same(x, y) for x, y in zip(xs, ys))
        rx.close()
        # tenbin.Connection -> C++ tool
        port = free_port()
        p = subprocess.Popen([tool, "recv", f"zpull://127.0.0.1:{port}", "-n", "1", "--json", "--timeout", "20"],
                             stdout=subprocess.PIPE)
        tx = tenbin.Connection(f"zpush://127.0.0.1:{port}", multipart=not single, infos=["img", "n"])
        tx.send(xs)
        out = p.communicate(timeout=60)[0]
        assert p.returncode == 0
        desc = json.loads(out.decode().splitlines()[0])["tensors"]
        assert [(t["info"], t["dtype"], t["shape"]) for t in desc] == [("img", "f4", [3, 20]), ("n", "u4", [])]
        tx.close()
    # tenbin serve (C++ producer) -> Loader
    port = free_port()
    ld = tenbin.Loader(f"zrpull://127.0.0.1:{port}", timeout=20)
    p = subprocess.Popen([tool, "serve", f"zrpush://127.0.0.1:{port}", "--synthetic", "f2:4,3,8,8;i4:4", "-n", "5"])
    shapes = [[a.shape for a in ld.next()] for _ in range(5)]
    assert shapes == [[(4, 3, 8, 8), (4,)]] * 5
    assert p.wait(30) == 0
    ld.close()


SIGINT_CODE = """
import sys, numpy as np, tenbin
port = int(sys.argv[1])
if sys.argv[2] == "loader":
    x = tenbin.Loader(f"zpull://127.0.0.1:{port}")
    wait = x.next
elif sys.argv[2] == "connection":
    x = tenbin.Connection(f"zpull://127.0.0.1:{port}")
    wait = x.recv
else:
    import zmq
    s = zmq.Context().socket(zmq.PULL); s.bind(f"tcp://127.0.0.1:{port}")
    wait = lambda: tenbin.zrecv_multipart(s)
try:
    print("ready", flush=True)
    wait()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("what", ["loader", "connection", "pyzmq"])
def test_ctrl_c_interrupts_a_blocked_receive(what):
    p = subprocess.Popen([sys.executable, "-c", SIGINT_CODE, str(free_port()), what],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.2)  # blocked in the receive by now
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=20)  # a hang fails here
    assert p.returncode == 3 and "interrupted" in out


def test_loader_threads_and_close():
    port = free_port()
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10, queue_messages=4)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    got = []

    def consume():
        for _ in range(10):
            got.append(int(ld.next()[0][0]))

    threads = [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(20):
        tx.send([np.full(10, i, "i4")])
    for t in threads:
        t.join(30)
    assert sorted(got) == list(range(20))
    assert ld.stats.count == 20
    ld.close()
    with pytest.raises(tenbin.Closed):
        ld.next()
    with pytest.raises(StopIteration):
        next(iter(ld))
    tx.close()


EXIT_CODE = """
import sys, numpy as np, tenbin
port = int(sys.argv[1])
# Messages still in flight, and received arrays still holding the sender's
# memory (inproc), when the interpreter exits: no crash, no hang.
rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
tx = tenbin.Connection(f"zpush://127.0.0.1:{port}", linger=1)
irx = tenbin.Connection("zpull+inproc://exit", timeout=10)
itx = tenbin.Connection("zpush+inproc://exit")
for i in range(8):
    a = np.full(1 << 18, i, "f4")
    a.flags.writeable = False
    tx.send([a])
    itx.send([a])
kept = [irx.recv(), rx.recv()]
print("sent", flush=True)
"""


def test_interpreter_exit_with_messages_in_flight():
    p = subprocess.run([sys.executable, "-c", EXIT_CODE, str(free_port())], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "sent"


@pytest.mark.skipif(not hasattr(_tenbin, "TensorPool"), reason="built without tenbin::tensor_pool")
def test_tensor_pool_arrays_go_zero_copy_and_come_back():
    pool = tenbin.TensorPool(max_bytes=8 << 20, max_buffers=4, timeout=5)
    rx = tenbin.Connection(f"zpull+inproc://pool{os.getpid()}", timeout=10)
    tx = tenbin.Connection(f"zpush+inproc://pool{os.getpid()}")
    addresses = set()
    for i in range(20):
        a = pool.acquire((256, 1024), "f4")
        assert a.flags.writeable and a.shape == (256, 1024) and a.__array_interface__["data"][0] % 64 == 0
        a[:] = i
        tx.send([a])
        with pytest.raises(ValueError):  # refilling a sent pool array is refused
            a[0, 0] = -1
        (got,) = rx.recv()
        # Over inproc the received frame is the pool block itself: no copy.
        assert got.__array_interface__["data"][0] == a.__array_interface__["data"][0]
        assert got.min() == got.max() == i and not got.flags.writeable
        addresses.add(a.__array_interface__["data"][0])
        del a, got
    st = pool.stats
    assert st["reuses"] > 0 and len(addresses) <= 4 and st["buffers"] <= 4
    held = [pool.acquire(1 << 20, "f4") for _ in range(2)]  # 8 MiB: the bound
    with pytest.raises(tenbin.Timeout):
        pool.acquire(1 << 20, "f4", timeout=0.1)
    del held
    assert pool.acquire(1 << 20, "f4").nbytes == 4 << 20
    rx.close()
    tx.close()


def test_sent_arrays_are_released_without_another_tenbin_call():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    ro = np.arange(1 << 16, dtype="f4")
    ro.flags.writeable = False
    ref = weakref.ref(ro)
    tx.send([ro])  # the last tenbin call: ZeroMQ sends it (rx's I/O thread takes it) and lets go
    del ro
    for _ in range(500):  # plain Python: the interpreter's pending call drops it
        if ref() is None:
            break
        time.sleep(0.01)
    assert ref() is None
    rx.close()
    tx.close()


def test_waiting_messages_are_taken_as_blocking_receives_take_them():
    # Messages already queued are taken without releasing the GIL: the same
    # arrays, errors and guarantees as a receive that waits.
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10, recv_hwm=100, max_rank=40)
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.PUSH)
    s.connect(f"tcp://127.0.0.1:{port}")
    s.send_multipart(peer.encode_list([np.zeros(1, "u1")]))
    rx.recv()  # connected: what follows queues up
    arrays = [np.arange(24, dtype="f4").reshape(2, 3, 4), np.array(7, "u4"), np.zeros((0, 3), "i2"),
              np.arange(512, dtype="u1").reshape((2,) * 9)]
    rank33 = [np.array([peer.str64("f4"), 0, 33] + [1] * 33, "<i8").tobytes(), np.float32(5).tobytes()]
    s.send_multipart(peer.encode_list(arrays))
    s.send(b"not tenbin at all")
    s.send_multipart(rank33)
    s.send_multipart(peer.encode_list(arrays[:1]))
    time.sleep(0.3)  # all four queued by now (the test holds either way)
    got = rx.recv()
    assert all(same(a, b) for a, b in zip(got, arrays)) and len(got) == len(arrays)
    for a in got[:2] + got[3:]:  # (an empty array views nothing)
        assert not a.flags.writeable and not a.flags.owndata and a.flags.c_contiguous
    with pytest.raises(tenbin.BadMagic):
        rx.recv()
    with pytest.raises(tenbin.Error) as e:
        rx.recv()
    assert e.value.errc == "limit_exceeded" and "rank 33" in str(e.value)
    (last,) = rx.recv()
    rx.close()
    s.close(linger=0)
    del rx
    gc.collect()
    assert same(last, arrays[0]) and same(got[3], arrays[3])  # the frames outlive the connection
    # The loader: batches queued are taken at once, in order.
    ld = tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    for i in range(5):
        tx.send([np.full(3, i, "i4")])
    deadline = time.monotonic() + 10
    while ld.queued_messages < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [int(ld.next()[0][0]) for _ in range(5)] == list(range(5))
    tx.close()
    ld.close()
