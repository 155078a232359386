#!/usr/bin/python3
"""One side of a tenbin-bench stream, done the way tensorcom does it.

The four functions below follow tensorcom's tenbin.py: encode_list hands
pyzmq each array's buffer, and pyzmq's defaults (copy=True, its default
high-water marks) copy every frame on send and receive into bytes, which
np.frombuffer then views. Same protocol as tenbin-bench's --peer roles:

  recv: bind PULL to --endpoint, print "endpoint E"; take --warmup messages
        (checking the first), print "ready", take --count more, print
        "seconds S" for those. With --settle S, the count starts S seconds
        after "ready" (messages queue up meanwhile: the receiver's own cost).
  send: connect PUSH to --endpoint, send --warmup messages, wait for "go" on
        stdin, send --count more.
"""
import argparse
import ctypes
import os
import signal
import struct
import sys
import time

import numpy as np
import zmq

MAGIC = b"~TenBin~"
CODES = {np.dtype("float16"): "f2", np.dtype("float32"): "f4", np.dtype("int32"): "i4"}
DTYPES = {v: k for k, v in CODES.items()}


def str64(s):
    return struct.unpack("<q", s.encode("ascii").ljust(8, b"\0"))[0]


def unstr64(word):
    return struct.pack("<q", word).rstrip(b"\0").decode("ascii")


def encode_header(a, info=""):
    return np.array([str64(CODES[a.dtype]), str64(info), a.ndim] + list(a.shape), dtype="<i8").tobytes()


def decode_header(h):
    words = np.frombuffer(h, dtype="<i8")
    return DTYPES[unstr64(int(words[0]))], unstr64(int(words[1])), tuple(int(d) for d in words[3 : 3 + words[2]])


def encode_list(arrays, infos):
    frames = []
    for a, info in zip(arrays, infos):
        frames += [encode_header(a, info), a.data]  # the array's own buffer, as tensorcom's bytedata
    return frames


def decode_list(frames):
    out = []
    for h, d in zip(frames[0::2], frames[1::2]):
        dtype, info, shape = decode_header(h)
        out.append(np.frombuffer(d, dtype=dtype).reshape(shape))
    return out


def roundup(n, k=64):
    return (n + k - 1) // k * k


def encode_buffer(arrays, infos):
    payloads = [b for a, info in zip(arrays, infos) for b in (encode_header(a, info), a.data)]
    result = bytearray(sum(16 + roundup(len(memoryview(p).cast("B"))) for p in payloads))
    at = 0
    for p in payloads:
        p = memoryview(p).cast("B")
        result[at : at + 8] = MAGIC
        result[at + 8 : at + 16] = struct.pack("<q", len(p))
        result[at + 16 : at + 16 + len(p)] = p
        at += 16 + roundup(len(p))
    return result


def decode_buffer(buf):
    # Slices of the received bytes, as tensorcom's decode_chunks takes them:
    # each slice of a bytes object is a copy.
    chunks, at = [], 0
    while at < len(buf):
        assert buf[at : at + 8] == MAGIC
        (n,) = struct.unpack("<q", buf[at + 8 : at + 16])
        chunks.append(buf[at + 16 : at + 16 + n])
        at += 16 + roundup(n)
    return decode_list(chunks)


def zsend_multipart(sock, arrays, infos):
    sock.send_multipart(encode_list(arrays, infos))


def zrecv_multipart(sock):
    return decode_list(sock.recv_multipart())


def zsend_single(sock, arrays, infos):
    sock.send(encode_buffer(arrays, infos))


def zrecv_single(sock):
    return decode_buffer(sock.recv())


def pattern(nbytes, k):
    """The bytes tenbin-bench makes: byte j of tensor k is (31 j + 7 k) mod 251."""
    period = ((np.arange(251) * 31 + 7 * k) % 251).astype(np.uint8)
    return np.resize(period, nbytes)


def workload(name, nbytes):
    if name == "quad":
        arrays = [pattern(nbytes // 4, k).view(np.float32) for k in range(4)]
        return arrays, [""] * 4
    if name == "small":
        return [pattern(256, 0).view(np.float32)], [""]
    if name == "batch":
        x = pattern(256 * 3 * 224 * 224 * 2, 0).view(np.float16).reshape(256, 3, 224, 224)
        y = pattern(256 * 4, 1).view(np.int32)
        return [x, y], ["input", "target"]
    raise SystemExit("unknown set " + name)


def die_with_parent():
    """Ends this peer when tenbin-bench goes (killed mid-run), as a blocked
    receive never would (Linux: PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the peer ends with its run
        return
    if os.getppid() == 1:  # the parent went before the request
        sys.exit(1)


def main():
    die_with_parent()
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["send", "recv"])
    for flag in ("--form", "--set", "--bytes", "--warmup", "--count", "--endpoint"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--settle", type=float, default=0)
    ap.add_argument("--hwm", type=int, help="the receiving socket's high-water mark (default: pyzmq's)")
    args = ap.parse_args()
    arrays, infos = workload(args.set, int(args.bytes))
    warmup, count = int(args.warmup), int(args.count)
    single = args.form == "single"
    ctx = zmq.Context()
    if args.role == "recv":
        sock = ctx.socket(zmq.PULL)
        if args.hwm:
            sock.set_hwm(args.hwm)
        sock.bind(args.endpoint)
        print("endpoint", sock.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
        recv = zrecv_single if single else zrecv_multipart
        for i in range(warmup):
            got = recv(sock)
            # Bytes, not values: the pattern holds NaNs, which never compare equal.
            same = len(got) == len(arrays) and all(
                a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(got, arrays)
            )
            if i == 0 and not same:
                raise SystemExit("received arrays differ")
        print("ready", flush=True)
        time.sleep(args.settle)
        t0 = time.monotonic()
        for _ in range(count):
            got = recv(sock)
            assert len(got) == len(arrays)
        print("seconds", time.monotonic() - t0, flush=True)
    else:
        sock = ctx.socket(zmq.PUSH)
        sock.connect(args.endpoint)
        send = zsend_single if single else zsend_multipart
        for _ in range(warmup):
            send(sock, arrays, infos)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("sender expected go")
        for _ in range(count):
            send(sock, arrays, infos)
    sock.close()  # default linger: queued messages are delivered first
    ctx.term()


if __name__ == "__main__":
    main()
