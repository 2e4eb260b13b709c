#!/bin/sh
# The host-link time of single tables on the GPU, for fitting the tier
# model (docs/gpu.md, "The second run"; an H200's: docs/data/h200-tiers.csv).
# NPER tables of each family (default 6; rows cut to 256 MiB a table), each
# alone on a device of its own of one plan, timed by `shardctl eval` at the
# model's batch in fused (HBM), fused_uvm and fused_uvm_caching at load
# factor 0.2.  Run from the bundle (scripts/gpu-bundle.sh copies it there;
# gpu-check.sh runs it):
#   usage: gpu-tiers.sh OUT [BACKEND]   (cpu: the host-link time modelled)
# Writes OUT/tiers.csv (docs/data/h200-tiers.csv's columns) and prints the
# host-link time (fused_uvm less fused) against TorchRec's formula, 3 x
# lookups x row bytes over 32 GiB/s.  Exit 0 when every eval ran.
set -u
OUT=${1:?usage: gpu-tiers.sh OUT [BACKEND]}
BE=${2:-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=$(cd "$(dirname "$0")" && pwd)
cd "$B" || exit 2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for f in zipf exp uniform bimodal seq onehot dlrm; do
    ./shardctl gen-tables --count "${NPER:-6}" --seed 11 --family $f \
        --out "$W/$f.json" >/dev/null || exit 1
done
python3 - "$W" <<'PY' || exit 1
import glob, json, sys
W = sys.argv[1]
tabs = []
for f in sorted(glob.glob(W + "/*.json")):
    for t in json.load(open(f))["tables"]:
        t["rows"] = min(t["rows"], (256 << 20) // (t["dim"] * 4))
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
PY
for kind in fused fused_uvm fused_uvm_caching; do
    ./shardctl eval --tables "$W/all.json" --plan "$W/$kind.plan" \
        --backend "$BE" --host-dram-gb 512 --mem-gb 64 --json \
        --out "$W/$kind.eval" || exit 1
done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
python3 - "$W" "$OUT/tiers.csv" "${GPU:-no GPU ($BE)}" <<'PY'
import json, sys
W, out, gpu = sys.argv[1:4]
tabs = json.load(open(W + "/all.json"))["tables"]
ev = {k: json.load(open("%s/%s.eval" % (W, k)))
      for k in ("fused", "fused_uvm", "fused_uvm_caching")}
batch, bw = 4096, 32 * 2**30 / 1000.0  # the model's batch; bytes per ms
ratios, meas, model = [], 0.0, 0.0
with open(out, "w") as f:
    f.write("# %s: each table alone on a device, timed by shardctl eval at "
            "batch %d\n# (forward and backward step, ms) in HBM (fused), host "
            "memory (fused_uvm) and fused_uvm_caching at load factor 0.2.\n"
            "# Tables: shardctl gen-tables --seed 11 --family F, rows cut to "
            "256 MiB a table; bins: the access histogram.\n" % (gpu, batch))
    f.write("name,rows,dim,pooling_factor,fused_ms,fused_uvm_ms,"
            "fused_uvm_caching_ms,bins\n")
    for i, t in enumerate(tabs):
        c = [ev[k]["devices"][i]["cost_ms"]["compute"]
             for k in ("fused", "fused_uvm", "fused_uvm_caching")]
        f.write("%s,%d,%d,%.6g,%.4f,%.4f,%.4f,%s\n" % (
            t["name"], t["rows"], t["dim"], t["pooling_factor"], c[0], c[1],
            c[2], " ".join("%.6g" % b for b in t["bins"])))
        link = c[1] - c[0]
        formula = 3 * t["pooling_factor"] * batch * t["dim"] * 4 / bw
        if link > 0.005:
            ratios.append(formula / link)
            meas += link
            model += formula
ratios.sort()
q = lambda p: ratios[min(len(ratios) - 1, int(p * len(ratios)))]
print("host-link time of %d tables (of %d) above 5 us: %.1f ms measured, "
      "%.1f ms by TorchRec's formula" % (len(ratios), len(tabs), meas, model))
if ratios:
    print("formula / measured: p10 %.2f, median %.2f, p90 %.2f"
          % (q(0.1), q(0.5), q(0.9)))
PY
