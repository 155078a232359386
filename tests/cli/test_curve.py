#!/usr/bin/env python3
"""The --curve-cert, --curve-server and --curve-allow options of the socket commands:
CURVE between two processes, refused handshakes, certificates that cannot work."""

import json
import os
import sys

from support import (zmq, ERROR_LINE, BY_PATH, vec, expected_tensors, run, start, finish, free_port, CliTest,
                     main)


class Curve(CliTest):
    def setUp(self):
        super().setUp()
        os.mkdir(self.path("allowed"))
        for name in ("server", "client", "stranger"):
            r = run("keygen", name, "--dir", self.path())
            self.assertEqual(r.returncode, 0, r.stderr)
        os.rename(self.path("client.key"), self.path("allowed", "client.key"))

    def server(self):
        return ["--curve-cert", self.path("server.key_secret"), "--curve-allow", self.path("allowed")]

    def client(self, name="client"):
        return ["--curve-cert", self.path(name + ".key_secret"), "--curve-server", self.path("server.key")]

    def test_send_and_recv_with_keys_deliver_every_message(self):
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "3", "--json", "--timeout", "20",
                         *self.server())
        self.succeeds("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--count", "3",
                      *self.client())
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 3)
        for line in lines:
            self.assertEqual(json.loads(line)["tensors"], expected_tensors(BY_PATH["i4_i8.ten"]))

    def test_serve_and_stat_over_pub_sub_with_keys(self):
        port = free_port()
        serve = start("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "f4:3", "--rate", "50", "--count", "200",
                      "--report", "0", *self.server())
        code, out, err = finish(start("stat", f"zsub://127.0.0.1:{port}", "--count", "3", "--timeout", "20",
                                      *self.client()))
        serve.kill()
        finish(serve)
        self.assertEqual(code, 0, err)

    def test_a_client_not_allowed_gets_nothing_through_and_is_reported(self):
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "1", "--timeout", "3", *self.server())
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"),
                                    "--timeout", "2", *self.client("stranger")))
        self.assertEqual(code, 2, err)  # never connected, so nothing could be sent
        self.assertIn("refused handshake", err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 2, err)
        self.assertEqual(out, "")
        self.assertIn("tenbin recv: refused handshake", err)
        self.assertIn("allow-list", err)

    def test_monitor_counts_refused_handshakes(self):
        port = free_port()
        monitor = start("monitor", f"tcp://127.0.0.1:{port}", "--socket", "pull", "--bind", "--json",
                        "--interval", "0.2", "--timeout", "3", *self.server())
        finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--timeout", "1"))  # no keys
        code, out, err = finish(monitor)
        self.assertEqual(code, 2, err)
        reports = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(reports[-1]["messages"], 0)
        self.assertGreater(reports[-1]["refused"], 0)
        self.assertIn("refused handshake", err)

    def test_certificates_made_by_pyzmq_work_once_private(self):
        if zmq is None:
            self.skipTest("no pyzmq")
        from zmq import auth
        auth.create_certificates(self.path(), "py")
        os.chmod(self.path("py.key_secret"), 0o644)
        port = free_port()
        r = run("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--timeout", "1",
                "--curve-cert", self.path("py.key_secret"), "--curve-server", self.path("server.key"))
        self.assertEqual(r.returncode, 1)
        m = ERROR_LINE.match(r.stderr.decode().strip())
        self.assertEqual(m["cls"], "bad_certificate")
        self.assertIn("chmod 600", m["msg"])
        os.chmod(self.path("py.key_secret"), 0o600)
        os.rename(self.path("py.key"), self.path("allowed", "py.key"))
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "1", "--json", "--timeout", "20",
                         *self.server())
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"),
                                    "--curve-cert", self.path("py.key_secret"),
                                    "--curve-server", self.path("server.key")))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)

    def test_curve_options_that_cannot_work_are_refused(self):
        for args, says in (
                (["recv", "zpull://127.0.0.1:1", "--curve-allow", self.path("allowed")], "need --curve-cert"),
                (["send", "zpush://127.0.0.1:1", "--file", vec("i4_i8.ten"),
                  "--curve-cert", self.path("client.key_secret")], "--curve-server"),
                (["recv", "zpull://127.0.0.1:1", "--curve-cert", self.path("server.key_secret"),
                  "--curve-server", self.path("server.key")], "this side binds"),
                (["send", "zpush://127.0.0.1:1", "--file", vec("i4_i8.ten"), *self.client(),
                  "--curve-allow", self.path("allowed")], "binds"),
                (["recv", "zpull://127.0.0.1:1", "--curve-cert", self.path("server.key")], "no secret-key")):
            with self.subTest(args=args):
                r = run(*args)
                self.assertIn(r.returncode, (1, 64), r.stderr)
                self.assertIn(says.encode(), r.stderr)
        for command in ("send", "recv", "serve", "monitor", "stat"):
            with self.subTest(command=command):
                out = run(command, "--help").stdout
                for option in (b"--curve-cert", b"--curve-server", b"--curve-allow"):
                    self.assertIn(option, out)

    def test_hostile_certificate_files_are_refused_at_once(self):
        # A FIFO (opened to read, it would wait for a writer for ever), as
        # this side's certificate, the server's, or inside the allow-list.
        os.mkfifo(self.path("fifo.key_secret"))
        os.mkfifo(self.path("fifo.key"))
        os.mkdir(self.path("hostile"))
        os.mkfifo(self.path("hostile", "peer.key"))
        port = free_port()
        for args, file in ((["recv", f"zpull://127.0.0.1:{port}", "--curve-cert", self.path("fifo.key_secret")],
                            self.path("fifo.key_secret")),
                           (["send", f"zpush://127.0.0.1:{port}", "-f", vec("i4_i8.ten"),
                             "--curve-cert", self.path("client.key_secret"), "--curve-server", self.path("fifo.key")],
                            self.path("fifo.key")),
                           (["recv", f"zpull://127.0.0.1:{port}", "--curve-cert", self.path("server.key_secret"),
                             "--curve-allow", self.path("hostile")], self.path("hostile", "peer.key"))):
            with self.subTest(file=file):
                m = self.error(run(*args, "--timeout", "1", timeout=10))
                self.assertEqual(m["cls"], "bad_certificate")
                self.assertEqual(m["msg"], f"{file}: is a FIFO, not a regular file: no certificate is read from one")
        # A secret others may write (they could put their own key in it).
        os.chmod(self.path("server.key_secret"), 0o602)
        m = self.error(run("recv", f"zpull://127.0.0.1:{port}", *self.server(), "--timeout", "1"))
        self.assertEqual(m["cls"], "bad_certificate")
        self.assertIn("its mode is 0602 (others may write it); run chmod 600 on it", m["msg"])
        os.chmod(self.path("server.key_secret"), 0o600)
        # A key in Z85's alphabet whose value is out of its range: named by file and line.
        with open(self.path("server.key")) as f:
            text = f.read()
        key = text.split('public-key = "')[1][:40]
        with open(self.path("odd.key"), "w") as f:
            f.write(text.replace(key, key[:35] + "#####"))
        line = 1 + text[:text.index(key)].count("\n")
        m = self.error(run("send", f"zpush://127.0.0.1:{port}", "-f", vec("i4_i8.ten"), "--timeout", "1",
                           "--curve-cert", self.path("client.key_secret"), "--curve-server", self.path("odd.key")))
        self.assertEqual(m["cls"], "bad_certificate")
        self.assertIn(f"{self.path('odd.key')}:{line}: public-key is not a CURVE key", m["msg"])

    def test_curve_on_inproc_is_refused(self):
        # libzmq joins inproc peers without a handshake: keys would be silently ignored.
        for args in (["recv", "inproc://feed", *self.server()],
                     ["send", "inproc://feed", "-f", vec("i4_i8.ten"), *self.client()]):
            with self.subTest(command=args[0]):
                m = self.error(run(*args, "--timeout", "1"), status=64)
                self.assertEqual(m["cls"], "bad_argument")
                self.assertIn("CURVE cannot secure inproc://feed", m["msg"])


if __name__ == "__main__":
    sys.exit(main())
