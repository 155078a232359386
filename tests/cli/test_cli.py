#!/usr/bin/env python3
"""End-to-end tests of the `tenbin` command-line tool.

Usage: test_cli.py PATH-TO-TENBIN   (TENBIN_VECTORS names the vector folder)

Runs the built tool as a user would: `info` over every vector of the manifest,
`send` -> `recv` between two processes over tcp and ipc, PUB -> SUB, the
request/reply socket pairs, timeouts, and malformed messages sent with pyzmq.
Prints `N passed, N failed` and exits non-zero on any failure.
"""

import hashlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile

TOOL = None  # set from argv in main()
VECTORS = os.environ.get("TENBIN_VECTORS", os.path.join(os.path.dirname(__file__), "..", "vectors"))

try:
    import zmq  # only for sending malformed messages and checking wire bytes
except ImportError:  # pragma: no cover - /usr/bin/python3 has it
    zmq = None

TENSOR_KEYS = ["info", "dtype", "shape", "nbytes", "sha256"]
ERROR_LINE = re.compile(r"^(?P<where>.+): error: (?P<cls>[a-z_]+): (?P<msg>.+)$")


def load_manifest():
    with open(os.path.join(VECTORS, "MANIFEST.json")) as f:
        return json.load(f)


MANIFEST = load_manifest()
VALID = [e for e in MANIFEST["files"] if e["kind"] in ("ten", "buffer")]
MALFORMED = [e for e in MANIFEST["malformed"] if e["kind"] in ("ten", "buffer")]
BY_PATH = {e["path"]: e for e in MANIFEST["files"] + MANIFEST["malformed"]}


def vec(name):
    return os.path.join(VECTORS, name)


def expected_tensors(entry):
    return [{k: t[k] for k in TENSOR_KEYS} for t in entry["tensors"]]


def acceptable(entry):
    return {entry["error"], *entry.get("acceptable_errors", [])}


def ordered(text):
    """JSON with objects as lists of pairs, to check key order too."""
    return json.loads(text, object_pairs_hook=lambda pairs: pairs)


def run(*args, input=None, timeout=60):
    return subprocess.run([TOOL, *args], input=input, capture_output=True, timeout=timeout)


def start(*args):
    return subprocess.Popen([TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc, timeout=60):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"process did not end within {timeout} s: {err.decode()!r}")
    return proc.returncode, out.decode(), err.decode()


def free_tcp_endpoint():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


_tmp = tempfile.TemporaryDirectory(prefix="tenbin-cli-")
_ipc_counter = [0]


def free_ipc_endpoint():
    _ipc_counter[0] += 1
    return f"ipc://{_tmp.name}/s{_ipc_counter[0]}.sock"


def chunk_payloads(data):
    """The payloads of a chunked buffer, parsed here independently of the tool."""
    out, pos = [], 0
    while pos < len(data):
        assert data[pos:pos + 8] == b"~TenBin~"
        (n,) = struct.unpack_from("<q", data, pos + 8)
        out.append(data[pos + 16:pos + 16 + n])
        pos += 16 + (n + 63) // 64 * 64
    return out


def frames_of(folder):
    d = vec(folder)
    return [open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))]


