#!/usr/bin/env python3
"""Builds the seed corpora of the fuzz targets from the Python vectors.

usage: make_seeds.py VECTORS_DIR URL_SEEDS_DIR OUT_DIR

Writes OUT_DIR/<target>/ for every target, in each target's input framing
(see the targets' comments). The vectors are read where they lie, never
copied into the repository.
"""
import pathlib
import shutil
import struct
import sys

MAGIC = b"~TenBin~"


def chunks(data):
    """Payloads of a well-formed chunked buffer (stops at the first problem)."""
    out, at = [], 0
    while at + 16 <= len(data) and data[at:at + 8] == MAGIC:
        (n,) = struct.unpack_from("<q", data, at + 8)
        if n < 0 or at + 16 + n > len(data):
            break
        out.append(data[at + 16:at + 16 + n])
        at += 16 + (n + 63) // 64 * 64
    return out


def framed(frames):
    """The decode_list target's framing: 2-byte length, then the bytes."""
    return b"".join(struct.pack("<H", len(f)) + f for f in frames if len(f) < 65536)


def main():
    vectors, url_seeds, out = map(pathlib.Path, sys.argv[1:4])
    targets = ["decode_buffer", "decode_list", "read", "decode_header", "url"]
    for t in targets:
        shutil.rmtree(out / t, ignore_errors=True)
        (out / t).mkdir(parents=True)

    def put(target, name, data):
        (out / target / name).write_bytes(data)

    for f in sorted(vectors.glob("*.ten")) + sorted(vectors.glob("*.bin")):
        data = f.read_bytes()
        put("decode_buffer", f.name, data)
        for mode in (0x00, 0x01, 0x03, 0x06, 0x0c):
            put("read", f"{f.name}.mode{mode:02x}", bytes([mode]) + data)
        payloads = chunks(data)
        if payloads:
            put("decode_list", f.name, framed(payloads))
        for i, p in enumerate(payloads[0::2]):
            put("decode_header", f"{f.name}.{i}", p)
    for d in sorted(p for p in vectors.glob("mp_*") if p.is_dir()):
        frames = [p.read_bytes() for p in sorted(d.glob("*.bin"))]
        put("decode_list", d.name, framed(frames))
        for i, h in enumerate(frames[0::2]):
            put("decode_header", f"{d.name}.{i}", h)
    for f in sorted(url_seeds.glob("*.txt")):
        put("url", f.name, f.read_bytes())
    for t in targets:
        print(f"{t}: {len(list((out / t).iterdir()))} seeds")


if __name__ == "__main__":
    main()
