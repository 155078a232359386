"""The package's shape: a conventional layout (imports and __all__ in
__init__.py, one module per concept, no circular import), exceptions written
out, keyword arguments in the signatures and the stubs, no side effect at
import, a version, reprs."""
import ast
import builtins
import inspect
import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tenbin
from tenbin import _tenbin
from conftest import ROOT, free_port

PACKAGE = pathlib.Path(tenbin.__file__).resolve().parent
SOURCE = ROOT / "python" / "tenbin"


def module_tree(name):
    return ast.parse((SOURCE / name).read_text())


def test_init_holds_imports_and_all_only():
    for node in module_tree("__init__.py").body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        all_list = isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"]
        assert docstring or all_list or isinstance(node, (ast.Import, ast.ImportFrom)), ast.dump(node)[:80]


def test_no_circular_import():
    imports = {}
    for path in SOURCE.glob("*.py"):
        mods = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                mods |= {node.module} if node.module else {a.name for a in node.names}
        imports[path.stem] = {m for m in mods if m != "_tenbin"}
    def visit(m, seen):
        assert m not in seen, f"circular import: {' -> '.join(seen + [m])}"
        for n in imports.get(m, ()):
            visit(n, seen + [m])
    for m in imports:
        if m != "__init__":
            visit(m, [])


def test_exceptions_are_written_out_and_exported():
    defined = {n.name for n in module_tree("_errors.py").body if isinstance(n, ast.ClassDef)}
    for errc, cls in tenbin.ERRC.items():
        assert cls.__name__ in defined and cls.__name__ in tenbin.__all__ and cls.errc == errc
        assert issubclass(cls, tenbin.Error) and cls.__module__ == "tenbin"
    assert {"Error", "Malformed", "Closed", "Notice"} <= defined
    assert tenbin.ERRC["closed"] is tenbin.Closed
    shadowing = [n for n in tenbin.__all__ if hasattr(builtins, n)]
    assert shadowing == [], shadowing
    assert "IOError" not in tenbin.__all__
    with pytest.warns(DeprecationWarning, match="IOFailure"):
        assert tenbin.IOError is tenbin.IOFailure
    assert issubclass(tenbin.IOFailure, OSError) and issubclass(tenbin.BadArgument, (ValueError, TypeError))


def keywords(f):
    return {n for n, p in inspect.signature(f).parameters.items() if p.kind is not p.VAR_KEYWORD} - {"self"}


