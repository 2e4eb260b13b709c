#!/bin/sh
# Runs the quick unit tests under valgrind's memcheck: reads of memory
# never written, which the sanitizer builds do not see (ASan checks
# bounds, not initialisation).  Two such reads were found so (2026-12-01):
# ns_search() reading its order past the free pieces, and the profiler
# timing random shards with the stack's tier.  Run after scripts/test.sh,
# on its build.  The slow tests (training, the whole search's test, the
# device model) are left out: each takes minutes under valgrind.
#   BUILD_DIR   the build folder (default: build)
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
TESTS="test_audit test_baseline test_comm test_plan test_torchrec
test_constraints test_tiers test_cost test_table test_json test_trace
test_families test_family_rows test_net test_net_features test_ensemble
test_import test_sample test_mutate test_config test_common test_eval_tiers
test_kern_tiers test_kernels test_schemes test_profiler"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
for t in $TESTS; do
    printf '%s ' "$t"
    if ! valgrind --error-exitcode=99 --track-origins=yes -q \
        "$BUILD_DIR/tests/$t" >"$LOG" 2>&1; then
        echo "FAILED"
        cat "$LOG"
        exit 1
    fi
    echo ok
done
