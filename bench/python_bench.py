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
run in rotating order and the medians are compared. Prints a table and,
with --json FILE, the rows in tenbin-bench's JSON shape.

    /usr/bin/python3 bench/python_bench.py [--quick] [--json FILE] [--build DIR] [--filter TEXT]

As its receiving end this script runs itself with --peer connection|loader.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

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
    r = subprocess.Popen(rx, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = r.stdout.readline().split()
    if not line or line[0] != "endpoint":
        raise SystemExit(f"{kind} receiver said {line}")
    send_hwm = QUEUED_HWM if settle else hwm_for(nbytes)
    if shm:
        tx = [os.path.join(args.build, "bench", "tenbin-bench-loader"), "--send", f"zpush+shm://{path}", "--set",
              setname, "--bytes", str(nbytes), "--hwm", str(send_hwm), "--shm", "copy",
              "--warmup", str(warmup), "--count", str(count)]
    else:
        tx = [os.path.join(args.build, "bench", "tenbin-bench"), "--peer", "send", "--impl", "tenbin", "--malloc",
              "default", "--hwm", str(send_hwm), "--form", form, "--set", setname,
              "--bytes", str(nbytes), "--endpoint", line[1], "--warmup", str(warmup), "--count", str(count)]
    s = subprocess.Popen(tx, stdin=subprocess.PIPE, text=True)
    if r.stdout.readline().strip() != "ready":
        raise SystemExit(f"{kind} receiver did not get ready")
    s.stdin.write("go\n")
    s.stdin.flush()
    done = r.stdout.readline().split()
    if not done or done[0] != "seconds":
        raise SystemExit(f"{kind} receiver said {done}")
    s.stdin.close()
    s.wait(120)
    r.wait(120)
    if shm and os.path.exists(path):  # libzmq leaves a bound ipc socket's file
        os.unlink(path)
    seconds = float(done[1])
    return count / seconds if form == "small" else nbytes * count / seconds / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int)
    ap.add_argument("--filter", help="only the cases whose label contains this")
    ap.add_argument("--peer", choices=["connection", "loader"])
    ap.add_argument("--warmup")
    ap.add_argument("--count")
    ap.add_argument("--settle", type=float, default=0)
    ap.add_argument("--hwm", type=int)
    ap.add_argument("--url")
    ap.add_argument("--set")
    ap.add_argument("--bytes")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
