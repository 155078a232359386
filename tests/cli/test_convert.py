#!/usr/bin/env python3
"""`tenbin convert` between .ten, .npy, .npz and .safetensors, and checkpoints with
long names."""

import hashlib
import json
import os
import struct
import sys
import zipfile

from support import VALID, MALFORMED, BY_PATH, vec, expected_tensors, acceptable, run, CliTest, main


class Convert(CliTest):
    def convert(self, *args):
        return run("convert", *args)

    def test_every_vector_through_every_format_and_back(self):
        tens = [e for e in VALID if e["kind"] == "ten"]
        self.assertGreater(len(tens), 10)
        for entry in tens:
            for ext in (".npz", ".safetensors"):
                with self.subTest(file=entry["path"], ext=ext):
                    mid, back = self.path(entry["path"] + ext), self.path(entry["path"] + ext + ".ten")
                    r = self.convert(vec(entry["path"]), mid)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    n = len(entry["tensors"])
                    self.assertIn(f"{n} tensor".encode(), r.stdout)
                    r = self.convert(mid, back)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    # Unnamed tensors come back named as NumPy names them.
                    want = expected_tensors(entry)
                    for i, t in enumerate(want):
                        t["info"] = t["info"] or f"arr_{i}"
                    self.assertEqual(self.info(back), want)
                    if all(t["info"] for t in entry["tensors"]):
                        with open(back, "rb") as a, open(vec(entry["path"]), "rb") as b:
                            self.assertEqual(a.read(), b.read())

    def test_npy_holds_one_tensor(self):
        out = self.path("m.npy")
        r = self.convert(vec("f4_matrix.ten"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(6), b"\x93NUMPY")
        r = self.convert(out, self.path("m.ten"), "-q")
        self.assertEqual((r.returncode, r.stdout), (0, b""))
        self.assertEqual(self.info(self.path("m.ten")), expected_tensors(BY_PATH["f4_matrix.ten"]))
        m = self.error(self.convert(vec("all_dtypes.ten"), self.path("many.npy")))
        self.assertEqual((m["where"], m["cls"]), (self.path("many.npy"), "bad_argument"))
        self.assertFalse(os.path.exists(self.path("many.npy")))

    def test_numpy_reads_what_convert_writes(self):
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - /usr/bin/python3 has it
            self.skipTest("numpy is not installed")
        out = self.path("a.npz")
        self.assertEqual(self.convert(vec("all_dtypes.ten"), out).returncode, 0)
        with np.load(out) as z:
            self.assertEqual(z.files, [t["info"] for t in BY_PATH["all_dtypes.ten"]["tensors"]])
            for t in BY_PATH["all_dtypes.ten"]["tensors"]:
                self.assertEqual(hashlib.sha256(z[t["info"]].tobytes()).hexdigest(), t["sha256"])
        np.savez(self.path("np.npz"), weights=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.int64(7))
        r = self.convert(self.path("np.npz"), self.path("np.safetensors"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("np.safetensors"), "rb") as f:
            data = f.read()
        (n,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["weights"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(header["b"], {"dtype": "I64", "shape": [], "data_offsets": [24, 32]})
        # A name a .ten info cannot hold is refused, not truncated.
        np.savez(self.path("long.npz"), a_long_tensor_name=np.zeros(2))
        m = self.error(self.convert(self.path("long.npz"), self.path("long.ten")))
        self.assertEqual(m["cls"], "bad_argument")
        self.assertIn("'a_long_tensor_name'", m["msg"])
        self.assertFalse(os.path.exists(self.path("long.ten")))
        np.savez_compressed(self.path("z.npz"), x=np.zeros(10))
        m = self.error(self.convert(self.path("z.npz"), self.path("z.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("z.npz"), "unsupported"))
        self.assertIn("compressed", m["msg"])

    def safetensors_header(self, path):
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack_from("<Q", data)
        return json.loads(data[8:8 + n])

    def write_safetensors(self, name, header, data=b""):
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(self.path(name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        return self.path(name)

    def test_large_headers_take_linear_time(self):
        # Legal sizes that took 20 to 35 s each when every JSON key insert
        # searched the keys before it; the bound is generous, not a timing.
        meta = self.write_safetensors("meta.safetensors", {
            "__metadata__": {f"k{i}": str(i) for i in range(80000)},
            "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\7")
        many = self.write_safetensors("many.safetensors", {
            f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(65536)}, bytes(65536))
        r = run("info", "--json", meta, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(len(got["metadata"]), 80000)
        self.assertEqual(got["metadata"]["k79999"], "79999")
        r = run("info", "--json", many, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(json.loads(r.stdout)["tensors"]), 65536)
        for src in (meta, many):
            out = self.path("out.safetensors")
            r = run("convert", "--force", src, out, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.safetensors_header(out), self.safetensors_header(src))

    def test_nul_in_a_name_is_refused_by_readers_as_by_writers(self):
        st = self.write_safetensors("nul.safetensors", {"a\u0000b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
                                    b"\1")
        npz = self.path("nul.npz")
        member = b"{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }"
        member = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + member + b" " * (117 - len(member)) + b"\n\1"
        with zipfile.ZipFile(npz, "w") as z:
            z.writestr("ok.npy", member)
            z.writestr("aXb.npy", member)  # zipfile cuts a name at NUL: patched in below
        with open(npz, "rb") as f:
            data = f.read()
        with open(npz, "wb") as f:
            f.write(data.replace(b"aXb.npy", b"a\0b.npy"))
        for path in (st, npz):
            with self.subTest(file=os.path.basename(path)):
                for args in (["info", path], ["convert", path, self.path("o.ten")]):
                    m = self.error(run(*args))
                    self.assertEqual(m["cls"], "bad_header")
                    self.assertIn("NUL", m["msg"])

    def test_file_commands_take_max_bytes(self):
        # buf_batch.bin carries 112 data bytes; the same layout as a .ten file.
        src = self.path("batch.ten")
        with open(src, "wb") as f:
            f.write(open(vec("buf_batch.bin"), "rb").read())
        r = run("info", "--max-bytes", "100b", src)
        self.assertEqual(self.error(r)["cls"], "limit_exceeded")
        r = run("info", "--json", "--max-bytes", "112", src)
        self.assertEqual(r.returncode, 0, r.stderr)
        st = self.path("b.safetensors")
        self.assertEqual(run("convert", src, st).returncode, 0)
        for args in (["info", "--max-bytes", "100", st], ["convert", "--max-bytes", "100", st, self.path("c.ten")],
                     ["convert", "--max-bytes", "100", "-f", src, self.path("d.npz")]):
            with self.subTest(args=args):
                m = self.error(run(*args))
                self.assertEqual(m["cls"], "limit_exceeded")
        self.assertFalse(os.path.exists(self.path("c.ten")))
        self.assertEqual(run("convert", "--max-bytes", "1k", st, self.path("c.ten")).returncode, 0)
        for bad in ("-1", "lots", "0"):
            with self.subTest(max_bytes=bad):
                self.assertEqual(run("info", "--max-bytes", bad, src).returncode, 64)
                self.assertEqual(run("convert", "--max-bytes", bad, src, self.path("e.ten")).returncode, 64)

    def test_safetensors_metadata_is_kept_and_set(self):
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        r = self.convert(vec("all_dtypes.ten"), a, "--metadata", "format=pt", "-m", "note=x=y")
        self.assertEqual(r.returncode, 0, r.stderr)
        header = self.safetensors_header(a)
        # First in the header, as the safetensors library writes it.
        self.assertEqual(list(header)[0], "__metadata__")
        self.assertEqual(header["__metadata__"], {"format": "pt", "note": "x=y"})
        # Carried from a .safetensors input; a key given again is replaced.
        r = self.convert(a, b, "-m", "note=z", "-m", "extra=")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(list(self.safetensors_header(b)["__metadata__"].items()),
                         [("format", "pt"), ("note", "z"), ("extra", "")])
        # Not through a .ten file, which has no place for it.
        self.assertEqual(self.convert(b, self.path("b.ten")).returncode, 0)
        self.assertEqual(self.convert(self.path("b.ten"), self.path("c.safetensors")).returncode, 0)
        self.assertNotIn("__metadata__", self.safetensors_header(self.path("c.safetensors")))
        m = self.error(self.convert(a, self.path("x.npz"), "-m", "format=pt"), status=64)
        self.assertEqual((m["where"], m["cls"]), (self.path("x.npz"), "bad_argument"))
        self.assertFalse(os.path.exists(self.path("x.npz")))
        r = self.convert(vec("all_dtypes.ten"), self.path("y.safetensors"), "-m", "format")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"KEY=VALUE", r.stderr)
        self.assertFalse(os.path.exists(self.path("y.safetensors")))

    def test_errors_name_the_file_and_class(self):
        m = self.error(self.convert(self.path("missing.npz"), self.path("x.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("missing.npz"), "io_error"))
        bad = [e for e in MALFORMED if e["kind"] == "ten"]
        self.assertTrue(bad)
        for entry in bad:
            with self.subTest(file=entry["path"]):
                m = self.error(self.convert(vec(entry["path"]), self.path("x.npz")))
                self.assertEqual(m["where"], vec(entry["path"]))
                self.assertIn(m["cls"], acceptable(entry))
        m = self.error(self.convert(vec("all_dtypes.ten"), self.path("x.txt")), status=64)
        self.assertEqual(m["cls"], "bad_extension")
        with open(self.path("bad.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + b"{}")
        m = self.error(self.convert(self.path("bad.safetensors"), self.path("x.ten")))
        self.assertEqual((m["where"], m["cls"]), (self.path("bad.safetensors"), "length_beyond_end"))

    def test_help_says_that_out_is_kept_without_force(self):
        r = run("convert", "--help")
        self.assertEqual(r.returncode, 0)
        text = r.stdout.decode()
        (out_line,) = [line for line in text.splitlines() if line.startswith("  OUT ")]
        self.assertIn("replaced only with --force", out_line)
        self.assertIn("An existing OUT is never replaced without --force", " ".join(text.split()))

    def test_output_is_replaced_only_with_force(self):
        out = self.path("a.safetensors")
        with open(out, "wb") as f:
            f.write(b"keep me")
        m = self.error(self.convert(vec("all_dtypes.ten"), out))
        self.assertEqual((m["where"], m["cls"]), (out, "bad_argument"))
        self.assertIn("--force", m["msg"])
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"keep me")
        r = self.convert(vec("all_dtypes.ten"), out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.convert(out, self.path("b.ten")).returncode, 0)
        self.assertEqual(self.info(self.path("b.ten")), expected_tensors(BY_PATH["all_dtypes.ten"]))
        # Never over the input itself, which may be mapped.
        m = self.error(self.convert(out, out, "--force"))
        self.assertEqual(m["cls"], "bad_argument")
        self.assertEqual(self.convert(out, self.path("c.ten")).returncode, 0)

    def write_checkpoint(self, path, names):
        header, offset, blob = {}, 0, b""
        for i, n in enumerate(names):
            data = struct.pack("<3f", i, i + 0.5, i + 1)
            header[n] = {"dtype": "F32", "shape": [3], "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            blob += data
        text = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + blob)

    def test_convert_maps_long_checkpoint_names_and_brings_them_back(self):
        names = ["model.embed.weight", "model.layers.0.attn.q_proj.weight", "bias", "t0"]
        st = self.path("model.safetensors")
        self.write_checkpoint(st, names)
        ten = self.path("model.ten")
        r = run("convert", st, ten)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"does not fit a .ten info", r.stderr)
        self.assertIn(b"--infos short", r.stderr)
        r = run("convert", st, ten, "--infos", "short")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"t0_1 = model.embed.weight", r.stdout)  # t0 is taken by a name of its own
        table = json.load(open(ten + ".names.json"))
        self.assertEqual(list(table.values()), names)
        infos = [t["info"] for t in json.loads(run("info", "--json", ten).stdout)["tensors"]]
        self.assertEqual(infos, list(table))
        self.assertEqual(len(set(infos)), 4)
        self.assertEqual(infos[2:], ["bias", "t0"])
        # Back out: the table beside the .ten file gives the names back.
        back = self.path("back.safetensors")
        r = run("convert", ten, back)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(run("info", "--json", back).stdout)["tensors"]
        self.assertEqual([t["name"] for t in got], names)
        self.assertEqual([t["sha256"] for t in got],
                         [t["sha256"] for t in json.loads(run("info", "--json", st).stdout)["tensors"]])
        # --infos FILE: a table of the user's own, both ways.
        mine = self.path("mine.json")
        with open(mine, "w") as f:
            json.dump({"emb": names[0], "q": names[1]}, f)
        ten2 = self.path("mine.ten")
        r = run("convert", st, ten2, "--infos", mine)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([t["info"] for t in json.loads(run("info", "--json", ten2).stdout)["tensors"]],
                         ["emb", "q", "bias", "t0"])
        npz = self.path("mine.npz")
        self.assertEqual(run("convert", ten2, npz, "--infos", mine).returncode, 0)
        self.assertEqual([t["name"] for t in json.loads(run("info", "--json", npz).stdout)["tensors"]], names)
        with open(mine, "w") as f:
            f.write("[1, 2]")
        r = run("convert", st, self.path("x.ten"), "--infos", mine)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"expected {", r.stderr)
        # The help's own example works, and is the one shown.
        self.assertIn(b"tenbin convert model.safetensors model.ten --infos short", run("convert", "--help").stdout)


if __name__ == "__main__":
    sys.exit(main())
