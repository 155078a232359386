#!/usr/bin/env python3
"""`tenbin send` (and `recv` at the other end): both forms over tcp, ipc and +shm,
every socket pair, the frames on the wire, timeouts, --tensorcom."""

import json
import sys
import time
import unittest

from support import (zmq, ERROR_LINE, BY_PATH, vec, expected_tensors, ordered, run, start, finish,
                     free_tcp_endpoint, free_port, free_ipc_endpoint, chunk_payloads, CliTest, main)


class Send(CliTest):
    FILES = ["all_dtypes.ten", "zero_size.ten", "scalars.ten", "buf_batch.bin", "u4_patched.ten"]

    def transfer(self, endpoint, name, count, send_args=(), recv_args=()):
        receiver = start("recv", endpoint, "--json", "--count", str(count), "--timeout", "20", *recv_args)
        sender = run("send", endpoint, "--file", vec(name), "--count", str(count), "--timeout", "20",
                     *send_args)
        rc, out, err = finish(receiver)
        self.assertEqual(sender.returncode, 0, sender.stderr)
        self.assertNotIn(b"went to nobody", sender.stderr)  # a PUB's subscriber was counted
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), count)
        for line in lines:
            self.assertEqual(json.loads(line), {"tensors": expected_tensors(BY_PATH[name])})
            self.assertEqual([k for k, _ in ordered(line)], ["tensors"])

    def test_every_format_info_reads_is_sent_and_served(self):
        # all_dtypes.ten through .npy (its first tensor), .npz and .safetensors:
        # the same tensors arrive, names as infos (an .npy has none).
        want = expected_tensors(BY_PATH["all_dtypes.ten"])
        one = self.path("one.ten")
        self.assertEqual(run("convert", vec("f4_matrix.ten"), one).returncode, 0)
        files = {".npy": (one, expected_tensors(BY_PATH["f4_matrix.ten"])), ".npz": (vec("all_dtypes.ten"), want),
                 ".safetensors": (vec("all_dtypes.ten"), want)}
        for ext, (source, tensors) in files.items():
            path = self.path("x" + ext)
            r = run("convert", source, path)
            self.assertEqual(r.returncode, 0, r.stderr)
            if ext == ".npy":
                tensors = [dict(t, info="") for t in tensors]
            for command in ("send", "serve"):
                with self.subTest(ext=ext, command=command):
                    endpoint = free_tcp_endpoint()
                    receiver = start("recv", endpoint, "--json", "--timeout", "20")
                    self.succeeds(command, endpoint, "-f", path, "--count", "1", "--timeout", "20",
                                  *(["--report", "0"] if command == "serve" else []))
                    code, out, err = finish(receiver)
                    self.assertEqual(code, 0, err)
                    self.assertEqual(json.loads(out)["tensors"], tensors)
        # A name no info can hold is refused, saying how to shorten it.
        long = self.path("long.safetensors")
        with open(long, "wb") as f:
            header = b'{"a_long_tensor_name":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
            f.write(len(header).to_bytes(8, "little") + header + b"\7")
        r = run("send", free_tcp_endpoint(), "-f", long, "--timeout", "1")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"'a_long_tensor_name'", r.stderr)
        self.assertIn(b"--infos short", r.stderr)

    def test_push_pull_both_forms_over_tcp_and_ipc(self):
        for make in (free_tcp_endpoint, free_ipc_endpoint):
            for form in ([], ["--single"]):
                for name in self.FILES:
                    with self.subTest(transport=make.__name__, form=form, file=name):
                        self.transfer(make(), name, 3, send_args=form)

    def test_pub_sub(self):
        for form in ([], ["--single"]):
            with self.subTest(form=form):
                self.transfer(free_tcp_endpoint(), "i2_u2_pair.ten", 2,
                              send_args=["--socket", "pub", *form],
                              recv_args=["--socket", "sub"])

    def test_request_reply_and_other_pairs(self):
        pairs = [("req", "rep"), ("req", "router"), ("dealer", "router"), ("pair", "pair")]
        for s, r in pairs:
            with self.subTest(send=s, recv=r):
                self.transfer(free_tcp_endpoint(), "i4_i8.ten", 2,
                              send_args=["--socket", s], recv_args=["--socket", r])

    def test_bind_and_connect_can_be_swapped(self):
        self.transfer(free_ipc_endpoint(), "f4_matrix.ten", 1,
                      send_args=["--bind"], recv_args=["--connect"])

    def test_shared_memory_push_pull_pub_sub_and_pair(self):
        for name in self.FILES:
            with self.subTest(file=name):
                self.transfer(free_ipc_endpoint().replace("ipc://", "shm://"), name, 3)
        self.transfer(free_ipc_endpoint().replace("ipc://", "shm://"), "i4_i8.ten", 2,
                      send_args=["--socket", "pair"], recv_args=["--socket", "pair"])
        self.transfer(free_ipc_endpoint().replace("ipc://", "shm://"), "i2_u2_pair.ten", 2,
                      send_args=["--socket", "pub"], recv_args=["--socket", "sub"])
        single = run("send", free_ipc_endpoint().replace("ipc://", "zpush+shm://"), "--file",
                     vec("i4_i8.ten"), "--single")
        self.assertNotEqual(single.returncode, 0)
        self.assertIn("--single has no +shm form", single.stderr.decode())

    def test_readable_summary(self):
        endpoint = free_tcp_endpoint()
        receiver = start("recv", endpoint, "--timeout", "20")
        run("send", endpoint, "--file", vec("i2_u2_pair.ten"), "--single", "--timeout", "20")
        rc, out, _ = finish(receiver)
        self.assertEqual(rc, 0)
        self.assertTrue(out.startswith("message 1: single-part, 2 tensors, 40 data bytes\n"), out)
        for t in BY_PATH["i2_u2_pair.ten"]["tensors"]:
            self.assertIn(t["sha256"], out)

    def test_sent_frames_are_the_python_forms(self):
        for name in ("all_dtypes.ten", "scalars.ten", "zero_size.ten", "buf_mixed.bin"):
            data = open(vec(name), "rb").read()
            for single in (False, True):
                with self.subTest(file=name, single=single):
                    pull = self.socket(zmq.PULL)
                    pull.rcvtimeo = 20000
                    port = pull.bind_to_random_port("tcp://127.0.0.1")
                    args = ["send", f"tcp://127.0.0.1:{port}", "-f", vec(name), "--timeout", "20"]
                    sender = start(*args, *(["--single"] if single else []))
                    frames = pull.recv_multipart()
                    rc, _, err = finish(sender)
                    self.assertEqual(rc, 0, err)
                    self.assertEqual(frames, [data] if single else chunk_payloads(data))

    def test_a_pub_nobody_subscribed_to_says_its_messages_went_to_nobody(self):
        # A PUB drops what it sends while nobody is subscribed: the exit is a
        # success (it did what it was asked), with a warning.
        for endpoint in (free_tcp_endpoint(), free_ipc_endpoint().replace("ipc://", "shm://")):
            with self.subTest(endpoint=endpoint):
                r = run("send", endpoint, "--socket", "pub", "-f", vec("f4_matrix.ten"), "--count", "2",
                        "--delay", "0.1")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("tenbin send: warning: no subscriber was connected: the 2 messages went to nobody",
                              r.stderr.decode())
                self.assertIn("--delay", r.stderr.decode())

    def test_send_with_no_receiver_exits_2(self):
        t0 = time.monotonic()
        r = run("send", free_tcp_endpoint(), "-f", vec("f4_matrix.ten"), "--timeout", "0.5", timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "timeout")

    @unittest.skipIf(zmq is None, "pyzmq is not available")
    def test_req_without_reply_exits_2(self):
        # A ROUTER that takes the request but never answers.
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.linger = 0
        try:
            port = router.bind_to_random_port("tcp://127.0.0.1")
            r = run("send", f"tcp://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"), "--socket", "req",
                    "--timeout", "1", timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(b"no reply", r.stderr)
            self.assertEqual(router.poll(1000), zmq.POLLIN)
        finally:
            router.close()
            ctx.term()

    def test_send_and_recv_take_tensorcom_urls(self):
        port = free_port()
        entry = BY_PATH["i4_i8.ten"]
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "2", "--json", "--timeout", "20")
        self.succeeds("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--count", "2")
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2)
        for line in lines:
            self.assertEqual(json.loads(line)["tensors"], expected_tensors(entry))

    def test_tensorcom_flag_refuses_what_tensorcom_cannot_decode(self):
        port = free_port()
        for args, words in ((["send", f"zpush://127.0.0.1:{port}", "--file", vec("u4_patched.ten")], "is u4"),
                            (["send", f"zpush://127.0.0.1:{port}", "--file", vec("scalars.ten")], "has rank 0"),
                            (["serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=uint32:3"], "is u4"),
                            (["serve", f"zpush://127.0.0.1:{port}", "--synthetic", "f4:"], "has rank 0")):
            with self.subTest(args=args):
                r = run(*args, "--tensorcom", "--timeout", "1")
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(words.encode(), r.stderr)
                self.assertIn(b"refused by --tensorcom", r.stderr)
                self.assertNotIn(b"connection_options", r.stderr)
        # Without it the same goes out (a tenbin receiver reads u4).
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--json", "--timeout", "20")
        self.succeeds("send", f"zpush://127.0.0.1:{port}", "--file", vec("u4_patched.ten"))
        self.assertEqual(finish(receiver)[0], 0)


if __name__ == "__main__":
    sys.exit(main())