class Info(unittest.TestCase):
    def test_json_matches_manifest_for_every_valid_vector(self):
        self.assertGreater(len(VALID), 10)
        for entry in VALID:
            with self.subTest(file=entry["path"]):
                r = run("info", "--json", vec(entry["path"]))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, b"")
                lines = r.stdout.decode().splitlines()
                self.assertEqual(len(lines), 1)
                got = json.loads(lines[0])
                self.assertEqual(got, {"file": vec(entry["path"]), "tensors": expected_tensors(entry)})
                # Key order as documented, outside and inside.
                pairs = ordered(lines[0])
                self.assertEqual([k for k, _ in pairs], ["file", "tensors"])
                for t in pairs[1][1]:
                    self.assertEqual([k for k, _ in t], TENSOR_KEYS)

    def test_table_matches_manifest_for_every_valid_vector(self):
        for entry in VALID:
            with self.subTest(file=entry["path"]):
                r = run("info", vec(entry["path"]))
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.decode().splitlines()
                n = len(entry["tensors"])
                self.assertTrue(lines[0].startswith(f"{vec(entry['path'])}: {n} tensor"), lines[0])
                rows = lines[2:] if n else lines[1:]
                self.assertEqual(len(rows), n, lines)
                if n:
                    self.assertEqual(lines[1].split(), ["#", "info", "dtype", "shape", "nbytes", "sha256"])
                for i, (row, t) in enumerate(zip(rows, entry["tensors"])):
                    words = row.split()
                    self.assertEqual(words[0], str(i))
                    self.assertEqual(words[1], t["info"] or "-")
                    self.assertEqual(words[2], t["dtype"])
                    self.assertEqual(json.loads(" ".join(words[3:-2])), t["shape"])
                    self.assertEqual(int(words[-2]), t["nbytes"])
                    self.assertEqual(words[-1], t["sha256"])

    def test_control_characters_in_infos_are_escaped_in_the_table(self):
        # Infos Python writes: a NUL inside, a line break, a terminal escape.
        infos = [b"a\0b", b"x\ny", b"\x1b[31m"]
        data = b""
        for info in infos:
            header = struct.pack("<8s8sqq", b"u1", info, 1, 2)
            for payload in (header, b"\x07\x08"):
                padded = payload + b"\0" * ((len(payload) + 63) // 64 * 64 - len(payload))
                data += b"~TenBin~" + struct.pack("<q", len(payload)) + padded
        path = os.path.join(_tmp.name, "control.ten")
        with open(path, "wb") as f:
            f.write(data)
        r = run("info", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertNotIn("\x1b", out)
        lines = out.splitlines()
        self.assertEqual(len(lines), 5, lines)  # title, heading, 3 rows: no row broken
        self.assertEqual([row.split()[1] for row in lines[2:]], ["a\\x00b", "x\\x0ay", "\\x1b[31m"])
        r = run("info", "--json", path)
        self.assertEqual([t["info"] for t in json.loads(r.stdout)["tensors"]], ["a\0b", "x\ny", "\x1b[31m"])

    def test_many_files_give_one_line_each_in_order(self):
        r = run("info", "--json", *[vec(e["path"]) for e in VALID])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual(got, [{"file": vec(e["path"]), "tensors": expected_tensors(e)} for e in VALID])

    def test_every_malformed_vector_is_one_error_line_and_status_1(self):
        self.assertGreaterEqual(len(MALFORMED), 7)
        for entry in MALFORMED:
            for mode in ([], ["--json"]):
                with self.subTest(file=entry["path"], mode=mode):
                    path = vec(entry["path"])
                    r = run("info", *mode, path)
                    self.assertEqual(r.returncode, 1)
                    self.assertEqual(r.stdout, b"")
                    lines = r.stderr.decode().splitlines()
                    self.assertEqual(len(lines), 1, lines)
                    m = ERROR_LINE.match(lines[0])
                    self.assertIsNotNone(m, lines[0])
                    self.assertEqual(m["where"], path)
                    self.assertIn(m["cls"], acceptable(entry), lines[0])

    def test_the_empty_file_of_every_format(self):
        # The sanitizer build runs this too: an empty file's buffer has no
        # bytes, not even an address.
        for ext, status in ((".ten", 0), (".ten.zst", 1), (".npy", 1), (".npz", 1), (".safetensors", 1)):
            with self.subTest(ext=ext):
                path = os.path.join(_tmp.name, "empty" + ext)
                open(path, "wb").close()
                for mode in ([], ["--json"]):
                    r = run("info", *mode, path)
                    self.assertEqual(r.returncode, status, r.stderr)
                    if status:
                        self.assertEqual(len(r.stderr.decode().splitlines()), 1, r.stderr)
                        self.assertIsNotNone(ERROR_LINE.match(r.stderr.decode().strip()), r.stderr)
                    elif mode:
                        self.assertEqual(json.loads(r.stdout)["tensors"], [])

    def test_a_bad_file_among_good_ones_fails_at_the_end(self):
        good1, good2 = VALID[0], VALID[4]
        bad = MALFORMED[0]
        missing = os.path.join(_tmp.name, "does-not-exist.ten")
        args = [vec(good1["path"]), vec(bad["path"]), missing, vec(good2["path"])]
        r = run("info", "--json", *args)
        self.assertEqual(r.returncode, 1)
        got = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual([g["file"] for g in got], [vec(good1["path"]), vec(good2["path"])])
        self.assertEqual(got[1]["tensors"], expected_tensors(good2))
        errors = [ERROR_LINE.match(line) for line in r.stderr.decode().splitlines()]
        self.assertEqual(len(errors), 2)
        self.assertTrue(all(errors), r.stderr)
        self.assertEqual(errors[0]["where"], vec(bad["path"]))
        self.assertIn(errors[0]["cls"], acceptable(bad))
        self.assertEqual((errors[1]["where"], errors[1]["cls"]), (missing, "io_error"))

    def test_a_missing_file_is_an_io_error(self):
        missing = os.path.join(_tmp.name, "missing.ten")
        for mode in ([], ["--json"]):
            r = run("info", *mode, missing)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stdout, b"")
            self.assertEqual(r.stderr.decode(), f"{missing}: error: io_error: " +
                             ERROR_LINE.match(r.stderr.decode().strip())["msg"] + "\n")

    def test_a_directory_is_an_io_error(self):
        r = run("info", VECTORS)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "io_error")

    def test_standard_input(self):
        entry = BY_PATH["buf_batch.bin"]
        data = open(vec(entry["path"]), "rb").read()
        r = run("info", "--json", "-", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})
        r = run("info", "-", input=data[:-10])
        self.assertEqual(r.returncode, 1)
        self.assertIn(ERROR_LINE.match(r.stderr.decode().strip())["cls"], {"truncated", "length_beyond_end"})

    def test_standard_input_compressed(self):
        # A .ten.zst piped in is told by its zstd magic.
        entry = BY_PATH["all_dtypes.ten"]
        with tempfile.TemporaryDirectory() as tmp:
            zst = os.path.join(tmp, "b.ten.zst")
            self.assertEqual(run("convert", vec(entry["path"]), zst).returncode, 0)
            data = open(zst, "rb").read()
        r = run("info", "--json", "-", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})
        r = run("info", "-", input=data[:-3])
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "truncated")
        # pzstd writes a skippable frame first (magic 0x184D2A50, 4-byte
        # length, payload): zstd readers pass over it, and so must this.
        skippable = struct.pack("<II", 0x184D2A50, 4) + b"\0\0\0\0"
        r = run("info", "--json", "-", input=skippable + data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})


