#!/bin/sh
# The main job on the embedded defaults: build, generate the 856 synthetic
# DLRM tables and the NeuroShard benchmark tasks (seed 0), start the shardd
# daemon with its embedded cost model, ask it over gRPC for the plan of task
# 0 on 8 devices of 16 GiB (the neuroshard search), print the plan, and stop
# the daemon.  The tables' features are computed at the model's batch
# (4096).  Generated data and the daemon's store are kept in build/.
#   ALG  algorithm (default neuroshard)
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
mkdir -p build
if ! { cmake -S . -B build && cmake --build build -j"$(nproc)" \
    --target shardctl shardd; } >build/quickstart-build.log 2>&1; then
    cat build/quickstart-build.log >&2
    exit 1
fi
CTL=build/shardctl
DATA=build/data
mkdir -p "$DATA"
if [ ! -s "$DATA/tables-4096.json" ]; then
    echo "generating 856 synthetic tables (once)..." >&2
    $CTL gen-tables --count 856 --seed 0 --batch-size 4096 \
        --out "$DATA/tables-4096.json"
fi
if [ ! -s "$DATA/tasks-4096.json" ]; then
    $CTL gen-tasks --count 10 --seed 0 --tables "$DATA/tables-4096.json" \
        --out "$DATA/tasks-4096.json"
fi

# The daemon on a private unix socket (no port to collide with), its store
# in build/shardd-data; the profiler stays off for a job this short.
RUN=$(mktemp -d /tmp/shardd-quickstart-XXXXXX)
ADDR="unix:$RUN/shardd.sock"
build/shardd --listen "$ADDR" --data-dir build/shardd-data --profiler off \
    2>"$RUN/shardd.log" &
PID=$!
stop() {
    kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    rm -rf "$RUN"
}
trap stop EXIT INT TERM
tries=0
until $CTL --addr "$ADDR" health >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ $tries -gt 100 ] || ! kill -0 "$PID" 2>/dev/null; then
        echo "shardd did not start:" >&2
        cat "$RUN/shardd.log" >&2
        exit 1
    fi
    sleep 0.1
done
echo "shardd is up ($(head -1 "$RUN/shardd.log" | sed 's/^shardd //'))" >&2
$CTL --addr "$ADDR" plan --tables "$DATA/tasks-4096.json" --task 0 \
    --devices 8 --mem-gb 16 --alg "${ALG:-neuroshard}"
