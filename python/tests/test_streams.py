"""Numbered streams across processes: a Python producer's epochs iterated
epoch by epoch, a consumer SIGKILLed mid-epoch and resumed from its saved
state_dict against `tenbin serve` replaying a shard, over tcp, ipc and
+shm; what the keywords refuse."""
import json
import os
import select
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

import tenbin
import tensorcom_peer as peer  # tests/peers/ (see conftest)
from conftest import free_port

EPOCH_SIZES = [5, 3, 4]


def places(tmp_path):
    """(receiving URL that binds, sending URL that connects) per transport."""
    port = free_port()
    return {
        "tcp": (f"zpull://127.0.0.1:{port}", f"zpush://127.0.0.1:{port}"),
        "ipc": (f"zpull+ipc://{tmp_path}/s.sock", f"zpush+ipc://{tmp_path}/s.sock"),
        "shm": (f"zpull+shm://{tmp_path}/m.sock", f"zpush+shm://{tmp_path}/m.sock"),
    }


PRODUCER = """
import sys, numpy as np, tenbin
url, sizes = sys.argv[1], [int(n) for n in sys.argv[2].split(",")]
with tenbin.Connection(url, producer="feed", send_timeout=20) as tx:
    for epoch, n in enumerate(sizes):
        for i in range(n):
            tx.send([np.array([epoch * 100 + i], "i4")])
        tx.end_epoch()
    print(tx.position(), flush=True)
    tx.end_stream()
"""


def start_producer(url):
    return subprocess.Popen([sys.executable, "-c", PRODUCER, url, ",".join(map(str, EPOCH_SIZES))],
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_loader_iterates_a_python_producers_epochs_one_by_one(tmp_path, where):
    recv_url, send_url = places(tmp_path)[where]
    with tenbin.Loader(recv_url, timeout=20) as loader:
        producer = start_producer(send_url)
        for epoch, n in enumerate(EPOCH_SIZES):
            assert loader.stream_epoch == epoch
            assert [int(b[0][0]) for b in loader] == [epoch * 100 + i for i in range(n)]
            assert loader.epoch_ended()
        out, _ = producer.communicate(timeout=30)
        assert producer.returncode == 0
        assert out.strip() == "('feed', 3, 0)"
        # The producer's end_stream after its last end_epoch: its (empty)
        # epoch 3 ends with the stream, and nothing more comes.
        assert list(loader) == [] and loader.stream_ended()
        with pytest.raises(tenbin.StreamEnd):
            loader.next()
        stats = loader.stream_stats()
        assert (stats["epochs"], stats["gaps"], stats["duplicates"]) == (4, 0, 0)
        state = loader.state_dict()
        assert state["producers"]["feed"]["finished"] and json.loads(json.dumps(state)) == state


def test_connection_iterates_epochs_and_keeps_tensorcoms_epoch(tmp_path):
    recv_url, send_url = places(tmp_path)["tcp"]
    rx = tenbin.Connection(recv_url, epoch=7, timeout=20)
    producer = start_producer(send_url)
    for epoch, n in enumerate(EPOCH_SIZES):
        assert rx.stream_epoch == epoch
        assert [int(b[0][0]) for b in rx] == [epoch * 100 + i for i in range(n)]
        assert rx.epoch_ended() and not rx.stream_ended()
    assert len(rx) == 7 and rx.epoch == 7  # tensorcom's epoch, untouched
    # The empty epoch 3 ends with the stream: StreamEnd, an EpochEnd too.
    with pytest.raises(tenbin.StreamEnd):
        rx.recv()
    assert rx.epoch_ended() and rx.stream_ended()
    with pytest.raises(tenbin.StreamEnd):
        rx.recv()
    assert list(rx) == []
    producer.communicate(timeout=30)
    assert rx.stream_stats()["epochs"] == 4
    rx.close()
    assert rx.state_dict()["producers"]["feed"]["finished"]  # readable after close


def test_a_state_loaded_drops_what_it_says_was_taken():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}", producer="p")
    rx.load_state_dict({"epoch": 0, "producers": {"p": {"epoch": 0, "next": 2, "taken": [], "finished": False}}})
    for i in range(4):
        tx.send([np.array([i], "i4")])
    assert tx.position() == ("p", 0, 4)
    tx.end_epoch()
    assert [int(b[0][0]) for b in rx] == [2, 3]
    assert rx.stream_stats()["duplicates"] == 2
    # A producer that replays from a position numbers from there.
    tx.seek(1, 1)
    tx.send([np.array([9], "i4")])
    tx.end_stream()
    assert [int(b[0][0]) for b in rx] == [9]
    with pytest.raises(tenbin.BadArgument):
        rx.load_state_dict({"epoch": "one"})
    with pytest.raises(tenbin.BadArgument):
        rx.load_state_dict({"epoch": 0, "producers": object()})
    tx.close()
    rx.close()


