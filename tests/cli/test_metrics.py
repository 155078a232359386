#!/usr/bin/env python3
"""`--metrics HOST:PORT` of serve, recv, monitor and stat: their connection's
metrics scraped over HTTP while they run, the counts those of what was sent
and received, and `--metrics-wait` holding the end until a last scrape."""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from support import run, start, finish, free_tcp_endpoint, CliTest, main

SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>.*)\})? (?P<value>\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# --synthetic x=f4:100;y=i4:10: 400 + 40 tensor bytes a message.
SYNTHETIC, MESSAGE_BYTES = "x=f4:100;y=i4:10", 440


def samples(text):
    """{(name, frozenset of labels): value} of a Prometheus text scrape."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(LABEL.findall(m["labels"] or ""))
        out[(m["name"], labels)] = float(m["value"])
    return out


def value(scrape, name, **labels):
    """The value of the one series `name` whose labels include `labels`."""
    found = [v for (n, ls), v in scrape.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name}{labels}: {len(found)} series"
    return found[0]


def metrics_url(proc):
    """The URL the command says it serves its metrics at (stderr)."""
    for line in iter(proc.stderr.readline, b""):
        m = re.search(rb"metrics at (http://\S+)", line)
        if m:
            return m[1].decode()
    raise AssertionError("the command ended without saying where its metrics are")


def scrape_until_ended(procs):
    """Scrapes each running command (a {name: (proc, url)}) until it ends:
    {name: [each scrape's samples, in order]}."""
    seen = {name: [] for name in procs}
    deadline = time.monotonic() + 60
    while any(p.poll() is None for p, _ in procs.values()):
        assert time.monotonic() < deadline, "the commands did not end"
        for name, (proc, url) in procs.items():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    seen[name].append(samples(r.read().decode()))
            except (urllib.error.URLError, ConnectionError):
                # Refused once the command closed its exporter, done: it
                # ends at once (a sanitizer's exit checks take a moment).
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"{name}: scrape refused while it runs") from None
        time.sleep(0.05)
    return seen


class Metrics(CliTest):
    def assert_grows_to(self, scrapes, name, last, **labels):
        """`name` never went down from scrape to scrape, and its last value is `last`."""
        values = [value(s, name, **labels) for s in scrapes]
        self.assertEqual(values, sorted(values), name)
        self.assertEqual(values[-1], last, name)

    def test_serve_and_recv_counts_scraped_while_they_run(self):
        endpoint = free_tcp_endpoint()
        count = 20
        recv = start("recv", endpoint, "--bind", "-n", str(count), "--json", "--timeout", "30",
                     "--metrics", "127.0.0.1:0", "--metrics-wait", "30")
        recv_url = metrics_url(recv)
        serve = start("serve", endpoint, "--synthetic", SYNTHETIC, "-n", str(count), "--rate", "40",
                      "--metrics", "127.0.0.1:0", "--metrics-wait", "30")
        serve_url = metrics_url(serve)
        self.assertRegex(serve_url, r"^http://127\.0\.0\.1:\d+/metrics$")
        seen = scrape_until_ended({"serve": (serve, serve_url), "recv": (recv, recv_url)})
        for proc in (serve, recv):
            rc, out, err = finish(proc)
            self.assertEqual(rc, 0, err)
            if proc is recv:
                self.assertEqual(len(out.splitlines()), count, out)
        # The last scrape came after the last message: --metrics-wait held
        # each command until one did.
        label = {"endpoint": endpoint}
        self.assert_grows_to(seen["serve"], "tenbin_messages_sent_total", count, connection="serve", **label)
        self.assert_grows_to(seen["serve"], "tenbin_bytes_sent_total", count * MESSAGE_BYTES, **label)
        self.assertGreaterEqual(value(seen["serve"][-1], "tenbin_send_duration_seconds_count"), count)
        self.assert_grows_to(seen["recv"], "tenbin_messages_received_total", count, connection="recv", **label)
        self.assert_grows_to(seen["recv"], "tenbin_bytes_received_total", count * MESSAGE_BYTES, **label)
        self.assert_grows_to(seen["recv"], "tenbin_receive_wait_seconds_count", count)
        self.assertEqual(value(seen["recv"][-1], "tenbin_receive_wait_seconds_bucket", le="+Inf"), count)
        # Each side counts only its own direction.
        self.assertFalse(any(n == "tenbin_messages_received_total" for n, _ in seen["serve"][-1]))
        self.assertFalse(any(n == "tenbin_messages_sent_total" for n, _ in seen["recv"][-1]))

    def test_monitor_and_stat_count_what_they_take(self):
        for command in ("monitor", "stat"):
            with self.subTest(command):
                endpoint = free_tcp_endpoint()
                receiver = start(command, endpoint, "--socket", "pull", "-n", "5", "--json", "--metrics",
                                 "127.0.0.1:0", "--metrics-wait", "30")
                url = metrics_url(receiver)
                serve = start("serve", endpoint, "--synthetic", SYNTHETIC, "-n", "5", "--report", "0")
                seen = scrape_until_ended({command: (receiver, url)})
                self.assertEqual(finish(serve)[0], 0)
                rc, out, err = finish(receiver)
                self.assertEqual(rc, 0, err)
                if command == "stat":
                    self.assertEqual(json.loads(out)["messages"], 5)
                self.assert_grows_to(seen[command], "tenbin_messages_received_total", 5, connection=command,
                                     endpoint=endpoint)
                self.assert_grows_to(seen[command], "tenbin_bytes_received_total", 5 * MESSAGE_BYTES)

    def test_help_and_bad_addresses(self):
        for command in ("serve", "recv", "monitor", "stat"):
            with self.subTest(command):
                r = run(command, "--help")
                self.assertEqual(r.returncode, 0)
                self.assertIn(b"--metrics HOST:PORT", r.stdout)
                self.assertIn(b"--metrics-wait", r.stdout)
        # --metrics-wait means nothing without --metrics.
        r = run("recv", free_tcp_endpoint(), "--metrics-wait", "1")
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn(b"--metrics-wait requires --metrics", r.stderr)
        for bad in ("[::1", "127.0.0.1:99999", "host:port"):
            with self.subTest(bad):
                r = run("recv", free_tcp_endpoint(), "--bind", "--timeout", "5", "--metrics", bad)
                m = self.error(r, 64)
                self.assertEqual(m["cls"], "bad_argument")
                self.assertIn("--metrics", m["msg"])


if __name__ == "__main__":
    sys.exit(main())
