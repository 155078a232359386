"""The lifetime traps of the API either compile correctly or fail to compile.

usage: dangling.py INCLUDE_DIR CONFIG_INCLUDE_DIR COMPILER [COMPILER...]

Each case is a small program compiled with -fsyntax-only -Werror=dangling
(clang) by every compiler given: a named braced tensor_span of named
tensors must compile (it refers to them), borrowing a temporary container
must not compile anywhere, and keeping a span or view of temporaries must
be refused by clang's lifetime analysis (g++ 12 has none).
"""
import os
import subprocess
import sys
import tempfile

PRELUDE = """
#include <tenbin/core.hpp>
#include <vector>
using namespace tenbin;
int main() {
"""

CASES = [
    # (name, body, compiles with g++, compiles with clang)
    ("named braced list of named tensors", """
        tensor x = tensor::zeros(dtype::f4, {2});
        tensor y = tensor::zeros(dtype::i4, {2});
        tensor_span batch = {x, y};
        return static_cast<int>(batch.size()) - 2;""", True, True),
    ("braced temporaries as a call argument", """
        return static_cast<int>(encode_buffer({tensor::zeros(dtype::u1, {1}), tensor::zeros(dtype::u1, {2})}).size() == 0);""",
     True, True),
    ("named braced list of temporaries", """
        tensor_span batch = {tensor::zeros(dtype::u1, {1}), tensor::zeros(dtype::u1, {2})};
        return static_cast<int>(batch.size());""", True, False),
    ("named span of a temporary vector", """
        tensor_span batch = std::vector<tensor>{tensor::zeros(dtype::u1, {1})};
        return static_cast<int>(batch.size());""", True, False),
    ("view of a temporary tensor", """
        tensor_view v = tensor::zeros(dtype::u1, {1}).view();
        return static_cast<int>(v.ndim());""", True, False),
    ("borrowing a temporary container", """
        tensor t = tensor::borrow(std::vector<float>{1.0f, 2.0f}, {2});
        return static_cast<int>(t.count());""", False, False),
    ("borrowing a temporary container, element type spelled out", """
        tensor t = tensor::borrow<float>(std::vector<float>{1.0f, 2.0f}, {2});
        return static_cast<int>(t.count());""", False, False),
    ("a braced list mixing tensors and views", """
        tensor x = tensor::zeros(dtype::f4, {2});
        tensor_view v = x.view();
        tensor_span batch = {x, v};
        return static_cast<int>(batch.size());""", False, False),
]


def compiles(compiler, includes, body):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(PRELUDE + body + "\n}\n")
        path = f.name
    try:
        args = [compiler, "-std=c++20", "-fsyntax-only", "-Werror=dangling" if "clang" in compiler else "-Werror"]
        args += [f"-I{d}" for d in includes] + [path]
        run = subprocess.run(args, capture_output=True, text=True)
        return run.returncode == 0, run.stderr
    finally:
        os.unlink(path)


def main():
    includes, compilers = sys.argv[1:3], sys.argv[3:]
    failed = passed = 0
    for compiler in compilers:
        is_clang = "clang" in os.path.basename(compiler)
        for name, body, gcc_ok, clang_ok in CASES:
            want = clang_ok if is_clang else gcc_ok
            got, err = compiles(compiler, includes, body)
            if got == want:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {compiler}: {name}: expected {'to compile' if want else 'an error'}, got "
                      f"{'none' if got else 'an error'}\n{err}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
