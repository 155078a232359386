#!/usr/bin/env bash
# Runs every libFuzzer target from the corpus kept in the repository; fails
# on any finding.
#
# usage: fuzz/run.sh [SECONDS [RUNS]]
#   each target stops after RUNS executions (default 1000000; 0: no limit) or
#   SECONDS (default 300), whichever comes first.
#   TENBIN_FUZZ_PARALLEL  targets fuzzed at once (default: the cores, divided
#                       by TENBIN_FUZZ_JOBS), fastest first
#   TENBIN_FUZZ_BUDGET  seconds for the whole run (default 0: no bound): a
#                       target gets at most its share of what is left (the
#                       time left times PARALLEL over the targets not yet
#                       started), at least 20 s
#                       (CI: 1,000,000 runs or 300 s each, 540 s in all)
#   TENBIN_FUZZ_BUILD   build folder (default build-fuzz); set up with clang,
#                       ASan and UBSan when it does not exist yet
#   TENBIN_FUZZ_JOBS    parallel fuzzing processes per target (default 1)
#   TENBIN_FUZZ_MERGE=1 afterwards, merge what the run found into
#                       fuzz/corpus/TARGET (libFuzzer's -merge=1 keeps only
#                       inputs that add coverage): commit the result
#
# Long runs (hours, all cores): TENBIN_FUZZ_JOBS=$(nproc) fuzz/run.sh 14400 0
# Each target reads fuzz/corpus/TARGET (kept in git, minimised) and the seeds
# made from tests/vectors, and writes what it finds to BUILD/fuzz/corpus/TARGET,
# which grows from run to run. A finding is written to BUILD/fuzz/artifacts/;
# replay it with `build-fuzz/fuzz/fuzz-NAME FILE` and turn it into a test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-300}"
runs="${2:-1000000}"
[ "$runs" = 0 ] && runs=-1
build="${TENBIN_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${TENBIN_FUZZ_JOBS:-1}"
parallel_targets="${TENBIN_FUZZ_PARALLEL:-$(( $(nproc) / jobs ))}"
[ "$parallel_targets" -ge 1 ] || parallel_targets=1
budget="${TENBIN_FUZZ_BUDGET:-0}"
vectors="$root/tests/vectors"

if [ ! -f "$build/build.ninja" ]; then
  CXX="${CXX:-clang++}" meson setup "$build" "$root" -Dfuzzing=true \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dtests=disabled -Dexamples=disabled -Dtools=disabled
fi
# fuzz-zstd exists only in a build with libzstd.
built=" $(ninja -C "$build" -t targets all 2>/dev/null | grep -o '^fuzz/fuzz-[a-z_]*:' | tr '\n' ' ') "
targets=()
# Fastest first (executions a second): they reach RUNS in well under a
# minute and leave the rest of a budget to the slow ones.
for t in decode_header decode_buffer formats read decode_list zrecv shm_wire shm_side stream zstd sctp_parts url; do
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
                     [formats]=16384 [zrecv]=8192 [sctp_parts]=8192 [shm_wire]=4096 [shm_side]=4096 [stream]=4096
                     [zstd]=65536)
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
began=$SECONDS

# One target: fuzz, report one line, leave its status in $work/$t.status.
fuzz_one() {
  local t="$1" cap="$2" started=$SECONDS log="$work/$t.log" status execs corpus
  mkdir -p "$work/corpus/$t" "$root/fuzz/corpus/$t" "$work/seeds/$t" "$work/run-$t"
  rm -f "$work/run-$t"/fuzz-*.log
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: memory a
  # hostile input makes the library use is a finding too. Its own folder:
  # with -jobs, libFuzzer writes fuzz-N.log into the current one.
  if (cd "$work/run-$t" && "$work/fuzz-$t" -max_total_time="$cap" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" "${parallel[@]}" -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" "$root/fuzz/corpus/$t" "$work/seeds/$t") \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
  fi
  execs=$({ cat "$log"; cat "$work/run-$t"/fuzz-*.log 2>/dev/null || true; } |
    awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
  corpus=$(ls "$work/corpus/$t" | wc -l)
  echo "fuzz $t: $status, $execs executions in $((SECONDS - started)) s (cap $cap s), corpus $corpus inputs"
  if [ "$status" != ok ]; then
    grep -h -A30 -E 'ERROR|fuzz property|runtime error|deadly signal|timeout' "$log" | head -60 || true
    ls "$work/artifacts/$t-"* 2>/dev/null || true
  fi
  if [ "$status" = ok ] && [ "${TENBIN_FUZZ_MERGE:-0}" = 1 ]; then
    "$work/fuzz-$t" -merge=1 -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=10 \
      "$root/fuzz/corpus/$t" "$work/corpus/$t" "$work/seeds/$t" >"$work/$t.merge.log" 2>&1
    echo "fuzz $t: fuzz/corpus/$t now $(ls "$root/fuzz/corpus/$t" | wc -l) inputs, $(du -sk "$root/fuzz/corpus/$t" | cut -f1) KB"
  fi
  echo "$status" >"$work/$t.status"
}

running=0
waiting=${#targets[@]}
for t in "${targets[@]}"; do
  if [ "$running" -ge "$parallel_targets" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  cap="$seconds"
  if [ "$budget" -gt 0 ]; then
    remaining=$((budget - (SECONDS - began)))
    left=$((remaining * parallel_targets / waiting))
    [ "$left" -le "$remaining" ] || left="$remaining"
    [ "$left" -ge 20 ] || left=20
    [ "$left" -ge "$cap" ] || cap="$left"
  fi
  rm -f "$work/$t.status"
  fuzz_one "$t" "$cap" &
  running=$((running + 1))
  waiting=$((waiting - 1))
done
wait

failed=0
for t in "${targets[@]}"; do
  [ "$(cat "$work/$t.status" 2>/dev/null)" = ok ] || failed=1
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - began)) s, $parallel_targets at once"
exit "$failed"
