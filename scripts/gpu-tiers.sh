#!/bin/sh
# The host-link time of single tables on the GPU, for fitting the tier
# model (docs/gpu.md, "The second run"; its output: docs/data/h200-tiers.csv).
# NPER tables of each family (default 6; rows cut to 256 MiB a table), each
# alone on a device of its own of one plan, timed by `shardctl eval` in
# fused (HBM), fused_uvm and fused_uvm_caching at load factor 0.2.  Run from
# the bundle (scripts/gpu-bundle.sh copies it there):
#   usage: gpu-tiers.sh OUT [BACKEND]   (cpu: the host-link time modelled)
# Writes tier_tables.json and tier_KERNEL.json (eval's JSON) into OUT.
set -u
OUT=${1:?usage: gpu-tiers.sh OUT [BACKEND]}
BE=${2:-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=$(cd "$(dirname "$0")" && pwd)
cd "$B" || exit 2
export LD_LIBRARY_PATH="$B/lib"
W=$(mktemp -d)
for f in zipf exp uniform bimodal seq onehot dlrm; do
  ./shardctl gen-tables --count ${NPER:-6} --seed 11 --family $f --out "$W/$f.json" >/dev/null 2>&1
done
python3 - "$W" <<'PY'
import json, sys, glob, os
W = sys.argv[1]
tabs = []
for f in sorted(glob.glob(W + "/*.json")):
    for t in json.load(open(f))["tables"]:
        cap = (256 << 20) // (t["dim"] * 4)
        t["rows"] = min(t["rows"], cap)
        tabs.append(t)
json.dump({"tables": tabs}, open(W + "/all.json", "w"))
for kind in ("fused", "fused_uvm", "fused_uvm_caching"):
    plan = {"devices": [{"id": i} for i in range(len(tabs))], "tables": []}
    for i, t in enumerate(tabs):
        e = {"name": t["name"], "scheme": "table_wise",
             "shards": [{"device": i, "col_offset": 0, "col_width": t["dim"]}]}
        if kind != "fused":
            e["compute_kernel"] = kind
        if kind == "fused_uvm_caching":
            e["cache_load_factor"] = 0.2
        plan["tables"].append(e)
    json.dump(plan, open(W + "/" + kind + ".plan", "w"))
print(len(tabs), "tables")
PY
cp "$W/all.json" "$OUT/tier_tables.json"
for kind in fused fused_uvm fused_uvm_caching; do
  s=$(date +%s)
  ./shardctl eval --tables "$W/all.json" --plan "$W/$kind.plan" --backend $BE \
     --host-dram-gb 512 --mem-gb 64 --json --out "$OUT/tier_$kind.json" 2>"$OUT/tier_$kind.err"
  echo "$kind rc $? $(( $(date +%s) - s )) s"
done
rm -rf "$W"
