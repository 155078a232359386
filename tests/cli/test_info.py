#!/usr/bin/env python3
"""`tenbin info`: every vector of the manifest, malformed files, standard input,
named formats and shards."""

import json
import os
import struct
import sys
import tempfile
import zipfile

from support import (VECTORS, TENSOR_KEYS, ERROR_LINE, VALID, MALFORMED, BY_PATH, vec, expected_tensors,
                     acceptable, ordered, run, CliTest, main)


class Info(CliTest):
    def test_json_matches_manifest_for_every_valid_vector(self):
        self.assertGreater(len(VALID), 10)
        for entry in VALID:
            with self.subTest(file=entry["path"]):
                r = run("info", "--json", vec(entry["path"]))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, b"")
                lines = r.stdout.decode().splitlines()
                self.assertEqual(len(lines), 1)
                got = json.loads(lines[0])
                self.assertEqual(got, {"file": vec(entry["path"]), "tensors": expected_tensors(entry)})
                # Key order as documented, outside and inside.
                pairs = ordered(lines[0])
                self.assertEqual([k for k, _ in pairs], ["file", "tensors"])
                for t in pairs[1][1]:
                    self.assertEqual([k for k, _ in t], TENSOR_KEYS)

    def test_table_matches_manifest_for_every_valid_vector(self):
        for entry in VALID:
            with self.subTest(file=entry["path"]):
                r = run("info", vec(entry["path"]))
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.decode().splitlines()
                n = len(entry["tensors"])
                self.assertTrue(lines[0].startswith(f"{vec(entry['path'])}: {n} tensor"), lines[0])
                rows = lines[2:] if n else lines[1:]
                self.assertEqual(len(rows), n, lines)
                if n:
                    self.assertEqual(lines[1].split(), ["#", "info", "dtype", "shape", "nbytes", "sha256"])
                for i, (row, t) in enumerate(zip(rows, entry["tensors"])):
                    words = row.split()
                    self.assertEqual(words[0], str(i))
                    self.assertEqual(words[1], t["info"] or "-")
                    self.assertEqual(words[2], t["dtype"])
                    self.assertEqual(json.loads(" ".join(words[3:-2])), t["shape"])
                    self.assertEqual(int(words[-2]), t["nbytes"])
                    self.assertEqual(words[-1], t["sha256"])

    def test_control_characters_in_infos_are_escaped_in_the_table(self):
        # Infos Python writes: a NUL inside, a line break, a terminal escape.
        infos = [b"a\0b", b"x\ny", b"\x1b[31m"]
        data = b""
        for info in infos:
            header = struct.pack("<8s8sqq", b"u1", info, 1, 2)
            for payload in (header, b"\x07\x08"):
                padded = payload + b"\0" * ((len(payload) + 63) // 64 * 64 - len(payload))
                data += b"~TenBin~" + struct.pack("<q", len(payload)) + padded
        path = self.path("control.ten")
        with open(path, "wb") as f:
            f.write(data)
        r = run("info", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertNotIn("\x1b", out)
        lines = out.splitlines()
        self.assertEqual(len(lines), 5, lines)  # title, heading, 3 rows: no row broken
        self.assertEqual([row.split()[1] for row in lines[2:]], ["a\\x00b", "x\\x0ay", "\\x1b[31m"])
        r = run("info", "--json", path)
        self.assertEqual([t["info"] for t in json.loads(r.stdout)["tensors"]], ["a\0b", "x\ny", "\x1b[31m"])

    def test_many_files_give_one_line_each_in_order(self):
        r = run("info", "--json", *[vec(e["path"]) for e in VALID])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual(got, [{"file": vec(e["path"]), "tensors": expected_tensors(e)} for e in VALID])

    def test_every_malformed_vector_is_one_error_line_and_status_1(self):
        self.assertGreaterEqual(len(MALFORMED), 7)
        for entry in MALFORMED:
            for mode in ([], ["--json"]):
                with self.subTest(file=entry["path"], mode=mode):
                    path = vec(entry["path"])
                    r = run("info", *mode, path)
                    self.assertEqual(r.returncode, 1)
                    self.assertEqual(r.stdout, b"")
                    lines = r.stderr.decode().splitlines()
                    self.assertEqual(len(lines), 1, lines)
                    m = ERROR_LINE.match(lines[0])
                    self.assertIsNotNone(m, lines[0])
                    self.assertEqual(m["where"], path)
                    self.assertIn(m["cls"], acceptable(entry), lines[0])

    def test_the_empty_file_of_every_format(self):
        # The sanitizer build runs this too: an empty file's buffer has no
        # bytes, not even an address.
        for ext, status in ((".ten", 0), (".ten.zst", 1), (".npy", 1), (".npz", 1), (".safetensors", 1)):
            with self.subTest(ext=ext):
                path = self.path("empty" + ext)
                open(path, "wb").close()
                for mode in ([], ["--json"]):
                    r = run("info", *mode, path)
                    self.assertEqual(r.returncode, status, r.stderr)
                    if status:
                        self.assertEqual(len(r.stderr.decode().splitlines()), 1, r.stderr)
                        self.assertIsNotNone(ERROR_LINE.match(r.stderr.decode().strip()), r.stderr)
                    elif mode:
                        self.assertEqual(json.loads(r.stdout)["tensors"], [])

    def test_a_bad_file_among_good_ones_fails_at_the_end(self):
        good1, good2 = VALID[0], VALID[4]
        bad = MALFORMED[0]
        missing = self.path("does-not-exist.ten")
        args = [vec(good1["path"]), vec(bad["path"]), missing, vec(good2["path"])]
        r = run("info", "--json", *args)
        self.assertEqual(r.returncode, 1)
        got = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual([g["file"] for g in got], [vec(good1["path"]), vec(good2["path"])])
        self.assertEqual(got[1]["tensors"], expected_tensors(good2))
        errors = [ERROR_LINE.match(line) for line in r.stderr.decode().splitlines()]
        self.assertEqual(len(errors), 2)
        self.assertTrue(all(errors), r.stderr)
        self.assertEqual(errors[0]["where"], vec(bad["path"]))
        self.assertIn(errors[0]["cls"], acceptable(bad))
        self.assertEqual((errors[1]["where"], errors[1]["cls"]), (missing, "io_error"))

    def test_a_missing_file_is_an_io_error(self):
        missing = self.path("missing.ten")
        for mode in ([], ["--json"]):
            r = run("info", *mode, missing)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stdout, b"")
            self.assertEqual(r.stderr.decode(), f"{missing}: error: io_error: " +
                             ERROR_LINE.match(r.stderr.decode().strip())["msg"] + "\n")

    def test_a_directory_is_an_io_error(self):
        r = run("info", VECTORS)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "io_error")

    def test_a_file_in_another_format_than_its_name_says_gets_a_hint(self):
        # Each file of one format under another format's name: the error says what it looks like.
        npz, npy, st = self.path("a.npz"), self.path("a.npy"), self.path("a.safetensors")
        for out in (npz, npy, st):
            self.assertEqual(run("convert", vec("f4_matrix.ten"), out).returncode, 0)
        cases = [(npz, "x.ten", ".npz"), (npy, "x.safetensors", ".npy"), (vec("f4_matrix.ten"), "x.npz", ".ten"),
                 (st, "x.npy", ".safetensors"), (npz, "x.tar", ".npz"), (vec("f4_matrix.ten"), "x.tar", ".ten")]
        for source, name, looks in cases:
            misnamed = self.path(name)
            with open(source, "rb") as f, open(misnamed, "wb") as g:
                g.write(f.read())
            for args in (["info", misnamed], ["convert", misnamed, self.path("out.npz")],
                         ["send", "tcp://127.0.0.1:1", "-f", misnamed], ["show", misnamed, "-o", self.path("o.png")]):
                with self.subTest(name=name, command=args[0]):
                    m = self.error(run(*args))
                    self.assertIn(f"this looks like a {looks} file", m["msg"])
            os.remove(misnamed)
        # A file of the format it says gets no hint, nor one of no known format.
        junk = self.path("junk.ten")
        with open(junk, "wb") as f:
            f.write(b"junk" * 100)
        for path in (junk, vec("bad_magic.ten")):
            self.assertNotIn(b"looks like", run("info", path).stderr)

    def test_standard_input(self):
        entry = BY_PATH["buf_batch.bin"]
        data = open(vec(entry["path"]), "rb").read()
        r = run("info", "--json", "-", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})
        r = run("info", "-", input=data[:-10])
        self.assertEqual(r.returncode, 1)
        self.assertIn(ERROR_LINE.match(r.stderr.decode().strip())["cls"], {"truncated", "length_beyond_end"})

    def test_standard_input_compressed(self):
        # A .ten.zst piped in is told by its zstd magic.
        entry = BY_PATH["all_dtypes.ten"]
        with tempfile.TemporaryDirectory() as tmp:
            zst = os.path.join(tmp, "b.ten.zst")
            self.assertEqual(run("convert", vec(entry["path"]), zst).returncode, 0)
            data = open(zst, "rb").read()
        r = run("info", "--json", "-", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})
        r = run("info", "-", input=data[:-3])
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "truncated")
        # pzstd writes a skippable frame first (magic 0x184D2A50, 4-byte
        # length, payload): zstd readers pass over it, and so must this.
        skippable = struct.pack("<II", 0x184D2A50, 4) + b"\0\0\0\0"
        r = run("info", "--json", "-", input=skippable + data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"file": "-", "tensors": expected_tensors(entry)})

    def test_info_lists_named_formats_with_names_and_metadata(self):
        st = self.path("m.safetensors")
        self.assertEqual(run("convert", vec("all_dtypes.ten"), st, "-m", "format=pt", "-m", "note=two\nlines").returncode, 0)
        r = run("info", "--json", st)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["metadata"], {"format": "pt", "note": "two\nlines"})
        want = expected_tensors(BY_PATH["all_dtypes.ten"])
        self.assertEqual([t.pop("name") for t in j["tensors"]], [t["info"] for t in want])
        self.assertEqual(j["tensors"], want)
        r = run("info", st)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout.decode()
        self.assertIn("  metadata format: pt\n", text)
        self.assertIn("  metadata note: two lines\n", text)  # kept on one line
        self.assertRegex(text, r"\n  #  name +dtype")
        # A name too long for an info is listed as it is.
        self.assertEqual(run("convert", vec("f4_matrix.ten"), self.path("one.npy")).returncode, 0)
        np_path = self.path("long.npz")
        with open(self.path("one.npy"), "rb") as f:
            npy = f.read()
        with zipfile.ZipFile(np_path, "w", zipfile.ZIP_STORED) as z:
            z.writestr("a_rather_long_name.npy", npy)
        j = json.loads(run("info", "--json", np_path).stdout)
        self.assertEqual((j["tensors"][0]["name"], j["tensors"][0]["info"]), ("a_rather_long_name", ""))
        self.assertNotIn("metadata", j)
        self.assertIn(b"a_rather_long_name", run("info", np_path).stdout)
        with open(self.path("bad.safetensors"), "wb") as f:
            f.write(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
        m = self.error(run("info", self.path("bad.safetensors")))
        self.assertEqual((m["where"], m["cls"]), (self.path("bad.safetensors"), "bad_header"))

    def test_hostile_shards_are_refused(self):
        good = self.path("good.tar")
        import tarfile
        with tarfile.open(good, "w", format=tarfile.USTAR_FORMAT) as tar:
            tar.add(vec("f4_matrix.ten"), arcname="000000.ten")
        data = bytearray(open(good, "rb").read())
        cases = {
            "short.tar": (bytes(data[:100]), "truncated"),
            "notar.tar": (b"x" * 1024, "bad_header"),
            "checksum.tar": (data[:0] + bytes([data[0] ^ 1]) + data[1:], "bad_header"),
            "cut.tar": (bytes(data[:512 + 10]), "truncated"),
        }
        big = bytearray(data)
        big[124:136] = b"77777777777\0"  # a size far past the end (checksum fixed below)
        big[148:156] = b"        "
        big[148:156] = b"%06o\0 " % sum(big[:512])
        cases["size.tar"] = (bytes(big), "truncated")
        for name, (content, cls) in cases.items():
            with self.subTest(case=name):
                with open(self.path(name), "wb") as f:
                    f.write(content)
                r = run("info", self.path(name))
                self.assertEqual(r.returncode, 1, r.stderr)
                m = ERROR_LINE.match(r.stderr.decode().splitlines()[0])
                self.assertIsNotNone(m, r.stderr)
                self.assertEqual(m["cls"], cls, r.stderr)
        self.assertEqual(run("recv", "zpull://127.0.0.1:1", "--save", self.path("x.ten")).returncode, 64)


if __name__ == "__main__":
    sys.exit(main())
