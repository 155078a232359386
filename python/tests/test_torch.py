"""torch: zero-copy conversion and TensorcomDataset with DataLoader."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tenbin
from conftest import free_port

torch = pytest.importorskip("torch")


def test_to_torch_shares_the_received_memory():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    tx.send([np.arange(1000, dtype="f2"), np.arange(5, dtype="u1"), np.array(3, "i4")])
    arrays = rx.recv()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "non-writable array" warning
        ts = [tenbin.to_torch(a) for a in arrays]
    for a, t in zip(arrays, ts):
        assert t.data_ptr() == a.__array_interface__["data"][0]
        assert tuple(t.shape) == a.shape and np.array_equal(t.numpy(), a)
    assert ts[0].dtype == torch.float16 and ts[2].ndim == 0
    del arrays, rx, tx
    assert float(ts[0][999]) == 999.0  # the tensor keeps the frame alive
    # arrays tenbin did not make: shared too, kept alive by the tensor
    own = np.arange(10, dtype="i8")
    t = tenbin.to_torch(own)
    assert t.data_ptr() == own.__array_interface__["data"][0]
    cap = tenbin.to_dlpack(np.arange(4, dtype="i2"))
    assert torch.utils.dlpack.from_dlpack(cap).tolist() == [0, 1, 2, 3]
    assert tenbin.to_torch(np.array([4000000000], "u4")).tolist() == [4000000000]


def test_connection_converters_torch():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10, converters="torch")
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    tx.send([np.ones((2, 3), "f4"), np.arange(2, dtype="i4")])
    x, y = rx.recv()
    assert isinstance(x, torch.Tensor) and x.shape == (2, 3) and y.tolist() == [0, 1]
    assert rx.batch_size == 2


DATASET_CODE = """
import sys, torch, tenbin
from torch.utils.data import DataLoader
port, workers, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ds = tenbin.TensorcomDataset(url % port, length=12, timeout=20)
got = [int(b[0][0]) for b in DataLoader(ds, batch_size=None, num_workers=workers)]
print(len(got), len(set(got)))
"""

PRODUCER_CODE = """
import sys, numpy as np, tenbin
# Endless, as a tensorcom server: each batch numbered.
c = tenbin.Connection(sys.argv[1], linger=0)
i = 0
while True:
    c.send([np.full(4, i, "i4")])
    i += 1
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_with_dataloader_workers(workers):
    port = free_port()
    prod = subprocess.Popen([sys.executable, "-c", PRODUCER_CODE, f"zrpush://127.0.0.1:{port}"])
    out = subprocess.run([sys.executable, "-c", DATASET_CODE, str(port), str(workers), "zrpull://127.0.0.1:%d"],
                         capture_output=True, text=True, timeout=120)
    prod.kill()
    prod.wait()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12", "12"]  # 12 batches, none twice


def test_dataset_refuses_workers_on_a_bound_socket():
    port = free_port()
    out = subprocess.run([sys.executable, "-c", DATASET_CODE, str(port), "2", "zpull://127.0.0.1:%d"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "zrpull://" in out.stderr and "num_workers=0" in out.stderr


def test_tensorcom_converter_does_what_tensorcom_did():
    port = free_port()
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=10, converters="tensorcom")
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
    nhwc = np.arange(2 * 4 * 5 * 3, dtype="u1").reshape(2, 4, 5, 3)
    hwc = np.arange(4 * 5 * 4, dtype="f2").reshape(4, 5, 4)
    sent = [nhwc, nhwc.astype("f2"), hwc, np.arange(6, dtype="i4"), np.arange(3, dtype="u2"),
            np.arange(3, dtype="i2"), np.arange(3, dtype="i8"), np.arange(3, dtype="u4"), np.ones((2, 3), "f8"),
            np.arange(4 * 5 * 6, dtype="f4").reshape(4, 5, 6)]
    tx.send(sent, allow64=True)
    got = rx.recv()
    expected = [(torch.uint8, (2, 3, 4, 5)), (torch.float32, (2, 3, 4, 5)), (torch.float32, (4, 4, 5)),
                (torch.int64, (6,)), (torch.int64, (3,)), (torch.int64, (3,)), (torch.int64, (3,)),
                (None, (3,)), (torch.float32, (2, 3)), (torch.float32, (4, 5, 6))]
    for a, t, (dtype, shape) in zip(sent, got, expected):
        assert isinstance(t, torch.Tensor) and tuple(t.shape) == shape
        if dtype is not None:
            assert t.dtype == dtype
        order = (0, 3, 1, 2) if a.ndim == 4 else (2, 0, 1) if a.ndim == 3 and a.shape[2] in (3, 4) else None
        want = a.transpose(order) if order else a
        assert np.array_equal(t.numpy(), want.astype(t.numpy().dtype))
    # No copy where the dtype stays: the NHWC uint8 batch is a view of the frame.
    assert got[0].data_ptr() != 0 and not got[0].is_contiguous()
    rx.close()
    tx.close()


REFUSED_CODE = """
import sys, numpy as np, tenbin
from torch.utils.data import DataLoader
ds = tenbin.TensorcomDataset(sys.argv[1], length=2, timeout=5)
try:
    next(iter(DataLoader(ds)))
except tenbin.BadArgument as e:
    print("refused:", e)
"""


def test_dataset_with_dataloaders_default_batch_size_is_refused():
    port = free_port()
    out = subprocess.run([sys.executable, "-c", REFUSED_CODE, f"zpull://127.0.0.1:{port}"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:") and "batch_size=None" in out.stdout
    assert "batch_size=None" in tenbin.TensorcomDataset.__doc__
