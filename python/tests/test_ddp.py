"""torch DistributedDataParallel fed by tenbin: 2 ranks (processes, gloo
backend) subscribed to 2 publishing producers through TensorcomDataset,
3 epochs of uneven producers: every rank gets as many batches in every
epoch, training runs to its end in step, nothing hangs (every wait is
bounded, so a failure fails); then a rank SIGKILLed mid-run and the job
restarted from the ranks' saved states: every batch trained once."""
import json
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import free_port

pytest.importorskip("torch")
EPOCHS = 3
SIZES = [7, 4]  # batches per epoch of each producer: odd, so ranks have a remainder to drop

PRODUCER = """
import sys, numpy as np, tenbin
url, name, n, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with tenbin.Connection(url, producer=name, wait_for=2, pub_nodrop=True, send_timeout=60) as tx:
    for epoch in range(epochs):
        for seq in range(n):
            x = np.full((8, 4), 100 * int(name[1:]) + seq, "f4")  # names the batch
            tx.send([x, x.sum(axis=1, keepdims=True) / 10])
        tx.end_epoch()
    tx.end_stream()
"""

RANK = """
import datetime, json, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
import tenbin
rank, init, epochs, urls = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
data = tenbin.TensorcomDataset(urls, timeout=30, epoch_timeout=20, expect_producers=2)  # rank, world size: dist's
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-5)
counts = []
for epoch in range(epochs):
    n = 0
    for x, y in DataLoader(data, batch_size=None):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # all-reduces the gradients with the other rank
        opt.step()
        n += 1
    counts.append(n)
dist.barrier()
assert all(torch.isfinite(p).all() for p in model.parameters())
print(json.dumps({"counts": counts, "weights": model.module.weight.detach().flatten().tolist(),
                  "stats": data.con.stream_stats()}), flush=True)
"""


