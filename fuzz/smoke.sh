#!/bin/sh
# The fuzz_smoke test: replays the committed corpus of every fuzz target.
#   smoke.sh CORPUS_DIR REPLAY_BINARY...
# A binary replay_<target> replays CORPUS_DIR/<target>/; every target must
# have a corpus, and the first failure fails the test.
set -eu
corpus=$1
shift
for bin in "$@"; do
    target=$(basename "$bin")
    target=${target#replay_}
    if [ ! -d "$corpus/$target" ]; then
        echo "fuzz_smoke: no corpus for $target in $corpus" >&2
        exit 1
    fi
    echo "fuzz_smoke: $target"
    "$bin" "$corpus/$target" 2>"${TMPDIR:-/tmp}/fuzz_smoke.$$.log" || {
        status=$?
        tail -n 40 "${TMPDIR:-/tmp}/fuzz_smoke.$$.log" >&2
        rm -f "${TMPDIR:-/tmp}/fuzz_smoke.$$.log"
        echo "fuzz_smoke: $target failed (exit $status)" >&2
        exit 1
    }
    rm -f "${TMPDIR:-/tmp}/fuzz_smoke.$$.log"
done