class Arguments(unittest.TestCase):
    def test_help_names_every_command(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for word in (b"info", b"send", b"recv", b"convert"):
            self.assertIn(word, r.stdout)
        for cmd in ("info", "send", "recv"):
            r = run(cmd, "--help")
            self.assertEqual(r.returncode, 0)
            self.assertIn(b"Usage: tenbin " + cmd.encode(), r.stdout)

    def test_version_is_the_projects(self):
        # The version meson.build declares, not one written into the tool.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "meson.build")) as f:
            version = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
        r = run("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), b"tenbin " + version.encode())

    def test_bad_arguments_fail_with_a_message(self):
        for args in ([], ["info"], ["nonsense"], ["send", "tcp://127.0.0.1:1"],
                     ["recv", "tcp://127.0.0.1:1", "--count", "0"],
                     ["recv", "tcp://127.0.0.1:1", "--socket", "push"],
                     ["send", "tcp://127.0.0.1:1", "-f", "x", "--bind", "--connect"]):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 64, r.stderr)  # EX_USAGE, whatever was wrong
                self.assertNotEqual(r.stderr, b"")
        r = run("nonsense")
        self.assertIn(b"unknown command 'nonsense'", r.stderr)
        r = run("--bogus")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"unknown option '--bogus'", r.stderr)
        # Another format is no .ten to send: say so, not bad_magic.
        npy = os.path.join(_tmp.name, "one.npy")
        with open(npy, "wb") as f:
            f.write(b"\x93NUMPY")
        r = run("send", "tcp://127.0.0.1:1", "-f", npy)
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"is not a .ten file", r.stderr)

    def test_output_that_cannot_be_written_is_a_failure(self):
        with open("/dev/full", "wb") as full:
            r = subprocess.run([TOOL, "info", "--json", vec("f4_matrix.ten")], stdout=full, stderr=subprocess.PIPE)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"writing to standard output failed", r.stderr)

    def test_number_options_of_every_command_are_checked(self):
        # Refused as recv has always refused a negative timeout: the usage
        # status, naming the option. NaN is no number.
        usage = run("recv", "tcp://127.0.0.1:1", "--timeout", "-1").returncode
        self.assertEqual(usage, 64)
        port = free_port()
        cases = [
            (["send", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten")],
             [("--count", "0"), ("--delay", "-1"), ("--timeout", "-1"), ("--timeout", "nan"), ("--linger", "-1"),
              ("--heartbeat-ms", "-1")]),
            (["recv", f"zpull://127.0.0.1:{port}"], [("--count", "0"), ("--timeout", "nan")]),
            (["serve", f"zpush://127.0.0.1:{port}", "--synthetic", "f4:3"],
             [("--count", "-1"), ("--rate", "-5"), ("--delay", "-2"), ("--timeout", "-1"), ("--timeout", "nan"),
              ("--report", "-1"), ("--heartbeat-ms", "-1")]),
            (["monitor", f"zsub://127.0.0.1:{port}"],
             [("--interval", "0"), ("--interval", "-1"), ("--interval", "nan"), ("--count", "-1"),
              ("--timeout", "-1")]),
            (["stat", f"zsub://127.0.0.1:{port}"],
             [("--count", "0"), ("--count", "-1"), ("--timeout", "-1"), ("--timeout", "nan")]),
        ]
        for command, bad in cases:
            for option, value in bad:
                with self.subTest(command=command[0], option=option, value=value):
                    r = run(*command, option, value, timeout=10)
                    self.assertEqual(r.returncode, usage, r.stderr)
                    self.assertIn(option.encode(), r.stderr)

    def test_help_of_every_socket_command_tells_its_defaults(self):
        # What a plain endpoint makes when no --socket is given.
        plain = {"send": "PUSH socket that connects", "recv": "PULL socket that binds",
                 "serve": "PUSH socket that connects", "monitor": "SUB socket that connects",
                 "stat": "SUB socket that connects"}
        for command, socket_text in plain.items():
            with self.subTest(command=command):
                r = run(command, "--help")
                self.assertEqual(r.returncode, 0)
                text = r.stdout.decode()
                flat = " ".join(text.split())
                # One name for the positional argument (optional for monitor and stat,
                # which default to tensormon's URL); every command has the footer.
                self.assertRegex(text, rf"Usage: tenbin {command} \[OPTIONS\] (URL(\.\.\.)?|\[URL\.\.\.\])\n")
                self.assertIn(f"a plain endpoint (tcp://, ipc://, inproc://) makes a {socket_text}", flat)
                self.assertNotIn("needs it", flat)
                self.assertIn("Exit status: 0 ", flat)
                self.assertRegex(text, rf"\nExamples:\n  tenbin {command} ")

    def test_bad_url_and_bad_file(self):
        r = run("recv", "nonsense://x", "--timeout", "1")
        self.assertEqual(r.returncode, 64)  # a wrong argument, though found as the command runs
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "bad_url")
        missing = os.path.join(_tmp.name, "nothing.ten")
        r = run("send", free_tcp_endpoint(), "-f", missing, "--timeout", "1")
        self.assertEqual(r.returncode, 1)
        m = ERROR_LINE.match(r.stderr.decode().strip())
        self.assertEqual((m["where"], m["cls"]), (missing, "io_error"))


class Transfer(unittest.TestCase):
    FILES = ["all_dtypes.ten", "zero_size.ten", "scalars.ten", "buf_batch.bin", "u4_patched.ten"]

    def transfer(self, endpoint, name, count, send_args=(), recv_args=()):
        receiver = start("recv", endpoint, "--json", "--count", str(count), "--timeout", "20", *recv_args)
        sender = run("send", endpoint, "--file", vec(name), "--count", str(count), "--timeout", "20",
                     *send_args)
        rc, out, err = finish(receiver)
        self.assertEqual(sender.returncode, 0, sender.stderr)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), count)
        for line in lines:
            self.assertEqual(json.loads(line), {"tensors": expected_tensors(BY_PATH[name])})
            self.assertEqual([k for k, _ in ordered(line)], ["tensors"])

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


@unittest.skipIf(zmq is None, "pyzmq is not available")
class Wire(unittest.TestCase):
    def setUp(self):
        self.ctx = zmq.Context()
        self.addCleanup(self.ctx.term)

    def socket(self, kind, linger=0):
        """A socket closed (with `linger`) when the test ends, pass or fail."""
        s = self.ctx.socket(kind)
        s.linger = linger
        self.addCleanup(s.close)
        return s

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
        receiver = subprocess.Popen([TOOL, "recv", endpoint, "--count", "100000", "--timeout", "60"],
                                    stdout=wr, stderr=subprocess.DEVNULL)
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


