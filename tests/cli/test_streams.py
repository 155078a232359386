#!/usr/bin/env python3
"""Numbered streams and acknowledged delivery across commands: serve --epochs
and --producer, recv's producer/epoch/seq, --epochs and --state, monitor's
epochs, --acked with a receiver killed mid-stream, --wait-for."""

import json
import os
import signal
import sys
import tarfile
import time

from support import run, start, finish, free_port, vec, CliTest, main

MEMBERS = ["f4_matrix.ten", "i4_i8.ten", "infos.ten"]


class Streams(CliTest):
    def shard(self):
        """A .tar shard of three messages, in the order of MEMBERS."""
        path = self.path("shard.tar")
        with tarfile.open(path, "w") as tar:
            for i, name in enumerate(MEMBERS):
                tar.add(vec(name), arcname=f"{i:06d}.ten")
        return path

    def hashes(self, name):
        return [t["sha256"] for t in self.info(vec(name))]

    def test_serve_epochs_of_a_shard_reach_recv_numbered_over_tcp_ipc_and_shm(self):
        shard = self.shard()
        port = free_port()
        places = {
            "tcp": (f"zpull://127.0.0.1:{port}", f"zpush://127.0.0.1:{port}"),
            "ipc": (f"zpull+ipc://{self.path('e.sock')}", f"zpush+ipc://{self.path('e.sock')}"),
            "shm": (f"zpull+shm://{self.path('s.sock')}", f"zpush+shm://{self.path('s.sock')}"),
        }
        for where, (recv_url, serve_url) in places.items():
            with self.subTest(where=where):
                receiver = start("recv", recv_url, "--epochs", "2", "--json", "--timeout", "20")
                self.succeeds("serve", serve_url, "--file", shard, "--epochs", "2", "--producer", "trainer-feed",
                              "--report", "0", "--timeout", "20")
                code, out, err = finish(receiver)
                self.assertEqual(code, 0, err)
                lines = [json.loads(line) for line in out.splitlines()]
                self.assertEqual([(m["producer"], m["epoch"], m["seq"]) for m in lines],
                                 [("trainer-feed", e, s) for e in (0, 1) for s in (0, 1, 2)])
                self.assertEqual(list(lines[0])[:3], ["producer", "epoch", "seq"])
                # Each epoch is the shard again, in order.
                for m in lines:
                    self.assertEqual([t["sha256"] for t in m["tensors"]], self.hashes(MEMBERS[m["seq"]]))
                self.assertIn("epoch 0 ended after 3 messages", err)
                self.assertIn("epoch 1 ended after 6 messages", err)

    def test_recv_stops_at_the_streams_end_and_resumes_from_its_state(self):
        port = free_port()
        state = self.path("state.json")
        # Receives 4 of 2 epochs of 3, saves where it is.
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "-n", "4", "--json", "--state", state,
                         "--timeout", "20")
        serve = start("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "f4:2", "-n", "3", "--epochs", "2",
                      "--producer", "p", "--report", "0", "--timeout", "5")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        self.assertEqual(len(out.splitlines()), 4)
        finish(serve)  # it may time out on what nobody took
        saved = json.loads(open(state).read())
        self.assertEqual(saved["producers"]["p"]["epoch"], 1)
        self.assertEqual(saved["producers"]["p"]["next"], 1)
        # The producer restarted from the start: what was taken is dropped,
        # the rest comes, and the stream's end stops recv.
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "-n", "0", "--json", "--state", state,
                         "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "f4:2", "-n", "3", "--epochs", "2",
                      "--producer", "p", "--report", "0", "--timeout", "20")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        self.assertEqual([(m["epoch"], m["seq"]) for m in map(json.loads, out.splitlines())], [(1, 1), (1, 2)])
        self.assertIn("the stream ended after 2 messages", err)
        self.assertTrue(json.loads(open(state).read())["producers"]["p"]["finished"])

    def test_recv_refuses_a_state_file_that_is_no_state(self):
        state = self.path("state.json")
        with open(state, "w") as f:
            f.write('{"epoch": "one"}')
        r = run("recv", f"zpull://127.0.0.1:{free_port()}", "--state", state, "--timeout", "1")
        self.assertEqual(self.error(r).group("cls"), "bad_argument")
        self.assertIn(state, r.stderr.decode())

    def test_monitor_shows_epochs(self):
        port = free_port()
        monitor = start("monitor", f"zpull://127.0.0.1:{port}", "--interval", "0.2", "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:10", "-n", "4", "--epochs", "3",
                      "--rate", "50", "--report", "0")
        code, out, err = finish(monitor)
        self.assertEqual(code, 0, err)  # the stream's end stops it
        for e in range(3):
            self.assertIn(f"epoch {e} ended: epoch {e + 1} ({e + 1} ended, 0 gaps, 0 duplicates)", out)
        self.assertIn("12 msgs", out.splitlines()[-1])

        monitor = start("monitor", f"zpull://127.0.0.1:{port}", "--interval", "0.2", "--timeout", "20", "--json")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:10", "-n", "4", "--epochs", "2",
                      "--report", "0")
        code, out, err = finish(monitor)
        self.assertEqual(code, 0, err)
        last = json.loads(out.splitlines()[-1])
        self.assertEqual((last["messages"], last["epoch"], last["epochs"], last["gaps"], last["duplicates"]),
                         (8, 2, 2, 0, 0))

    def acked_serve_with_a_receiver_lost(self, lose, *options):
        """serve --acked to two receivers; `lose` (a signal) hits the first
        once it printed five batches. Every batch reaches one of them, none
        twice the survivor."""
        port = free_port()
        count = 60
        serve = start("serve", f"zrpush://127.0.0.1:{port}", "--acked", "--synthetic", "f4:4", "-n", str(count),
                      "--rate", "40", "--wait-for", "2", "--report", "0.5", "--timeout", "20", *options)
        outs = [open(self.path(f"r{i}.json"), "w+") for i in range(2)]
        receivers = [start("recv", f"zrpull://127.0.0.1:{port}", "--acked", "--credit", "2", "-n", "0", "--json",
                           "--timeout", "20", *options, stdout=out) for out in outs]
        deadline = time.monotonic() + 20
        while os.path.getsize(outs[0].name) == 0 or open(outs[0].name).read().count("\n") < 5:
            self.assertLess(time.monotonic(), deadline, "the first receiver got nothing")
            time.sleep(0.05)
        receivers[0].send_signal(lose)
        try:
            code, _, err = finish(serve)
        finally:
            receivers[0].kill()
            finish(receivers[0])
        self.assertEqual(code, 0, err)
        self.assertRegex(err, r"[12] consumers? \(\d+ in flight, \d+ redelivered\)")
        code, _, err = finish(receivers[1])
        self.assertEqual(code, 0, err)
        self.assertIn("the stream ended", err)
        seqs = []
        for out in outs:
            out.seek(0)
            seqs.append([json.loads(line)["seq"] for line in out.read().splitlines() if line.endswith("}")])
        lost, survivor = seqs
        self.assertGreaterEqual(len(lost), 5)
        self.assertEqual(len(survivor), len(set(survivor)), "the survivor got a batch twice")
        self.assertEqual(set(lost) | set(survivor), set(range(count)))
        # What the lost one took and never acknowledged went to the survivor.
        self.assertLess(len(lost) + len(survivor), count + 2 + 1)

    def test_acked_serve_loses_nothing_when_a_receiver_is_killed(self):
        self.acked_serve_with_a_receiver_lost(signal.SIGKILL)

    def test_acked_serve_loses_nothing_when_a_receiver_stops_answering(self):
        # Its connection stays up: the serve finds it dead by its silence,
        # two heartbeats of 0.2 s (the same at both ends).
        self.acked_serve_with_a_receiver_lost(signal.SIGSTOP, "--ack-heartbeat", "0.2")

    def test_ack_heartbeat_is_positive_seconds(self):
        for command in ("serve", "send", "recv", "monitor", "stat"):
            r = run(command, "--help")
            self.assertIn(b"--ack-heartbeat", r.stdout, command)
        r = run("recv", f"zrpull://127.0.0.1:{free_port()}", "--acked", "--ack-heartbeat", "0", "--timeout", "1")
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn(b"--ack-heartbeat", r.stderr)

    def test_acked_serve_and_send_fail_while_what_they_sent_is_unacknowledged(self):
        r = run("serve", f"zrpush://127.0.0.1:{free_port()}", "--acked", "--synthetic", "f4:2", "-n", "2",
                "--timeout", "1", "--report", "0")
        self.assertEqual(self.error(r, status=2).group("cls"), "timeout")
        self.assertIn(b"0 of 2 messages were acknowledged", r.stderr)
        r = run("send", f"zrpush://127.0.0.1:{free_port()}", "--acked", "--file", vec(MEMBERS[0]), "--timeout", "1")
        self.assertEqual(self.error(r, status=2).group("cls"), "timeout")
        self.assertIn(b"0 of 1 messages were acknowledged", r.stderr)

    def test_wait_for_holds_the_first_message_until_the_subscribers_came(self):
        port = free_port()
        serve = start("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "f4:2", "-n", "3", "--wait-for", "2",
                      "--report", "0.2", "--timeout", "20")
        time.sleep(0.5)  # a publisher without --wait-for would have sent by now, to nobody
        subscribers = [start("recv", f"zsub://127.0.0.1:{port}", "-n", "3", "--json", "--timeout", "20")
                       for _ in range(2)]
        for s in subscribers:
            code, out, err = finish(s)
            self.assertEqual(code, 0, err)
            self.assertEqual(len(out.splitlines()), 3)
        code, _, err = finish(serve)
        self.assertEqual(code, 0, err)
        self.assertIn("2 subscribers", err)

    def test_wait_for_and_acked_are_refused_where_they_cannot_work(self):
        r = run("serve", f"zpush://127.0.0.1:{free_port()}", "--synthetic", "f4:2", "--wait-for", "2")
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn(b"--wait-for", r.stderr)
        r = run("serve", f"zpush://127.0.0.1:{free_port()}", "--synthetic", "f4:2", "--epochs", "1", "--tensorcom")
        self.assertEqual(r.returncode, 64, r.stderr)
        r = run("recv", f"zsub://127.0.0.1:{free_port()}", "--acked", "--timeout", "1")
        self.assertIn(self.error(r).group("cls"), {"bad_argument", "bad_url"})
        self.assertIn(b"acked", r.stderr)


if __name__ == "__main__":
    sys.exit(main())
