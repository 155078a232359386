#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time; fails on any finding.
#
# usage: fuzz/run.sh [SECONDS]      each target runs SECONDS (default 45)
#   TENBIN_FUZZ_BUILD   build folder (default build-fuzz); set up with clang,
#                       ASan and UBSan when it does not exist yet
#   TENBIN_FUZZ_JOBS    parallel fuzzing processes per target (default 1)
#
# Longer runs: fuzz/run.sh 3600, or one target by hand:
#   build-fuzz/fuzz/fuzz-read -max_total_time=3600 build-fuzz/fuzz/corpus/read build-fuzz/fuzz/seeds/read
# The corpora in BUILD/fuzz/corpus grow from run to run. A finding is written
# to BUILD/fuzz/artifacts/; replay it with `build-fuzz/fuzz/fuzz-NAME FILE`
# and turn it into a test in tests/test_hostile.cpp.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-45}"
build="${TENBIN_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${TENBIN_FUZZ_JOBS:-1}"
vectors="$root/tests/vectors"

if [ ! -f "$build/build.ninja" ]; then
  CXX="${CXX:-clang++}" meson setup "$build" "$root" -Dfuzzing=true \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dtests=disabled -Dexamples=disabled -Dtools=disabled
fi
targets=(decode_buffer decode_list read decode_header url formats)
ninja -C "$build" -j "${TENBIN_FUZZ_NINJA_JOBS:-2}" $(printf 'fuzz/fuzz-%s ' "${targets[@]}") >/dev/null

work="$build/fuzz"
/usr/bin/python3 "$root/fuzz/make_seeds.py" "$vectors" "$root/fuzz/seeds/url" "$work/seeds" >/dev/null
mkdir -p "$work/artifacts"

# UBSan only prints by default; a report must stop the run.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"

declare -A max_len=([decode_buffer]=65536 [decode_list]=65536 [read]=65536 [decode_header]=1024 [url]=512
                     [formats]=16384)
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t"
  log="$work/$t.log"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: memory a
  # hostile input makes the library use is a finding too.
  if "$work/fuzz-$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" "${parallel[@]}" -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" "$work/seeds/$t" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  execs=$(grep -h 'stat::number_of_executed_units' "$log" $( [ "$jobs" -gt 1 ] && ls fuzz-*.log 2>/dev/null )  | awk '{s += $2} END {print s + 0}')
  corpus=$(ls "$work/corpus/$t" | wc -l)
  echo "fuzz $t: $status, $execs executions in ${seconds}s, corpus $corpus inputs"
  if [ "$status" != ok ]; then
    grep -h -A30 -E 'ERROR|fuzz property|runtime error|deadly signal|timeout' "$log" | head -60 || true
    ls "$work/artifacts/$t-"* 2>/dev/null || true
  fi
done
exit "$failed"
