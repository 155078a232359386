#!/usr/bin/env python3
"""`tenbin recv`: malformed messages and requests, --max-bytes, a flood, timeouts,
hashes of the data, and recording a stream as a shard (--save)."""

import hashlib
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import time

from support import (zmq, ERROR_LINE, BY_PATH, vec, expected_tensors, acceptable, ordered, run, start,
                     finish, free_tcp_endpoint, free_port, free_ipc_endpoint, frames_of, CliTest, main)


class Recv(CliTest):
    def test_malformed_messages_are_reported_and_skipped(self):
        endpoint = free_tcp_endpoint()
        receiver = start("recv", endpoint, "--json", "--count", "5", "--timeout", "20")
        push = self.socket(zmq.PUSH, linger=1000)
        push.connect(endpoint)
        bad_magic = open(vec("bad_magic.ten"), "rb").read()
        good_single = open(vec("buf_batch.bin"), "rb").read()
        push.send_multipart(frames_of("mp_short_data"))
        push.send_multipart(frames_of("mp_batch"))
        push.send(bad_magic)
        push.send_multipart(frames_of("mp_odd_frames"))
        push.send(good_single)
        rc, out, err = finish(receiver)
        self.assertEqual(rc, 3, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 5, out)
        expect = [("error", "mp_short_data"), ("tensors", "mp_batch"), ("error", "bad_magic.ten"),
                  ("error", "mp_odd_frames"), ("tensors", "buf_batch.bin")]
        for line, (kind, name) in zip(lines, expect):
            got = json.loads(line)
            if kind == "error":
                self.assertEqual([k for k, _ in ordered(line)], ["error", "message"])
                self.assertIn(got["error"], acceptable(BY_PATH[name]))
                self.assertTrue(got["message"])
            else:
                self.assertEqual(got, {"tensors": expected_tensors(BY_PATH[name])})

    def test_malformed_requests_are_answered_by_rep_and_router(self):
        # A REQ peer waits for an answer to every request, a bad one too.
        for kind in ("rep", "router"):
            with self.subTest(socket=kind):
                endpoint = free_tcp_endpoint()
                receiver = start("recv", endpoint, "--socket", kind, "--json", "--count", "2", "--timeout", "20")
                req = self.socket(zmq.REQ)
                req.rcvtimeo = 10000
                req.connect(endpoint)
                req.send(open(vec("bad_magic.ten"), "rb").read())
                self.assertEqual(req.recv_multipart(), [b""])
                req.send_multipart(frames_of("mp_batch"))
                self.assertEqual(req.recv_multipart(), [b""])
                rc, out, err = finish(receiver)
                self.assertEqual(rc, 3, err)
                self.assertEqual([list(json.loads(line)) for line in out.splitlines()], [["error", "message"], ["tensors"]])

    def test_max_bytes_refuses_larger_messages_and_takes_units(self):
        # mp_batch carries 32 data bytes, buf_batch.bin 112.
        endpoint = free_tcp_endpoint()
        receiver = start("recv", endpoint, "--json", "--count", "2", "--timeout", "20", "--max-bytes", "100b")
        push = self.socket(zmq.PUSH, linger=1000)
        push.connect(endpoint)
        push.send(open(vec("buf_batch.bin"), "rb").read())
        push.send_multipart(frames_of("mp_batch"))
        rc, out, err = finish(receiver)
        self.assertEqual(rc, 3, err)
        lines = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(lines[0]["error"], "limit_exceeded", out)
        # In the command line's words: the option to raise, not the C++ field.
        self.assertIn("--max-bytes 100", lines[0]["message"])
        self.assertNotIn("limits::", lines[0]["message"])
        self.assertEqual(lines[1], {"tensors": expected_tensors(BY_PATH["mp_batch"])})
        for bad in ("-1", "lots", "1 parsecs"):
            with self.subTest(max_bytes=bad):
                self.assertEqual(run("recv", endpoint, "--max-bytes", bad).returncode, 64)

    def test_recv_memory_stays_bounded_under_a_flood(self):
        # recv stalls on a full stdout pipe while a PUSH floods it with
        # 512 KiB messages: what libzmq queues for it is bounded by the
        # library's receive high-water mark (16 messages), not libzmq's 1000
        # (500 MB here).
        import fcntl
        endpoint = free_tcp_endpoint()
        rd, wr = os.pipe()
        fcntl.fcntl(wr, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
        receiver = start("recv", endpoint, "--count", "100000", "--timeout", "60", stdout=wr,
                         stderr=subprocess.DEVNULL)
        os.close(wr)
        self.addCleanup(os.close, rd)

        def rss_kib():
            with open(f"/proc/{receiver.pid}/status") as f:
                return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])

        try:
            push = self.socket(zmq.PUSH)
            push.sndhwm = 4
            push.sndtimeo = 3000
            push.connect(endpoint)
            n = 512 * 1024
            header = struct.pack("<8s8sqq", b"u1", b"", 1, n)
            data = bytes(n)
            base, peak, sent = None, 0, 0
            while sent < 1200:  # the unbounded receiver takes all of them
                try:
                    push.send(header, zmq.SNDMORE)
                    push.send(data, copy=False)
                except zmq.Again:
                    break
                sent += 1
                if sent == 2:
                    base = rss_kib()
                if sent % 20 == 0:
                    peak = max(peak, rss_kib())
            time.sleep(1)
            peak = max(peak, rss_kib())
            self.assertIsNotNone(base)
            self.assertLess(sent, 1200, "every message was taken: nothing held the flood back")
            self.assertLess(peak - base, 160 * 1024, f"RSS grew from {base} to {peak} KiB ({sent} messages sent)")
        finally:
            receiver.kill()
            receiver.wait()

    def test_a_timeout_wins_over_a_malformed_message(self):
        endpoint = free_tcp_endpoint()
        receiver = start("recv", endpoint, "--json", "--count", "2", "--timeout", "2")
        push = self.socket(zmq.PUSH)
        push.connect(endpoint)
        push.send_multipart(frames_of("mp_short_data"))
        rc, out, err = finish(receiver)
        self.assertEqual(rc, 2, err)
        self.assertEqual(json.loads(out)["error"], "data_size_mismatch")

    def test_received_sha256_is_of_the_data(self):
        # The tool's hash against one computed here from the frames themselves.
        frames = frames_of("mp_dims")
        endpoint = free_ipc_endpoint()
        receiver = start("recv", endpoint, "--json", "--timeout", "20")
        push = self.socket(zmq.PUSH, linger=1000)
        push.connect(endpoint)
        push.send_multipart(frames)
        rc, out, err = finish(receiver)
        self.assertEqual(rc, 0, err)
        got = [t["sha256"] for t in json.loads(out)["tensors"]]
        self.assertEqual(got, [hashlib.sha256(f).hexdigest() for f in frames[1::2]])

    def test_recv_with_nothing_to_receive_exits_2(self):
        t0 = time.monotonic()
        r = run("recv", free_tcp_endpoint(), "--json", "--timeout", "0.5", timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(r.stdout, b"")
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "timeout")

    def test_recv_prints_what_arrived_before_the_timeout(self):
        endpoint = free_tcp_endpoint()
        receiver = start("recv", endpoint, "--json", "--count", "2", "--timeout", "2")
        sender = run("send", endpoint, "--file", vec("f8_cube.ten"), "--timeout", "20")
        rc, out, err = finish(receiver)
        self.assertEqual(sender.returncode, 0)
        self.assertEqual(rc, 2, err)
        self.assertEqual([json.loads(line) for line in out.splitlines()],
                         [{"tensors": expected_tensors(BY_PATH["f8_cube.ten"])}])
        self.assertIn("received 1 of 2", err)

    def record(self, shard, *args, count=3, serve=3):
        """recv --save `shard` of `count` messages while serve sends `serve`: (status, stderr) of recv."""
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "-n", str(count), "--save", shard, "--timeout", "20",
                         *args)
        if serve:
            self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                          "-n", str(serve), "--report", "0", "--timeout", "5")
        code, _, err = finish(receiver)
        return code, err

    def members(self, shard):
        with tarfile.open(shard) as tar:
            return [(m.name, m.mtime) for m in tar.getmembers()]

    def test_save_replaces_a_file_only_with_force(self):
        shard = self.path("kept.tar")
        with open(shard, "wb") as f:
            f.write(b"keep me")
        code, err = self.record(shard, serve=0)
        self.assertEqual(code, 1, err)
        self.assertIn(f"'{shard}' exists; use --force to replace it", err)
        with open(shard, "rb") as f:
            self.assertEqual(f.read(), b"keep me")
        self.assertFalse(os.path.exists(shard + ".part"))
        code, err = self.record(shard, "--force")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(self.members(shard)), 3)
        self.assertEqual(run("recv", "zpull://127.0.0.1:1", "--force").returncode, 64)  # --force needs --save

    def test_members_carry_the_time_they_were_recorded(self):
        shard = self.path("dated.tar")
        before = int(time.time())
        code, err = self.record(shard)
        after = time.time()
        self.assertEqual(code, 0, err)
        for name, mtime in self.members(shard):
            self.assertTrue(before <= mtime <= after, (name, mtime, before, after))

    def test_save_never_follows_a_link_at_the_partial_file(self):
        # A link planted at X.tar.part, pointing at a file of the user's: the
        # recorder refuses, and the file is untouched.
        shard, victim = self.path("x.tar"), self.path("victim")
        with open(victim, "wb") as f:
            f.write(b"precious")
        os.symlink(victim, shard + ".part")
        code, err = self.record(shard, serve=0)
        self.assertEqual(code, 1, err)
        self.assertIn(f"{shard}.part exists", err)
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"precious")
        self.assertTrue(os.path.islink(shard + ".part"))
        self.assertFalse(os.path.exists(shard))

    def test_save_refuses_a_target_that_is_no_regular_file(self):
        victim = self.path("victim")
        with open(victim, "wb") as f:
            f.write(b"precious")
        targets = {"fifo.tar": lambda p: os.mkfifo(p), "link.tar": lambda p: os.symlink(victim, p),
                   "dir.tar": lambda p: os.mkdir(p)}
        try:
            os.mknod(self.path("probe"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            targets["device.tar"] = lambda p: os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            pass  # no CAP_MKNOD here: the device case is left out
        for name, make in targets.items():
            for force in ([], ["--force"]):
                with self.subTest(target=name, force=force):
                    shard = self.path(name)
                    make(shard)
                    code, err = self.record(shard, *force, serve=0)  # a FIFO opened would hang here
                    self.assertEqual(code, 1, err)
                    self.assertIn("not a regular file", err)
                    self.assertFalse(os.path.exists(shard + ".part"))
                    self.assertFalse(stat.S_ISREG(os.lstat(shard).st_mode))
                    if os.path.isdir(shard) and not os.path.islink(shard):
                        os.rmdir(shard)
                    else:
                        os.remove(shard)
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"precious")

    def test_save_finishes_the_shard_at_a_signal(self):
        for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal=sig.name):
                shard = self.path(f"{sig.name}.tar")
                port = free_port()
                receiver = start("recv", f"zpull://127.0.0.1:{port}", "-n", "0", "--save", shard, "--timeout", "0")
                self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                              "-n", "2", "--report", "0")
                time.sleep(0.5)
                receiver.send_signal(sig)
                code, _, err = finish(receiver, timeout=10)
                self.assertEqual(code, status, err)
                self.assertIn("saved 2 messages", err)
                self.assertEqual([n for n, _ in self.members(shard)], ["000000.ten", "000001.ten"])
                self.assertFalse(os.path.exists(shard + ".part"))

    def test_two_recorders_on_one_path_cannot_mix_their_shards(self):
        shard = self.path("one.tar")
        port = free_port()
        first = start("recv", f"zpull://127.0.0.1:{port}", "-n", "2", "--save", shard, "--timeout", "20")
        time.sleep(0.3)  # it holds one.tar.part
        second = run("recv", f"zpull://127.0.0.1:{free_port()}", "-n", "1", "--save", shard, "--force",
                     "--timeout", "1")
        self.assertEqual(second.returncode, 1, second.stderr)
        self.assertIn(b"another tenbin recv --save is recording to", second.stderr)
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "-f", vec("i4_i8.ten"), "-n", "2",
                      "--report", "0")
        code, _, err = finish(first)
        self.assertEqual(code, 0, err)
        r = run("info", "--json", shard)
        self.assertEqual([m["tensors"] for m in json.loads(r.stdout)["messages"]],
                         [expected_tensors(BY_PATH["i4_i8.ten"])] * 2)

    def test_record_a_stream_as_a_shard_and_replay_it(self):
        names = ["f4_matrix.ten", "u1_image.ten", "i4_i8.ten"]
        shard = self.path("recorded.tar")
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "3", "--save", shard, "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", *sum((["-f", vec(n)] for n in names), []),
                      "--count", "3", "--report", "0")
        code, _, err = finish(receiver)
        self.assertEqual(code, 0, err)
        self.assertIn("saved 3 messages", err)
        self.assertEqual(os.path.getsize(shard) % 10240, 0)
        # Python's tarfile (as webdataset) reads it: KEY.ten members, in order, each a .ten file.
        with tarfile.open(shard) as tar:
            members = tar.getmembers()
            self.assertEqual([m.name for m in members], ["000000.ten", "000001.ten", "000002.ten"])
            for m, n in zip(members, names):
                with self.subTest(member=m.name):
                    data = tar.extractfile(m).read()
                    self.assertEqual(data[:8], b"~TenBin~")
                    one = self.path(m.name)
                    with open(one, "wb") as f:
                        f.write(data)
                    r = run("info", "--json", one)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(json.loads(r.stdout)["tensors"], expected_tensors(BY_PATH[n]))
        r = run("info", "--json", shard)
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = json.loads(r.stdout)
        self.assertEqual([m["name"] for m in listed["messages"]], ["000000.ten", "000001.ten", "000002.ten"])
        self.assertEqual([m["tensors"] for m in listed["messages"]], [expected_tensors(BY_PATH[n]) for n in names])
        self.assertIn(b"shard of 3 messages", run("info", shard).stdout)
        # send replays it message by message, --count times over.
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "6", "--json", "--timeout", "20")
        self.succeeds("send", f"zpush://127.0.0.1:{port}", "--file", shard, "--count", "2")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        self.assertEqual(got, [expected_tensors(BY_PATH[n]) for n in names] * 2)


if __name__ == "__main__":
    sys.exit(main())
