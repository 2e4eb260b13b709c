#!/bin/sh
# Proves shardd's GPU path in one go on a GPU machine that has CUDA but none
# of shardd's Debian libraries, from the bundle scripts/gpu-bundle.sh made
# (docs/gpu.md):
#   1. the machine: GPUs, driver, where cuBLAS, NCCL and NVML are;
#   2. the GPU parity tests: the TBE kernels, the cost model's scores,
#      cuBLAS's products and training, NCCL and NVML (test_parity_tbe,
#      test_parity_net, test_gpu_comm);
#   3. bench_kernels and bench_net on cuda; the memory tiers: one table
#      timed in HBM, fused_uvm and fused_uvm_caching (bench_kernels ...
#      tiers), and shardctl eval of a plan with cached tables, whose
#      host-link time is then measured, not modelled; 42 single tables
#      timed in each tier (gpu-tiers.sh, into tiers.csv);
#   4. NCCL on every GPU (a 1-rank communicator on one): the collectives
#      sweep and NeuroShard comm samples (shardctl comm-profile);
#   5. shardctl profile --backend cuda for a time budget (>= 3,000 samples
#      is the aim), shardctl train with cuBLAS's products, the model scored
#      on the GPU and on the host;
#   6. shardd on the cuda backend with that model active and resident in
#      GPU memory: status, an online plan equal to the offline one, an
#      estimate; then on a data directory with no model, where the model
#      compiled in for this GPU (when there is one) serves;
#   7. plans measured on the GPU (bench_quality): the new model's, the
#      compiled-in model and policy's, and those by table family;
#   8. a summary.
# Writes summary.txt, the samples database (shardd.db, gzipped when large),
# the model (model.sdcn), the single tables' tier times (tiers.csv) and the
# logs (logs.txt) into OUT.  Exit 0 when
# every step passed; every step runs whatever the others did.
#   usage: gpu-check.sh OUT [BUNDLE]
#   GPU_CHECK_SECONDS  the whole run's budget (default 540: one device call)
#   PROFILE_SECONDS    the profiling budget (default: what is left, <= 240)
#   GPU_CHECK_BACKEND  cuda (default); cpu rehearses the script where no GPU
#                      is (the GPU tests then skip, and count as failed)
set -u
BE=${GPU_CHECK_BACKEND:-cuda}
OUT=${1:?usage: gpu-check.sh OUT [BUNDLE]}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -n "${2:-}" ]; then
    B=$(cd "$2" && pwd)
elif [ -x "$HERE/shardd" ]; then
    B=$HERE # run from inside the bundle
else
    B=$(cd "$HERE/.." && pwd)/build-gpu-bundle
fi
[ -x "$B/shardd" ] || {
    echo "gpu-check: no bundle at $B (scripts/gpu-bundle.sh makes it)" >&2
    exit 2
}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/gpu-check.XXXXXX)
START=$(date +%s)
BUDGET=${GPU_CHECK_SECONDS:-540}
SUM="$OUT/summary.txt"
LOG="$W/logs.txt"
: >"$SUM"
: >"$LOG"
FAILED=0

say() { echo "$*" | tee -a "$SUM"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# share K: seconds for one of K steps still to run, of what is left but 20
# (at least 10).
share() {
    t=$((($(left) - 20) / $1))
    [ $t -lt 10 ] && t=10
    echo $t
}
# step NAME CMD...: runs CMD with its output in the log, and says how it
# went (exit 77 is a skip, which counts as a failure here: a GPU is meant
# to be at hand).
step() {
    name=$1
    shift
    t0=$(date +%s)
    {
        echo "===== $name: $*"
    } >>"$LOG"
    "$@" >"$W/step.out" 2>&1
    rc=$?
    cat "$W/step.out" >>"$LOG"
    case $rc in
    0) status=ok ;;
    77) status="SKIPPED (no GPU answered?)" ;;
    *) status="FAILED (exit $rc)" ;;
    esac
    [ $rc -eq 0 ] || FAILED=$((FAILED + 1))
    say "[$status] $name ($(($(date +%s) - t0)) s)"
    return $rc
}
# The lines of the last step's output matching a pattern, into the summary.
keep() { grep -E "$1" "$W/step.out" | sed 's/^/    /' | tee -a "$SUM" >/dev/null; }

