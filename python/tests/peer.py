"""A tensorcom-style peer of our own: pyzmq with its defaults and NumPy,
encoding as tensorcom's tenbin.py does (not using tenbin)."""
import struct

import numpy as np

CODES = {"float16": "f2", "float32": "f4", "float64": "f8", "int8": "i1", "int16": "i2", "int32": "i4",
         "int64": "i8", "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8"}
NAMES = {v: k for k, v in CODES.items()}


def word(s):
    return struct.unpack("<q", s.encode("ascii").ljust(8, b"\0"))[0]


def unword(w):
    return struct.pack("<q", int(w)).rstrip(b"\0").decode("ascii")


def header(a, info=""):
    return np.array([word(CODES[a.dtype.name]), word(info), a.ndim, *a.shape], dtype="<i8").tobytes()


def encode_list(arrays, infos=None):
    infos = infos or [""] * len(arrays)
    out = []
    for a, i in zip(arrays, infos):
        out += [header(a, i), np.ascontiguousarray(a).tobytes()]
    return out


def decode_list(frames):
    out = []
    for h, d in zip(frames[0::2], frames[1::2]):
        w = np.frombuffer(h, dtype="<i8")
        shape = tuple(int(x) for x in w[3:3 + int(w[2])])
        out.append(np.frombuffer(d, dtype=NAMES[unword(w[0])]).reshape(shape))
    return out


def pad(n):
    return (n + 63) // 64 * 64


def encode_buffer(arrays, infos=None):
    out = bytearray()
    for p in encode_list(arrays, infos):
        out += b"~TenBin~" + struct.pack("<q", len(p)) + p + b"\0" * (pad(len(p)) - len(p))
    return bytes(out)


def decode_buffer(buf):
    frames, at = [], 0
    while at < len(buf):
        assert buf[at:at + 8] == b"~TenBin~"
        n = struct.unpack("<q", buf[at + 8:at + 16])[0]
        frames.append(buf[at + 16:at + 16 + n])
        at += 16 + pad(n)
    return decode_list(frames)
