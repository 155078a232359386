"""Shared fixtures: the format's vectors, the C++ tool, free endpoints."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# The tensorcom-style peer (its own NumPy codec) that the C++ interop tests
# also run: `import tensorcom_peer`.
sys.path.insert(0, str(ROOT / "tests" / "peers"))


def vectors_dir():
    # As the C++ tests: TENBIN_VECTORS (set by meson test), else the repo's.
    return pathlib.Path(os.environ.get("TENBIN_VECTORS", ROOT / "tests" / "vectors"))


@pytest.fixture(scope="session")
def vectors():
    d = vectors_dir()
    return d, json.loads((d / "MANIFEST.json").read_text())


@pytest.fixture(scope="session")
def tool():
    """The tenbin command-line tool of this build (TENBIN_TOOL from meson test)."""
    path = os.environ.get("TENBIN_TOOL")
    if not path:
        for build in ("build", "builddir"):
            p = ROOT / build / "tools" / "tenbin"
            if p.is_file():
                path = str(p)
                break
    if not path or not os.path.exists(path):
        pytest.skip("the tenbin tool is not built")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port():
    return free_port()


def run_python(code, **kw):
    """Runs `code` in a fresh /usr/bin/python3 with this PYTHONPATH."""
    return subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ), **kw)


def stop(process):
    """SIGSTOPs `process` and returns once it is stopped: the signal takes a
    moment to reach every thread, which may go on meanwhile."""
    process.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while open(f"/proc/{process.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.01)
