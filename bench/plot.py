#!/usr/bin/python3
"""Throughput against message size from tenbin-bench JSON, as one PNG.

    /usr/bin/python3 bench/plot.py bench/results/results.json bench/results/throughput.png
    /usr/bin/python3 bench/plot.py bench/results/shm.json bench/results/shm.png

A run of the shm group alone (--filter shm) draws the +shm rows instead:
per size, the copy-in path against ipc and tcp between two processes and a
warm memcpy (bars, log scale). The pool path is left to the table: it
moves no byte, so its "GB/s" is a message rate times the size, not
throughput. A full run draws both, the shm figure beside OUT as
OUT-shm.png.

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


# The shm bars: label, row name, which column of it.
SHM_BARS = [("+shm, copy-in", "shm copy-in vs memcpy", "tenbin", "plum"),
            ("warm memcpy", "shm pool vs memcpy", "baseline", "tab:gray"),
            ("ipc, two processes", "shm pool vs ipc-2proc", "baseline", "tab:orange"),
            ("tcp, two processes", "shm pool vs tcp-2proc", "baseline", "tab:red")]


def plot_shm(rows, out):
    rows = [r for r in rows if r["transport"] == "shm-2proc"]
    sizes = sorted({r["bytes"] for r in rows})
    fig, ax = plt.subplots(figsize=(8, 4.8))
    width = 0.8 / len(SHM_BARS)
    for i, (label, name, key, color) in enumerate(SHM_BARS):
        by_size = {r["bytes"]: r[key] for r in rows if r["name"] == name}
        xs = [k + (i - (len(SHM_BARS) - 1) / 2) * width for k, s in enumerate(sizes) if s in by_size]
        ys = [by_size[s] for s in sizes if s in by_size]
        bars = ax.bar(xs, ys, width, color=color, label=label)
        ax.bar_label(bars, labels=["%.3g" % y for y in ys], fontsize=6, padding=2)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)  # room for the labels
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([("77 MB batch" if s > 64 << 20 else size_label(s)) for s in sizes])
    ax.set_xlabel("payload per message (4 float32 tensors; the 77 MB batch: f2 images + i4 labels)")
    ax.set_ylabel("GB/s of tensor data (log)")
    ax.set_title("+shm copy-in between two processes (medians; the pool path moves no byte)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT.png")
    rows = json.load(open(sys.argv[1]))
    has_shm = any(r["transport"] == "shm-2proc" for r in rows)
    if not any(r["name"] in ("multi", "single") for r in rows):
        if has_shm:
            return plot_shm(rows, sys.argv[2])
        sys.exit(f"plot.py: {sys.argv[1]} has no multi, single or shm rows to plot")
    if has_shm:
        plot_shm(rows, sys.argv[2].removesuffix(".png") + "-shm.png")
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
