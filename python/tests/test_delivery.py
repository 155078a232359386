"""Acknowledged delivery and publishing to a known audience, across
processes: two acked consumers, one SIGKILLed mid-stream, over tcp, ipc and
+shm (every batch processed, none twice by the survivor); a PUB that waits
for named subscribers."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tenbin
from conftest import free_port, stop

COUNT = 60

# A consumer: writes each batch's number once processed, then drops it
# (ack="release": the acknowledgement goes when the arrays are let go).
CONSUMER = """
import sys, time, tenbin
url, name, delay, ack = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
with tenbin.Loader(url, acked=True, credit=2, ack=ack, name=name, timeout=30, ack_heartbeat=0.2) as loader:
    while True:
        try:
            batch = loader.next()
        except tenbin.StreamEnd:
            break
        time.sleep(delay)
        print(int(batch[0][0]), flush=True)
        del batch
"""


def places(tmp_path):
    port = free_port()
    return {
        "tcp": (f"zrpush://127.0.0.1:{port}", f"zrpull://127.0.0.1:{port}"),
        "ipc": (f"zrpush+ipc://{tmp_path}/a.sock", f"zrpull+ipc://{tmp_path}/a.sock"),
        "shm": (f"zrpush+shm://{tmp_path}/m.sock", f"zrpull+shm://{tmp_path}/m.sock"),
    }


def lines(path):
    with open(path) as f:
        return [int(line) for line in f.read().splitlines() if line]


def feeding(url, count):
    """An acked producer on `url`, and a thread that sends it batches 0 to
    count - 1 then ends its stream; the errors it met go to the list."""
    producer = tenbin.Connection(url, acked=True, producer="feed", ack_heartbeat=0.2, send_timeout=30)
    failed = []

    def feed():
        try:
            for i in range(count):
                producer.send([np.array([i], "i4")])
            producer.end_stream()
        except tenbin.Error as e:
            failed.append(e)

    sender = threading.Thread(target=feed)
    sender.start()
    return producer, sender, failed


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_acked_consumers_one_killed_the_other_gets_the_rest_once(tmp_path, where):
    send_url, recv_url = places(tmp_path)[where]
    producer = tenbin.Connection(send_url, acked=True, producer="feed", ack_heartbeat=0.2, send_timeout=30)
    outs = [tmp_path / f"c{i}.txt" for i in range(2)]
    consumers = []
    for i, out in enumerate(outs):
        with open(out, "w") as f:
            consumers.append(subprocess.Popen([sys.executable, "-c", CONSUMER, recv_url, f"c{i}",
                                               "0.05" if i == 0 else "0.01", "release"], stdout=f))
    try:
        wait_until(lambda: len(producer.consumers()) == 2, 20, "the consumers did not come")
        assert sorted(c["name"] for c in producer.consumers()) == ["c0", "c1"]
        for i in range(COUNT):
            producer.send([np.array([i], "i4")])
            if i == COUNT // 3:
                wait_until(lambda: len(lines(outs[0])) >= 3, 20, "the first consumer processed nothing")
                consumers[0].send_signal(signal.SIGKILL)
                consumers[0].wait(timeout=10)
        wait_until(lambda: producer.delivery_stats()["acknowledged"] >= COUNT, 30,
                   f"not every batch was acknowledged: {producer.delivery_stats()}")
        producer.end_stream()
        assert consumers[1].wait(timeout=30) == 0
    finally:
        for c in consumers:
            c.kill()
            c.wait()
    killed, survivor = lines(outs[0]), lines(outs[1])
    assert len(survivor) == len(set(survivor)), "the survivor got a batch twice"
    assert set(killed) | set(survivor) == set(range(COUNT))
    # At most the batch the killed one was working on is processed twice.
    assert len(killed) + len(survivor) <= COUNT + 1
    stats = producer.delivery_stats()
    assert stats["consumers_lost"] >= 1 and stats["redelivered"] >= 1 and stats["bad_acks"] == 0
    producer.close()


@pytest.mark.parametrize("where", ["tcp", "ipc"])
def test_a_consumer_taken_for_dead_while_stopped_carries_on_at_full_pace(tmp_path, where):
    # Stopped for five heartbeats, the consumer is dead to the producer,
    # which greets it again when it speaks. Its releases (ack="release")
    # wait for confirmations, counted afresh from there on both ends: each
    # used to wait two heartbeats in vain (0.4 s a batch here).
    send_url, recv_url = places(tmp_path)[where]
    producer = tenbin.Connection(send_url, acked=True, producer="feed", ack_heartbeat=0.2, send_timeout=30)
    out = tmp_path / "c.txt"
    with open(out, "w") as f:
        consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, recv_url, "c", "0", "release"], stdout=f)
    try:
        for i in range(10):
            producer.send([np.array([i], "i4")])
        wait_until(lambda: len(lines(out)) == 10, 20, "the consumer processed nothing")
        stop(consumer)
        wait_until(lambda: producer.delivery_stats()["consumers_lost"] >= 1, 20, "the stopped consumer lived on")
        consumer.send_signal(signal.SIGCONT)
        woke = time.monotonic()
        for i in range(10, 110):
            producer.send([np.array([i], "i4")])
        producer.end_stream()
        assert consumer.wait(timeout=30) == 0
        # A bound on a stall, not a benchmark: under a second on a quiet
        # machine, and two heartbeats a batch would take 40 s.
        assert time.monotonic() - woke < 20, "the consumer crawled after it woke"
    finally:
        consumer.kill()
        consumer.wait()
    assert lines(out) == list(range(110))
    producer.close()


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_a_for_loop_with_one_credit_gets_every_batch(tmp_path, where):
    # A for loop keeps its batch (unacknowledged with ack="release") while
    # it asks for the next: with one credit taken as one, nothing more came,
    # and the loop ended at its timeout after the first batch, silently.
    send_url, recv_url = places(tmp_path)[where]
    producer, sender, failed = feeding(send_url, 30)
    with tenbin.Loader(recv_url, acked=True, credit=1, timeout=10, ack_heartbeat=0.2) as loader:
        got = [int(batch[0][0]) for batch in loader]
        assert loader.stream_ended()
    sender.join()
    assert not failed
    assert got == list(range(30))
    producer.close()


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_iterating_a_connection_holds_no_batch_the_loop_dropped(tmp_path, where):
    # With ack="release" the next batch comes once the producer confirmed
    # the release of those dropped before: each batch, then, finds all
    # before it acknowledged. Iteration kept the last batch while it waited
    # for the next, so a body's `del batch` released nothing until later.
    send_url, recv_url = places(tmp_path)[where]
    producer, sender, failed = feeding(send_url, 12)
    consumer = tenbin.Connection(recv_url, acked=True, credit=2, timeout=10, ack_heartbeat=0.2)
    seen = []
    for batch in consumer:
        seen.append((int(batch[0][0]), producer.delivery_stats()["acknowledged"]))
        del batch
        if len(seen) == 12:
            break
    sender.join()
    assert not failed
    assert seen == [(i, i) for i in range(12)]
    consumer.close()
    producer.close()


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_a_for_loop_over_a_loader_acknowledges_each_batch_before_it_waits(tmp_path, where):
    # A for loop holds its batch while it asks for the next; with
    # ack="release" it counts as done all the same, and the next batch comes
    # once that was confirmed: each batch finds all before it acknowledged,
    # so one a trainer finished is never processed again if it dies waiting.
    send_url, recv_url = places(tmp_path)[where]
    producer, sender, failed = feeding(send_url, 12)
    seen = []
    with tenbin.Loader(recv_url, acked=True, credit=2, timeout=10, ack_heartbeat=0.2) as loader:
        for batch in loader:
            seen.append((int(batch[0][0]), producer.delivery_stats()["acknowledged"]))
        assert loader.stream_ended()
        # The last too, once the loop asked for more; its arrays still valid.
        assert producer.delivery_stats()["acknowledged"] == 12
        assert int(batch[0][0]) == 11
    sender.join()
    assert not failed
    assert seen == [(i, i) for i in range(12)]
    producer.close()


def test_an_acked_producer_with_wait_for_starts_once_its_consumer_came(tmp_path):
    # Without wait_for it hands out nothing for two heartbeats: 10 s here.
    send_url, recv_url = places(tmp_path)["ipc"]
    producer = tenbin.Connection(send_url, acked=True, producer="feed", ack_heartbeat=5, wait_for_names=["t0"],
                                 send_timeout=30)
    producer.send([np.array([7], "i4")])
    with tenbin.Loader(recv_url, acked=True, name="t0", ack_heartbeat=5, timeout=3) as loader:
        assert int(loader.next()[0][0]) == 7
    producer.close()


def test_pub_waits_for_named_subscribers(tmp_path):
    port = free_port()
    code = """
import sys, tenbin
with tenbin.Connection(sys.argv[1], name=sys.argv[2], timeout=20) as rx:
    print(int(rx.recv()[0][0]), flush=True)
"""
    pub = tenbin.Connection(f"zpub://127.0.0.1:{port}", wait_for=2, wait_for_names=["late"], producer="p",
                            send_timeout=30)
    subs = [subprocess.Popen([sys.executable, "-c", code, f"zsub://127.0.0.1:{port}", name],
                             stdout=subprocess.PIPE, text=True) for name in ("early", "late")]
    try:
        pub.send([np.array([7], "i4")])  # waits until both joined
        assert pub.subscribers() == 2 and sorted(pub.subscriber_names()) == ["early", "late"]
        for s in subs:
            out, _ = s.communicate(timeout=30)
            assert out.strip() == "7"
    finally:
        for s in subs:
            s.kill()
            s.wait()
    pub.close()
