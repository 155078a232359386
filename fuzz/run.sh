#!/usr/bin/env bash
# Runs every libFuzzer target from the corpus kept in the repository; fails
# on any finding.
#
# usage: fuzz/run.sh [SECONDS [RUNS]]
#   each target stops after RUNS executions (default 1000000; 0: no limit) or
#   SECONDS (default 40), whichever comes first: CI's budget.
#   TENBIN_FUZZ_BUILD   build folder (default build-fuzz); set up with clang,
#                       ASan and UBSan when it does not exist yet
#   TENBIN_FUZZ_JOBS    parallel fuzzing processes per target (default 1)
#   TENBIN_FUZZ_MERGE=1 afterwards, merge what the run found into
#                       fuzz/corpus/TARGET (libFuzzer's -merge=1 keeps only
#                       inputs that add coverage): commit the result
#
# Long runs (hours, all cores): TENBIN_FUZZ_JOBS=$(nproc) fuzz/run.sh 3600 0
# Each target reads fuzz/corpus/TARGET (kept in git, minimised) and the seeds
# made from tests/vectors, and writes what it finds to BUILD/fuzz/corpus/TARGET,
# which grows from run to run. A finding is written to BUILD/fuzz/artifacts/;
# replay it with `build-fuzz/fuzz/fuzz-NAME FILE` and turn it into a test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-40}"
runs="${2:-1000000}"
[ "$runs" = 0 ] && runs=-1
build="${TENBIN_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${TENBIN_FUZZ_JOBS:-1}"
vectors="$root/tests/vectors"

if [ ! -f "$build/build.ninja" ]; then
  CXX="${CXX:-clang++}" meson setup "$build" "$root" -Dfuzzing=true \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dtests=disabled -Dexamples=disabled -Dtools=disabled
fi
# fuzz-zstd exists only in a build with libzstd.
built=" $(ninja -C "$build" -t targets all 2>/dev/null | grep -o '^fuzz/fuzz-[a-z_]*:' | tr '\n' ' ') "
targets=()
for t in decode_buffer decode_list read decode_header url formats zrecv sctp_parts shm_wire zstd; do
  [[ "$built" == *" fuzz/fuzz-$t: "* ]] && targets+=("$t")
done
ninja -C "$build" -j "${TENBIN_FUZZ_NINJA_JOBS:-2}" $(printf 'fuzz/fuzz-%s ' "${targets[@]}") >/dev/null

work="$build/fuzz"
/usr/bin/python3 "$root/fuzz/make_seeds.py" "$vectors" "$root/fuzz/seeds/url" "$work/seeds" >/dev/null
mkdir -p "$work/artifacts"

# UBSan only prints by default; a report must stop the run.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"

declare -A max_len=([decode_buffer]=65536 [decode_list]=65536 [read]=65536 [decode_header]=1024 [url]=512
                     [formats]=16384 [zrecv]=8192 [sctp_parts]=8192 [shm_wire]=4096 [zstd]=65536)
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "$root/fuzz/corpus/$t"
  started=$SECONDS
  log="$work/$t.log"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: memory a
  # hostile input makes the library use is a finding too.
  if "$work/fuzz-$t" -max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" "${parallel[@]}" -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" "$root/fuzz/corpus/$t" "$work/seeds/$t" \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  execs=$(grep -h 'stat::number_of_executed_units' "$log" $( [ "$jobs" -gt 1 ] && ls fuzz-*.log 2>/dev/null )  | awk '{s += $2} END {print s + 0}')
  corpus=$(ls "$work/corpus/$t" | wc -l)
  echo "fuzz $t: $status, $execs executions in $((SECONDS - started)) s, corpus $corpus inputs"
  if [ "$status" != ok ]; then
    grep -h -A30 -E 'ERROR|fuzz property|runtime error|deadly signal|timeout' "$log" | head -60 || true
    ls "$work/artifacts/$t-"* 2>/dev/null || true
  fi
  if [ "$status" = ok ] && [ "${TENBIN_FUZZ_MERGE:-0}" = 1 ]; then
    "$work/fuzz-$t" -merge=1 -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=10 \
      "$root/fuzz/corpus/$t" "$work/corpus/$t" "$work/seeds/$t" >"$work/$t.merge.log" 2>&1
    echo "fuzz $t: fuzz/corpus/$t now $(ls "$root/fuzz/corpus/$t" | wc -l) inputs, $(du -sk "$root/fuzz/corpus/$t" | cut -f1) KB"
  fi
done
exit "$failed"
