#!/bin/sh
# The main job on the embedded defaults: build, generate the 856 synthetic
# DLRM tables and the NeuroShard benchmark tasks (seed 0), and print the plan
# of task 0 on 8 devices of 16 GiB made by the neuroshard search with the
# embedded cost model.  The tables' features are computed at the model's
# batch (4096).  Generated data is kept in build/data.
#   ALG  algorithm (default neuroshard)
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
mkdir -p build
if ! { cmake -S . -B build && cmake --build build -j"$(nproc)" \
    --target shardctl; } >build/quickstart-build.log 2>&1; then
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
$CTL plan --offline --tables "$DATA/tasks-4096.json" --task 0 --devices 8 \
    --mem-gb 16 --alg "${ALG:-neuroshard}"