def test_a_wait_after_an_epochs_end_is_a_timeout_not_another_end():
    port = free_port()
    with tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10) as loader:
        with tenbin.Connection(f"zpush://127.0.0.1:{port}", producer="p") as tx:
            tx.send([np.array([1], "i4")])
            tx.end_epoch()
            assert [int(b[0][0]) for b in loader] == [1] and loader.epoch_ended()
            with pytest.raises(tenbin.Timeout):  # beyond one wait slice
                loader.next(timeout=0.3)
            assert not loader.epoch_ended() and loader.stream_epoch == 1
            tx.send([np.array([2], "i4")])
            assert int(loader.next()[0][0]) == 2


def test_resume_from_is_in_place_before_the_first_batch():
    state = {"epoch": 0, "producers": {"p": {"epoch": 0, "next": 3, "taken": [4], "finished": False}}}
    port = free_port()
    with tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10, resume_from=state) as loader:
        assert loader.state_dict() == state
        with tenbin.Connection(f"zpush://127.0.0.1:{port}", producer="p") as tx:
            for i in range(6):
                tx.send([np.array([i], "i4")])
            tx.end_stream()
            assert [int(b[0][0]) for b in loader] == [3, 5]
        assert loader.stream_stats()["duplicates"] == 4 and loader.stream_ended()
    # Its JSON too; a Connection takes it; a sender has nothing to resume.
    with tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", resume_from=json.dumps(state)) as rx:
        assert rx.state_dict() == state
    with pytest.raises(tenbin.BadArgument, match="seek"):
        tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", resume_from=state)
    with pytest.raises(tenbin.BadArgument):
        tenbin.Loader(f"zpull://127.0.0.1:{free_port()}", resume_from={"epoch": "one"})


def test_a_loaders_state_leaves_out_the_short_epochs_it_prefetched():
    port = free_port()
    with tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=10) as loader:
        with tenbin.Connection(f"zpush://127.0.0.1:{port}", producer="p") as tx:
            for epoch in range(3):
                for i in range(2):
                    tx.send([np.array([i], "i4")])
                tx.end_epoch()
            tx.end_stream()
        deadline = time.monotonic() + 10
        while not loader.queued_messages >= 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        loader.next()
        assert loader.state_dict() == {"epoch": 0, "producers": {"p": {"epoch": 0, "next": 1, "taken": [],
                                                                        "finished": False}}}


def test_plain_messages_of_a_tensorcom_style_peer_still_come_as_they_are():
    zmq = pytest.importorskip("zmq")
    port = free_port()
    with tenbin.Loader(f"zpull://127.0.0.1:{port}", timeout=0.5, expect_producers=2, epoch_timeout=1) as loader:
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://127.0.0.1:{port}")
        for i in range(3):
            push.send_multipart(peer.encode_list([np.array([i], "i4")]))
        assert [int(b[0][0]) for b in loader] == [0, 1, 2]  # ends at the timeout: no epochs
        assert not loader.epoch_ended() and loader.stream_epoch == 0
        push.close()
        ctx.term()
    # A producer for a tensorcom receiver cannot send end marks (no tensors).
    with tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", producer="p", tensorcom_compatible=True) as tx:
        with pytest.raises(tenbin.BadArgument, match="tensorcom"):
            tx.end_epoch()


