"""What the end-to-end tests of the `tenbin` tool share.

Each test_*.py beside this file tests one part of the tool as a user runs
it (a subcommand, or the options the socket commands share) and is run as

    test_X.py PATH-TO-TENBIN   (TENBIN_VECTORS names the vector folder)

printing `N passed, N failed` and exiting non-zero on any failure. meson
runs each file as a test of its own (suite `cli`), so they run in parallel.
"""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

TOOL = None  # set from argv by main()
VECTORS = os.environ.get("TENBIN_VECTORS", os.path.join(os.path.dirname(__file__), "..", "vectors"))

try:
    import zmq  # for peers that send what the tool cannot (malformed messages), and for checking wire bytes
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


def start(*args, **popen_args):
    """The tool running with `args`, its output piped unless `popen_args` send it elsewhere."""
    return subprocess.Popen([TOOL, *args], **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen_args})


def finish(proc, timeout=60):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"process did not end within {timeout} s: {err.decode()!r}")
    return proc.returncode, (out or b"").decode(), (err or b"").decode()


def free_tcp_endpoint():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def free_port():
    return free_tcp_endpoint().rsplit(":", 1)[1]


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


class CliTest(unittest.TestCase):
    """A test with a folder of its own (`path`), pyzmq sockets closed at its
    end (`socket`), and readers of the tool's answers (`error`, `info`)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tenbin-cli-")
        self.addCleanup(self.dir.cleanup)
        self._ctx = None

    def path(self, *names):
        return os.path.join(self.dir.name, *names)

    def socket(self, kind, linger=0):
        """A pyzmq socket closed (with `linger`) when the test ends, pass or fail."""
        if zmq is None:
            self.skipTest("pyzmq is not available")
        if self._ctx is None:
            self._ctx = zmq.Context()
            self.addCleanup(self._ctx.term)  # after the sockets' cleanups, which run first
        s = self._ctx.socket(kind)
        s.linger = linger
        self.addCleanup(s.close)
        return s

    def succeeds(self, *args, timeout=60):
        """Runs the tool with `args` to its end, which must be a success: its (stdout, stderr)."""
        code, out, err = finish(start(*args), timeout=timeout)
        self.assertEqual(code, 0, err)
        return out, err

    def error(self, r, status=1):
        """The one error line of a finished run that failed with `status`."""
        self.assertEqual(r.returncode, status, r.stderr)
        lines = r.stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, lines)
        m = ERROR_LINE.match(lines[0])
        self.assertIsNotNone(m, lines[0])
        return m

    def info(self, path):
        """`tenbin info --json PATH`'s tensors."""
        r = run("info", "--json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["tensors"]


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
    """Runs the tests of the calling script (`__main__`) against argv[1]."""
    global TOOL
    script = os.path.basename(sys.argv[0])
    if len(sys.argv) < 2:
        print(f"usage: {script} PATH-TO-TENBIN", file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv.pop(1))
    if not os.access(TOOL, os.X_OK):
        print(f"{script}: {TOOL} is not an executable", file=sys.stderr)
        return 2
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules["__main__"])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=Result, stream=sys.stdout)
    result = runner.run(suite)
    print(f"{result.passed} passed, {result.failed} failed")
    return 0 if result.wasSuccessful() and result.failed == 0 else 1
