#!/usr/bin/env python3
"""Builds the seed corpora of the fuzz targets from the Python vectors (and,
for the file formats, from small files made here with the standard library).

usage: make_seeds.py VECTORS_DIR URL_SEEDS_DIR OUT_DIR

Writes OUT_DIR/<target>/ for every target, in each target's input framing
(see the targets' comments). The vectors are read where they lie, never
copied into the repository.
"""
import io
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import zipfile

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


def npy(descr, shape, data, fortran=False):
    """An .npy file (version 1.0) as np.save writes it."""
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
    pad = -(10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npz(members):
    """An uncompressed .npz archive of (name, npy bytes)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name + ".npy", data)
    return out.getvalue()


def safetensors(entries, metadata=None):
    """A .safetensors file of (name, dtype, shape, data)."""
    header, body = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def format_seeds():
    """(name, input) for the formats target: mode byte, then the file."""
    f4 = struct.pack("<6f", *range(6))
    i2_be = struct.pack(">3h", 1, -2, 3)
    npys = {
        "f4_2x3": npy("<f4", "(2, 3)", f4),
        "i2_be": npy(">i2", "(3,)", i2_be),
        "u1_scalar": npy("|u1", "()", b"\x07"),
        "f8_fortran": npy("<f8", "(1, 2)", struct.pack("<2d", 1.5, -2.5), fortran=True),
        "f2_empty": npy("<f2", "(0, 4)", b""),
    }
    out = [(f"npy_{k}", bytes([0]) + v) for k, v in npys.items()]
    out.append(("npz_two", bytes([1]) + npz([("x", npys["f4_2x3"]), ("label", npys["u1_scalar"])])))
    out.append(("npz_empty", bytes([1]) + npz([])))
    st = safetensors([("w", "F32", [2, 3], f4), ("b", "I16", [3], struct.pack("<3h", 1, 2, 3)),
                      ("z", "U8", [0], b"")], {"format": "pt"})
    out.append(("st_meta", bytes([2]) + st))
    out.append(("st_meta_small", bytes([6]) + st))
    out.append(("st_plain", bytes([3]) + safetensors([("x", "F64", [1], struct.pack("<d", 3.0))])))
    return out


def zstd(data):
    """data as one zstd frame, by the zstd tool (None without it)."""
    try:
        return subprocess.run(["zstd", "-q", "-c", "--no-progress"], input=data, capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def zrecv_input(mode, frames):
    """The zrecv target's input: mode byte, then framed frames."""
    return bytes([mode]) + framed(frames)


def sctp_input(hint, max_size, messages, cut=180):
    """The sctp_parts target's input: messages cut into parts of at most `cut` bytes."""
    out = bytes([hint]) + struct.pack("<H", max_size - 1)
    for data, note in messages:
        pieces = [data[i:i + cut] for i in range(0, len(data), cut)] or [b"\0"]
        for j, piece in enumerate(pieces):
            flags = (1 if j == len(pieces) - 1 else 0) | (2 if note else 0)
            out += bytes([flags, len(piece) - 1]) + piece
    return out


def main():
    vectors, url_seeds, out = map(pathlib.Path, sys.argv[1:4])
    targets = ["decode_buffer", "decode_list", "read", "decode_header", "url", "formats", "zrecv", "sctp_parts",
               "shm_wire", "shm_side", "zstd"]
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
        if len(data) < 4096:
            # Single-part, then multipart behind a ROUTER identity and
            # delimiter, through the envelope specs that take them.
            put("zrecv", f"{f.name}.single", zrecv_input(0x00, [data]))
            if payloads:
                put("zrecv", f"{f.name}.router", zrecv_input(0x04, [b"id", b""] + payloads))
                put("zrecv", f"{f.name}.topic", zrecv_input(0x16, [b"topic"] + payloads))
        packed = zstd(data)
        if packed is not None:
            put("zstd", f"{f.name}.zst", bytes([0]) + packed)
            put("zstd", f"{f.name}.zst.short", bytes([1]) + packed)
    for d in sorted(p for p in vectors.glob("mp_*") if p.is_dir()):
        frames = [p.read_bytes() for p in sorted(d.glob("*.bin"))]
        put("decode_list", d.name, framed(frames))
        for i, h in enumerate(frames[0::2]):
            put("decode_header", f"{d.name}.{i}", h)
    for f in sorted(url_seeds.glob("*.txt")):
        put("url", f.name, f.read_bytes())
    for name, data in format_seeds():
        put("formats", name, data)
    packed = zstd(b"")
    if packed is not None:
        # A skippable frame (as pzstd writes first), then two frames.
        skippable = struct.pack("<II", 0x184D2A50, 4) + b"skip"
        put("zstd", "skippable_concat", bytes([4]) + skippable + packed + packed)
    put("sctp_parts", "two", sctp_input(0, 4096, [(bytes(range(200)), False), (b"x" * 500, False)]))
    put("sctp_parts", "note_over", sctp_input(3, 300, [(b"n" * 40, True), (b"y" * 700, False), (b"z" * 10, False)]))
    put("sctp_parts", "exact", sctp_input(1, 256, [(b"e" * 256, False), (b"f" * 257, False)], cut=100))
    # The side channel: each request, each reply, a ring filled and read.
    for t in (1, 2, 3, 4):
        put("shm_side", f"request{t}", bytes([0]) + struct.pack("<IIQ", t, 0, 42))
    put("shm_side", "fds", bytes([1, 2]) + struct.pack("<IIQQQQ", 10, 2, 5, 0, 3, 4))
    put("shm_side", "ok", bytes([1, 0]) + struct.pack("<IIQQQ", 11, 1, 5, 123456, 9))
    put("shm_side", "gone", bytes([1, 0]) + struct.pack("<IIQQ", 12, 0, 5, 7))
    put("shm_side", "ring", bytes([1, 1]) + struct.pack("<IIQQ", 13, 0, 5, 0))
    put("shm_side", "cut_off", bytes([1, 0]) + struct.pack("<IIQQ", 14, 0, 0, 1))
    steps = b"".join(bytes([0]) + struct.pack("<Q", 2 * k + 2) for k in range(8)) + bytes([1]) + bytes(8)
    put("shm_side", "ring_steps", bytes([2]) + steps + bytes([2]) + struct.pack("<Q", 1 << 40) + bytes([1]) + bytes(8))
    for t in targets:
        print(f"{t}: {len(list((out / t).iterdir()))} seeds")


if __name__ == "__main__":
    main()
