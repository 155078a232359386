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

The "producer" rows turn it around: one trainer process (a tenbin.Loader
on zpull+shm://, touching every byte of each 77 MB batch) is fed by one
producer process at a time, each writing every byte of every batch it
sends: (p) the C++ producer (tenbin-bench-loader --shm fill: tensors from
the connection's pool, filled in place), (q) a Python producer filling
arrays from Connection.acquire (the same pool, no copy), (r) a Python
producer filling an array of its own, which send() copies into shared
memory. (q)/(p) and (r)/(p) are the end-to-end ratios.

Prints a table and, with --json FILE, the rows in tenbin-bench's JSON
shape.

    /usr/bin/python3 bench/python_bench.py [--quick] [--json FILE] [--build DIR] [--filter TEXT]

As its receiving end this script runs itself with --peer connection|loader
(or trainer), and as a Python producer with --peer acquire|own.
"""
import argparse
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
# The producer rows: (kind, label); p is the baseline.
PRODUCERS = [("cpp", "C++ producer, pool filled in place"), ("acquire", "Connection.acquire, filled in place"),
             ("own", "own array, copied in by send()")]
PRODUCER_COUNTS = (3, 60, 12)  # warmup, count, quick count


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


def trainer_main(args):
    """The producer rows' receiving end: a Loader touching every byte."""
    sys.path.insert(0, os.path.join(args.build, "python"))
    import tenbin
    ld = tenbin.Loader(args.url, timeout=120)
    print("endpoint", ld.endpoints[0][2], flush=True)
    sys.path.insert(0, HERE)
    import python_peer
    expected, _ = python_peer.workload("batch", BATCH)
    for i in range(int(args.warmup)):
        got = ld.next()
        if i == 0 and [(a.dtype, a.shape, a.tobytes()) for a in got] != [(a.dtype, a.shape, a.tobytes()) for a in expected]:
            raise SystemExit("trainer: received arrays differ")
        touch(got)
    print("ready", flush=True)
    t0 = time.monotonic()
    for _ in range(int(args.count)):
        touch(ld.next())
    print("seconds", time.monotonic() - t0, flush=True)
    ld.close()


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
    receiver prints "seconds S" for them. Returns S."""
    r = subprocess.Popen(rx, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = r.stdout.readline().split()
    if not line or line[0] != "endpoint":
        raise SystemExit(f"{who} said {line}")
    s = subprocess.Popen(make_tx(line[1]), stdin=subprocess.PIPE, text=True)
    if r.stdout.readline().strip() != "ready":
        raise SystemExit(f"{who} did not get ready")
    s.stdin.write("go\n")
    s.stdin.flush()
    done = r.stdout.readline().split()
    if not done or done[0] != "seconds":
        raise SystemExit(f"{who} said {done}")
    s.stdin.close()
    s.wait(120)
    r.wait(120)
    if path and os.path.exists(path):  # libzmq leaves a bound ipc socket's file
        os.unlink(path)
    return float(done[1])


def run_producer_once(args, kind, count):
    warmup = PRODUCER_COUNTS[0]
    path = f"/tmp/tenbin-pybench-{os.getpid()}-producer"
    common = ["--warmup", str(warmup), "--count", str(count)]
    rx = [sys.executable, os.path.abspath(__file__), "--build", args.build, "--peer", "trainer",
          "--url", f"zpull+shm://{path}"] + common
    hwm = hwm_for(BATCH)
    if kind == "cpp":
        tx = [os.path.join(args.build, "bench", "tenbin-bench-loader"), "--send", f"zpush+shm://{path}", "--set",
              "batch", "--hwm", str(hwm), "--shm", "fill"] + common
    else:
        tx = [sys.executable, os.path.abspath(__file__), "--build", args.build, "--peer", kind, "--hwm", str(hwm),
              "--url", f"zpush+shm://{path}"] + common
    seconds = timed_run(rx, lambda endpoint: tx, f"the trainer ({kind} producer)", path)
    return BATCH * count / seconds / 1e9


def producer_rows(args, reps):
    count = PRODUCER_COUNTS[2] if args.quick else PRODUCER_COUNTS[1]
    kinds = [k for k, _ in PRODUCERS]
    results = {k: [] for k in kinds}
    for rep in range(reps):
        for i in range(len(kinds)):
            k = kinds[(i + rep) % len(kinds)]
            results[k].append(run_producer_once(args, k, count))
        results.setdefault("touch", []).append(touch_rate())
    med = {k: statistics.median(v) for k, v in results.items()}
    rows = [{"name": "python producer batch 77 MB shm: C++ producer vs the trainer's touch alone", "transport": "shm-2proc",
             "bytes": BATCH, "tenbin": med["cpp"], "baseline": med["touch"], "unit": "GB/s",
             "ratio": med["cpp"] / med["touch"] if med["touch"] else 0,
             "versus": "the trainer's touch of a warm batch in one process (the bound of the rows below)",
             "note": f"medians of {reps}", "reps": reps}]
    for mine, label in PRODUCERS[1:]:
        name = f"python producer batch 77 MB shm: {label} vs C++ producer"
        row = {"name": name, "transport": "shm-2proc", "bytes": BATCH, "tenbin": med[mine], "baseline": med["cpp"],
               "unit": "GB/s", "ratio": med[mine] / med["cpp"] if med["cpp"] else 0,
               "versus": "the C++ producer filling tensors of the connection's pool (tenbin-bench-loader --shm fill)",
               "note": f"end to end: a Python trainer (tenbin.Loader) touching every byte; medians of {reps}",
               "reps": reps}
        rows.append(row)
    print("python producer batch 77 MB shm (one Python trainer touching every byte):")
    for row in rows:
        print(f"  {row['name'].split(': ', 1)[1]:<42.42}{row['tenbin']:>12.4g}{row['baseline']:>12.4g}{row['ratio']:>8.2f}  GB/s", flush=True)
    print("  medians: " + ", ".join(f"{k} {v:.4g}" for k, v in med.items()), flush=True)
    print("  all: " + ", ".join(f"{k} {[round(x, 3) for x in v]}" for k, v in results.items()), flush=True)
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
    ap.add_argument("--peer", choices=["connection", "loader", "trainer", "acquire", "own"])
    ap.add_argument("--warmup")
    ap.add_argument("--count")
    ap.add_argument("--settle", type=float, default=0)
    ap.add_argument("--hwm", type=int)
    ap.add_argument("--url")
    ap.add_argument("--set")
    ap.add_argument("--bytes")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.peer == "trainer":
        return trainer_main(args)
    if args.peer in ("acquire", "own"):
        return producer_main(args)
    if args.peer:
        return peer_main(args)
    reps = args.reps or (1 if args.quick else 3)
    rows = []
    print(f"{'case':<44}{'tenbin':>12}{'baseline':>12}{'ratio':>8}  unit")
    for w in WORKLOADS:
        if args.filter and args.filter not in w[7]:
            continue
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
    if not args.filter or args.filter in "python producer batch 77 MB shm":
        rows += producer_rows(args, reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
