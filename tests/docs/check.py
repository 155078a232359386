"""The documentation site builds cleanly and has no broken internal link.

usage: check.py docs/build.py BUILD_ARGS... --out DIR

Runs docs/build.py --strict (any Doxygen or Sphinx warning fails, every
cross-reference must resolve), then reads every page of DIR/html: each
local href and src (pages, anchors, images, stylesheets, scripts, the
diagram) must name a file that exists and, with a #fragment, an element of
that page with that id. External links are listed, not fetched (no network
here).
"""
import html.parser
import os
import subprocess
import sys
import urllib.parse


class Links(html.parser.HTMLParser):
    """The ids a page defines and the local targets it points at."""

    def __init__(self):
        super().__init__()
        self.ids, self.targets, self.external = set(), [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        # Anchors: any element's id, and an <a>'s old-style name.
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src", "data"):
            value = attrs.get(key)
            if value is None or (tag == "a" and key != "href"):
                continue
            parts = urllib.parse.urlsplit(value)
            if parts.scheme in ("http", "https", "mailto"):
                self.external.add(value)
            elif parts.scheme == "data" or value.startswith("javascript:"):
                continue
            elif parts.scheme or parts.netloc:
                self.targets.append((value, None, None))  # file:// or //host: never right in a site
            else:
                self.targets.append((value, urllib.parse.unquote(parts.path), parts.fragment))


def parse(path):
    links = Links()
    with open(path, encoding="utf-8") as f:
        links.feed(f.read())
    return links


def check_links(root):
    pages = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                pages[os.path.normpath(path)] = parse(path)
    broken, checked, external = [], 0, set()
    for page, links in sorted(pages.items()):
        external |= links.external
        for value, path, fragment in links.targets:
            checked += 1
            if path is None:
                broken.append(f"{os.path.relpath(page, root)}: {value}: not a link within the site")
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.isfile(target):
                broken.append(f"{os.path.relpath(page, root)}: {value}: no file {os.path.relpath(target, root)}")
            elif fragment and target.endswith(".html") and fragment not in pages[target].ids:
                broken.append(f"{os.path.relpath(page, root)}: {value}: no #{fragment} in "
                              f"{os.path.relpath(target, root)}")
    return pages, checked, broken, external


def main():
    build, args = sys.argv[1], sys.argv[2:]
    out = args[args.index("--out") + 1]
    if subprocess.run([sys.executable, build, "--strict", *args]).returncode != 0:
        print("docs: the site has warnings (above); each is an error here")
        return 1
    pages, checked, broken, external = check_links(os.path.join(out, "html"))
    # An empty site (or a checker that finds nothing) must not pass.
    if len(pages) < 10 or checked < 100:
        print(f"docs: only {len(pages)} pages and {checked} links found in {out}/html")
        return 1
    for line in broken:
        print("broken link:", line)
    print(f"{len(pages)} pages, {checked} local links and targets checked, {len(broken)} broken; "
          f"{len(external)} external links not fetched")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