def start_job(rank_code, producer_code, ports, *args, resuming=False):
    """The 2 ranks (given `args` before the URLs) and the producers; ranks
    resuming first say they loaded their states, so that no batch comes
    before it."""
    init = f"tcp://127.0.0.1:{free_port()}"
    ranks = [subprocess.Popen([sys.executable, "-c", rank_code, str(r), init, str(EPOCHS), *args]
                              + [f"zsub://127.0.0.1:{port}" for port in ports],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for r in ranks if resuming else []:
        ready = select.select([r.stdout], [], [], 60)[0] and r.stdout.readline().strip() == "ready"
        if not ready:
            stop_job([], ranks)
            raise AssertionError("a rank did not resume")
    producers = [subprocess.Popen([sys.executable, "-c", producer_code, f"zpub://127.0.0.1:{port}", f"p{i}",
                                   str(n), str(EPOCHS)])
                 for i, (port, n) in enumerate(zip(ports, SIZES))]
    return producers, ranks


def stop_job(producers, ranks):
    for p in producers + ranks:
        p.kill()
        p.wait()


def finish_job(producers, ranks):
    """What each rank printed, once every process ended well (bounded)."""
    try:
        results = []
        for r in ranks:
            out, err = r.communicate(timeout=120)
            assert r.returncode == 0, err
            results.append(json.loads(out))
        for p in producers:
            assert p.wait(timeout=30) == 0
        return results
    finally:
        stop_job(producers, ranks)


def test_ddp_ranks_get_equal_batches_every_epoch_and_train_to_the_end():
    results = finish_job(*start_job(RANK, PRODUCER, [free_port() for _ in SIZES]))
    # Each rank takes the sequence numbers of its rank modulo 2, of each
    # producer; drop_last drops what would make one rank's share larger.
    share = sum(n // 2 for n in SIZES)
    assert [res["counts"] for res in results] == [[share] * EPOCHS] * 2
    for res in results:
        stats = res["stats"]
        assert (stats["gaps"], stats["duplicates"], stats["producers_timed_out"]) == (0, 0, 0)
        assert stats["epochs"] >= EPOCHS
    # The remainder (a batch of p0 each epoch, rank 0's) was dropped, counted.
    assert sum(res["stats"]["dropped_remainder"] for res in results) == EPOCHS * sum(n % 2 for n in SIZES)
    # DistributedDataParallel kept the replicas in step.
    assert results[0]["weights"] == results[1]["weights"]


# A rank that checkpoints after every step (its data's state_dict and what
# it trained on, one file per step, written whole), and on a restart goes
# back to the last step both ranks saved.
CHECKPOINTING_RANK = """
import datetime, json, os, pathlib, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
import tenbin
rank, init, epochs, ckpts, urls = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4]), sys.argv[5:]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
data = tenbin.TensorcomDataset(urls, timeout=30, epoch_timeout=20, expect_producers=2)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-5)
steps = lambda r: {int(p.stem.split("-")[2]) for p in ckpts.glob(f"ckpt-{r}-*.json")}
both = steps(0) & steps(1)
step, epoch, trained = 0, 0, []
resumed_from = 0
if both:
    step = resumed_from = max(both)
    saved = json.loads((ckpts / f"ckpt-{rank}-{step:05d}.json").read_text())
    data.load_state_dict(saved["data"])  # opens its loader, subscribed: producers may start
    print("ready", flush=True)
    epoch, trained = saved["data"]["epoch"], saved["trained"]
    model.module.load_state_dict({k: torch.tensor(v) for k, v in saved["model"].items()})
for epoch in range(epoch, epochs):
    for x, y in DataLoader(data, batch_size=None):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
        trained.append([epoch, int(x[0, 0])])
        path = ckpts / f"ckpt-{rank}-{step:05d}.json"
        path.with_suffix(".tmp").write_text(json.dumps({"data": data.state_dict(), "trained": trained,
            "model": {k: v.tolist() for k, v in model.module.state_dict().items()}}))
        os.replace(path.with_suffix(".tmp"), path)
        time.sleep(0.05)
dist.barrier()
print(json.dumps({"trained": trained, "resumed_from": resumed_from, "stats": data.con.stream_stats()}), flush=True)
"""


def test_ddp_job_restarted_after_a_rank_was_killed_trains_each_batch_once(tmp_path):
    ports = [free_port() for _ in SIZES]
    producers, ranks = start_job(CHECKPOINTING_RANK, PRODUCER, ports, str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ckpt-1-*.json"))) < 7:  # mid epoch 1
            assert time.monotonic() < deadline and ranks[1].poll() is None, "the job made no progress"
            time.sleep(0.02)
        ranks[1].send_signal(signal.SIGKILL)
    finally:
        stop_job(producers, ranks)  # the job fails as a whole: every process goes
    killed_at = max(int(p.stem.split("-")[2]) for p in tmp_path.glob("ckpt-1-*.json"))
    assert killed_at < EPOCHS * sum(n // 2 for n in SIZES)

    # The producers replay from their start.
    results = finish_job(*start_job(CHECKPOINTING_RANK, PRODUCER, ports, str(tmp_path), resuming=True))
    # Both went back to the last step both had saved, mid epoch 1 (what the
    # producers sent again of what they had is dropped: trained once below).
    assert 6 <= results[0]["resumed_from"] == results[1]["resumed_from"] <= killed_at
    for epoch in range(EPOCHS):
        per_rank = [sorted(i for e, i in res["trained"] if e == epoch) for res in results]
        assert len(per_rank[0]) == len(per_rank[1]) == sum(n // 2 for n in SIZES), (epoch, per_rank)
        for rank, got in enumerate(per_rank):
            assert got == sorted(100 * p + seq for p, n in enumerate(SIZES) for seq in range(rank, n - n % 2, 2))
    assert [res["stats"]["gaps"] for res in results] == [0, 0], [(res["stats"], res["resumed_from"]) for res in results]
