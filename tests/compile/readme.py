"""Every C++ and Python code block of the README compiles.

usage: readme.py README.md BUILD_DIR REFERENCE_SOURCE

A ```cpp block is compiled (-fsyntax-only) with the flags the build used for
REFERENCE_SOURCE (a file using the whole library), taken from
BUILD_DIR/compile_commands.json, so include paths of packages and wraps are
the build's own. A block with a main() is a whole program and is compiled as
it is; any other is a fragment: its #include lines go first, then PRELUDE,
which declares only the names the README leaves to the reader (sockets, a
step count, fill and train), then the rest as a function body. Nothing else
is included for a block: a fragment that forgets a header fails. ```python
blocks are byte-compiled. Errors point at README lines (#line).
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap

PRELUDE = """
#include <zmq.hpp>
// What a README fragment leaves to the reader.
extern zmq::socket_t push_socket, pull_socket;
constexpr int steps = 2;
template <class... Args> void fill(Args&&...) {}
template <class... Args> void train(Args&&...) {}
"""

FENCE = re.compile(r"^\s*```(\w*)\s*$")  # indented too (blocks in lists)


def blocks(path):
    """(language, first line number, lines) of each fenced block."""
    found, lang, start, body = [], None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if lang is None and m:
                lang, start, body = m.group(1), number + 1, []
            elif lang is not None and line.strip() == "```":
                found.append((lang, start, body))
                lang = None
            elif lang is not None:
                body.append(line)
    if lang is not None:
        sys.exit(f"{path}: the block opened at line {start - 1} is never closed")
    return found


def compile_flags(build_dir, reference):
    """The compiler command the build used for `reference`, minus its
    input, output and dependency-file arguments."""
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    target = os.path.realpath(reference)
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == target:
            args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
            kept, skip = [], False
            for a in args:
                if skip:
                    skip = False
                elif a in ("-o", "-MQ", "-MF", "-MT"):
                    skip = True
                elif a in ("-c", "-MD", "-MMD") or os.path.realpath(os.path.join(e["directory"], a)) == target:
                    continue
                else:
                    kept.append(a)
            return e["directory"], kept
    sys.exit(f"{reference} is not in {build_dir}/compile_commands.json")


def cpp_source(readme, start, body):
    line = lambda n: f'#line {n} "{readme}"\n'
    if any(re.search(r"\bmain\s*\(", l) for l in body):
        return line(start) + "".join(body)
    includes = [(start + i, l) for i, l in enumerate(body) if l.lstrip().startswith("#include")]
    out = [line(n) + l for n, l in includes]
    out.append('#line 1 "readme-prelude"\n' + PRELUDE)
    out.append(f"void readme_block_{start}() {{\n")
    for i, l in enumerate(body):
        if not l.lstrip().startswith("#include"):
            out.append(line(start + i) + l)
    out.append("}\n")
    return "".join(out)


def main():
    readme, build_dir, reference = sys.argv[1:4]
    readme = os.path.realpath(readme)
    directory, flags = compile_flags(build_dir, reference)
    failed = checked = 0
    for lang, start, body in blocks(readme):
        if lang == "cpp":
            with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
                f.write(cpp_source(readme, start, body))
                path = f.name
            try:
                run = subprocess.run(flags + ["-fsyntax-only", "-fdiagnostics-color=never", path], cwd=directory,
                                     capture_output=True, text=True)
            finally:
                os.unlink(path)
            ok, err = run.returncode == 0, run.stderr
        elif lang == "python":
            try:
                compile(textwrap.dedent("".join(body)), f"{readme}:{start}", "exec")
                ok, err = True, ""
            except SyntaxError as e:
                ok, err = False, f"{readme}:{start - 1 + (e.lineno or 1)}: {e.msg}"
        else:
            continue
        checked += 1
        print(f"{'ok' if ok else 'FAIL'}: the {lang} block at README line {start}")
        if not ok:
            failed += 1
            print(err)
    print(f"{checked - failed} compiled, {failed} failed")
    # A README without blocks (or a broken extractor) must not pass quietly.
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
