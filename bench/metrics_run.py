#!/usr/bin/python3
"""A run a Prometheus server watches, drawn from its query API: the
picture of the Metrics page.

    /usr/bin/python3 bench/metrics_run.py build/tools/tenbin docs/metrics-run.png

`tenbin serve` feeds two `tenbin recv` trainers over tcp (PUSH to two
PULLs, 40 batches a second), each with `--metrics`; a Prometheus server
(Debian's `prometheus`) scrapes all three every second. After 15 s the
producer is stopped (SIGSTOP) for 10 s: the trainers starve. 10 s after it
goes on, one trainer is killed: the other takes every batch. Three panels:
batches sent and received a second, and the trainers' mean wait for a
batch. Needs python3-matplotlib.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query_range(port, q, start, end):
    url = f"http://127.0.0.1:{port}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": q, "start": start, "end": end, "step": 1})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def main(tool, out):
    work = tempfile.mkdtemp(prefix="tenbin-metrics-run-")
    data_port, prom_port = free_port(), free_port()
    ports = {"serve": free_port(), "trainer 1": free_port(), "trainer 2": free_port()}
    (open(os.path.join(work, "prometheus.yml"), "w").write(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tenbin\n    static_configs:\n"
        f"      - targets: {json.dumps([f'127.0.0.1:{p}' for p in ports.values()])}\n"))
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = {}
    try:
        for name in ("trainer 1", "trainer 2"):
            procs[name] = subprocess.Popen(
                [tool, "recv", f"zpull://127.0.0.1:{data_port}", "--connect", "--count", "0", "--timeout", "0",
                 "--metrics", f"127.0.0.1:{ports[name]}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs["serve"] = subprocess.Popen(
            [tool, "serve", f"zpush://127.0.0.1:{data_port}", "--bind", "--synthetic", "x=f4:256;y=i4:1",
             "--count", "0", "--rate", "40", "--report", "0", "--metrics", f"127.0.0.1:{ports['serve']}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.time()
        time.sleep(15)
        procs["serve"].send_signal(signal.SIGSTOP)
        paused = time.time() - start
        time.sleep(10)
        procs["serve"].send_signal(signal.SIGCONT)
        resumed = time.time() - start
        time.sleep(10)
        procs["trainer 2"].kill()
        killed = time.time() - start
        time.sleep(15)
        end = time.time()
        time.sleep(2)  # the last scrape in

        instance = {f"127.0.0.1:{p}": n for n, p in ports.items()}
        panels = [
            ("batches sent a second", "rate(tenbin_messages_sent_total[3s])"),
            ("batches received a second", "rate(tenbin_messages_received_total[3s])"),
            ("mean wait for a batch (s)",
             "rate(tenbin_receive_wait_seconds_sum[3s]) / rate(tenbin_receive_wait_seconds_count[3s])"),
        ]
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, 7), sharex=True)
        for ax, (title, q) in zip(axes, panels):
            for series in query_range(prom_port, q, start, end):
                name = instance.get(series["metric"].get("instance"), "?")
                ts, vs = [], []
                for t, v in series["values"]:
                    if ts and float(t) - start - ts[-1] > 1.5:  # no scrape (a stopped process): a gap
                        ts.append(ts[-1] + 1)
                        vs.append(float("nan"))
                    ts.append(float(t) - start)
                    vs.append(float(v))
                ax.plot(ts, vs, label=name)
            ax.set_ylabel(title, fontsize=8)
            for at, what in ((paused, "producer stopped"), (resumed, "goes on"), (killed, "trainer 2 killed")):
                ax.axvline(at, color="grey", linestyle=":", linewidth=1)
                if ax is axes[0]:
                    ax.annotate(what, (at, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                                va="top", ha="right")
            ax.legend(fontsize=7, loc="upper left")
        axes[-1].set_xlabel("seconds")
        fig.suptitle("tenbin serve and two tenbin recv trainers, as Prometheus saw them", fontsize=10)
        fig.tight_layout()
        fig.savefig(out, dpi=100)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
        prometheus.terminate()
        prometheus.wait()


if __name__ == "__main__":
    main(*sys.argv[1:3])