def stub_keywords(cls):
    for node in ast.walk(ast.parse((SOURCE / "__init__.pyi").read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            args = init.args
            assert args.kwarg is None, f"{cls}.__init__ takes **{args.kwarg.arg} in the stubs"
            return {a.arg for a in args.args + args.kwonlyargs} - {"self"}
    raise AssertionError(f"no {cls} in the stubs")


def test_every_connection_option_is_a_keyword_in_signatures_and_stubs():
    options = {n for n in dir(_tenbin.ConnectionOptions) if not n.startswith("_")} | {"on_notice"}
    assert {"tensorcom_compatible", "shm_pool_bytes", "shm_lease", "heartbeat", "timeout"} <= options
    assert options <= keywords(tenbin.Connection)
    receiving = options - {"send_timeout", "send_hwm", "linger", "pub_nodrop", "immediate", "tensorcom_compatible",
                           "shm_pool_bytes", "shm_lease", "shm_max_peers", "shm_max_held_bytes", "shm_laggard_after",
                           "multipart", "infos", "allow64", "producer", "stream", "wait_for", "wait_for_names",
                           "replay_window"}
    assert receiving <= keywords(tenbin.Loader)
    for cls in (tenbin.Connection, tenbin.Loader, tenbin.TensorPool):
        assert keywords(cls) == stub_keywords(cls.__name__), cls
    # Times in seconds, and the library's defaults shown.
    params = inspect.signature(tenbin.Connection).parameters
    assert params["linger"].default == 10 and params["shm_lease"].default == 60 and params["send_hwm"].default == 16


def test_a_mistyped_keyword_gets_did_you_mean():
    with pytest.raises(tenbin.BadArgument, match="did you mean 'timeout'"):
        tenbin.Connection(f"zpull://127.0.0.1:{free_port()}", timout=1)
    with pytest.raises(TypeError, match="did you mean 'queue_messages'"):
        tenbin.Loader(f"zpull://127.0.0.1:{free_port()}", queue_message=4)
    with pytest.raises(tenbin.BadArgument, match="only receives"):
        tenbin.Loader(f"zpull://127.0.0.1:{free_port()}", send_hwm=4)


def test_every_option_reaches_the_library():
    c = tenbin.Connection(f"zpub://127.0.0.1:{free_port()}", timeout=1.5, send_timeout=2, linger=0.25, send_hwm=3,
                          recv_hwm=5, tensorcom_compatible=True, pub_nodrop=True, immediate=False, heartbeat=0.5,
                          shm_pool_bytes=1 << 20, shm_lease=7, max_rank=4, expect_infos=["a"])
    o = c._options
    assert (o.timeout, o.send_timeout, o.linger, o.heartbeat, o.shm_lease) == (1.5, 2, 0.25, 0.5, 7)
    assert (o.send_hwm, o.recv_hwm, o.shm_pool_bytes, o.max_rank, o.expect_infos) == (3, 5, 1 << 20, 4, ["a"])
    assert o.tensorcom_compatible and o.pub_nodrop and not o.immediate
    # tensorcom_compatible is the library's: a u4 tensor is refused.
    with pytest.raises(tenbin.BadArgument, match="tensorcom"):
        c.send([np.zeros(3, "u4")])
    c.close()
    o = tenbin.Connection(producer="feed", stream=True, epoch_timeout=2.5, expect_producers=3, rank=1, world_size=4,
                          drop_last=False, acked=True, credit=5, ack="take", ack_heartbeat=0.25, name="me",
                          wait_for=2, wait_for_names=["a", "b"], replay_window=8)._options
    assert (o.producer, o.stream, o.epoch_timeout, o.expect_producers, o.rank, o.world_size, o.drop_last) == (
        "feed", True, 2.5, 3, 1, 4, False)
    assert (o.acked, o.credit, o.ack, o.ack_heartbeat, o.name) == (True, 5, "take", 0.25, "me")
    assert (o.wait_for, o.wait_for_names, o.replay_window) == (2, ["a", "b"], 8)
    d = tenbin.Connection()._options
    assert (d.producer, d.name, d.ack, d.epoch_timeout, d.ack_heartbeat, d.credit) == (None, None, "release", 30, 1, 16)


def test_the_extension_is_split_by_area():
    src = ROOT / "python" / "src"
    binds = {}
    for path in src.glob("bind_*.cpp"):
        binds[path.stem] = re.findall(r"^void (bind_\w+)\(py::module_& m\)", path.read_text(), re.M)
    assert binds and all(v == [k] for k, v in binds.items()), binds
    assert all(len(p.read_text().splitlines()) <= 500 for p in src.glob("*.cpp"))
    assert not (SOURCE / "_tenbin.cpp").exists()


MALLOC_CODE = """
import ctypes, numpy as np
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
def mapped():  # whether a 64 MiB block comes from a mapping of its own (glibc's default)
    before = libc.mallinfo2().hblks
    a = np.empty(64 << 20, "u1")
    return libc.mallinfo2().hblks > before
import tenbin
print(mapped())
tenbin.reuse_large_allocations()
print(mapped())
"""


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""), reason="ASan's allocator is not glibc's malloc")
def test_import_changes_nothing_outside_the_package():
    out = subprocess.run([sys.executable, "-c", MALLOC_CODE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]  # glibc's own until asked


def test_version_is_the_projects():
    version = re.search(r"version: '([^']+)'", (ROOT / "meson.build").read_text()).group(1)
    assert tenbin.__version__ == version


def test_reprs_say_what_an_object_is_connected_to():
    port = free_port()
    with tenbin.Loader(f"zpull://127.0.0.1:{port}") as ld:
        assert repr(ld) == f"<tenbin.Loader pull bound to tcp://127.0.0.1:{port}, 0 batches queued>"
        tx = tenbin.Connection(f"zpush://127.0.0.1:{port}")
        assert repr(tx) == f"<tenbin.Connection push connected to tcp://127.0.0.1:{port}>"
        tx.close()
        assert repr(tx).endswith("(closed)>")
    assert repr(tenbin.Connection()) == "<tenbin.Connection, not connected>"
    assert "0 of 0 blocks in use" in repr(tenbin.TensorPool())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repr(tenbin.Connection).startswith("<class 'tenbin.Connection'")


def test_notices_are_warnings():
    port = free_port()
    pub = tenbin.Connection(f"zpub://127.0.0.1:{port}#training")
    sub = tenbin.Connection(f"zsub://127.0.0.1:{port}#train", timeout=0.05)
    got = []
    collected = tenbin.Connection(f"zsub://127.0.0.1:{port}#train", timeout=0.05, on_notice=got.append)
    with pytest.warns(tenbin.Notice, match="passes over messages of topic 'training'"):
        for _ in range(100):  # subscriptions take a moment to reach the publisher
            pub.send([np.zeros(2, "f4")])
            try:
                sub.recv()
            except tenbin.Timeout:
                pass
            try:
                collected.recv()
            except tenbin.Timeout:
                pass
            if sub.other_topics and got:
                break
    assert sub.other_topics > 0
    assert len(got) == 1 and "other_topics" in got[0] and "()" not in got[0]
    for c in (pub, sub, collected):
        c.close()


def cpp_fields(struct, header):
    """The fields of C++ `struct` as its public header declares them."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "include" / "tenbin" / header).read_text()
    body = re.search(r"struct %s \{(.*?)\n\};" % struct, text, re.S)[1]
    return set(re.findall(r"^    [\w:<>,\s]+?\b(\w+)(?:\{[^;]*\})?(?: = [^;]*)?;$", body, re.M))


def test_every_cpp_connection_option_has_a_python_keyword():
    """What a C++ user can set, a Python user can: each field of
    connection_options and stream_options (the nested ones spelled out)."""
    fields = cpp_fields("connection_options", "connection.hpp") | cpp_fields("stream_options", "stream.hpp")
    assert {"shm_max_peers", "count_peers", "epoch_timeout", "recv_timeout"} <= fields, fields
    spelled = {"recv_timeout": "timeout", "decode": None, "streams": None, "curve": None}
    missing = {spelled.get(f, f) for f in fields} - {None} - keywords(tenbin.Connection)
    assert not missing, f"connection options without a Python keyword: {sorted(missing)}"
    # The nested ones: the decoder's limits and the CURVE files.
    assert {"max_tensors", "max_rank", "max_bytes", "expect_infos", "curve_cert", "curve_server",
            "curve_allow"} <= keywords(tenbin.Connection)
