#!/usr/bin/python3
"""The Python package against a tensorcom-style receiver and the C++ loader.

A C++ producer sends to one receiving process at a time, over tcp loopback
(tenbin-bench's `--peer send`, tenbin's zero-copy multipart sender):

  (a) tensorcom-style: bench/python_peer.py (pyzmq defaults, np.frombuffer)
  (b) tenbin.Connection.recv
  (c) tenbin.Loader.next
  (d) the C++ tenbin::loader (tenbin-bench-loader)

for the 77 MB batch (256x3x224x224 f2 + 256 i4), 1 MiB messages (four f4
tensors) and 256 B messages. "256 B recv_hwm 1000" gives (b) to (d)
pyzmq's default receive high-water mark, which (a) has, instead of tenbin's
16. The case "256 B queued" starts counting a second after the sender
started, with (a) to (c) at a high-water mark of 10,000: the messages wait
in the receiver's queue, so it measures what one message costs the
receiver, apart from the producer's rate and the wake-ups of a receiver
that keeps up (no (d) row). The "shm" cases send (b) to (d) the same
messages over `+shm` (same host only; tenbin-bench-loader --send: a
tenbin::connection on zpush+shm:// that copies the producer's tensors into
shared memory, one memcpy a message) against (a) over tcp, which cannot
use shared memory. Each repetition starts fresh processes; the receivers
run in rotating order and the medians are compared.

The "end to end" rows are what a trainer sees: one trainer process
touching every byte of each 77 MB batch (a max over its 64-bit words) is
fed by one producer process at a time, which makes and writes every byte of
every batch it sends: the C++ producer (tenbin-bench-loader --shm fill:
tensors from the connection's pool, or over ipc and tcp from a pool of its
own, filled in place), a Python producer filling arrays from
Connection.acquire (the same pools), and over +shm a Python producer
filling an array of its own, which send() copies into shared memory. Their
trainer takes the batches from a tenbin.Loader over +shm, ipc or tcp. The
baseline is a PyTorch DataLoader (batch_size=None) whose worker processes
make the same batch, filled the same way into fresh tensors (a Dataset's
item is handed over: torch moves it into shared memory), for the same
trainer loop; the bound is the trainer's touch of a warm batch, in one
process.

Prints a table and, with --json FILE, the rows in tenbin-bench's JSON
shape.

    /usr/bin/python3 bench/python_bench.py [--quick] [--json FILE] [--build DIR] [--filter TEXT]

As its receiving end this script runs itself with --peer connection|loader
(or trainer|dataloader), and as a Python producer with --peer acquire|own.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20

# (set, bytes, form, warmup, count, quick count, unit, label, settle seconds,
#  transport of (b) to (d), their recv_hwm (None: tenbin's default))
WORKLOADS = [
    ("batch", 256 * 3 * 224 * 224 * 2 + 256 * 4, "multi", 2, 12, 4, "GB/s", "batch 77 MB", 0, "tcp", None),
    ("quad", MiB, "multi", 20, 1000, 200, "GB/s", "multi 1 MiB", 0, "tcp", None),
    ("small", 256, "small", 1000, 40000, 5000, "msg/s", "small 256 B", 0, "tcp", None),
    ("small", 256, "small", 1000, 40000, 5000, "msg/s", "small 256 B recv_hwm 1000", 0, "tcp", 1000),
    ("small", 256, "small", 1000, 10000, 5000, "msg/s", "small 256 B queued", 1.0, "tcp", 10000),
    ("batch", 256 * 3 * 224 * 224 * 2 + 256 * 4, "multi", 2, 150, 20, "GB/s", "batch 77 MB shm", 0, "shm", None),
    ("quad", MiB, "multi", 20, 2000, 300, "GB/s", "multi 1 MiB shm", 0, "shm", None),
]
QUEUED_HWM = 10000
BATCH = 256 * 3 * 224 * 224 * 2 + 256 * 4
# The end-to-end rows: who makes the batches, over which transport (None: the
# DataLoader's own worker processes, the baseline).
E2E = [("cpp", "shm"), ("acquire", "shm"), ("own", "shm"), ("cpp", "ipc"), ("acquire", "ipc"), ("cpp", "tcp"),
       ("acquire", "tcp"), ("dataloader", None)]
# One worker a core: torch warns past that on this machine, and three or
# four were no faster here (one: two thirds of the rate).
DATALOADER_WORKERS = 2
MAKERS = {"cpp": "C++ producer, pool filled in place", "acquire": "Python, Connection.acquire filled",
          "own": "Python, own array copied by send()",
          "dataloader": f"PyTorch DataLoader, {DATALOADER_WORKERS} workers"}
E2E_COUNTS = (3, 60, 8)  # warmup, count, quick count


def hwm_for(payload):  # as tenbin-bench's senders
    return max(2, min(1000, (256 * MiB) // max(payload, 1)))


def peer_main(args):
    """One receiving process: (b) or (c)."""
    sys.path.insert(0, os.path.join(args.build, "python"))
    import tenbin
    warmup, count = int(args.warmup), int(args.count)
    opts = {"recv_hwm": args.hwm} if args.hwm else {}
    if args.peer == "connection":
        c = tenbin.Connection(args.url, timeout=120, **opts)
        take = c.recv
    else:
        c = tenbin.Loader(args.url, timeout=120, **opts)
        take = c.next
    print("endpoint", c.endpoints[0][2], flush=True)
    sys.path.insert(0, HERE)
    import python_peer  # the producers' bytes, to check the first message against
    expected, _ = python_peer.workload(args.set, int(args.bytes))
    for i in range(warmup):
        got = take()
        # Bytes, not values: the pattern holds NaNs.
        if i == 0 and [(a.dtype, a.shape, a.tobytes()) for a in got] != [(a.dtype, a.shape, a.tobytes()) for a in expected]:
            raise SystemExit(f"{args.peer}: received arrays differ")
    print("ready", flush=True)
    time.sleep(args.settle)
    t0 = time.monotonic()
    for _ in range(count):
        take()
    print("seconds", time.monotonic() - t0, flush=True)
    c.close()


def touch(batch):
    """What a trainer does at least: reads every byte (a max over 64-bit words)."""
    return [a.reshape(-1).view(np.uint64).max() if a.nbytes % 8 == 0 else a.max() for a in batch]


def dataloader_batches(workers, length):
    """A PyTorch DataLoader whose worker processes make the batch as the
    Python producers do: fresh arrays, every byte written."""
    import torch
    import python_peer
    source, _ = python_peer.workload("batch", BATCH)

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            batch = [torch.from_numpy(np.empty_like(x)) for x in source]
            for t, x in zip(batch, source):
                np.copyto(t.numpy(), x)
            return batch

    it = iter(torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=workers))
    return lambda: [t.numpy() for t in next(it)]


def trainer_main(args):
    """The end-to-end rows' receiving end: a trainer touching every byte of
    each batch, from a tenbin.Loader (--peer trainer) or a DataLoader."""
    sys.path.insert(0, HERE)
    import python_peer
    warmup, count = int(args.warmup), int(args.count)
    if args.peer == "dataloader":
        take, close = dataloader_batches(DATALOADER_WORKERS, warmup + count), None
        print("endpoint -", flush=True)
    else:
        sys.path.insert(0, os.path.join(args.build, "python"))
        import tenbin
        ld = tenbin.Loader(args.url, timeout=120)
        take, close = ld.next, ld.close
        print("endpoint", ld.endpoints[0][2], flush=True)
    expected, _ = python_peer.workload("batch", BATCH)
    for i in range(warmup):
        got = take()
        if i == 0 and [(a.dtype, a.shape, a.tobytes()) for a in got] != [(a.dtype, a.shape, a.tobytes()) for a in expected]:
            raise SystemExit(f"{args.peer}: received arrays differ")
        touch(got)
    print("ready", flush=True)
    t0 = time.monotonic()
    for _ in range(count):
        touch(take())
    print("seconds", time.monotonic() - t0, flush=True)
    if close:
        close()


def touch_rate(seconds=1.0):
    """GB/s of touch() on a warm batch in this process: what bounds a
    trainer's rate whatever feeds it."""
    sys.path.insert(0, HERE)
    import python_peer
    batch, _ = python_peer.workload("batch", BATCH)
    touch(batch)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        touch(batch)
        n += 1
    return BATCH * n / (time.monotonic() - t0) / 1e9