class Timeouts(unittest.TestCase):
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

    def test_send_with_no_receiver_exits_2(self):
        t0 = time.monotonic()
        r = run("send", free_tcp_endpoint(), "-f", vec("f4_matrix.ten"), "--timeout", "0.5", timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "timeout")

    def test_a_timeout_on_a_plain_endpoint_says_what_socket_it_made(self):
        # serve and stat both connect on a plain endpoint (PUSH, SUB): neither
        # hears the other, and each says what it did.
        endpoint = free_tcp_endpoint()
        stat = start("stat", endpoint, "--count", "1", "--timeout", "1")
        serve = start("serve", endpoint, "--synthetic", "f4:3", "--count", "1", "--timeout", "1", "--report", "0")
        results = {"serve": finish(serve), "stat": finish(stat)}
        results["send"] = finish(start("send", endpoint, "-f", vec("f4_matrix.ten"), "--timeout", "0.5"))
        results["recv"] = finish(start("recv", endpoint, "--timeout", "0.5"))
        results["monitor"] = finish(start("monitor", endpoint, "--timeout", "0.5", "--interval", "5"))
        expect = {
            "serve": ("message 1 could not be sent within 1 s (no receiver?)", "PUSH socket connected to", "PULL"),
            "stat": ("0 of 1 messages within 1 s", "SUB socket connected to", "PUB"),
            "send": ("message 1 of 1 could not be sent within 0.5 s", "PUSH socket connected to", "PULL"),
            "recv": ("received 0 of 1 messages; nothing arrived within 0.5 s", "PULL socket bound to", "PUSH"),
            "monitor": ("nothing for 0.5 s", "SUB socket connected to", "PUB"),
        }
        for command, (prefix, did, peer) in expect.items():
            with self.subTest(command=command):
                code, _, err = results[command]
                self.assertEqual(code, 2, err)
                m = ERROR_LINE.match(err.strip())
                self.assertIsNotNone(m, err)
                self.assertEqual((m["where"], m["cls"]), (f"tenbin {command}", "timeout"))
                self.assertTrue(m["msg"].startswith(prefix), m["msg"])
                self.assertIn(f"{did} {endpoint} and needs a {peer}", m["msg"])
        # A tensorcom URL says what it makes: no hint.
        code, _, err = finish(start("stat", f"zsub://127.0.0.1:{free_port()}", "--count", "1", "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertNotIn("hint", err)

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


def free_port():
    return free_tcp_endpoint().rsplit(":", 1)[1]


class Pipelines(unittest.TestCase):
    """tensorcom URLs, and the serve / monitor / stat commands."""

    def test_send_and_recv_take_tensorcom_urls(self):
        port = free_port()
        entry = BY_PATH["i4_i8.ten"]
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "2", "--json", "--timeout", "20")
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--count", "2"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2)
        for line in lines:
            self.assertEqual(json.loads(line)["tensors"], expected_tensors(entry))

    def test_heartbeats_are_an_option_of_every_socket_command(self):
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "1", "--json", "--timeout", "20",
                         "--heartbeat-ms", "100")
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"),
                                    "--heartbeat-ms", "100"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["tensors"], expected_tensors(BY_PATH["i4_i8.ten"]))
        for command in ("send", "recv", "serve", "monitor", "stat"):
            with self.subTest(command=command):
                r = run(command, "--help")
                self.assertIn(b"--heartbeat-ms", r.stdout)
        r = run("recv", f"zpull://127.0.0.1:{port}", "--heartbeat-ms", "-5")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"--heartbeat-ms", r.stderr)

    def test_a_url_scheme_that_does_not_fit_the_command_is_refused(self):
        code, _, err = finish(start("send", "zpull://127.0.0.1:1", "--file", vec("i4_i8.ten")))
        self.assertEqual(code, 64)
        self.assertIn("bad_url", err)
        code, _, err = finish(start("recv", "zfoo://127.0.0.1:1"))
        self.assertEqual(code, 64)
        self.assertIn("unknown scheme", err)
        for args in (["serve", "zpull://127.0.0.1:1", "--synthetic", "f4:3"], ["monitor", "zpush://127.0.0.1:1"],
                     ["stat", "zpush://127.0.0.1:1"]):
            with self.subTest(args=args):
                code, _, err = finish(start(*args, "--timeout", "1"))
                self.assertEqual(code, 64, err)
                self.assertIn("bad_url", err)
                self.assertIn("makes a", err)

    def test_pair_commands_meet_on_a_plain_endpoint(self):
        # A receiving PAIR binds (as recv's always has), a sending one connects.
        for receiver in ("recv", "monitor", "stat"):
            with self.subTest(receiver=receiver):
                endpoint = free_tcp_endpoint()
                r = start(receiver, endpoint, "--socket", "pair", "--count", "2", "--timeout", "20", "--json")
                code, _, err = finish(start("serve", endpoint, "--socket", "pair", "--synthetic", "f4:3",
                                            "--count", "2", "--timeout", "5", "--report", "0"))
                self.assertEqual(code, 0, err)
                code, out, err = finish(r)
                self.assertEqual(code, 0, err)
                self.assertTrue(out, err)

    def test_serve_sends_its_files_in_turn(self):
        port = free_port()
        receiver = start("recv", f"zrpull://127.0.0.1:{port}", "--bind", "--count", "4", "--json", "--timeout", "20")
        code, _, err = finish(start("serve", f"zrpush://127.0.0.1:{port}", "--connect", "-f", vec("f4_matrix.ten"),
                                    "-f", vec("u1_image.ten"), "--count", "4", "--report", "0"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        want = [expected_tensors(BY_PATH[n]) for n in ("f4_matrix.ten", "u1_image.ten")] * 2
        self.assertEqual(got, want)

    def test_serve_synthetic_batches_with_infos_single_part_and_progress(self):
        port = free_port()
        receiver = start("recv", f"tcp://127.0.0.1:{port}", "--count", "3", "--json", "--timeout", "20")
        code, _, err = finish(start("serve", f"tcp://127.0.0.1:{port}", "--synthetic", "f2:4,3,8,8;i4:4",
                                    "--infos", "images,labels", "--single", "--count", "3", "--rate", "10",
                                    "--report", "0.05"))
        self.assertEqual(code, 0, err)
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
        code, _, err = finish(start("convert", vec("f4_matrix.ten"), os.path.join(_tmp.name, "out.xyz")))
        self.assertEqual(code, 64)
        self.assertIn("unknown extension", err)

    def test_monitor_reports_rate_and_layout(self):
        port = free_port()
        monitor = start("monitor", f"zpull://127.0.0.1:{port}", "--count", "12", "--json", "--interval", "0.2",
                        "--timeout", "20")
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:1000;y=f4:10",
                                    "--count", "12", "--rate", "20", "--report", "0"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(monitor)
        self.assertEqual(code, 0, err)
        reports = [json.loads(line) for line in out.splitlines()]
        self.assertGreaterEqual(len(reports), 2)
        self.assertEqual(reports[-1]["messages"], 12)
        self.assertEqual(reports[-1]["malformed"], 0)
        self.assertEqual(reports[-1]["tensors"], [{"info": "x", "dtype": "u1", "shape": [1000]},
                                                  {"info": "y", "dtype": "f4", "shape": [10]}])
        # 20 msg/s of 1040 bytes: any report with messages shows a plausible rate.
        rates = [r["rate"] for r in reports if r["rate"] > 0]
        self.assertTrue(rates and max(rates) < 200, reports)

    def test_monitor_times_out_with_status_2(self):
        code, _, err = finish(start("monitor", f"zpull://127.0.0.1:{free_port()}", "--interval", "0.1",
                                    "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertIn("timeout", err)

    def test_monitor_times_out_on_time_whatever_the_interval(self):
        t0 = time.monotonic()
        code, out, err = finish(start("monitor", f"zpull://127.0.0.1:{free_port()}", "--interval", "10",
                                      "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(len(out.splitlines()), 1, out)

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
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                                    "--count", "3", "--report", "0"))
        self.assertEqual(code, 0, err)
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
        code, _, err = finish(start("serve", f"zpub://127.0.0.1:{port}", "--synthetic", "a=f4:500;b=u1:300",
                                    "--count", "40", "--rate", "40", "--delay", "0.3", "--report", "0"))
        self.assertEqual(code, 0, err)
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
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", *sources, "--count", str(count),
                                    "--report", "0"))
        self.assertEqual(code, 0, err)
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
            code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "--synthetic", spec, "--count", count,
                                        "--report", "0"))
            self.assertEqual(code, 0, err)
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