def test_stream_keywords_are_checked():
    with pytest.raises(tenbin.BadArgument, match="release"):
        tenbin.Connection("zpull://127.0.0.1:0", ack="later")
    with pytest.raises(tenbin.BadArgument):
        tenbin.Connection("zpull://127.0.0.1:0", world_size=-1)
    with pytest.raises(tenbin.BadArgument, match="a Loader only receives"):
        tenbin.Loader("zpull://127.0.0.1:0", producer="p")
    with pytest.raises(tenbin.BadArgument):  # numbering needs a producer
        tenbin.Connection(f"zpush://127.0.0.1:{free_port()}").end_epoch()
    with tenbin.Connection(f"zpush://127.0.0.1:{free_port()}") as plain:
        assert plain.position() is None
    with tenbin.Loader("zpull://127.0.0.1:0", epoch_timeout=2.5, rank=1, world_size=2, drop_last=False,
                       expect_producers=3) as loader:
        assert loader.stream_epoch == 0 and not loader.stream_ended()


# ---- kill -9 and resume ------------------------------------------------------

SHARD_SIZE = 12

# A trainer: each batch processed is checkpointed with the loader's state in
# one file, replaced atomically (a checkpoint holds both or neither).
TRAINER = """
import json, os, sys, time, tenbin
url, ckpt, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
processed, state = [], None
if os.path.exists(ckpt):
    with open(ckpt) as f:
        saved = json.load(f)
    processed, state = saved["processed"], saved["state"]
loader = tenbin.Loader(url, timeout=20, queue_messages=4, resume_from=state)
print("ready", flush=True)

def checkpoint():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"processed": processed, "state": loader.state_dict()}, f)
    os.replace(ckpt + ".tmp", ckpt)

while not loader.stream_ended():
    epoch = loader.stream_epoch
    for batch in loader:
        time.sleep(delay)
        processed.append([epoch, int(batch[0][0])])
        checkpoint()
    if not (loader.epoch_ended() or loader.stream_ended()):
        sys.exit("timed out")
checkpoint()
print("done", flush=True)
"""


def shard(tmp_path):
    path = tmp_path / "shard.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(SHARD_SIZE):
            member = tmp_path / f"{i:06d}.ten"
            tenbin.save(str(member), np.array([i], "i4"))
            tar.add(member, arcname=member.name)
    return path


def ready(process, seconds=30):
    """Whether `process` said "ready" on its stdout within `seconds`."""
    if not select.select([process.stdout], [], [], seconds)[0]:
        return False
    return process.stdout.readline().strip() == "ready"


def processed(ckpt):
    try:
        with open(ckpt) as f:
            return json.load(f)["processed"]
    except (OSError, ValueError):
        return []


@pytest.mark.parametrize("where", ["tcp", "ipc", "shm"])
def test_a_trainer_killed_mid_epoch_resumes_from_its_state_each_batch_once(tmp_path, tool, where):
    recv_url, send_url = places(tmp_path)[where]
    ckpt = str(tmp_path / "ckpt.json")
    serve = [tool, "serve", send_url, "--file", str(shard(tmp_path)), "--epochs", "2", "--producer", "feed",
             "--report", "0", "--timeout", "20"]
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, recv_url, ckpt, "0.1"], stdout=subprocess.PIPE,
                               text=True)
    producer = subprocess.Popen(serve, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(processed(ckpt)) < 3:
        assert time.monotonic() < deadline and trainer.poll() is None, "the trainer processed nothing"
        time.sleep(0.02)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=10)
    producer.kill()
    producer.wait(timeout=10)
    before = processed(ckpt)
    assert 3 <= len(before) < SHARD_SIZE and {e for e, _ in before} == {0}  # killed mid-epoch 0

    # Restarted from the checkpoint; the producer replays the shard from its start.
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, recv_url, ckpt, "0"], stdout=subprocess.PIPE,
                               text=True)
    assert ready(trainer), "the trainer did not start"
    producer = subprocess.Popen(serve, stderr=subprocess.PIPE, text=True)
    out, _ = trainer.communicate(timeout=60)
    assert trainer.returncode == 0 and out.strip() == "done"
    _, err = producer.communicate(timeout=30)
    assert producer.returncode == 0, err
    after = processed(ckpt)
    assert after[:len(before)] == before
    for epoch in (0, 1):
        assert sorted(i for e, i in after if e == epoch) == list(range(SHARD_SIZE)), epoch
    assert len(after) == 2 * SHARD_SIZE