def pool_bytes(hwm):  # as tenbin-bench-loader's sender: the messages in flight and a few more
    return min(4 << 30, (2 * hwm + 40) * (BATCH + (64 << 10)))


def producer_main(args):
    """A Python producer (--peer acquire|own) writing every byte of each batch."""
    sys.path.insert(0, os.path.join(args.build, "python"))
    import tenbin
    sys.path.insert(0, HERE)
    import python_peer
    source, infos = python_peer.workload("batch", BATCH)
    c = tenbin.Connection(args.url, infos=infos, send_hwm=args.hwm, send_timeout=120,
                          shm_pool_bytes=pool_bytes(args.hwm))
    own = [np.empty_like(x) for x in source]

    def send_one():
        arrays = [c.acquire(x.shape, x.dtype) for x in source] if args.peer == "acquire" else own
        for a, x in zip(arrays, source):
            np.copyto(a, x)
        c.send(arrays)

    for _ in range(int(args.warmup)):
        send_one()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("producer expected go")
    for _ in range(int(args.count)):
        send_one()
    c.close()


def timed_run(rx, make_tx, who, path):
    """The protocol of the two ends: the receiver `rx` prints "endpoint E";
    the sender `make_tx(E)` starts and sends its warmup; the receiver prints
    "ready"; "go" on the sender's stdin starts the counted messages; the
    receiver prints "seconds S" for them. Returns S. A receiver making its
    own batches has no sender (make_tx gives None)."""
    r = subprocess.Popen(rx, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = r.stdout.readline().split()
    if not line or line[0] != "endpoint":
        raise SystemExit(f"{who} said {line}")
    tx = make_tx(line[1])
    s = tx and subprocess.Popen(tx, stdin=subprocess.PIPE, text=True)
    if r.stdout.readline().strip() != "ready":
        raise SystemExit(f"{who} did not get ready")
    if s:
        s.stdin.write("go\n")
        s.stdin.flush()
    done = r.stdout.readline().split()
    if not done or done[0] != "seconds":
        raise SystemExit(f"{who} said {done}")
    if s:
        s.stdin.close()
        s.wait(120)
    r.wait(120)
    if path and os.path.exists(path):  # libzmq leaves a bound ipc socket's file
        os.unlink(path)
    return float(done[1])


def run_e2e_once(args, maker, transport, count):
    """GB/s of one end-to-end run: the trainer's touched bytes over its time."""
    common = ["--warmup", str(E2E_COUNTS[0]), "--count", str(count)]
    me = [sys.executable, os.path.abspath(__file__), "--build", args.build]
    if maker == "dataloader":
        return BATCH * count / timed_run(me + ["--peer", "dataloader"] + common, lambda endpoint: None,
                                         "the DataLoader's trainer", None) / 1e9
    path = None if transport == "tcp" else f"/tmp/tenbin-pybench-{os.getpid()}-e2e"
    url = f"zpull+{transport}://{path}" if path else "zpull://127.0.0.1:0"

    def make_tx(endpoint):
        push = f"zpush+{transport}://{path}" if path else "zpush://" + endpoint.split("://", 1)[1]
        if maker == "cpp":
            return [os.path.join(args.build, "bench", "tenbin-bench-loader"), "--send", push, "--set", "batch",
                    "--hwm", str(hwm_for(BATCH)), "--shm", "fill"] + common
        return me + ["--peer", maker, "--hwm", str(hwm_for(BATCH)), "--url", push] + common

    rx = me + ["--peer", "trainer", "--url", url] + common
    return BATCH * count / timed_run(rx, make_tx, f"the trainer ({maker} over {transport})", path) / 1e9


def e2e_rows(args, reps):
    """The end-to-end rows, each against the DataLoader and against the bound."""
    if importlib.util.find_spec("torch") is None:
        raise SystemExit("the end-to-end rows need PyTorch (Debian: python3-torch) for their DataLoader baseline")
    count = E2E_COUNTS[2] if args.quick else E2E_COUNTS[1]
    results = {case: [] for case in E2E}
    bound = []
    for rep in range(reps):
        for i in range(len(E2E)):
            case = E2E[(i + rep) % len(E2E)]
            results[case].append(run_e2e_once(args, *case, count))
        bound.append(touch_rate(0.3 if args.quick else 1.0))
    med = {case: statistics.median(v) for case, v in results.items()}
    base, top = med[("dataloader", None)], statistics.median(bound)
    note = f"end to end: a trainer process touching every byte of each batch; medians of {reps}"
    touch_versus = "the trainer's touch of a warm batch in one process (the bound)"
    print(f"python end to end batch 77 MB (a trainer touching every byte; {MAKERS['dataloader']} the baseline):")
    print(f"  {'producer':<38}{'transport':<11}{'GB/s':>8}{'x DataLoader':>14}{'x bound':>9}")
    rows = []
    for (maker, transport), rate in med.items():
        where = {"shm": "+shm"}.get(transport, transport)
        name = f"python end to end batch 77 MB{' ' + where if where else ''}: {MAKERS[maker]}"
        kind = f"{transport}-2proc" if transport else "dataloader"
        if maker != "dataloader":
            rows.append({"name": f"{name} vs DataLoader", "transport": kind, "bytes": BATCH, "tenbin": rate,
                         "baseline": base, "unit": "GB/s", "ratio": rate / base,
                         "versus": MAKERS["dataloader"] + " feeding the same trainer loop", "note": note, "reps": reps})
        rows.append({"name": f"{name} vs the bound", "transport": kind, "bytes": BATCH, "tenbin": rate, "baseline": top,
                     "unit": "GB/s", "ratio": rate / top, "versus": touch_versus, "note": note, "reps": reps})
        print(f"  {MAKERS[maker]:<38}{where or '-':<11}{rate:>8.3g}{rate / base:>14.2f}{rate / top:>9.3f}", flush=True)
    print(f"  {'bound: the touch of a warm batch':<49}{top:>8.3g}{'':>14}{1:>9.3f}", flush=True)
    print("  all: " + "; ".join(f"{m} {t}: {[round(x, 3) for x in v]}" for (m, t), v in results.items())
          + f"; bound: {[round(x, 2) for x in bound]}", flush=True)
    return rows


def run_once(args, kind, w, count):
    setname, nbytes, form, warmup, _, _, _, _, settle, transport, hwm = w
    shm = transport == "shm" and kind != "tensorcom"
    common = ["--warmup", str(warmup), "--count", str(count)]
    if settle:
        common += ["--settle", str(settle)]
    if hwm:
        common += ["--hwm", str(hwm)]
    path = f"/tmp/tenbin-pybench-{os.getpid()}-{kind}"
    url = f"zpull+shm://{path}" if shm else "tcp://127.0.0.1:*"
    if kind == "tensorcom":
        rx = [sys.executable, os.path.join(HERE, "python_peer.py"), "recv", "--form", form, "--set", setname,
              "--bytes", str(nbytes), "--endpoint", url] + common
    elif kind == "cpp-loader":
        rx = [os.path.join(args.build, "bench", "tenbin-bench-loader"), "--endpoint", url, "--set", setname,
              "--bytes", str(nbytes)] + common
    else:
        url = url if shm else "zpull://127.0.0.1:0"
        rx = [sys.executable, os.path.abspath(__file__), "--build", args.build, "--peer", kind, "--url", url,
              "--set", setname, "--bytes", str(nbytes)] + common
    send_hwm = QUEUED_HWM if settle else hwm_for(nbytes)

    def sender(endpoint):
        if shm:
            return [os.path.join(args.build, "bench", "tenbin-bench-loader"), "--send", f"zpush+shm://{path}",
                    "--set", setname, "--bytes", str(nbytes), "--hwm", str(send_hwm), "--shm", "copy",
                    "--warmup", str(warmup), "--count", str(count)]
        return [os.path.join(args.build, "bench", "tenbin-bench"), "--peer", "send", "--impl", "tenbin", "--malloc",
                "default", "--hwm", str(send_hwm), "--form", form, "--set", setname, "--bytes", str(nbytes),
                "--endpoint", endpoint, "--warmup", str(warmup), "--count", str(count)]

    seconds = timed_run(rx, sender, f"{kind} receiver", path if shm else None)
    return count / seconds if form == "small" else nbytes * count / seconds / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int)
    ap.add_argument("--filter", help="only the cases whose label contains this")
    ap.add_argument("--peer", choices=["connection", "loader", "trainer", "dataloader", "acquire", "own"])
    ap.add_argument("--warmup")
    ap.add_argument("--count")
    ap.add_argument("--settle", type=float, default=0)
    ap.add_argument("--hwm", type=int)
    ap.add_argument("--url")
    ap.add_argument("--set")
    ap.add_argument("--bytes")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.peer in ("trainer", "dataloader"):
        return trainer_main(args)
    if args.peer in ("acquire", "own"):
        return producer_main(args)
    if args.peer:
        return peer_main(args)
    reps = args.reps or (1 if args.quick else 3)
    rows = []
    workloads = [w for w in WORKLOADS if not args.filter or args.filter in w[7]]
    if workloads:
        print(f"{'case':<44}{'tenbin':>12}{'baseline':>12}{'ratio':>8}  unit")
    for w in workloads:
        count = w[5] if args.quick else w[4]
        kinds = ["tensorcom", "connection", "loader"] + ([] if w[8] else ["cpp-loader"])
        results = {k: [] for k in kinds}
        for rep in range(reps):
            for i in range(len(kinds)):
                k = kinds[(i + rep) % len(kinds)]
                results[k].append(run_once(args, k, w, count))
        med = {k: statistics.median(v) for k, v in results.items()}
        shm = w[9] == "shm"
        for mine, base in [("loader", "tensorcom"), ("connection", "tensorcom"), ("loader", "cpp-loader")]:
            if base not in med:
                continue
            name = f"python {w[7]}: tenbin.{'Loader' if mine == 'loader' else 'Connection'} vs {base}"
            if base == "tensorcom":
                versus = "tensorcom-style receiver (pyzmq defaults, np.frombuffer)" + (" over tcp" if shm else "")
            else:
                versus = "the C++ loader (tenbin::loader)" + (" over +shm" if shm else "")
            note = f"C++ producer; medians of {reps}"
            if shm:
                note += "; +shm from a producer copying into shared memory"
            if w[8]:
                note += f"; counted {w[8]} s after the start"
            if w[10]:
                note += f"; receive high-water marks {w[10]}"
            row = {"name": name, "transport": "shm-2proc" if shm else "tcp-2proc", "bytes": w[1], "tenbin": med[mine],
                   "baseline": med[base], "unit": w[6], "ratio": med[mine] / med[base] if med[base] else 0,
                   "versus": versus, "note": note, "reps": reps}
            rows.append(row)
            print(f"{name:<44.44}{row['tenbin']:>12.4g}{row['baseline']:>12.4g}{row['ratio']:>8.2f}  {w[6]}", flush=True)
        print("  medians: " + ", ".join(f"{k} {v:.4g}" for k, v in med.items()), flush=True)
    if not args.filter or args.filter in "python end to end batch 77 MB":
        rows += e2e_rows(args, reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
