#!/usr/bin/env python3
"""A Python peer for tenbin interoperability tests.

It carries its own small implementation of the tenbin format, written the
way NVlabs tensorcom's tenbin.py does it (numpy arrays, np.frombuffer, str64
words, "~TenBin~" chunks padded to 64 bytes), but correct where the original
is not: it handles uint32 ("u4") and rank-0 tensors, and its decoders check
every length instead of trusting the input.

Modes (every socket operation is bounded by --timeout seconds; the process
exits non-zero on a timeout or an unexpected error):

  send     connect a PUSH socket and send --count messages of the tensor set
           --set generated from --seed + message index, as --form
           multipart (send_multipart) or single (one frame).
  recv     connect a PULL socket, receive --count messages in either form,
           and print one JSON line per message: form, each tensor's info,
           dtype, shape, nbytes and SHA-256 of its data, and whether the
           message equals the set generated from --seed + index.
  echo     connect a PAIR socket; receive --count messages and send each
           back, decoded and encoded again, in the form it came in.
  frames   connect a PUSH socket and send the given files as messages: a
           directory is one multipart message of its NNN.bin files, in
           order; a file is one single-frame message. Bytes are sent as
           they are, malformed or not.

Generated data: tensor k of a message with seed s has byte i equal to
(x ^ (x >> 13)) & 0xff with x = i * 2654435761 + s * 1000003 + k * 7919
(uint64 arithmetic). The C++ test builds the same tensors.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import zmq
import zmq.auth

MAGIC = b"~TenBin~"
PAD = 64

# NumPy short codes, always little-endian on the wire.
DTYPES = {
    "f2": np.dtype("<f2"), "f4": np.dtype("<f4"), "f8": np.dtype("<f8"),
    "i1": np.dtype("i1"), "i2": np.dtype("<i2"), "i4": np.dtype("<i4"), "i8": np.dtype("<i8"),
    "u1": np.dtype("u1"), "u2": np.dtype("<u2"), "u4": np.dtype("<u4"), "u8": np.dtype("<u8"),
}


def code_of(arr):
    for code, dt in DTYPES.items():
        if arr.dtype.kind == dt.kind and arr.dtype.itemsize == dt.itemsize:
            return code
    raise ValueError("no tenbin code for dtype %s" % arr.dtype)


# ---- str64 ------------------------------------------------------------------

def str64(s):
    b = s.encode("ascii")
    if len(b) > 8:
        raise ValueError("%r is longer than 8 bytes" % s)
    return int(np.frombuffer(b + b"\0" * (8 - len(b)), dtype="<i8")[0])


def unstr64(word):
    raw = np.array([word], dtype="<i8").tobytes()
    return raw.strip(b"\0").decode("ascii")  # both ends, as tenbin.py does


# ---- headers and the list form ---------------------------------------------

def encode_header(arr, info=""):
    code = code_of(arr)
    words = [str64(code), str64(info), arr.ndim] + list(arr.shape)
    return np.array(words, dtype="<i8").tobytes()


def decode_header(h):
    if len(h) < 24 or len(h) % 8 != 0:
        raise ValueError("bad_header: %d header bytes" % len(h))
    words = np.frombuffer(h, dtype="<i8")
    code, info, ndim = unstr64(words[0]), unstr64(words[1]), int(words[2])
    if code not in DTYPES:
        raise ValueError("unknown_dtype: %r" % code)
    if ndim != len(words) - 3:
        raise ValueError("bad_header: ndim %d in %d header bytes" % (ndim, len(h)))
    shape = tuple(int(d) for d in words[3:])
    if any(d < 0 for d in shape):
        raise ValueError("bad_header: negative dimension in %r" % (shape,))
    return DTYPES[code], info, shape


def encode_list(arrays, infos=None):
    infos = infos or [""] * len(arrays)
    out = []
    for arr, info in zip(arrays, infos):
        # (np.ascontiguousarray would turn a rank-0 array into rank 1)
        arr = np.asarray(arr, dtype=DTYPES[code_of(arr)], order="C")
        out.append(encode_header(arr, info))
        out.append(arr.tobytes())
    return out


def decode_list(frames):
    if len(frames) % 2 != 0:
        raise ValueError("odd_chunk_count: %d frames" % len(frames))
    arrays, infos = [], []
    for k in range(0, len(frames), 2):
        dt, info, shape = decode_header(bytes(frames[k]))
        need = math.prod(shape) * dt.itemsize
        if len(frames[k + 1]) != need:
            raise ValueError("data_size_mismatch: tensor %d needs %d bytes, has %d"
                             % (k // 2, need, len(frames[k + 1])))
        arrays.append(np.frombuffer(frames[k + 1], dtype=dt).reshape(shape))
        infos.append(info)
    return arrays, infos


# ---- the chunked form -------------------------------------------------------

def roundup(n):
    return (n + PAD - 1) // PAD * PAD


def encode_chunks(payloads):
    out = []
    for p in payloads:
        out += [MAGIC, np.array([len(p)], dtype="<i8").tobytes(), p,
                b"\0" * (roundup(len(p)) - len(p))]
    return b"".join(out)


def decode_chunks(buf):
    buf = memoryview(buf)
    out, at = [], 0
    while at < len(buf):
        if len(buf) - at < 16:
            raise ValueError("truncated: chunk preamble at offset %d" % at)
        if bytes(buf[at:at + 8]) != MAGIC:
            raise ValueError("bad_magic at offset %d" % at)
        n = int(np.frombuffer(buf[at + 8:at + 16], dtype="<i8")[0])
        if n < 0:
            raise ValueError("negative_length at offset %d" % at)
        if n > len(buf) - at - 16:
            raise ValueError("length_beyond_end at offset %d" % at)
        if roundup(n) > len(buf) - at - 16:
            raise ValueError("truncated: padding at offset %d" % at)
        out.append(buf[at + 16:at + 16 + n])
        at += 16 + roundup(n)
    return out


def encode_buffer(arrays, infos=None):
    return encode_chunks(encode_list(arrays, infos))


def decode_buffer(buf):
    return decode_list(decode_chunks(buf))


# ---- the deterministic tensor sets -----------------------------------------

FULL = [
    ("f2", (7,), "half"), ("f4", (3, 5), "input"), ("f8", (2, 3, 4), "cube"),
    ("i1", (13,), "bytes"), ("i2", (5, 3), "x"), ("i4", (4,), "target"),
    ("i8", (3,), "big"), ("u1", (2, 8, 8, 3), "image"), ("u2", (5,), "y"),
    ("u4", (2, 3), "u32"), ("u8", (6,), "u64"), ("f8", (), "scalar"),
    ("f4", (0, 4), "none"), ("u1", (0,), ""), ("i2", (1, 2, 1, 1, 2, 1, 1, 1, 2), "ninedims"),
    ("u1", (5000,), "large"), ("f4", (1000,), "abcdefgh"), ("u1", (3,), "a\0b"),
]
# What the real tensorcom decoder can read back: no uint32, no rank 0.
COMPAT = [t for t in FULL if t[0] != "u4" and t[1] != ()]
SETS = {"full": FULL, "compat": COMPAT}


def pattern(nbytes, seed, k):
    i = np.arange(nbytes, dtype=np.uint64)
    x = i * np.uint64(2654435761) + np.uint64((seed * 1000003 + k * 7919) % 2**64)
    return ((x ^ (x >> np.uint64(13))) & np.uint64(0xFF)).astype(np.uint8).tobytes()


def generate(name, seed):
    arrays, infos = [], []
    for k, (code, shape, info) in enumerate(SETS[name]):
        dt = DTYPES[code]
        data = pattern(math.prod(shape) * dt.itemsize, seed, k)
        arrays.append(np.frombuffer(data, dtype=dt).reshape(shape))
        infos.append(info)
    return arrays, infos


def same(a_arrays, a_infos, b_arrays, b_infos):
    if len(a_arrays) != len(b_arrays) or list(a_infos) != list(b_infos):
        return False
    for a, b in zip(a_arrays, b_arrays):
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            return False
    return True


# ---- sockets ------------------------------------------------------------------

def open_socket(ctx, kind, endpoint, timeout, curve=None):
    s = ctx.socket(kind)
    if curve:  # (own secret certificate, server's public one): a CURVE client
        public, secret = zmq.auth.load_certificate(curve[0])
        s.curve_publickey, s.curve_secretkey = public, secret
        s.curve_serverkey = zmq.auth.load_certificate(curve[1])[0]
    if kind == zmq.SUB:
        s.setsockopt(zmq.SUBSCRIBE, b"")  # as tensorcom: every message
    s.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    s.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    s.setsockopt(zmq.LINGER, int(timeout * 1000))
    s.connect(endpoint)
    return s


def receive(sock):
    frames = sock.recv_multipart(copy=False)
    frames = [f.buffer for f in frames]
    if len(frames) == 1:
        return "single", decode_buffer(frames[0])
    return "multipart", decode_list(frames)


def send(sock, form, arrays, infos):
    if form == "single":
        sock.send(encode_buffer(arrays, infos))
    else:
        sock.send_multipart(encode_list(arrays, infos))


def describe(arrays, infos):
    return [{"info": info, "dtype": code_of(a), "shape": list(a.shape), "nbytes": a.nbytes,
             "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
            for a, info in zip(arrays, infos)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["send", "recv", "echo", "frames", "certs"])
    ap.add_argument("--endpoint")
    ap.add_argument("--curve-cert", help="this side's secret certificate (CURVE client)")
    ap.add_argument("--curve-server", help="the server's public certificate")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", choices=sorted(SETS), default="full")
    ap.add_argument("--form", choices=["multipart", "single"], default="multipart")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--kind", choices=["push", "pub", "pull", "sub"],
                    help="socket for send (push, pub) or recv (pull, sub); default push/pull")
    ap.add_argument("--delay", type=float, default=0.0,
                    help="seconds to wait before sending (lets subscribers join)")
    ap.add_argument("paths", nargs="*")
    args = ap.parse_intermixed_args()
    if args.mode == "certs":  # paths: DIR NAME; zmq.auth's own certificate files
        zmq.auth.create_certificates(*args.paths)
        return 0
    if not args.endpoint:
        ap.error("--endpoint is required")
    curve = (args.curve_cert, args.curve_server) if args.curve_cert else None

    ctx = zmq.Context()
    sock = None
    try:
        if args.mode == "send":
            sock = open_socket(ctx, zmq.PUB if args.kind == "pub" else zmq.PUSH, args.endpoint, args.timeout, curve)
            time.sleep(args.delay)
            for n in range(args.count):
                send(sock, args.form, *generate(args.set, args.seed + n))
        elif args.mode == "frames":
            sock = open_socket(ctx, zmq.PUSH, args.endpoint, args.timeout)
            for path in args.paths:
                if os.path.isdir(path):
                    names = sorted(f for f in os.listdir(path) if f.endswith(".bin"))
                    frames = []
                    for f in names:
                        with open(os.path.join(path, f), "rb") as fh:
                            frames.append(fh.read())
                    sock.send_multipart(frames)
                else:
                    with open(path, "rb") as fh:
                        sock.send(fh.read())
        elif args.mode == "recv":
            sock = open_socket(ctx, zmq.SUB if args.kind == "sub" else zmq.PULL, args.endpoint, args.timeout, curve)
            for n in range(args.count):
                line = {"index": n}
                try:
                    form, (arrays, infos) = receive(sock)
                    want = generate(args.set, args.seed + n)
                    line.update(form=form, tensors=describe(arrays, infos),
                                matches=same(arrays, infos, *want))
                except ValueError as e:
                    line["error"] = str(e)
                print(json.dumps(line), flush=True)
        elif args.mode == "echo":
            sock = open_socket(ctx, zmq.PAIR, args.endpoint, args.timeout)
            for _ in range(args.count):
                form, (arrays, infos) = receive(sock)
                # Copies, so that the reply is encoded from fresh arrays.
                send(sock, form, [a.copy() for a in arrays], infos)
        sock.close()  # lingers up to the timeout to deliver what is queued
    except zmq.Again:
        print("tensorcom_peer.py %s: timed out after %.1f s" % (args.mode, args.timeout), file=sys.stderr)
        sock.close(linger=0)
        return 3
    finally:
        ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