class Convert(unittest.TestCase):
    """`tenbin convert` between .ten, .npy, .npz and .safetensors."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tenbin-convert-")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def convert(self, *args):
        return run("convert", *args)

    def info(self, path):
        r = run("info", "--json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["tensors"]

    def error(self, r, status=1):
        self.assertEqual(r.returncode, status, r.stderr)
        lines = r.stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, lines)
        m = ERROR_LINE.match(lines[0])
        self.assertIsNotNone(m, lines[0])
        return m

    def test_every_vector_through_every_format_and_back(self):
        tens = [e for e in VALID if e["kind"] == "ten"]
        self.assertGreater(len(tens), 10)
        for entry in tens:
            for ext in (".npz", ".safetensors"):
                with self.subTest(file=entry["path"], ext=ext):
                    mid, back = self.path(entry["path"] + ext), self.path(entry["path"] + ext + ".ten")
                    r = self.convert(vec(entry["path"]), mid)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    n = len(entry["tensors"])
                    self.assertIn(f"{n} tensor".encode(), r.stdout)
                    r = self.convert(mid, back)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    # Unnamed tensors come back named as NumPy names them.
                    want = expected_tensors(entry)
                    for i, t in enumerate(want):
                        t["info"] = t["info"] or f"arr_{i}"
                    self.assertEqual(self.info(back), want)
                    if all(t["info"] for t in entry["tensors"]):
                        with open(back, "rb") as a, open(vec(entry["path"]), "rb") as b:
                            self.assertEqual(a.read(), b.read())

    def test_npy_holds_one_tensor(self):
        out = self.path("m.npy")
        r = self.convert(vec("f4_matrix.ten"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(6), b"\x93NUMPY")
        r = self.convert(out, self.path("m.ten"), "-q")
        self.assertEqual((r.returncode, r.stdout), (0, b""))
        self.assertEqual(self.info(self.path("m.ten")), expected_tensors(BY_PATH["f4_matrix.ten"]))
        m = self.error(self.convert(vec("all_dtypes.ten"), self.path("many.npy")))
        self.assertEqual((m["where"], m["cls"]), (self.path("many.npy"), "bad_argument"))
        self.assertFalse(os.path.exists(self.path("many.npy")))

    def test_numpy_reads_what_convert_writes(self):
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - /usr/bin/python3 has it
            self.skipTest("numpy is not installed")
        out = self.path("a.npz")
        self.assertEqual(self.convert(vec("all_dtypes.ten"), out).returncode, 0)
        with np.load(out) as z:
            self.assertEqual(z.files, [t["info"] for t in BY_PATH["all_dtypes.ten"]["tensors"]])
            for t in BY_PATH["all_dtypes.ten"]["tensors"]:
                self.assertEqual(hashlib.sha256(z[t["info"]].tobytes()).hexdigest(), t["sha256"])
        np.savez(self.path("np.npz"), weights=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.int64(7))
        r = self.convert(self.path("np.npz"), self.path("np.safetensors"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("np.safetensors"), "rb") as f:
            data = f.read()
        (n,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["weights"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(header["b"], {"dtype": "I64", "shape": [], "data_offsets": [24, 32]})
        # A name a .ten info cannot hold is refused, not truncated.
        np.savez(self.path("long.npz"), a_long_tensor_name=np.zeros(2))
        m = self.error(self.convert(self.path("long.npz"), self.path("long.ten")))
        self.assertEqual(m["cls"], "bad_argument")
        self.assertIn("'a_long_tensor_name'", m["msg"])
        self.assertFalse(os.path.exists(self.path("long.ten")))
        np.savez_compressed(self.path("z.npz"), x=np.zeros(10))
        m = self.error(self.convert(self.path("z.npz"), self.path("z.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("z.npz"), "unsupported"))
        self.assertIn("compressed", m["msg"])

    def safetensors_header(self, path):
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack_from("<Q", data)
        return json.loads(data[8:8 + n])

    def write_safetensors(self, name, header, data=b""):
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(self.path(name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        return self.path(name)

    def test_large_headers_take_linear_time(self):
        # Legal sizes that took 20 to 35 s each when every JSON key insert
        # searched the keys before it; the bound is generous, not a timing.
        meta = self.write_safetensors("meta.safetensors", {
            "__metadata__": {f"k{i}": str(i) for i in range(80000)},
            "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\7")
        many = self.write_safetensors("many.safetensors", {
            f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(65536)}, bytes(65536))
        r = run("info", "--json", meta, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(len(got["metadata"]), 80000)
        self.assertEqual(got["metadata"]["k79999"], "79999")
        r = run("info", "--json", many, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(json.loads(r.stdout)["tensors"]), 65536)
        for src in (meta, many):
            out = self.path("out.safetensors")
            r = run("convert", "--force", src, out, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.safetensors_header(out), self.safetensors_header(src))

    def test_nul_in_a_name_is_refused_by_readers_as_by_writers(self):
        st = self.write_safetensors("nul.safetensors", {"a\u0000b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
                                    b"\1")
        npz = self.path("nul.npz")
        member = b"{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }"
        member = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + member + b" " * (117 - len(member)) + b"\n\1"
        with zipfile.ZipFile(npz, "w") as z:
            z.writestr("ok.npy", member)
            z.writestr("aXb.npy", member)  # zipfile cuts a name at NUL: patched in below
        with open(npz, "rb") as f:
            data = f.read()
        with open(npz, "wb") as f:
            f.write(data.replace(b"aXb.npy", b"a\0b.npy"))
        for path in (st, npz):
            with self.subTest(file=os.path.basename(path)):
                for args in (["info", path], ["convert", path, self.path("o.ten")]):
                    m = self.error(run(*args))
                    self.assertEqual(m["cls"], "bad_header")
                    self.assertIn("NUL", m["msg"])

    def test_file_commands_take_max_bytes(self):
        # buf_batch.bin carries 112 data bytes; the same layout as a .ten file.
        src = self.path("batch.ten")
        with open(src, "wb") as f:
            f.write(open(vec("buf_batch.bin"), "rb").read())
        r = run("info", "--max-bytes", "100b", src)
        self.assertEqual(self.error(r)["cls"], "limit_exceeded")
        r = run("info", "--json", "--max-bytes", "112", src)
        self.assertEqual(r.returncode, 0, r.stderr)
        st = self.path("b.safetensors")
        self.assertEqual(run("convert", src, st).returncode, 0)
        for args in (["info", "--max-bytes", "100", st], ["convert", "--max-bytes", "100", st, self.path("c.ten")],
                     ["convert", "--max-bytes", "100", "-f", src, self.path("d.npz")]):
            with self.subTest(args=args):
                m = self.error(run(*args))
                self.assertEqual(m["cls"], "limit_exceeded")
        self.assertFalse(os.path.exists(self.path("c.ten")))
        self.assertEqual(run("convert", "--max-bytes", "1k", st, self.path("c.ten")).returncode, 0)
        for bad in ("-1", "lots", "0"):
            with self.subTest(max_bytes=bad):
                self.assertEqual(run("info", "--max-bytes", bad, src).returncode, 64)
                self.assertEqual(run("convert", "--max-bytes", bad, src, self.path("e.ten")).returncode, 64)

    def test_safetensors_metadata_is_kept_and_set(self):
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        r = self.convert(vec("all_dtypes.ten"), a, "--metadata", "format=pt", "-m", "note=x=y")
        self.assertEqual(r.returncode, 0, r.stderr)
        header = self.safetensors_header(a)
        # First in the header, as the safetensors library writes it.
        self.assertEqual(list(header)[0], "__metadata__")
        self.assertEqual(header["__metadata__"], {"format": "pt", "note": "x=y"})
        # Carried from a .safetensors input; a key given again is replaced.
        r = self.convert(a, b, "-m", "note=z", "-m", "extra=")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(list(self.safetensors_header(b)["__metadata__"].items()),
                         [("format", "pt"), ("note", "z"), ("extra", "")])
        # Not through a .ten file, which has no place for it.
        self.assertEqual(self.convert(b, self.path("b.ten")).returncode, 0)
        self.assertEqual(self.convert(self.path("b.ten"), self.path("c.safetensors")).returncode, 0)
        self.assertNotIn("__metadata__", self.safetensors_header(self.path("c.safetensors")))
        m = self.error(self.convert(a, self.path("x.npz"), "-m", "format=pt"), status=64)
        self.assertEqual((m["where"], m["cls"]), (self.path("x.npz"), "bad_argument"))
        self.assertFalse(os.path.exists(self.path("x.npz")))
        r = self.convert(vec("all_dtypes.ten"), self.path("y.safetensors"), "-m", "format")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"KEY=VALUE", r.stderr)
        self.assertFalse(os.path.exists(self.path("y.safetensors")))

    def test_info_lists_named_formats_with_names_and_metadata(self):
        st = self.path("m.safetensors")
        self.assertEqual(self.convert(vec("all_dtypes.ten"), st, "-m", "format=pt", "-m", "note=two\nlines").returncode, 0)
        r = run("info", "--json", st)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["metadata"], {"format": "pt", "note": "two\nlines"})
        want = expected_tensors(BY_PATH["all_dtypes.ten"])
        self.assertEqual([t.pop("name") for t in j["tensors"]], [t["info"] for t in want])
        self.assertEqual(j["tensors"], want)
        r = run("info", st)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout.decode()
        self.assertIn("  metadata format: pt\n", text)
        self.assertIn("  metadata note: two lines\n", text)  # kept on one line
        self.assertRegex(text, r"\n  #  name +dtype")
        # A name too long for an info is listed as it is.
        self.assertEqual(self.convert(vec("f4_matrix.ten"), self.path("one.npy")).returncode, 0)
        np_path = self.path("long.npz")
        with open(self.path("one.npy"), "rb") as f:
            npy = f.read()
        with zipfile.ZipFile(np_path, "w", zipfile.ZIP_STORED) as z:
            z.writestr("a_rather_long_name.npy", npy)
        j = json.loads(run("info", "--json", np_path).stdout)
        self.assertEqual((j["tensors"][0]["name"], j["tensors"][0]["info"]), ("a_rather_long_name", ""))
        self.assertNotIn("metadata", j)
        self.assertIn(b"a_rather_long_name", run("info", np_path).stdout)
        with open(self.path("bad.safetensors"), "wb") as f:
            f.write(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
        m = self.error(run("info", self.path("bad.safetensors")))
        self.assertEqual((m["where"], m["cls"]), (self.path("bad.safetensors"), "bad_header"))

    def test_errors_name_the_file_and_class(self):
        m = self.error(self.convert(self.path("missing.npz"), self.path("x.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("missing.npz"), "io_error"))
        bad = [e for e in MALFORMED if e["kind"] == "ten"]
        self.assertTrue(bad)
        for entry in bad:
            with self.subTest(file=entry["path"]):
                m = self.error(self.convert(vec(entry["path"]), self.path("x.npz")))
                self.assertEqual(m["where"], vec(entry["path"]))
                self.assertIn(m["cls"], acceptable(entry))
        m = self.error(self.convert(vec("all_dtypes.ten"), self.path("x.txt")), status=64)
        self.assertEqual(m["cls"], "bad_extension")
        with open(self.path("bad.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + b"{}")
        m = self.error(self.convert(self.path("bad.safetensors"), self.path("x.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("bad.safetensors"), "length_beyond_end"))

    def test_help_says_that_out_is_kept_without_force(self):
        r = run("convert", "--help")
        self.assertEqual(r.returncode, 0)
        text = r.stdout.decode()
        (out_line,) = [line for line in text.splitlines() if line.startswith("  OUT ")]
        self.assertIn("replaced only with --force", out_line)
        self.assertIn("An existing OUT is never replaced without --force", " ".join(text.split()))

    def test_output_is_replaced_only_with_force(self):
        out = self.path("a.safetensors")
        with open(out, "wb") as f:
            f.write(b"keep me")
        m = self.error(self.convert(vec("all_dtypes.ten"), out))
        self.assertEqual((m["where"], m["cls"]), (out, "bad_argument"))
        self.assertIn("--force", m["msg"])
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"keep me")
        r = self.convert(vec("all_dtypes.ten"), out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.convert(out, self.path("b.ten")).returncode, 0)
        self.assertEqual(self.info(self.path("b.ten")), expected_tensors(BY_PATH["all_dtypes.ten"]))
        # Never over the input itself, which may be mapped.
        m = self.error(self.convert(out, out, "--force"))
        self.assertEqual(m["cls"], "bad_argument")
        self.assertEqual(self.convert(out, self.path("c.ten")).returncode, 0)


class Newcomer(unittest.TestCase):
    """What a tensorcom user meets first: URLs, --tensorcom, defaults, Ctrl-C,
    errors, record and replay, and checkpoints with long names (issue 27)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tenbin-newcomer-")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_urls_as_tensorcom_spells_them(self):
        # The #topic of zpub and zsub: a frame in front, filtered on; scheme case ignored.
        port = free_port()
        receiver = start("recv", f"ZSUB://127.0.0.1:{port}#train", "--count", "2", "--json", "--timeout", "20")
        code, _, err = finish(start("send", f"zpub://127.0.0.1:{port}#train", "--file", vec("i4_i8.ten"),
                                    "--count", "2", "--delay", "1"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        for line in out.splitlines():
            self.assertEqual(json.loads(line)["tensors"], expected_tensors(BY_PATH["i4_i8.ten"]))
        # A subscriber of another topic gets nothing.
        port = free_port()
        other = start("recv", f"zsub://127.0.0.1:{port}#eval", "--count", "1", "--timeout", "3")
        finish(start("send", f"zpub://127.0.0.1:{port}#train", "--file", vec("i4_i8.ten"), "--delay", "1"))
        self.assertEqual(finish(other)[0], 2)
        # What tensorcom would drop silently is refused, saying so.
        for url, words in ((f"zpush://127.0.0.1:{port}/feed", "tensorcom would ignore it and use tcp://127.0.0.1"),
                           (f"zpush://127.0.0.1:{port}?hwm=5", "tensorcom would drop it silently"),
                           (f"zpush://127.0.0.1:{port}#t", "a #topic is for pub and sub sockets")):
            with self.subTest(url=url):
                r = run("send", url, "--file", vec("i4_i8.ten"))
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(words.encode(), r.stderr)

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
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("u4_patched.ten")))
        self.assertEqual(code, 0, err)
        self.assertEqual(finish(receiver)[0], 0)

    def test_monitor_and_stat_default_to_tensormons_url(self):
        for command in ("monitor", "stat"):
            with self.subTest(command=command):
                self.assertIn(b"zsub://127.0.0.1:7880", run(command, "--help").stdout)
                # No URL is no usage error: it waits on the default, then times out.
                r = run(command, "--count", "1", "--timeout", "0.3")
                self.assertEqual(r.returncode, 2, r.stderr)

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

    def test_stat_prints_what_it_has_when_interrupted(self):
        port = free_port()
        stat = start("stat", f"zpull://127.0.0.1:{port}", "--count", "1000", "--json", "--timeout", "0")
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten"),
                                    "--count", "3", "--report", "0"))
        self.assertEqual(code, 0, err)
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

    def test_an_address_in_use_is_named(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            for args in (["serve", f"zrpush://127.0.0.1:{port}", "--synthetic", "f4:3"],
                         ["monitor", f"zrsub://127.0.0.1:{port}"], ["stat", f"zrsub://127.0.0.1:{port}"],
                         ["recv", f"zpull://127.0.0.1:{port}"]):
                with self.subTest(command=args[0]):
                    r = run(*args, "--timeout", "1")
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertIn(f"cannot bind to tcp://127.0.0.1:{port}: Address already in use".encode(),
                                  r.stderr)
                    self.assertIn(b"io_error", r.stderr)

    def test_a_mistyped_command_or_option_gets_a_suggestion(self):
        r = run("sned", "x")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"did you mean 'send'?", r.stderr)
        r = run("recv", "zpull://127.0.0.1:1", "--jsn")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"--jsn: did you mean --json?", r.stderr)
        r = run("stat", "--cuont", "3")
        self.assertIn(b"did you mean --count?", r.stderr)
        self.assertNotIn(b"did you mean", run("nonsense").stderr)

    def test_record_a_stream_as_a_shard_and_replay_it(self):
        import tarfile
        names = ["f4_matrix.ten", "u1_image.ten", "i4_i8.ten"]
        shard = self.path("recorded.tar")
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "3", "--save", shard, "--timeout", "20")
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", *sum((["-f", vec(n)] for n in names), []),
                                    "--count", "3", "--report", "0"))
        self.assertEqual(code, 0, err)
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
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", shard, "--count", "2"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        self.assertEqual(got, [expected_tensors(BY_PATH[n]) for n in names] * 2)

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
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "-f", shard, "--count", "2",
                                    "--report", "0"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["tensors"] for line in out.splitlines()]
        self.assertEqual(got, [expected_tensors(BY_PATH[n]) for n in names])

    def test_hostile_shards_are_refused(self):
        good = self.path("good.tar")
        import tarfile
        with tarfile.open(good, "w", format=tarfile.USTAR_FORMAT) as tar:
            tar.add(vec("f4_matrix.ten"), arcname="000000.ten")
        data = bytearray(open(good, "rb").read())
        cases = {
            "short.tar": (bytes(data[:100]), "truncated"),
            "notar.tar": (b"x" * 1024, "bad_header"),
            "checksum.tar": (data[:0] + bytes([data[0] ^ 1]) + data[1:], "bad_header"),
            "cut.tar": (bytes(data[:512 + 10]), "truncated"),
        }
        big = bytearray(data)
        big[124:136] = b"77777777777\0"  # a size far past the end (checksum fixed below)
        big[148:156] = b"        "
        big[148:156] = b"%06o\0 " % sum(big[:512])
        cases["size.tar"] = (bytes(big), "truncated")
        for name, (content, cls) in cases.items():
            with self.subTest(case=name):
                with open(self.path(name), "wb") as f:
                    f.write(content)
                r = run("info", self.path(name))
                self.assertEqual(r.returncode, 1, r.stderr)
                m = ERROR_LINE.match(r.stderr.decode().splitlines()[0])
                self.assertIsNotNone(m, r.stderr)
                self.assertEqual(m["cls"], cls, r.stderr)
        self.assertEqual(run("recv", "zpull://127.0.0.1:1", "--save", self.path("x.ten")).returncode, 64)

    @staticmethod
    def read_png(path):
        """(width, height, rows of RGB bytes) of an 8-bit RGB PNG, decoded here with zlib."""
        import zlib
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
        pos, idat, ihdr = 8, b"", None
        while pos < len(data):
            (n,) = struct.unpack(">I", data[pos:pos + 4])
            kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
            if kind == b"IHDR":
                ihdr = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat += body
            pos += 12 + n
        width, height, depth, color = ihdr[:4]
        assert (depth, color) == (8, 2), ihdr
        raw = zlib.decompress(idat)
        stride = width * 3
        assert len(raw) == height * (stride + 1)
        rows, prev = [], bytearray(stride)
        for y in range(height):
            f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            for i in range(stride):
                a = line[i - 3] if i >= 3 else 0
                b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
                if f == 1:
                    line[i] = (line[i] + a) & 255
                elif f == 2:
                    line[i] = (line[i] + b) & 255
                elif f == 3:
                    line[i] = (line[i] + (a + b) // 2) & 255
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            rows.append(bytes(line))
            prev = line
        return width, height, rows

    def test_show_draws_image_like_tensors_as_a_png(self):
        png = self.path("image.png")
        r = run("show", vec("u1_image.ten"), "--out", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"2 images, 204 x 90 pixels", r.stdout)
        # Two 8x8 RGB images (NHWC), enlarged 8 times, side by side, captions below.
        width, height, rows = self.read_png(png)
        self.assertEqual((width, height), (204, 90))
        pixels = chunk_payloads(open(vec("u1_image.ten"), "rb").read())[1]
        for k, x0 in ((0, 4), (1, 104)):
            for y, x in ((0, 0), (7, 7), (3, 5)):
                with self.subTest(image=k, y=y, x=x):
                    at = ((k * 8 + y) * 8 + x) * 3
                    px, py = x0 + x * 8 + 3, 4 + y * 8 + 3
                    self.assertEqual(rows[py][px * 3:px * 3 + 3], pixels[at:at + 3])
        self.assertEqual(rows[0][:3], b"\xff\xff\xff")  # the margin
        self.assertIn(0, rows[4 + 64 + 4])  # caption text under the first image
        # A float matrix: one gray image stretched from its minimum (black) to its maximum (white).
        r = run("show", vec("f4_matrix.ten"), "--out", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        width, height, rows = self.read_png(png)
        self.assertEqual((width, height), (104, 62))  # 3x5 enlarged 12 times: 60x36
        self.assertEqual(rows[4][4 * 3:4 * 3 + 3], b"\x00\x00\x00")
        self.assertEqual(rows[4 + 35][(4 + 59) * 3:(4 + 59) * 3 + 3], b"\xff\xff\xff")
        self.assertEqual(rows[4 + 12 + 5][(4 + 24 + 5) * 3:(4 + 24 + 5) * 3 + 3], b"\x80\x80\x80")  # -0.125: half
        # Nothing image-like is an error, not an empty picture.
        r = run("show", vec("i4_i8.ten"), "--out", png)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"no image-like tensor", r.stderr)
        # Received messages: a batch of NCHW images, two to a row.
        port = free_port()
        shower = start("show", f"zpull://127.0.0.1:{port}", "--out", png, "--columns", "2", "--timeout", "20")
        code, _, err = finish(start("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:3,3,16,16",
                                    "--count", "1", "--report", "0"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(shower)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.read_png(png)[:2], (204, 176))

    def write_safetensors(self, path, names):
        header, offset, blob = {}, 0, b""
        for i, n in enumerate(names):
            data = struct.pack("<3f", i, i + 0.5, i + 1)
            header[n] = {"dtype": "F32", "shape": [3], "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            blob += data
        text = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + blob)

    def test_convert_maps_long_checkpoint_names_and_brings_them_back(self):
        names = ["model.embed.weight", "model.layers.0.attn.q_proj.weight", "bias", "t0"]
        st = self.path("model.safetensors")
        self.write_safetensors(st, names)
        ten = self.path("model.ten")
        r = run("convert", st, ten)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"does not fit a .ten info", r.stderr)
        self.assertIn(b"--infos short", r.stderr)
        r = run("convert", st, ten, "--infos", "short")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"t0_1 = model.embed.weight", r.stdout)  # t0 is taken by a name of its own
        table = json.load(open(ten + ".names.json"))
        self.assertEqual(list(table.values()), names)
        infos = [t["info"] for t in json.loads(run("info", "--json", ten).stdout)["tensors"]]
        self.assertEqual(infos, list(table))
        self.assertEqual(len(set(infos)), 4)
        self.assertEqual(infos[2:], ["bias", "t0"])
        # Back out: the table beside the .ten file gives the names back.
        back = self.path("back.safetensors")
        r = run("convert", ten, back)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(run("info", "--json", back).stdout)["tensors"]
        self.assertEqual([t["name"] for t in got], names)
        self.assertEqual([t["sha256"] for t in got],
                         [t["sha256"] for t in json.loads(run("info", "--json", st).stdout)["tensors"]])
        # --infos FILE: a table of the user's own, both ways.
        mine = self.path("mine.json")
        with open(mine, "w") as f:
            json.dump({"emb": names[0], "q": names[1]}, f)
        ten2 = self.path("mine.ten")
        r = run("convert", st, ten2, "--infos", mine)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([t["info"] for t in json.loads(run("info", "--json", ten2).stdout)["tensors"]],
                         ["emb", "q", "bias", "t0"])
        npz = self.path("mine.npz")
        self.assertEqual(run("convert", ten2, npz, "--infos", mine).returncode, 0)
        self.assertEqual([t["name"] for t in json.loads(run("info", "--json", npz).stdout)["tensors"]], names)
        with open(mine, "w") as f:
            f.write("[1, 2]")
        r = run("convert", st, self.path("x.ten"), "--infos", mine)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"expected {", r.stderr)
        # The help's own example works, and is the one shown.
        self.assertIn(b"tenbin convert model.safetensors model.ten --infos short", run("convert", "--help").stdout)


