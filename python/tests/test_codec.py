"""The module functions of Python tenbin: codec, streams, files."""
import gc
import hashlib
import io
import pathlib

import numpy as np
import pytest

import tenbin

DTYPES = ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random(shape) * 100).astype(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", range(10))
def test_roundtrip_every_dtype_and_rank(dtype, rank):
    shape = tuple([2, 3, 1, 2, 1, 1, 2, 1, 1][:rank])
    a = sample(dtype, shape, rank)
    for encode, decode in [(tenbin.encode_buffer, tenbin.decode_buffer), (tenbin.encode_list, tenbin.decode_list)]:
        (b,) = decode(encode([a]))
        assert same(a, b)


def test_vectors_decode_and_reencode_byte_identical(vectors):
    d, manifest = vectors
    checked = 0
    for entry in manifest["files"]:
        path = d / entry["path"]
        infos = [t["info"] for t in entry["tensors"]]
        if entry["kind"] == "multipart":
            frames = [f.read_bytes() for f in sorted(path.iterdir())]
            arrays = tenbin.decode_list(frames)
            again = tenbin.encode_list(arrays, infos=infos)
            assert [bytes(f) for f in again] == frames, entry["path"]
        else:
            raw = path.read_bytes()
            arrays, got = tenbin.decode_buffer(raw, infos=True)
            assert got == infos
            assert bytes(tenbin.encode_buffer(arrays, infos=infos)) == raw, entry["path"]
            if entry["kind"] == "ten":
                assert [same(x, y) for x, y in zip(tenbin.load(path), arrays)] == [True] * len(arrays)
        assert len(arrays) == len(entry["tensors"])
        for a, t in zip(arrays, entry["tensors"]):
            assert a.dtype.str[1:] == t["dtype"] and list(a.shape) == t["shape"]
            assert hashlib.sha256(a.tobytes()).hexdigest() == t["sha256"]
        checked += 1
    assert checked == len(manifest["files"]) > 10


def test_vectors_malformed_raise_their_class(vectors):
    d, manifest = vectors
    assert manifest["malformed"]
    for entry in manifest["malformed"]:
        path = d / entry["path"]
        with pytest.raises(tenbin.Error) as e:
            if path.is_dir():
                tenbin.decode_list([f.read_bytes() for f in sorted(path.iterdir())])
            else:
                tenbin.decode_buffer(path.read_bytes())
        assert e.value.errc in entry["acceptable_errors"], (entry["path"], e.value.errc)
        assert isinstance(e.value, tenbin.ERRC[e.value.errc])


def test_malformed_input_raises_typed_errors():
    good = bytes(tenbin.encode_buffer([np.arange(10, dtype="f4")]))
    with pytest.raises(tenbin.BadMagic):
        tenbin.decode_buffer(b"x" * len(good))
    with pytest.raises(tenbin.Malformed) as e:
        tenbin.decode_buffer(good[:-70])
    assert e.value.errc in ("truncated", "length_beyond_end")
    with pytest.raises(tenbin.OddChunkCount):
        tenbin.decode_list([tenbin.encode_list([np.zeros(3, "f4")])[0]])
    with pytest.raises(tenbin.BadArgument):
        tenbin.encode_buffer([np.zeros(3, dtype=bool)])
    with pytest.raises(tenbin.BadArgument):
        tenbin.encode_buffer([np.zeros(3, "f4")], infos=["far too long"])
    with pytest.raises(tenbin.InfoMismatch):
        tenbin.decode_buffer(tenbin.encode_buffer([np.zeros(3, "f4")], infos=["a"]), infos=["b"])
    assert isinstance(tenbin.BadMagic("x"), tenbin.Error) and tenbin.BadMagic.errc == "bad_magic"


def test_infos_arguments_as_tensorcom():
    a, b = np.zeros(2, "f4"), np.ones(3, "i2")
    buf = tenbin.encode_buffer([a, b], infos=["img", "lbl"])
    arrays = tenbin.decode_buffer(buf)
    assert isinstance(arrays, list) and len(arrays) == 2
    arrays, infos = tenbin.decode_buffer(buf, infos=True)
    assert infos == ["img", "lbl"]
    assert len(tenbin.decode_buffer(buf, infos=["img", "lbl"])) == 2
    with pytest.raises(tenbin.BadArgument):
        tenbin.encode_buffer([a, b], infos=["one"])


def test_noncontiguous_and_big_endian_are_sent_in_logical_order():
    a = np.arange(24, dtype="f4").reshape(4, 6)
    cases = [a.T, a[:, ::2], a.astype(">f4"), a.astype(">i8").T, a[::-1]]
    for x in cases:
        (y,) = tenbin.decode_buffer(tenbin.encode_buffer([x]))
        assert y.dtype.byteorder in ("<", "=", "|") and np.array_equal(x, y) and y.shape == x.shape
        (z,) = tenbin.decode_list(tenbin.encode_list([x]))
        assert np.array_equal(x, z)


def test_uint32_and_rank0_both_ways():
    xs = [np.array(4000000000, dtype="u4"), np.arange(5, dtype="u4") + 4000000000, np.float32(1.5)]
    ys = tenbin.decode_buffer(tenbin.encode_buffer(xs))
    assert [y.shape for y in ys] == [(), (5,), ()]
    assert ys[0] == 4000000000 and ys[1].dtype == np.uint32 and ys[2] == 1.5


def test_decoded_arrays_view_the_buffer():
    buf = bytes(tenbin.encode_buffer([np.arange(100, dtype="f4")]))
    (a,) = tenbin.decode_buffer(buf)
    assert not a.flags.owndata and not a.flags.writeable
    # The array's memory lies inside the bytes object: no copy.
    start = np.frombuffer(buf, dtype="u1").__array_interface__["data"][0]
    assert start <= a.__array_interface__["data"][0] < start + len(buf)
    del buf
    gc.collect()
    assert a[99] == 99.0  # the base keeps the bytes alive


def test_write_read_stream():
    xs = [sample(t, (3, 2), i) for i, t in enumerate(DTYPES)]
    s = io.BytesIO()
    tenbin.write(s, xs, infos=DTYPES)
    assert s.getvalue() == bytes(tenbin.encode_buffer(xs, infos=DTYPES))
    s.seek(0)
    ys, infos = tenbin.read(s, infos=True)
    assert infos == DTYPES and all(same(x, y) for x, y in zip(xs, ys))
    s.seek(0)
    assert len(tenbin.read(s, n=3)) == 3
    assert tenbin.read(io.BytesIO(b"")) == []
    with pytest.raises(tenbin.Malformed):
        tenbin.read(io.BytesIO(s.getvalue()[:100]))


def test_save_load_and_mmap(tmp_path):
    xs = [sample("f2", (8, 3)), np.arange(7, dtype="u4"), np.array(3, "i1")]
    p = tmp_path / "x.ten"
    tenbin.save(str(p), *xs, infos=["a", "b", "c"])
    assert p.read_bytes() == bytes(tenbin.encode_buffer(xs, infos=["a", "b", "c"]))
    for f in (tenbin.load, tenbin.load_mmap):
        ys, infos = f(str(p), infos=True)
        assert infos == ["a", "b", "c"] and all(same(x, y) for x, y in zip(xs, ys))
    m = tenbin.load_mmap(p)
    assert not m[0].flags.writeable and not m[0].flags.owndata
    with pytest.raises(tenbin.BadExtension):
        tenbin.save(str(tmp_path / "x.bin"), *xs)
    tenbin.save(str(tmp_path / "x.bin"), *xs, nocheck=True)
    assert len(tenbin.load(str(tmp_path / "x.bin"), nocheck=True)) == 3
    with pytest.raises(tenbin.IOFailure):
        tenbin.load(str(tmp_path / "missing.ten"))


def test_encode_list_frames():
    a = np.arange(6, dtype="i4").reshape(2, 3)
    frames = tenbin.encode_list([a], infos=["x"])
    assert len(frames) == 2 and isinstance(frames[0], bytes) and len(frames[0]) == 24 + 16
    assert bytes(frames[1]) == a.tobytes()


def test_sctp_over_a_seqpacket_pair():
    import socket
    s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with s1, s2:
        xs = [np.arange(1000, dtype="f4"), np.array(5, "u4")]
        tenbin.sctp_send(s1, None, xs, infos=["a", "b"])
        ys, infos = tenbin.sctp_recv(s2, infos=True)
        assert infos == ["a", "b"] and all(same(x, y) for x, y in zip(xs, ys))
        tenbin.sctp_send(s1, None, xs)
        with pytest.raises(tenbin.LimitExceeded):
            tenbin.sctp_recv(s2, maxsize=100)
        s1.sendall(b"garbage")
        with pytest.raises(tenbin.BadMagic):
            tenbin.sctp_recv(s2)


def test_help_and_docstrings():
    for name in tenbin.__all__:
        obj = getattr(tenbin, name)
        if callable(obj):
            assert obj.__doc__, name
    assert pathlib.Path(tenbin.__file__).with_name("__init__.pyi").exists()


def test_urls():
    assert tenbin.brace_expand("zsub://h:78{80..82}") == ["zsub://h:7880", "zsub://h:7881", "zsub://h:7882"]
    assert tenbin.parse_urls("zsub://127.0.0.1:{1,2}#topic") == [
        ("sub", False, "tcp://127.0.0.1:1"), ("sub", False, "tcp://127.0.0.1:2")]
    with pytest.raises(tenbin.BadURL):  # a topic is for pub and sub
        tenbin.parse_urls("zpull://127.0.0.1:1#topic")
    with pytest.raises(tenbin.BadURL):  # one socket, one topic
        tenbin.parse_urls(["zsub://127.0.0.1:1#a", "zsub://127.0.0.1:2#b"])
    assert tenbin.parse_urls("zrpull+ipc:///tmp/x") == [("pull", False, "ipc:///tmp/x")]
    with pytest.raises(tenbin.BadURL):
        tenbin.parse_urls("zpull://h:{1,2")