# --- 1. the machine -----------------------------------------------------------
say "shardd GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), bundle $B"
sed -n '2,4p' "$B/MANIFEST" 2>/dev/null | sed 's/^/    bundle /' | tee -a "$SUM" >/dev/null
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id \
        --format=csv,noheader 2>&1 | sed 's/^/    gpu /' | tee -a "$SUM" >/dev/null
else
    say "    no nvidia-smi"
fi
# cuBLAS, NCCL and NVML: from the loader's cache, CUDA's folders, or the
# Python wheels (nvidia-*-cu13); shardd loads them at run time.
find_lib() { # SONAME: the first file found
    p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
    [ -n "$p" ] && { echo "$p"; return; }
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib* \
        /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu \
        /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
        /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
        /usr/lib/python3*/site-packages/nvidia/*/lib; do
        [ -e "$d/$1" ] && { echo "$d/$1"; return; }
    done
}
LIBPATH="$B/lib"
for pair in SHARDD_CUBLAS_LIB:libcublas.so.13 SHARDD_NCCL_LIB:libnccl.so.2 \
    SHARDD_NVML_LIB:libnvidia-ml.so.1; do
    var=${pair%%:*}
    so=${pair#*:}
    f=$(find_lib "$so")
    if [ -n "$f" ]; then
        export "$var=$f"
        LIBPATH="$LIBPATH:$(dirname "$f")" # cuBLAS needs cublasLt beside it
        say "    $so: $f"
    else
        say "    $so: not found"
    fi
done
export LD_LIBRARY_PATH="$LIBPATH"
cd "$B" || exit 2

# --- 2. parity tests ------------------------------------------------------------
step "shardd --version" ./shardd --version && keep 'shardd'
step "parity: TBE kernels (cuda vs cpu)" ./test_parity_tbe
keep 'passed|failed|median|ms'
step "parity: cost model scores, cuBLAS sgemm, training" ./test_parity_net
keep 'passed|scores of|one shard|epochs|training'
step "NCCL (every GPU) and NVML" ./test_gpu_comm
keep 'passed|nccl:|nvml|idle gate|late|comm sample 0'

# --- 3. benches ------------------------------------------------------------------
step "bench_kernels $BE" ./bench_kernels $BE 5 flush shapes && keep '.'
step "bench_net" ./bench_net all && keep '.'

# --- 3b. memory tiers: timed on cuda (modelled on cpu) -------------------------
step "bench_kernels $BE tiers: HBM, fused_uvm, fused_uvm_caching" \
    ./bench_kernels $BE 5 flush tiers
keep 'miss|d128 fused'
# 16 tables cut to 500,000 rows, planned on 2 devices whose memory holds 30 %
# of them with host DRAM for all: the tier pass caches the rest; then the
# two of most lookups go to fused_uvm, so that both host tiers are timed.
./shardctl gen-tables --count 16 --seed 4 --out "$W/t16.json" >/dev/null 2>&1
python3 - "$W/t16.json" <<'PY' >"$W/t16.mem" 2>>"$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for t in d["tables"]:
    t["rows"] = min(t["rows"], 500000)
json.dump(d, open(sys.argv[1], "w"))
print("%.6f" % (0.3 * sum(t["rows"] * t["dim"] * 4 for t in d["tables"]) / 2 / 2**30))
PY
step "plan with cached tables (HBM for 30 %)" ./shardctl plan --offline \
    --tables "$W/t16.json" --devices 2 --mem-gb "$(cat "$W/t16.mem")" \
    --host-dram-gb 64 --json --out "$W/t16.plan.json"
python3 - "$W/t16.json" "$W/t16.plan.json" <<'PY' 2>>"$LOG"
import json, sys
pf = {t["name"]: t["pooling_factor"] for t in json.load(open(sys.argv[1]))["tables"]}
d = json.load(open(sys.argv[2]))
for t in sorted(d["tables"], key=lambda t: -pf[t["name"]])[:2]:
    t["compute_kernel"] = "fused_uvm"
    t.pop("cache_load_factor", None)
json.dump(d, open(sys.argv[2], "w"))
PY
step "eval of that plan on $BE (host-link time measured on cuda)" \
    ./shardctl eval --tables "$W/t16.json" --plan "$W/t16.plan.json" \
    --backend $BE --host-dram-gb 64 --json --out "$W/t16.eval.json"
step "eval named the host-link time measured (cuda) or modelled (cpu)" \
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
want = "(measured)" if sys.argv[2] == "cuda" else "(modelled)"
print("cost_model: %s; plan cost %.3f ms" % (d["cost_model"], d["plan_cost_ms"]))
for x in d["devices"]:
    print("device %d: compute %.3f ms, measured tiers %s, modelled tier ms %.3f"
          % (x["id"], x["cost_ms"]["compute"], x["cost_ms"].get("tier_measured", False),
             x["cost_ms"].get("tier_modelled", 0)))
print("tables off HBM: %d" % sum("compute_kernel" in t for t in d["tables"]))
sys.exit(0 if d["cost_model"].endswith(want) else 1)' "$W/t16.eval.json" "$BE"
keep '.'
step "eval of the same plan, text (prediction beside measurement)" \
    ./shardctl eval --tables "$W/t16.json" --plan "$W/t16.plan.json" \
    --backend $BE --host-dram-gb 64
keep '^(plan cost|memory tiers|  plan |predicted)|^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[+-]'

# The host-link time of 42 single tables (6 of each family) in each tier,
# against TorchRec's formula the tier model uses (gpu-tiers.sh): the data
# for refitting it on this GPU, into OUT/tiers.csv.
step "host-link time of single tables (gpu-tiers.sh)" ./gpu-tiers.sh \
    "$W/tiers" "$BE"
keep '^(host-link|formula)'
[ -f "$W/tiers/tiers.csv" ] && cp "$W/tiers/tiers.csv" "$OUT/tiers.csv"

# --- 4. NCCL --------------------------------------------------------------------
step "comm-profile: collectives sweep and NeuroShard comm samples" \
    ./shardctl comm-profile --backend $BE --collectives --samples 20 \
    --db "$W/comm.db" --seconds 60
keep '^(all-to-all|reduce-scatter|all-gather|all-reduce) .* 16777216|plan 0:|plans timed'

# --- 5. profile, train, score -----------------------------------------------------
mkdir -p "$W/data"
DB="$W/data/shardd.db"
P=${PROFILE_SECONDS:-$(($(left) - 300))}
[ "$P" -gt 240 ] && P=240
[ "$P" -lt 30 ] && P=30
step "profile --backend $BE (${P} s budget)" ./shardctl profile --db "$DB" \
    --backend $BE --samples 100000 --seconds "$P" --batch-size 4096
keep 'samples added'
step "train --backend $BE (cuBLAS products on cuda)" ./shardctl train \
    --db "$DB" --backend $BE --activate --out "$OUT/model.sdcn"
FAMS='^(dlrm|zipf|exp|uniform|bimodal|seq|onehot|mix|whole tables|row blocks) '
keep "^(model|samples|MAPE|epochs)|products on|$FAMS"
step "score on the host" ./shardctl score --db "$DB" --model "$OUT/model.sdcn"
keep "MAPE|$FAMS"
step "score on the GPU (the model resident, one batch)" ./shardctl score \
    --db "$DB" --model "$OUT/model.sdcn" --backend $BE
keep MAPE
# --- 6. shardd ----------------------------------------------------------------------
# serve NAME DATA_DIR [--model FILE]: shardd on the backend with DATA_DIR's
# active model (none there: the model compiled in for this device, else the
# cpu one); its status, a plan through it equal to the offline plan by the
# same model (FILE, or the profile shardd said it made resident), an
# estimate, and the log line that says the model was resident.
serve() {
    sname=$1
    dir=$2
    shift 2
    sock="unix:$W/$sname.sock"
    slog="$W/shardd-$sname.log"
    ./shardd --data-dir "$dir" --listen "$sock" --backend $BE \
        --log-level debug --profiler-idle-ms 3600000 >"$slog" 2>&1 &
    pid=$!
    i=0
    until ./shardctl health --addr "$sock" --timeout-s 2 >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
            say "[FAILED] shardd ($sname) did not come up"
            FAILED=$((FAILED + 1))
            break
        fi
        sleep 0.2
    done
    if [ $# -eq 0 ]; then
        prof=$(sed -n 's/.*model embedded of \(.*\) resident on .*/\1/p' \
            "$slog" | head -n 1)
        [ -n "$prof" ] && set -- --profile "$prof"
    fi
    step "shardd ($sname) status" ./shardctl status --addr "$sock" && keep '.'
    step "plan through shardd ($sname, $BE backend)" ./shardctl plan \
        --addr "$sock" --tables "$W/tables.json" --devices 8 --mem-gb 16 \
        --json --out "$W/online.json" && keep '.'
    step "the same plan offline ($*)" ./shardctl plan --offline \
        --tables "$W/tables.json" --devices 8 --mem-gb 16 "$@" \
        --json --out "$W/offline.json"
    step "online plan equals offline (cost, devices, placements)" python3 -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
keys = ("plan_cost_ms", "cost_model", "devices", "tables")
print("plan cost: online %r, offline %r; %s" % (a["plan_cost_ms"], b["plan_cost_ms"], a["cost_model"]))
sys.exit(any(a[k] != b[k] for k in keys))' "$W/online.json" "$W/offline.json"
    keep 'plan cost'
    step "estimate through shardd ($sname)" ./shardctl estimate --addr "$sock" \
        --tables "$W/tables.json" --plan "$W/online.json" --mem-gb 16
    kill -TERM $pid 2>/dev/null
    wait $pid 2>/dev/null
    cat "$slog" >>"$LOG"
    step "the model was resident on the device ($sname)" \
        grep -E "resident on $BE device 0" "$slog" && keep resident
}
./shardctl gen-tables --count 60 --seed 1 --out "$W/tables.json" >/dev/null 2>&1
prof=
serve trained "$W/data" --model "$OUT/model.sdcn"
# A data directory with no model: the one compiled in for this GPU serves.
mkdir -p "$W/fresh"
serve compiled "$W/fresh"