class Curve(unittest.TestCase):
    """keygen and the --curve-* options: CURVE between two processes."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        os.mkdir(self.path("allowed"))
        for name in ("server", "client", "stranger"):
            r = run("keygen", name, "--dir", self.dir)
            self.assertEqual(r.returncode, 0, r.stderr)
        os.rename(self.path("client.key"), self.path("allowed", "client.key"))

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def server(self):
        return ["--curve-cert", self.path("server.key_secret"), "--curve-allow", self.path("allowed")]

    def client(self, name="client"):
        return ["--curve-cert", self.path(name + ".key_secret"), "--curve-server", self.path("server.key")]

    def test_keygen_writes_a_pair_pyzmq_reads_and_keeps_existing_ones(self):
        self.assertEqual(os.stat(self.path("server.key_secret")).st_mode & 0o777, 0o600)
        if zmq is not None:
            from zmq import auth
            public, secret = auth.load_certificate(self.path("server.key_secret"))
            self.assertEqual(zmq.curve_public(secret), public)
            self.assertEqual(auth.load_certificate(self.path("server.key"))[0], public)
            self.assertIsNone(auth.load_certificate(self.path("server.key"))[1])
        r = run("keygen", "server", "--dir", self.dir)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"exists", r.stderr)
        r = run("keygen", "x", "--dir", self.path("missing"))
        self.assertEqual(r.returncode, 64)

    def test_send_and_recv_with_keys_deliver_every_message(self):
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "3", "--json", "--timeout", "20",
                         *self.server())
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"), "--count", "3",
                                    *self.client()))
        self.assertEqual(code, 0, err)
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
        auth.create_certificates(self.dir, "py")
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


class Result(unittest.TextTestResult):
    """Counts subtests as tests, so the summary says how many checks ran."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0
        self.failed = 0
        self._current_failed = {}

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is None:
            self.passed += 1
        else:
            self.failed += 1
            self._current_failed[test.id()] = True

    def addSuccess(self, test):
        super().addSuccess(test)
        if not self._current_failed.get(test.id()):
            self.passed += 1

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.failed += 1

    def addError(self, test, err):
        super().addError(test, err)
        self.failed += 1


def main():
    global TOOL
    if len(sys.argv) < 2:
        print("usage: test_cli.py PATH-TO-TENBIN", file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv.pop(1))
    if not os.access(TOOL, os.X_OK):
        print(f"test_cli.py: {TOOL} is not an executable", file=sys.stderr)
        return 2
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=Result, stream=sys.stdout)
    result = runner.run(suite)
    print(f"{result.passed} passed, {result.failed} failed")
    return 0 if result.wasSuccessful() and result.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
