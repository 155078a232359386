#!/usr/bin/env python3
"""`tenbin keygen`: CURVE certificate pairs as pyzmq writes them."""

import os
import sys

from support import zmq, run, CliTest, main


class Keygen(CliTest):
    def test_keygen_writes_a_pair_pyzmq_reads_and_keeps_existing_ones(self):
        r = run("keygen", "server", "--dir", self.path())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"server.key_secret", r.stdout)
        self.assertEqual(os.stat(self.path("server.key_secret")).st_mode & 0o777, 0o600)
        if zmq is not None:
            from zmq import auth
            public, secret = auth.load_certificate(self.path("server.key_secret"))
            self.assertEqual(zmq.curve_public(secret), public)
            self.assertEqual(auth.load_certificate(self.path("server.key"))[0], public)
            self.assertIsNone(auth.load_certificate(self.path("server.key"))[1])
        r = run("keygen", "server", "--dir", self.path())
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"exists", r.stderr)
        r = run("keygen", "x", "--dir", self.path("missing"))
        self.assertEqual(r.returncode, 64)


if __name__ == "__main__":
    sys.exit(main())
