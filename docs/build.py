"""Builds tenbin's documentation site: Doxygen's XML of the public headers,
then Sphinx over docs/ (MyST pages, breathe, autodoc, graphviz).

usage: build.py [--strict] --doxyfile FILE --tool TENBIN --pythonpath DIR
                --version V --out DIR [--stamp FILE --depfile FILE]

--out DIR gets html/ (the site), xml/ (Doxygen's) and doctrees/. With
--strict (the `docs` test), any Doxygen or Sphinx warning fails the build
(Sphinx runs to the end first, to report them all); without it (the `docs`
target), warnings are printed and the site is written anyway. --stamp and
--depfile let meson rebuild the site only when one of its inputs changed.
"""
import argparse
import os
import subprocess
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)


def inputs(args):
    """Every file the site is made from, for meson's depfile."""
    found = [args.doxyfile, args.tool]
    for top in ("docs", "include/tenbin", "python/tenbin", "bench/results"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [os.path.join(folder, f) for f in files]
    found += [os.path.join(ROOT, f) for f in ("CHANGELOG.md", "CONTRIBUTING.md")]
    built = args.pythonpath
    for folder, _, files in os.walk(os.path.join(built, "tenbin")):
        found += [os.path.join(folder, f) for f in files if f.endswith((".py", ".so"))]
    return sorted(os.path.abspath(f) for f in found if os.path.isfile(f))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--doxyfile", required=True)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--version", default="")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stamp")
    parser.add_argument("--depfile")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    # The configured Doxyfile, writing into OUT; its FAIL_ON_WARNINGS only
    # when strict.
    with open(args.doxyfile, encoding="utf-8") as f:
        config = f.read() + f"\nOUTPUT_DIRECTORY = {out}\n"
    if not args.strict:
        config += "WARN_AS_ERROR = NO\n"
    if subprocess.run(["doxygen", "-"], input=config, text=True).returncode != 0:
        return 1

    env = dict(os.environ, TENBIN_DOXYGEN_XML=os.path.join(out, "xml"), TENBIN_TOOL=os.path.abspath(args.tool),
               TENBIN_PYTHONPATH=os.path.abspath(args.pythonpath), TENBIN_VERSION=args.version,
               PYTHONDONTWRITEBYTECODE="1")
    sphinx = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-q", "-d", os.path.join(out, "doctrees"),
              DOCS, os.path.join(out, "html")]
    if args.strict:
        sphinx[3:3] = ["-W", "--keep-going"]
    if subprocess.run(sphinx, env=env).returncode != 0:
        return 1

    if args.depfile:
        with open(args.depfile, "w", encoding="utf-8") as f:
            f.write(args.stamp.replace(" ", "\\ ") + ": " +
                    " ".join(p.replace(" ", "\\ ") for p in inputs(args)) + "\n")
    if args.stamp:
        with open(args.stamp, "w", encoding="utf-8") as f:
            f.write(os.path.join(out, "html", "index.html") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
