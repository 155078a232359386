#!/usr/bin/env bash
# Installs tenbin from SOURCE_ROOT into a temporary prefix, then builds and
# runs consumer programs against it: a CMake project using
# find_package(tenbin), a plain Makefile using pkg-config, the same program
# against the build tree's uninstalled pkg-config file, and a meson
# project using tenbin as a subproject. Exits non-zero on the first failure.
#
#   tests/consumers/run.sh SOURCE_ROOT
#
# Needs meson, ninja, cmake, make, pkg-config and the library's own
# dependencies; a missing cmake skips the CMake consumer (exit code 77 if
# nothing could run).
set -euo pipefail

src=$(cd "${1:?usage: run.sh SOURCE_ROOT}" && pwd)
here="$src/tests/consumers"
work=$(mktemp -d "${TMPDIR:-/tmp}/tenbin-consumers-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

# Only the library, built as a packager would (release, -O3), with
# warnings as errors: GCC's -O3 analyses warn where -O1 does not. No tests,
# tools, examples or benchmarks, and no sanitizers from the caller's
# environment.
lib_options=(-Dtests=disabled -Dtools=disabled -Dexamples=disabled -Dbench=disabled -Dpython=disabled
             --buildtype=release -Dwerror=true --wrap-mode=nofallback)
export -n CXXFLAGS LDFLAGS 2>/dev/null || true
unset MESON_TESTTHREADS ASAN_OPTIONS UBSAN_OPTIONS LD_PRELOAD

step() { echo "== $*"; }

step "install tenbin to $prefix"
meson setup "$work/build" "$src" --prefix="$prefix" --libdir=lib "${lib_options[@]}" >"$work/setup.log" ||
    { cat "$work/setup.log"; exit 1; }
meson install -C "$work/build" >"$work/install.log" || { cat "$work/install.log"; exit 1; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ran=0

step "pkg-config: $(pkg-config --cflags --libs tenbin)"
cp -rL "$here/make" "$work/make"
make -C "$work/make" --no-print-directory
"$work/make/consumer"
ran=$((ran + 1))

step "pkg-config, with libtenbin.a"
# Not `pkg-config --static`: Debian's libzmq.pc then asks for static
# archives Debian does not ship. libzmq stays shared; what libtenbin.a needs
# besides is its Requires.private (libzstd) and -pthread.
private=$(pkg-config --print-requires-private tenbin | grep -v cppzmq | tr '\n' ' ')
# shellcheck disable=SC2046,SC2086
"${CXX:-c++}" -std=c++20 -o "$work/make/consumer-static" "$work/make/consumer.cpp" \
    $(pkg-config --cflags --libs tenbin | sed "s|-ltenbin|$prefix/lib/libtenbin.a|") \
    $( [ -z "$private" ] || pkg-config --libs $private) -pthread
env -u LD_LIBRARY_PATH "$work/make/consumer-static"
if ldd "$work/make/consumer-static" | grep -q libtenbin; then
    echo "consumer-static links libtenbin.so"; exit 1
fi

step "pkg-config from the build tree (tenbin-uninstalled.pc), uninstalled"
# pkg-config prefers NAME-uninstalled.pc: what a user building against a
# build directory gets.
mkdir -p "$work/uninstalled"
# shellcheck disable=SC2046
"${CXX:-c++}" -std=c++20 -o "$work/uninstalled/consumer" "$here/make/consumer.cpp" \
    $(PKG_CONFIG_PATH="$work/build/meson-uninstalled" pkg-config --cflags --libs tenbin)
LD_LIBRARY_PATH="$work/build/lib" "$work/uninstalled/consumer"
ran=$((ran + 1))

if command -v cmake >/dev/null; then
    for kind in shared static; do
        step "cmake find_package(tenbin), $kind"
        cp -rL "$here/cmake" "$work/cmake-$kind"
        static=OFF
        [ "$kind" = static ] && static=ON
        cmake -S "$work/cmake-$kind" -B "$work/cmake-$kind/build" -DCMAKE_PREFIX_PATH="$prefix" \
            -DTENBIN_STATIC=$static >"$work/cmake-$kind.log" || { cat "$work/cmake-$kind.log"; exit 1; }
        cmake --build "$work/cmake-$kind/build" >>"$work/cmake-$kind.log" || { cat "$work/cmake-$kind.log"; exit 1; }
        # The shared one must find the library without LD_LIBRARY_PATH
        # (CMake sets the build RPATH from the imported location).
        env -u LD_LIBRARY_PATH "$work/cmake-$kind/build/consumer"
    done
    ran=$((ran + 1))
else
    echo "cmake not installed: CMake consumer skipped"
fi

step "meson subproject"
cp -rL "$here/meson" "$work/meson"
mkdir -p "$work/meson/subprojects"
ln -s "$src" "$work/meson/subprojects/tenbin"
meson setup "$work/meson/build" "$work/meson" --force-fallback-for=tenbin --wrap-mode=nofallback \
    -Doptimization=1 >"$work/meson-setup.log" || { cat "$work/meson-setup.log"; exit 1; }
grep -q "Executing subproject tenbin" "$work/meson-setup.log" ||
    { echo "tenbin was not built as a subproject"; cat "$work/meson-setup.log"; exit 1; }
meson compile -C "$work/meson/build" >"$work/meson-compile.log" || { cat "$work/meson-compile.log"; exit 1; }
env -u LD_LIBRARY_PATH "$work/meson/build/consumer"
ran=$((ran + 1))

[ "$ran" -gt 0 ] || exit 77
echo "consumers: all $ran kinds built and ran"
