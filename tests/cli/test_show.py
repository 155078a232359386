#!/usr/bin/env python3
"""`tenbin show`: image-like tensors of files and messages drawn into a PNG."""

import resource
import struct
import sys

import support
from support import vec, run, start, finish, free_port, chunk_payloads, CliTest, main


def ten_file(path, tensors):
    """A .ten file of (dtype, info, shape, data) tensors, written here as Python's tenbin writes it."""
    with open(path, "wb") as f:
        for dtype, info, shape, data in tensors:
            header = struct.pack(f"<8s8sq{len(shape)}q", dtype, info, len(shape), *shape)
            for payload in (header, data):
                f.write(b"~TenBin~" + struct.pack("<q", len(payload)))
                f.write(payload + bytes(-len(payload) % 64))


class Show(CliTest):
    @staticmethod
    def read_png(path):
        """(width, height, rows of RGB bytes) of an 8-bit RGB PNG, decoded here with zlib."""
        import zlib
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
        pos, idat, ihdr = 8, b"", None
        while pos < len(data):
            (n,) = struct.unpack(">I", data[pos:pos + 4])
            kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
            if kind == b"IHDR":
                ihdr = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat += body
            pos += 12 + n
        width, height, depth, color = ihdr[:4]
        assert (depth, color) == (8, 2), ihdr
        raw = zlib.decompress(idat)
        stride = width * 3
        assert len(raw) == height * (stride + 1)
        rows, prev = [], bytearray(stride)
        for y in range(height):
            f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            for i in range(stride):
                a = line[i - 3] if i >= 3 else 0
                b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
                if f == 1:
                    line[i] = (line[i] + a) & 255
                elif f == 2:
                    line[i] = (line[i] + b) & 255
                elif f == 3:
                    line[i] = (line[i] + (a + b) // 2) & 255
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            rows.append(bytes(line))
            prev = line
        return width, height, rows

    def test_show_draws_image_like_tensors_as_a_png(self):
        png = self.path("image.png")
        r = run("show", vec("u1_image.ten"), "--out", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"2 images, 204 x 90 pixels", r.stdout)
        # Two 8x8 RGB images (NHWC), enlarged 8 times, side by side, captions below.
        width, height, rows = self.read_png(png)
        self.assertEqual((width, height), (204, 90))
        pixels = chunk_payloads(open(vec("u1_image.ten"), "rb").read())[1]
        for k, x0 in ((0, 4), (1, 104)):
            for y, x in ((0, 0), (7, 7), (3, 5)):
                with self.subTest(image=k, y=y, x=x):
                    at = ((k * 8 + y) * 8 + x) * 3
                    px, py = x0 + x * 8 + 3, 4 + y * 8 + 3
                    self.assertEqual(rows[py][px * 3:px * 3 + 3], pixels[at:at + 3])
        self.assertEqual(rows[0][:3], b"\xff\xff\xff")  # the margin
        self.assertIn(0, rows[4 + 64 + 4])  # caption text under the first image
        # A float matrix: one gray image stretched from its minimum (black) to its maximum (white).
        r = run("show", vec("f4_matrix.ten"), "--out", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        width, height, rows = self.read_png(png)
        self.assertEqual((width, height), (104, 62))  # 3x5 enlarged 12 times: 60x36
        self.assertEqual(rows[4][4 * 3:4 * 3 + 3], b"\x00\x00\x00")
        self.assertEqual(rows[4 + 35][(4 + 59) * 3:(4 + 59) * 3 + 3], b"\xff\xff\xff")
        self.assertEqual(rows[4 + 12 + 5][(4 + 24 + 5) * 3:(4 + 24 + 5) * 3 + 3], b"\x80\x80\x80")  # -0.125: half
        # Nothing image-like is an error, not an empty picture.
        r = run("show", vec("i4_i8.ten"), "--out", png)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"no image-like tensor", r.stderr)
        # Received messages: a batch of NCHW images, two to a row.
        port = free_port()
        shower = start("show", f"zpull://127.0.0.1:{port}", "--out", png, "--columns", "2", "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:3,3,16,16",
                      "--count", "1", "--report", "0")
        code, out, err = finish(shower)
        self.assertEqual(code, 0, err)
        # Two rows of cells: 64 pixels of image, three caption lines ("u1 [3, 3, 16, 16]" wraps).
        self.assertEqual(self.read_png(png)[:2], (204, 2 * (64 + 3 * 9 + 4) + 4))


    def test_captions_keep_their_case(self):
        pngs = []
        for info in (b"cat", b"CAT"):
            ten, png = self.path(info.decode() + ".ten"), self.path(info.decode() + ".png")
            ten_file(ten, [(b"u1", info, [8, 8], bytes(range(64)))])
            r = run("show", ten, "--out", png)
            self.assertEqual(r.returncode, 0, r.stderr)
            pngs.append(self.read_png(png))
        (width, height, lower), (_, _, upper) = pngs
        self.assertEqual(lower[:4 + 64], upper[:4 + 64])  # the same picture
        self.assertNotEqual(lower[4 + 64:], upper[4 + 64:])  # captions told apart

    def test_a_long_shape_wraps_instead_of_being_cut(self):
        # "u1 [1, 4, 4, 1]" fits a 16-character cell; "u1 [100000, 4, 4, 1]" takes a third line.
        sizes = {}
        for n in (1, 100000):
            ten, png = self.path(f"{n}.ten"), self.path(f"{n}.png")
            ten_file(ten, [(b"u1", b"", [n, 4, 4, 1], bytes(16 * n))])
            r = run("show", ten, "--out", png, "--max-images", "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            sizes[n] = self.read_png(png)
        self.assertEqual(sizes[100000][1], sizes[1][1] + 9)
        rows = sizes[100000][2]
        third = rows[4 + 64 + 2 * 9 + 1:4 + 64 + 3 * 9]
        self.assertTrue(any(0 in row for row in third), "the third caption line has no text")

    def test_only_the_items_drawn_cost_memory(self):
        # A batch of 20 million 1x1 images, one drawn: well within 512 MiB of
        # address space (a picture made per item took 4.6 GB).
        with open(support.TOOL, "rb") as f:
            if b"__asan_init" in f.read():
                self.skipTest("AddressSanitizer reserves terabytes of address space: no RLIMIT_AS under it")
        ten, png = self.path("many.ten"), self.path("many.png")
        ten_file(ten, [(b"u1", b"x", [20000000, 1, 1, 1], bytes(20000000))])
        limit = 512 << 20
        code, out, err = finish(start("show", ten, "--out", png, "--max-images", "1",
                                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))))
        self.assertEqual(code, 0, err)
        self.assertIn("1 image,", out)


if __name__ == "__main__":
    sys.exit(main())