# --- 7. plans measured on the GPU ----------------------------------------------------
# The product's claim on this GPU: plans by a model against the greedy
# baselines', each measured on the device (5 tasks on 4 and 8 devices, 3
# interleaved rounds; one task and one round in a cpu rehearsal, where
# measuring a plan takes a minute): the model and policy compiled in for
# this device (when there are: the file whose profile shardd made resident),
# those on each table family's tasks, then the new model's.  Each is cut off
# at its share of what is left of the budget.
if [ "$BE" = cpu ]; then QUALITY="1 1 cpu 1"; else QUALITY="5 5 $BE 3"; fi
QKEEP='^(bench_quality: model|([a-z]+: )?[0-9] devices|algorithm|[a-z_]+ +[0-9]+/[0-9]+ )'
CM=
[ -n "$prof" ] && CM=$(grep -l -F "$prof" "$B"/models/cuda-*.sdcn 2>/dev/null |
    head -n 1)
if [ -n "$CM" ]; then
    # shellcheck disable=SC2086
    step "plans measured on $BE: the compiled-in model and policy" \
        timeout "$(share 3)" ./bench_quality $QUALITY "$CM" \
        "${CM%.sdcn}.sdpol"
    keep "$QKEEP"
    step "plans measured on $BE by table family (compiled-in model)" \
        env SHARDD_BENCH_FAMILIES=all timeout "$(share 2)" \
        ./bench_quality 2 5 "$BE" 2 "$CM" "${CM%.sdcn}.sdpol"
    keep "$QKEEP"
fi
# shellcheck disable=SC2086
step "plans measured on $BE: the new model against the greedy baselines" \
    timeout "$(share 1)" ./bench_quality $QUALITY "$OUT/model.sdcn"
keep "$QKEEP"

# --- 8. summary ----------------------------------------------------------------------
if [ -f "$DB" ]; then
    if [ "$(du -k "$DB" | cut -f1)" -gt 15000 ]; then
        gzip -c "$DB" >"$OUT/shardd.db.gz"
    else
        cp "$DB" "$OUT/shardd.db"
    fi
fi
cp "$LOG" "$OUT/logs.txt"
say "$FAILED step(s) failed, $(($(date +%s) - START)) s in all"
rm -rf "$W"
[ "$FAILED" -eq 0 ]
