#!/usr/bin/env python3
"""`tenbin stat`: exact statistics, a row per layout, bounded rows, malformed peers,
Ctrl-C."""

import json
import re
import struct
import sys
import time
import unittest

from support import zmq, vec, run, start, finish, free_port, CliTest, main


class Stat(CliTest):
    @unittest.skipIf(zmq is None, "pyzmq is not available")
    def test_stat_times_out_while_a_peer_sends_only_malformed_messages(self):
        port = free_port()
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.linger = 0
        push.sndtimeo = 100
        try:
            push.connect(f"tcp://127.0.0.1:{port}")
            stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "1", "--timeout", "1")
            t0 = time.monotonic()
            while stat.poll() is None and time.monotonic() - t0 < 20:
                try:
                    push.send(b"not a tenbin header")
                except zmq.Again:
                    pass
                time.sleep(0.05)
            code, _, err = finish(stat)
            self.assertEqual(code, 2, err[-500:])
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("0 of 1 messages within 1 s", err)
        finally:
            push.close()
            ctx.term()

    def test_stat_gives_exact_statistics_of_known_data(self):
        # f4_matrix.ten holds -1.875, -1.625, ..., 1.625 (15 values, step 0.25).
        values = [-1.875 + 0.25 * i for i in range(15)]
        mean = sum(values) / 15
        std = (sum((v - mean) ** 2 for v in values) / 15) ** 0.5
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "3", "--json", "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                      "--count", "3", "--report", "0")
        code, out, err = finish(stat)
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertEqual(result["messages"], 3)
        (t,) = result["tensors"]
        self.assertEqual((t["dtype"], t["shape"], t["count"]), ("f4", [3, 5], 45))
        self.assertAlmostEqual(t["min"], -1.875)
        self.assertAlmostEqual(t["max"], 1.625)
        self.assertAlmostEqual(t["mean"], mean)
        self.assertAlmostEqual(t["std"], std)

    def test_stat_of_synthetic_data_stays_in_range_and_table_is_readable(self):
        port = free_port()
        stat = start("stat", f"zsub://127.0.0.1:{port}", "--count", "4", "--timeout", "20")
        self.succeeds("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "a=f4:500;b=u1:300",
                      "--count", "40", "--rate", "40", "--delay", "0.3", "--report", "0")
        code, out, err = finish(stat)
        self.assertEqual(code, 0, err)
        rows = {line.split()[1]: line.split() for line in out.splitlines()[2:]}
        lo, hi = float(rows["a"][4]), float(rows["a"][5])
        self.assertTrue(0 <= lo < 0.05 and 0.95 < hi < 1, out)
        lo, hi = float(rows["b"][4]), float(rows["b"][5])
        self.assertTrue(0 <= lo <= 10 and 245 <= hi <= 255, out)

    def stat_of(self, files, count, *args):
        """What `tenbin stat` says of `count` messages that serve sends from `files` in turn."""
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", str(count), "--timeout", "20", *args)
        sources = [a for f in files for a in ("-f", vec(f))]
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", *sources, "--count", str(count),
                      "--report", "0")
        code, out, err = finish(stat)
        self.assertEqual(code, 0, err)
        return out

    def test_stat_keeps_tensors_of_different_layouts_apart(self):
        # Two files of different tensors, in turn: each tensor's statistics are
        # those of its own file, a row per layout, in the order they came.
        alone = [json.loads(self.stat_of([f], 1, "--json"))["tensors"] for f in ("buf_batch.bin", "i2_u2_pair.ten")]
        mixed = json.loads(self.stat_of(["buf_batch.bin", "i2_u2_pair.ten"], 4, "--json"))
        self.assertEqual(mixed["messages"], 4)
        layout = lambda ts: [(t["index"], t["info"], t["dtype"], t["shape"]) for t in ts]
        want = alone[0] + alone[1]
        self.assertEqual(layout(mixed["tensors"]), layout(want))
        for got, one in zip(mixed["tensors"], want):
            self.assertEqual((got["messages"], got["count"], got["nan"]), (2, 2 * one["count"], 0))
            self.assertEqual((got["min"], got["max"]), (one["min"], one["max"]))
            self.assertAlmostEqual(got["mean"], one["mean"], delta=1e-9 * max(1, abs(one["mean"])))
            self.assertAlmostEqual(got["std"], one["std"], delta=1e-9 * max(1, abs(one["std"])))

    @unittest.skipIf(zmq is None, "pyzmq is not available")
    def test_stat_rows_are_bounded(self):
        # 65,536 empty tensors of distinct shapes per message: the same
        # layouts again merge into the same rows; new ones past 65,536 rows
        # stop stat with one clear line (found by a hash, not a search of
        # every row, which took minutes).
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "3", "--timeout", "60")
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.linger = 10000
        push.connect(f"tcp://127.0.0.1:{port}")

        def message(first):
            frames = []
            for i in range(65536):
                frames += [struct.pack("<8s8sqqq", b"u1", b"", 2, 0, first + i), b""]
            return frames

        try:
            for first in (0, 0, 65536):
                push.send_multipart(message(first))
            code, out, err = finish(stat, timeout=120)
        finally:
            push.close()
            ctx.term()
        self.assertEqual(code, 1, err)
        self.assertEqual(out, "")
        lines = [line for line in err.splitlines() if ": error: " in line]  # not the binding or progress lines
        self.assertEqual(len(lines), 1, err)
        self.assertIn("error: limit_exceeded: message 3 brings more than 65536 distinct layouts", lines[0])

    def test_stat_table_has_a_row_per_layout(self):
        # The same tensor name, dtype and position, but another shape: a row of its own.
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "3", "--timeout", "20")
        for spec, count in (("input=f4:2,3;target=i4:2", "2"), ("input=f4:2,3,4;target=i2:5", "1")):
            self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", spec, "--count", count,
                          "--report", "0")
        code, out, err = finish(stat)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 6, out)  # count, heading, 4 layouts
        self.assertEqual(lines[0], "3 messages")
        self.assertEqual(lines[1].split(), ["index", "info", "dtype", "shape", "min", "max", "mean", "std", "msgs"])
        row = re.compile(r"^ *(\d+) (\S+) +(\S+) +(\[[0-9, ]*\]) +(\S+) +(\S+) +(\S+) +(\S+) +(\d+)$")
        rows = [row.match(line) for line in lines[2:]]
        self.assertTrue(all(rows), out)
        self.assertEqual([r.group(1, 2, 3, 4, 9) for r in rows],
                         [("0", "input", "f4", "[2, 3]", "2"), ("1", "target", "i4", "[2]", "2"),
                          ("0", "input", "f4", "[2, 3, 4]", "1"), ("1", "target", "i2", "[5]", "1")])
        for r in (rows[0], rows[2]):  # synthetic floats are in [0, 1)
            self.assertTrue(0 <= float(r[5]) <= float(r[6]) < 1, out)

    def test_stat_of_tensors_without_values(self):
        # zero_size.ten: f4 [0, 4], i8 [3, 0, 2] and an unnamed u1 [0].
        result = json.loads(self.stat_of(["zero_size.ten"], 1, "--json"))
        for t in result["tensors"]:
            self.assertEqual((t["count"], t["nan"]), (0, 0))
            self.assertFalse({"min", "max", "mean", "std"} & set(t), t)
        lines = self.stat_of(["zero_size.ten"], 1).splitlines()
        self.assertEqual(len(lines), 5, lines)
        for line, (info, dtype, shape) in zip(lines[2:], [("none", "f4", r"\[0, 4\]"), ("empty", "i8", r"\[3, 0, 2\]"),
                                                          ("-", "u1", r"\[0\]")]):
            self.assertRegex(line, rf"^ *\d+ {info} +{dtype} +{shape} +- +- +- +- +1$")

    def test_stat_prints_what_it_has_when_interrupted(self):
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "1000", "--json", "--timeout", "0")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                      "--count", "3", "--report", "0")
        time.sleep(1)  # the three are received (stat waits for more)
        stat.send_signal(2)  # SIGINT, as Ctrl-C
        code, out, err = finish(stat)
        self.assertEqual(code, 130, err)
        result = json.loads(out)
        self.assertEqual(result["messages"], 3)
        self.assertTrue(result["interrupted"])
        self.assertEqual(result["tensors"][0]["count"], 45)
        self.assertIn("interrupted after 3 of 1000 messages", err)
        self.assertIn(b"130 interrupted", run("stat", "--help").stdout)


if __name__ == "__main__":
    sys.exit(main())
