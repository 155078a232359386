"""torch DistributedDataParallel fed by tenbin: 2 ranks (processes, gloo
backend) subscribed to 2 publishing producers through TensorcomDataset,
3 epochs of uneven producers: every rank gets as many batches in every
epoch, training runs to its end in step, nothing hangs (every wait is
bounded, so a failure fails)."""
import json
import subprocess
import sys

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
            x = np.full((8, 4), seq, "f4")
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
opt = torch.optim.SGD(model.parameters(), lr=0.001)
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
print(json.dumps({"counts": counts, "weights": model.module.weight.detach().flatten().tolist(),
                  "stats": data.con.stream_stats()}), flush=True)
"""


def test_ddp_ranks_get_equal_batches_every_epoch_and_train_to_the_end():
    ports = [free_port() for _ in SIZES]
    producers = [subprocess.Popen([sys.executable, "-c", PRODUCER, f"zpub://127.0.0.1:{port}", f"p{i}", str(n),
                                   str(EPOCHS)])
                 for i, (port, n) in enumerate(zip(ports, SIZES))]
    init = f"tcp://127.0.0.1:{free_port()}"
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init, str(EPOCHS)]
                              + [f"zsub://127.0.0.1:{port}" for port in ports],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:
        results = []
        for r in ranks:
            out, err = r.communicate(timeout=120)
            assert r.returncode == 0, err
            results.append(json.loads(out))
        for p in producers:
            assert p.wait(timeout=30) == 0
    finally:
        for p in producers + ranks:
            p.kill()
            p.wait()
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
