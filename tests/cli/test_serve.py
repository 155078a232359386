#!/usr/bin/env python3
"""`tenbin serve`: files in turn, shards, synthetic batches, infos, rates."""

import json
import re
import sys

from support import BY_PATH, vec, expected_tensors, run, start, finish, free_port, zmq, CliTest, main


class Serve(CliTest):
    def test_serve_sends_its_files_in_turn(self):
        port = free_port()
        receiver = start("recv", f"zrpull://127.0.0.1:{port}", "--bind", "--count", "4", "--json", "--timeout", "20")
        self.succeeds("serve", f"zrpush://127.0.0.1:{port}", "--connect", "-f", vec("f4_matrix.ten"),
                      "-f", vec("u1_image.ten"), "--count", "4", "--report", "0")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        want = [expected_tensors(BY_PATH[n]) for n in ("f4_matrix.ten", "u1_image.ten")] * 2
        self.assertEqual(got, want)

    def test_serve_synthetic_batches_with_infos_single_part_and_progress(self):
        port = free_port()
        receiver = start("recv", f"tcp://127.0.0.1:{port}", "--count", "3", "--json", "--timeout", "20")
        _, err = self.succeeds("serve", f"tcp://127.0.0.1:{port}", "--synthetic", "f2:4,3,8,8;i4:4",
                               "--infos", "images,labels", "--single", "--count", "3", "--rate", "10",
                               "--report", "0.05")
        # Not a terminal: progress comes as plain lines.
        self.assertRegex(err, r"tenbin serve: \d+ msgs, [0-9.]+ msg/s")
        self.assertNotIn("\r", err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        for line in out.splitlines():
            ts = json.loads(line)["tensors"]
            self.assertEqual([(t["info"], t["dtype"], t["shape"]) for t in ts],
                             [("images", "f2", [4, 3, 8, 8]), ("labels", "i4", [4])])
        # Two synthetic batches alternate: messages 0 and 2 equal, 1 differs.
        hashes = [json.loads(line)["tensors"][0]["sha256"] for line in out.splitlines()]
        self.assertEqual(hashes[0], hashes[2])
        self.assertNotEqual(hashes[0], hashes[1])

    def test_recent_rates_are_counted_over_the_report_interval(self):
        # Not read off the spacing of the last few messages: each report
        # gives the messages of the time since the one before, and the last
        # report (after a moment too short to say more) gives none.
        port = free_port()
        receiver = start("recv", f"tcp://127.0.0.1:{port}", "--count", "12", "--timeout", "20")
        _, err = self.succeeds("serve", f"tcp://127.0.0.1:{port}", "--synthetic", "f4:1000", "--count", "12",
                               "--rate", "20", "--report", "0.2")
        self.assertEqual(finish(receiver)[0], 0)
        lines = [line for line in err.splitlines() if " msgs, " in line]
        report = re.compile(r"^tenbin serve: (\d+) msgs, [0-9.]+ msg/s, [0-9.]+ MB/s"
                            r" \(last ([0-9.]+) s: ([0-9.]+) msg/s, [0-9.]+ MB/s\)$")
        self.assertGreaterEqual(len(lines), 2, err)
        self.assertRegex(lines[-1], r"^tenbin serve: 12 msgs, [0-9.]+ msg/s, [0-9.]+ MB/s$")
        before = 0
        for line in lines[:-1]:
            m = report.match(line)
            self.assertIsNotNone(m, line)
            count, window, rate = int(m[1]), float(m[2]), float(m[3])
            self.assertGreaterEqual(window, 0.2, line)
            self.assertAlmostEqual(rate * window, count - before, delta=0.15 * max(1, count - before), msg=line)
            before = count

    def test_a_pub_nobody_subscribed_to_says_its_messages_went_to_nobody(self):
        # A PUB drops what it sends while nobody is subscribed: said once at
        # the end, the exit still a success (it did what it was asked).
        port = free_port()
        _, err = self.succeeds("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "f4:16", "--count", "3",
                               "--delay", "0", "--report", "0.05")
        self.assertIn("0 peers connected", err)
        self.assertIn("no subscriber was connected: the 3 messages went to nobody", err)
        self.assertIn("--wait-for", err)

    def test_a_pub_with_a_subscriber_counts_it_and_does_not_warn(self):
        port = free_port()
        sub = self.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{port}")
        serve = start("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "f4:16", "--count", "20",
                      "--rate", "20", "--report", "0.2")
        sub.rcvtimeo = 20000
        got = [sub.recv_multipart() for _ in range(5)]  # the subscriber takes messages while serve sends
        self.assertTrue(all(got))
        code, _, err = finish(serve)
        self.assertEqual(code, 0, err)
        self.assertIn("1 peer connected", err)
        self.assertNotIn("went to nobody", err)

    def test_a_bad_synthetic_spec_is_refused(self):
        code, _, err = finish(start("serve", "zpush://127.0.0.1:1", "--synthetic", "c8:4"))
        self.assertEqual(code, 64)
        self.assertIn("bad_argument", err)
        code, _, err = finish(start("serve", "zpush://127.0.0.1:1", "--synthetic", "f4:4,x"))
        self.assertEqual(code, 64)
        self.assertIn("bad dimension", err)
        code, _, err = finish(start("serve", "zpush://127.0.0.1:1"))
        self.assertEqual(code, 64)
        self.assertIn("nothing to send", err)
        # Refused before anything is allocated or sent.
        for spec, says in (("f4:1000000000000", "more than a ZeroMQ frame holds"),
                           ("f4:99999999999,99999999999", "more than a ZeroMQ frame holds"),
                           ("toolongname=f4:1", "toolongname")):
            with self.subTest(spec=spec):
                code, _, err = finish(start("serve", "zpush://127.0.0.1:1", "--synthetic", spec), timeout=20)
                self.assertEqual(code, 64, err)
                self.assertIn(says, err)
        code, _, err = finish(start("serve", "zpush://127.0.0.1:1", "-f", vec("f4_matrix.ten"), "--infos", "p,q"))
        self.assertEqual(code, 64, err)
        self.assertIn("--infos gives 2 infos", err)
        code, _, err = finish(start("convert", vec("f4_matrix.ten"), self.path("out.xyz")))
        self.assertEqual(code, 64)
        self.assertIn("unknown extension", err)

    def test_synthetic_takes_numpy_names_and_value_ranges(self):
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "4", "--json", "--timeout", "20")
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "--synthetic",
                                    "x=float16:8,3;y=int32:500:-3..9;z=f4:100:10..20", "--count", "4",
                                    "--report", "0"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(stat)
        self.assertEqual(code, 0, err)
        rows = {t["info"]: t for t in json.loads(out)["tensors"]}
        self.assertEqual((rows["x"]["dtype"], rows["y"]["dtype"], rows["z"]["dtype"]), ("f2", "i4", "f4"))
        self.assertEqual((rows["y"]["min"], rows["y"]["max"]), (-3, 9))  # 2000 draws from 13 values
        self.assertGreaterEqual(rows["z"]["min"], 10)
        self.assertLess(rows["z"]["max"], 20)
        for spec, words in (("i4:4:9..0", "is empty"), ("uint8:4:0..300", "does not fit u1"),
                            ("i4:4:a..b", "needs two integers"), ("i4:4:5", "is not LO..HI"),
                            ("complex64:4", "NumPy name")):
            with self.subTest(spec=spec):
                r = run("serve", f"zpush://127.0.0.1:{port}", "--synthetic", spec)
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(words.encode(), r.stderr)

    def test_a_shard_made_by_pythons_tarfile_replays(self):
        import io
        import tarfile
        shard = self.path("python.tar")
        names = ["u1_image.ten", "f4_matrix.ten"]
        with tarfile.open(shard, "w") as tar:  # PAX, Python's default
            d = tarfile.TarInfo("samples")
            d.type = tarfile.DIRTYPE
            tar.addfile(d)
            for i, n in enumerate(names):
                data = open(vec(n), "rb").read()
                for name, payload in ((f"samples/{i:06d}.ten", data), (f"samples/{i:06d}.cls", b"7")):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        r = run("info", shard)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"shard of 2 messages (2 members not .ten skipped)", r.stdout)
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "2", "--json", "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", shard, "--count", "2",
                      "--report", "0")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        self.assertEqual(got, [expected_tensors(BY_PATH[n]) for n in names])


if __name__ == "__main__":
    sys.exit(main())
