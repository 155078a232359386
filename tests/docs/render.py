"""The built documentation site renders: headless Chromium draws its main
pages, and each must look like a styled page.

usage: render.py SITE_HTML_DIR

For each page, a screenshot as built and one of the same page with its
stylesheets removed. The page as built must be far from one colour (not
blank) and differ from the unstyled one over a large part of the window
(at least a fifth of its 32-pixel blocks: the theme's stylesheet loaded and
applied; a missing or broken _static/ leaves the two alike, and a styled
page differs over 40% or more). The screenshots stay in SITE_HTML_DIR/../render/
for a person to look at. Exit status 77 (skipped) when chromium is not
installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from PIL import Image, ImageChops

PAGES = ["index.html", "cpp-guide.html", "shared-memory.html", "api/cpp-core.html"]
WINDOW = (1280, 900)


def screenshot(chromium, url, png, profile):
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
               f"--screenshot={png}", url]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or not os.path.isfile(png):
        raise RuntimeError(f"chromium failed on {url} (exit {run.returncode}): {run.stderr[-2000:]}")
    return Image.open(png).convert("RGB")


def unstyled_copy(page, site, folder):
    """The page without its stylesheets, its other links still into the site."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    text, removed = re.subn(r"<link[^>]*rel=\"stylesheet\"[^>]*>", "", text)
    if removed == 0:
        raise RuntimeError(f"{page} links no stylesheet")
    base = "file://" + os.path.dirname(os.path.abspath(page)) + "/"
    text = text.replace("<head>", f'<head><base href="{base}">', 1)
    path = os.path.join(folder, "unstyled-" + os.path.relpath(page, site).replace("/", "-"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def dominant_share(image):
    colours = image.getcolors(maxcolors=image.width * image.height)
    return max(count for count, _ in colours) / (image.width * image.height), len(colours)


def block_change(a, b):
    """The share of the window's 32-pixel blocks whose mean brightness
    differs by more than 8 levels between two screenshots: the layout, not
    anti-aliasing, tells a styled page from an unstyled one."""
    blocks = (WINDOW[0] // 32, WINDOW[1] // 32)
    diff = ImageChops.difference(a.convert("L").resize(blocks, Image.BOX), b.convert("L").resize(blocks, Image.BOX))
    return sum(diff.histogram()[9:]) / (blocks[0] * blocks[1])


def main():
    site = os.path.abspath(sys.argv[1])
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium is not installed: the rendering check is skipped")
        return 77
    shots = os.path.join(os.path.dirname(site), "render")
    os.makedirs(shots, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tenbin-render-") as tmp:
        for name in PAGES:
            page = os.path.join(site, name)
            if not os.path.isfile(page):
                print(f"FAIL {name}: not in the site")
                failed += 1
                continue
            stem = name.replace("/", "-").removesuffix(".html")
            styled = screenshot(chromium, "file://" + page, os.path.join(shots, stem + ".png"),
                                os.path.join(tmp, "profile-" + stem))
            plain = screenshot(chromium, "file://" + unstyled_copy(page, site, tmp),
                               os.path.join(shots, stem + "-unstyled.png"), os.path.join(tmp, "profile-u-" + stem))
            share, colours = dominant_share(styled)
            changed = block_change(styled, plain)
            problems = []
            if share > 0.95 or colours < 32:
                problems.append(f"nearly blank ({share:.0%} one colour, {colours} colours)")
            if changed < 0.20:
                problems.append(f"looks unstyled (only {changed:.0%} of it differs from the page without CSS)")
            print(f"{'FAIL' if problems else 'ok'} {name}: {share:.0%} one colour, {colours} colours, "
                  f"{changed:.0%} differs from unstyled{': ' + '; '.join(problems) if problems else ''}")
            failed += bool(problems)
    print(f"screenshots in {shots}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
