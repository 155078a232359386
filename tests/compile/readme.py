"""Every C++ and Python example of the README and the documentation site
compiles, and runs where it stands alone.

usage: readme.py --build BUILD_DIR --reference SOURCE --link-like PROGRAM
                 [--pythonpath DIR] FILE_OR_FOLDER...

Each Markdown file given (a folder: every *.md under it) is read for fenced
```cpp and ```python blocks (indented ones in lists too).

- A C++ block with a main() is a whole program: compiled with the flags the
  build used for SOURCE (a file using the whole library, from
  BUILD_DIR/compile_commands.json), linked as the build links PROGRAM
  (BUILD_DIR/build.ninja), and run in a fresh folder; it must exit 0.
- Any other C++ block is a fragment: its #include lines go first, then
  PRELUDE, which declares only the names the pages leave to the reader
  (sockets, a step count, fill and train), then the rest as a function
  body, compiled (-fsyntax-only). Nothing else is included for a block: a
  fragment that forgets a header fails.
- A Python block runs with this interpreter, the built package first on
  its path (--pythonpath), in a fresh folder; it must exit 0. Without
  --pythonpath (a sanitizer build, whose extension plain python3 cannot
  load) Python blocks are byte-compiled only.

A comment on the line before a block changes that, for blocks that need
what a page cannot give them (a peer on another host, a GPU):
  <!-- check: compile -->   compile (C++) or byte-compile (Python) only
  <!-- check: skip -->      not checked at all (output, pseudo-code)
Errors point at the Markdown file's lines (#line).
"""
import argparse
import concurrent.futures
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
// What a fragment leaves to the reader.
extern zmq::socket_t push_socket, pull_socket;
constexpr int steps = 2;
template <class... Args> void fill(Args&&...) {}
template <class... Args> void train(Args&&...) {}
"""

# A fence: three or more backticks, then the language or a MyST directive
# ({include}, ...); indented too (blocks in lists).
FENCE = re.compile(r"^\s*(```+)\s*(\S*)")
MARK = re.compile(r"^\s*<!--\s*check:\s*(\w+)\s*-->\s*$")
MODES = {"compile", "skip"}


def blocks(path):
    """(language, mode, first line number, lines) of each fenced block."""
    found, lang, fence, start, body, mode, previous = [], None, "", 0, [], None, ""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if lang is None and m:
                mark = MARK.match(previous)
                if mark and mark.group(1) not in MODES:
                    sys.exit(f"{path}:{number - 1}: unknown check mode {mark.group(1)!r} ({', '.join(MODES)})")
                fence, lang, start, body, mode = m.group(1), m.group(2), number + 1, [], mark.group(1) if mark else None
            elif lang is not None and line.strip() == fence:
                found.append((lang, mode, start, body))
                lang = None
            elif lang is not None:
                body.append(line)
            previous = line
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


def link_flags(build_dir, program):
    """What the build links `program` (a path in the build folder) with,
    its relative rpaths made absolute."""
    with open(os.path.join(build_dir, "build.ninja"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"build {program}: ") and "LINKER" in line:
            for following in lines[i + 1:]:
                if not following.startswith(" "):
                    break
                if following.strip().startswith("LINK_ARGS = "):
                    args = shlex.split(following.strip()[len("LINK_ARGS = "):].replace("$$", "$"))
                    origin = os.path.join(build_dir, os.path.dirname(program))
                    return [a.replace("$ORIGIN", origin) for a in args]
    sys.exit(f"no link command of {program} in {build_dir}/build.ninja")


def cpp_source(path, start, body):
    line = lambda n: f'#line {n} "{path}"\n'
    if is_program(body):
        return line(start) + "".join(body)
    includes = [(start + i, l) for i, l in enumerate(body) if l.lstrip().startswith("#include")]
    out = [line(n) + l for n, l in includes]
    out.append('#line 1 "fragment-prelude"\n' + PRELUDE)
    out.append(f"void fragment_at_line_{start}() {{\n")
    for i, l in enumerate(body):
        if not l.lstrip().startswith("#include"):
            out.append(line(start + i) + l)
    out.append("}\n")
    return "".join(out)


def is_program(body):
    return any(re.search(r"\bint\s+main\s*\(", l) for l in body)


def run(command, **kwargs):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)
    except subprocess.TimeoutExpired:
        return False, f"{command[0]}: still running after 120 s"
    return done.returncode == 0, (done.stdout + done.stderr).strip() + (
        f"\n(exit status {done.returncode})" if done.returncode else "")


def check_cpp(path, mode, start, body, build):
    with tempfile.TemporaryDirectory(prefix="tenbin-doc-") as tmp:
        source = os.path.join(tmp, "block.cpp")
        with open(source, "w", encoding="utf-8") as f:
            f.write(cpp_source(path, start, body))
        if not is_program(body) or mode == "compile":
            return "compiled", *run(build.cxx + ["-fsyntax-only", "-fdiagnostics-color=never", source],
                                    cwd=build.directory)
        program = os.path.join(tmp, "block")
        ok, out = run(build.cxx + ["-fdiagnostics-color=never", source, "-o", program] + build.ld, cwd=build.directory)
        if not ok:
            return "compiled", ok, out
        return "compiled and ran", *run([program], cwd=tmp)


def check_python(path, mode, start, body, build):
    code = textwrap.dedent("".join(body))
    try:
        compile(code, f"{path}:{start}", "exec")
    except SyntaxError as e:
        return "byte-compiled", False, f"{path}:{start - 1 + (e.lineno or 1)}: {e.msg}"
    if mode == "compile" or not build.pythonpath:
        return "byte-compiled", True, ""
    with tempfile.TemporaryDirectory(prefix="tenbin-doc-") as tmp:
        script = os.path.join(tmp, "block.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write("\n" * (start - 1) + code)
        # Run under the page's name: tracebacks point at its lines.
        runner = "import sys; exec(compile(open(sys.argv[1]).read(), sys.argv[2], 'exec'))"
        env = dict(os.environ, PYTHONPATH=build.pythonpath, PYTHONDONTWRITEBYTECODE="1")
        return "ran", *run([sys.executable, "-c", runner, script, path], cwd=tmp, env=env)


def markdown_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for folder, dirs, files in os.walk(p):
                dirs.sort()
                yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".md"))
        else:
            yield p


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--link-like", required=True)
    parser.add_argument("--pythonpath")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    build = argparse.Namespace(pythonpath=args.pythonpath and os.path.abspath(args.pythonpath))
    build.directory, build.cxx = compile_flags(args.build, args.reference)
    build.ld = link_flags(os.path.abspath(args.build), args.link_like)

    jobs = []
    for path in markdown_files(args.files):
        path = os.path.realpath(path)
        for lang, mode, start, body in blocks(path):
            checker = {"cpp": check_cpp, "python": check_python}.get(lang)
            if checker and mode != "skip":
                jobs.append((path, lang, start, checker, mode, body))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = pool.map(lambda j: (j, j[3](j[0], j[4], j[2], j[5], build)), jobs)
        failed = 0
        for (path, lang, start, *_), (what, ok, output) in results:
            where = f"{os.path.relpath(path)}:{start}"
            print(f"{'ok' if ok else 'FAIL'}: {what}: the {lang} block at {where}")
            if not ok:
                failed += 1
                print(textwrap.indent(output, "    "))
    print(f"{len(jobs) - failed} blocks passed, {failed} failed")
    # No blocks at all (or a broken extractor) must not pass quietly.
    return 1 if failed or not jobs else 0


if __name__ == "__main__":
    sys.exit(main())
