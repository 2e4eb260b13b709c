#!/bin/sh
# Fuzzing bench: builds the libFuzzer targets with clang (ASan + UBSan +
# coverage) into build-fuzz/ and runs each for at least a million
# executions, then prints executions per second and coverage per target.
#
#   scripts/fuzz.sh [TARGET...]         all targets when none is named
#
# Environment:
#   RUNS=1000000   executions per target (per job with JOBS > 1)
#   JOBS=1         parallel fuzzing processes per target (-jobs/-workers)
#   MAX_TIME=0     stop a target after this many seconds (0: no limit)
#   BUILD=build-fuzz   build directory
#   KEEP=0         1: keep the inputs the fuzzer finds in fuzz/corpus/<t>/
#                  (default: a scratch corpus under BUILD, committed corpus
#                  read only)
#
# A crash stops that target; its input is saved as
# BUILD/fuzz/crash-<target>-<hash> (fuzz/README.md says what to do next).
# Exit status: 0 if every target finished its runs without a crash.
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNS=${RUNS:-1000000}
JOBS=${JOBS:-1}
MAX_TIME=${MAX_TIME:-0}
BUILD=${BUILD:-build-fuzz}
KEEP=${KEEP:-0}
case $BUILD in
/*) ;;
*) BUILD="$ROOT/$BUILD" ;;
esac
ALL="fuzz_tables_json fuzz_tables_input fuzz_plan_json fuzz_trace fuzz_model fuzz_policy fuzz_plan_request"
TARGETS=${*:-$ALL}

command -v clang >/dev/null 2>&1 || {
    echo "fuzz.sh: clang is needed (Debian: apt-get install clang)" >&2
    exit 2
}

# Configure once; a build directory made with another compiler is refused
# by CMake, so say so rather than mix them.
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    CC=clang cmake -S . -B "$BUILD" -DSHARDD_FUZZ=ON -DSHARDD_CUDA=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
elif ! grep -q '^SHARDD_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt"; then
    echo "fuzz.sh: $BUILD was not configured with SHARDD_FUZZ=ON" >&2
    exit 2
fi
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$(nproc)" --target $TARGETS >/dev/null

status=0
summary=""
for t in $TARGETS; do
    corpus="$ROOT/fuzz/corpus/$t"
    if [ "$KEEP" = 1 ]; then
        dirs="$corpus"
    else
        scratch="$BUILD/fuzz/scratch/$t"
        mkdir -p "$scratch"
        dirs="$scratch $corpus"
    fi
    log="$BUILD/fuzz/$t.log"
    echo "== $t: $RUNS runs x $JOBS job(s)"
    set +e
    if [ "$JOBS" -gt 1 ]; then
        # shellcheck disable=SC2086
        (cd "$BUILD/fuzz" && "./$t" -runs="$RUNS" -jobs="$JOBS" \
            -workers="$JOBS" -max_total_time="$MAX_TIME" -rss_limit_mb=2048 \
            -timeout=10 -print_final_stats=1 -artifact_prefix="./crash-$t-" \
            $dirs) >"$log" 2>&1
        rc=$?
        cat "$BUILD"/fuzz/fuzz-*.log >>"$log" 2>/dev/null
        rm -f "$BUILD"/fuzz/fuzz-*.log
    else
        # shellcheck disable=SC2086
        "$BUILD/fuzz/$t" -runs="$RUNS" -max_total_time="$MAX_TIME" \
            -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
            -artifact_prefix="$BUILD/fuzz/crash-$t-" $dirs >"$log" 2>&1
        rc=$?
    fi
    set -e
    # libFuzzer's final stats: stat::number_of_executed_units, and the last
    # status line's cov:/ft:/exec/s.
    runs=$(awk '/stat::number_of_executed_units/ {s += $2} END {print s+0}' \
        "$log")
    secs=$(awk '/stat::average_exec_per_sec/ {s += $2} END {print s+0}' \
        "$log")
    last=$(grep -E '^#[0-9]+.*(cov|ft):' "$log" | tail -n 1 || true)
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    line=$(printf '%-18s runs %9s  exec/s %6s  cov %5s  ft %6s  rc %d' \
        "$t" "$runs" "$secs" "${cov:-?}" "${ft:-?}" "$rc")
    echo "$line"
    summary="$summary$line
"
    if [ "$rc" -ne 0 ]; then
        status=1
        grep -E 'ERROR|invariant broken|SUMMARY|Test unit written' "$log" |
            head -n 10 || true
    fi
done
echo
echo "summary (logs in $BUILD/fuzz/<target>.log):"
printf '%s' "$summary"
exit "$status"
