#!/usr/bin/env python3
"""NumPy's side of the format conversion tests (run by tests/test_formats.cpp).

  formats_peer.py write DIR   writes .npy and .npz files with np.save/np.savez,
                              and DIR/expected.json describing their tensors
  formats_peer.py check DIR   reads the files tenbin wrote in DIR (listed in
                              DIR/expected.json) with np.load and a small
                              safetensors reader, and compares

A tensor in expected.json: {"name", "dtype" (tenbin code), "shape", "hex"
(little-endian C-order data bytes)}. Archives too large to list that way are
under "npz_spot": {"names": every member's name, in order, "tensors": some
of them as {"name", "dtype", "shape", "sha256" (of the bytes "hex" would
show)}}. Every archive must also pass Python's zipfile.testzip and, when
unzip is installed, `unzip -tqq`. Exits 0 when everything matches, else
prints what differs and exits 1.
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

import numpy as np

CODES = {"f2": "<f2", "f4": "<f4", "f8": "<f8", "i1": "|i1", "i2": "<i2", "i4": "<i4",
         "i8": "<i8", "u1": "|u1", "u2": "<u2", "u4": "<u4", "u8": "<u8"}
SAFETENSORS = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "|i1", "I16": "<i2", "I32": "<i4",
               "I64": "<i8", "U8": "|u1", "U16": "<u2", "U32": "<u4", "U64": "<u8"}


def code_of(dtype):
    d = dtype.newbyteorder("<").str
    for code, s in CODES.items():
        if s == d:
            return code
    raise ValueError(f"no tenbin code for {dtype}")


def describe(name, arr):
    le = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"))
    return {"name": name, "dtype": code_of(arr.dtype), "shape": list(arr.shape), "hex": le.tobytes().hex()}


def digest(name, arr):
    le = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"name": name, "dtype": code_of(arr.dtype), "shape": list(arr.shape),
            "sha256": hashlib.sha256(le.reshape(-1).view(np.uint8)).hexdigest()}


def check_zip(path):
    """What Python's zipfile and Info-ZIP's unzip find wrong with the archive
    at `path` (CRC-32s, structure), as a list of failures."""
    failures = []
    members = 0
    try:
        with zipfile.ZipFile(path) as zf:
            members = len(zf.infolist())
            bad = zf.testzip()
        if bad is not None:
            failures.append(f"{path}: zipfile.testzip finds {bad} corrupt")
    except (zipfile.BadZipFile, OSError) as e:
        failures.append(f"{path}: zipfile: {e}")
    # unzip warns (exit status 1) about an empty archive.
    if members and shutil.which("unzip"):
        run = subprocess.run(["unzip", "-tqq", path], capture_output=True, text=True)
        if run.returncode != 0:
            failures.append(f"{path}: unzip -tqq exits {run.returncode}: {(run.stdout + run.stderr)[:300]}")
    return failures


def patterned(code, shape, seed):
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(CODES[code]).itemsize
    i = np.arange(n, dtype=np.int64)
    raw = ((i * 37 + (i >> 8) * 101 + seed * 11 + 5) & 0xFF).astype(np.uint8)  # support.hpp's patterned
    return raw.view(CODES[code]).reshape(shape)


def write(folder):
    expected = {"npy": {}, "npz": {}, "refused": {}}
    arrays = {}
    shapes = [(3, 5), (), (7,), (2, 0, 4), (1, 65), (4, 1, 3)]
    for i, code in enumerate(CODES):
        arr = patterned(code, shapes[i % len(shapes)], i + 1)
        arrays[f"t_{code}"] = arr
        np.save(os.path.join(folder, f"{code}.npy"), arr)
        expected["npy"][f"{code}.npy"] = describe("", arr)
    # Big-endian data, which tenbin swaps on reading.
    big = np.arange(12, dtype=">i4").reshape(3, 4) * 1000003
    np.save(os.path.join(folder, "big_endian.npy"), big)
    expected["npy"]["big_endian.npy"] = describe("", big)
    # A Fortran-ordered 1-d array is stored as C order would be.
    np.save(os.path.join(folder, "fortran_1d.npy"), np.asfortranarray(np.arange(5, dtype="<f8")))
    expected["npy"]["fortran_1d.npy"] = describe("", np.arange(5, dtype="<f8"))
    np.save(os.path.join(folder, "fortran_2d.npy"), np.asfortranarray(np.ones((2, 3), dtype="<f4")))
    expected["refused"]["fortran_2d.npy"] = "unsupported"
    np.save(os.path.join(folder, "bool.npy"), np.array([True, False]))
    expected["refused"]["bool.npy"] = "unsupported"
    np.save(os.path.join(folder, "complex.npy"), np.zeros(2, dtype=np.complex64))
    expected["refused"]["complex.npy"] = "unsupported"

    # Positional arrays are arr_0, ...; keywords keep their names, long or not.
    np.savez(os.path.join(folder, "arrays.npz"), patterned("u1", (4,), 9), **arrays,
             a_rather_long_name=patterned("f4", (2, 2), 10))
    # np.savez puts keyword arrays first, then the positional ones.
    expected["npz"]["arrays.npz"] = [describe(k, v) for k, v in arrays.items()] + \
        [describe("a_rather_long_name", patterned("f4", (2, 2), 10)),
         describe("arr_0", patterned("u1", (4,), 9))]
    np.savez(os.path.join(folder, "empty.npz"))
    expected["npz"]["empty.npz"] = []
    np.savez_compressed(os.path.join(folder, "compressed.npz"), x=np.zeros(100))
    expected["refused"]["compressed.npz"] = "unsupported"
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(expected, f)
    return 0


def read_safetensors(path):
    """A small reader after the safetensors specification (json + numpy):
    the tensors in data order, and the __metadata__ as [key, value] pairs."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    assert (8 + n) % 8 == 0, f"data section at {8 + n} is not 8-byte aligned"
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        arr = np.frombuffer(body[begin:end], dtype=SAFETENSORS[entry["dtype"]]).reshape(entry["shape"])
        out.append((begin, name, arr))
    covered = sorted((e["data_offsets"] for k, e in header.items() if k != "__metadata__"))
    pos = 0
    for begin, end in covered:
        assert begin == pos, f"range [{begin}, {end}) does not start at {pos}"
        pos = end
    assert pos == len(body), f"data section of {len(body)} bytes, ranges cover {pos}"
    metadata = [[k, v] for k, v in header.get("__metadata__", {}).items()]
    return [(name, arr) for _, name, arr in sorted(out, key=lambda t: t[0])], metadata


