#!/usr/bin/python3
"""Throughput against message size from tenbin-bench JSON, as one PNG.

    /usr/bin/python3 bench/plot.py bench/results/results.json bench/results/throughput.png

Two panels (multipart and single-part); one line per transport for tenbin
(solid) and raw libzmq (dashed), and the tensorcom-style Python peer over
tcp between two processes (dotted). Needs python3-matplotlib. Left to the
table: inproc (a pointer hand-over, whose "GB/s" is off the others' scale),
small messages and the loader (messages per second), codec and file rows.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRANSPORTS = ["inproc", "ipc", "tcp", "tcp-2proc"]
COLORS = {"inproc": "tab:blue", "ipc": "tab:orange", "tcp": "tab:green", "tcp-2proc": "tab:red"}


def series(rows, name, transport, key):
    pts = sorted((r["bytes"], r[key]) for r in rows if r["name"] == name and r["transport"] == transport)
    return [p[0] for p in pts], [p[1] for p in pts]


def size_label(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%g %s" % (n / div, unit)
    return "%d B" % n


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT.png")
    rows = json.load(open(sys.argv[1]))
    if not any(r["name"] in ("multi", "single") for r in rows):
        sys.exit(f"plot.py: {sys.argv[1]} has no multi or single rows to plot (run tenbin-bench without --filter)")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for ax, form in zip(axes, ["multi", "single"]):
        sizes = set()
        for t in TRANSPORTS:
            # inproc hands pointers over: its "GB/s" is a message rate, off
            # the scale of the others; it stays in the table, not the plot.
            if t == "inproc":
                continue
            x, y = series(rows, form, t, "tenbin")
            if x:
                ax.plot(x, y, "-o", color=COLORS[t], label="tenbin " + t)
                sizes.update(x)
            x, y = series(rows, form, t, "baseline")
            if x:
                ax.plot(x, y, "--s", color=COLORS[t], alpha=0.6, mfc="none", label="raw libzmq " + t)
        x, y = series(rows, form + " vs python", "tcp-2proc", "baseline")
        if x:
            ax.plot(x, y, ":^", color="black", label="tensorcom-style Python, tcp-2proc")
            sizes.update(x)
        for r in rows:
            if r["name"].startswith("batch multi, reuse on") and form == "multi":
                ax.plot([r["bytes"]], [r["tenbin"]], "*", ms=14, color="tab:red", label="tenbin 77 MB batch (2 tensors), reuse on")
                ax.plot([r["bytes"]], [r["baseline"]], "x", ms=10, color="tab:red", label="raw 77 MB batch, glibc default")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(sizes))
        ax.set_xticklabels([size_label(s) for s in sorted(sizes)], rotation=30)
        ax.set_xlabel("payload per message (4 float32 tensors; the 77 MB batch: f2 images + i4 labels)")
        ax.set_ylabel("GB/s of tensor data")
        ax.set_title(("multipart (zsend_multipart / zrecv_multipart)" if form == "multi"
                      else "single-part (zsend_single / zrecv_single)"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("tenbin vs raw libzmq vs tensorcom-style Python (medians)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