def check(folder):
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    failures = []

    def compare(where, got, want):
        if got != want:
            failures.append(f"{where}: got {json.dumps(got)[:300]}, want {json.dumps(want)[:300]}")

    for file, want in expected.get("npy", {}).items():
        path = os.path.join(folder, file)
        arr = np.load(path)
        compare(file, describe("", arr), want)
        # tenbin writes exactly the bytes np.save writes.
        again = os.path.join(folder, "again_" + file)
        np.save(again, arr)
        with open(path, "rb") as a, open(again, "rb") as b:
            if a.read() != b.read():
                failures.append(f"{file}: bytes differ from np.save's")
    for file, want in expected.get("npz", {}).items():
        try:
            with np.load(os.path.join(folder, file)) as z:
                compare(file, [describe(k, z[k]) for k in z.files], want)
        except Exception as e:
            failures.append(f"{file}: np.load: {type(e).__name__}: {e}")
        failures += check_zip(os.path.join(folder, file))
    for file, want in expected.get("npz_spot", {}).items():
        try:
            with np.load(os.path.join(folder, file)) as z:
                compare(file + " names", z.files, want["names"])
                for t in want["tensors"]:
                    compare(file + " " + t["name"], digest(t["name"], z[t["name"]]), t)
        except Exception as e:
            failures.append(f"{file}: np.load: {type(e).__name__}: {e}")
        failures += check_zip(os.path.join(folder, file))
    for file, want in expected.get("safetensors", {}).items():
        got, metadata = read_safetensors(os.path.join(folder, file))
        compare(file, [describe(k, a) for k, a in got], want)
        compare(file + " __metadata__", metadata, expected.get("safetensors_metadata", {}).get(file, []))
    for line in failures:
        print(line)
    print(f"formats_peer: {len(failures)} failures")
    return 1 if failures else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    return write(sys.argv[2]) if sys.argv[1] == "write" else check(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
