#!/bin/sh
# Memory tiers and precisions through the real binaries: 40 tables that the
# devices' memory holds only 40 % of are refused without host DRAM and
# planned with UVM caches with it (offline and by the built shardd on a
# private unix socket, the same plan both ways), with HBM and DDR per device
# and per host and the modelled host-link time in every output; with memory
# to spare the host tier changes nothing; cache-curve shows a table's
# miss-rate curve; --comm-precision fp16 halves the exchanges' bytes; a
# user's compute_kernels and cache_params (TorchRec's form) are kept, or
# refused naming the table, offline and through the daemon; eval of a plan
# with tables off HBM on the cpu backend names their time modelled.
# usage: test_tiers.sh PATH/TO/shardctl PATH/TO/shardd
set -u
CTL=$1
SHARDD=$2
. "$(dirname "$0")/lib.sh"

"$CTL" gen-tables --count 40 --seed 3 --out "$DIR/t.json" >/dev/null 2>&1 && ok || bad "gen-tables"
# The devices' memory: 40 % of the tables' bytes over 8 devices; host DRAM
# all of them.
MEM=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); b=sum(t['rows']*t['dim']*4 for t in d['tables']); print('%.6f' % (0.4*b/8/2**30))" "$DIR/t.json")
DRAM=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); b=sum(t['rows']*t['dim']*4 for t in d['tables']); print('%.6f' % (1.0*b/2**30))" "$DIR/t.json")
PLAN="plan --tables $DIR/t.json --devices 8 --mem-gb $MEM"

# --- offline ------------------------------------------------------------------
"$CTL" $PLAN --offline >"$DIR/none.txt" 2>"$DIR/err"
[ $? -eq 2 ] && ok || bad "without host DRAM the plan is refused (exit 2)"
"$CTL" $PLAN --offline --host-dram-gb "$DRAM" >"$DIR/off.txt" 2>"$DIR/err" && ok ||
    bad "with host DRAM: $(cat "$DIR/err")"
grep -q '^memory tiers' "$DIR/off.txt" && ok || bad "text output lacks the memory tiers"
grep -q '^host 0: HBM GiB .* DDR GiB ' "$DIR/off.txt" && ok || bad "text output lacks HBM and DDR per host"
grep -q 'fused_uvm_caching, load factor' "$DIR/off.txt" && ok || bad "text output lacks the cached tables"
grep -q 'host-link misses (modelled)' "$DIR/off.txt" && ok || bad "the cost model is not named modelled"
"$CTL" $PLAN --offline --host-dram-gb "$DRAM" --json --out "$DIR/off.json" && ok || bad "offline --json"
json_check "$DIR/off.json" 'any(t.get("compute_kernel") == "fused_uvm_caching" and 0 < t["cache_load_factor"] < 1 for t in d["tables"])'
json_check "$DIR/off.json" 'sum(x["ddr_bytes"] for x in d["devices"]) > 0 and all(x["memory_bytes"] <= '"$MEM"' * 2**30 for x in d["devices"])'
json_check "$DIR/off.json" '"(modelled)" in d["cost_model"]'
json_check "$DIR/off.json" 'len(d["hosts"]) == 1 and d["hosts"][0]["ddr_bytes"] == sum(x["ddr_bytes"] for x in d["devices"]) and d["hosts"][0]["ddr_bytes"] <= d["hosts"][0]["ddr_capacity_bytes"]'
"$CTL" $PLAN --offline --host-dram-gb "$DRAM" --torchrec >"$DIR/off.trec" && ok || bad "offline --torchrec"
json_check "$DIR/off.trec" 'any(t["compute_kernel"] == "fused_uvm_caching" and "load_factor" in t["cache_params"] for t in d["plan"]["embedding_bags"].values())'
# Host DRAM for a fifth of the tables: refused.
SMALL=$(python3 -c "print('%.6f' % ($DRAM / 5))")
# shellcheck disable=SC2086
expect_fail 2 "host DRAM" $PLAN --offline --host-dram-gb "$SMALL"
grep -q "plan: plan:" "$DIR/err" && bad "a doubled prefix: $(cat "$DIR/err")"

# Memory to spare: the host tier changes nothing.
"$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb 64 --json --out "$DIR/a.json" && ok || bad "plan, memory to spare"
"$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb 64 --host-dram-gb 512 --json --out "$DIR/b.json" && ok ||
    bad "plan, memory to spare, host DRAM"
if python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a['tables'] == b['tables'] and a['plan_cost_ms'] == b['plan_cost_ms'] and not any('compute_kernel' in t for t in b['tables']) and 'hosts' not in a and all(x['ddr_bytes'] == 0 for x in b['hosts']) else 1)" \
    "$DIR/a.json" "$DIR/b.json"; then ok; else bad "host DRAM changed a plan that fits HBM"; fi

# fp16 exchanges: the forward exchange of the same plan is cheaper.
"$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb 64 --comm-precision fp16 --json --out "$DIR/c.json" && ok ||
    bad "--comm-precision fp16"
json_check "$DIR/c.json" 'd["comm_model"] == "alpha_beta (fp16)"'
if python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if max(x['cost_ms']['bwd_comm'] for x in b['devices']) < max(x['cost_ms']['bwd_comm'] for x in a['devices']) else 1)" \
    "$DIR/a.json" "$DIR/c.json"; then ok; else bad "fp16 exchanges cost as much as fp32"; fi
"$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb 64 --comm-precision int8 >/dev/null 2>"$DIR/err"
[ $? -eq 2 ] && grep -q 'is not fp32, fp16 or bf16' "$DIR/err" && ok || bad "--comm-precision int8 refused"

# cache-curve: one table's curve, falling as the cache grows.
"$CTL" cache-curve --tables "$DIR/t.json" --table table_0002 >"$DIR/curve.txt" 2>"$DIR/err" && ok ||
    bad "cache-curve: $(cat "$DIR/err")"
if awk '/^  [0-9]/ { gsub("%", "", $2); if (n++ && $2 > last) bad = 1; last = $2 } END { exit (n == 8 && !bad) ? 0 : 1 }' "$DIR/curve.txt"; then
    ok
else
    bad "cache-curve: not 8 falling miss rates: $(cat "$DIR/curve.txt")"
fi
# An unknown table: exit 2, one line naming it, nothing on stdout (the
# header was printed first).
expect_fail 2 'no table is called "nope"' cache-curve --tables "$DIR/t.json" \
    --table nope
# ... at the batch plan prices at: the model's (its profile's last part),
# or --batch-size.
for prof in "" neuroshard/V100/65536; do
    set -- ${prof:+--profile "$prof"}
    want=$("$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb 64 "$@" |
        sed -n 's|^plan cost: .*(compute: .*/\([0-9]*\) model, .*|\1|p')
    got=$("$CTL" cache-curve --tables "$DIR/t.json" --table table_0002 "$@" |
        sed -n 's|^table_0002: .*, batch \([0-9]*\);.*|\1|p')
    [ -n "$want" ] && [ "$got" = "$want" ] && ok ||
        bad "cache-curve ${prof:-embedded}: batch '$got', plan's '$want'"
done
got=$("$CTL" cache-curve --tables "$DIR/t.json" --table table_0002 --batch-size 512 |
    sed -n 's|^table_0002: .*, batch \([0-9]*\);.*|\1|p')
[ "$got" = 512 ] && ok || bad "cache-curve --batch-size 512: batch '$got'"

# --- a user's compute_kernels and cache_params (TorchRec's form) ----------------
# The 40 tables as EmbeddingBagConfig with their bins, and ParameterConstraints
# with their pooling factors and the constraints given (a JSON object of
# table name to constraints).
trec() { # OUT CONS-JSON
    python3 - "$DIR/t.json" "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
tables = [{"name": t["name"], "num_embeddings": t["rows"], "embedding_dim": t["dim"],
           "bins": t["bins"]} for t in d["tables"]]
cons = {t["name"]: {"pooling_factors": [t["pooling_factor"]]} for t in d["tables"]}
for name, c in json.loads(sys.argv[3]).items():
    cons[name].update(c)
json.dump({"tables": tables, "constraints": cons}, open(sys.argv[2], "w"))
EOF
}
kernel_of() { # PLAN-JSON TABLE: its kernel and load factor
    python3 -c "import json,sys; t=[t for t in json.load(open(sys.argv[1]))['tables'] if t['name'] == sys.argv[2]][0]; print(t.get('compute_kernel', 'fused'), t.get('cache_load_factor', 0))" "$1" "$2"
}
# HBM to spare: table_0002 asked cached at 0.2 is, table_0005 asked for
# fused_uvm or fused_uvm_caching is off HBM (the tier pass chose), the rest
# stay fused; the TorchRec plan says so too.
trec "$DIR/k.json" '{"table_0002": {"compute_kernels": ["fused_uvm_caching"], "cache_params": {"load_factor": 0.2}},
                     "table_0005": {"compute_kernels": ["fused_uvm", "fused_uvm_caching"]},
                     "table_0007": {"compute_kernels": ["fused", "quant"]}}'
KPLAN="plan --tables $DIR/k.json --devices 8 --mem-gb 64"
"$CTL" $KPLAN --offline --host-dram-gb 512 --json --out "$DIR/k.off.json" 2>"$DIR/err" && ok ||
    bad "compute_kernels: $(cat "$DIR/err")"
[ "$(kernel_of "$DIR/k.off.json" table_0002)" = "fused_uvm_caching 0.2" ] && ok ||
    bad "table_0002 is not cached at 0.2: $(kernel_of "$DIR/k.off.json" table_0002)"
case $(kernel_of "$DIR/k.off.json" table_0005) in
fused_uvm*) ok ;;
*) bad "table_0005 is in HBM against its compute_kernels" ;;
esac
json_check "$DIR/k.off.json" 'sum("compute_kernel" in t for t in d["tables"]) == 2'
json_check "$DIR/k.off.json" 'any(n["table"] == "table_0007" and n["kind"] == "not_applied" and "quant" in n["message"] for n in d["notes"])'
"$CTL" $KPLAN --offline --host-dram-gb 512 --torchrec >"$DIR/k.trec" && ok || bad "compute_kernels --torchrec"
json_check "$DIR/k.trec" 'd["plan"]["embedding_bags"]["table_0002"]["compute_kernel"] == "fused_uvm_caching" and d["plan"]["embedding_bags"]["table_0002"]["cache_params"]["load_factor"] == 0.2 and d["plan"]["embedding_bags"]["table_0001"]["compute_kernel"] == "fused"'
"$CTL" $KPLAN --offline --host-dram-gb 512 >"$DIR/k.txt" && ok || bad "compute_kernels, text"
grep -q '^  table_0002 *fused_uvm_caching, load factor 0.2,' "$DIR/k.txt" && ok || bad "text lacks table_0002's kernel"
# Without host DRAM a table held off HBM is refused, named, with the fix.
"$CTL" $KPLAN --offline >/dev/null 2>"$DIR/err"
[ $? -eq 2 ] && grep -q '"table_0002": .*give host_dram_bytes (--host-dram-gb)' "$DIR/err" && ok ||
    bad "no host DRAM for a cached table: $(cat "$DIR/err")"
# HBM short: a table the tier pass caches, asked for fused, stays in HBM.
"$CTL" plan --offline --tables "$DIR/t.json" --devices 8 --mem-gb "$MEM" --host-dram-gb "$DRAM" \
    --json --out "$DIR/free.json" && ok || bad "plan, HBM short"
HELD=$(python3 -c "import json,sys; print([t['name'] for t in json.load(open(sys.argv[1]))['tables'] if 'compute_kernel' in t][0])" "$DIR/free.json")
trec "$DIR/f.json" "{\"$HELD\": {\"compute_kernels\": [\"fused\"]}}"
"$CTL" plan --offline --tables "$DIR/f.json" --devices 8 --mem-gb "$MEM" --host-dram-gb "$DRAM" \
    --json --out "$DIR/f.off.json" 2>"$DIR/err" && ok || bad "one table held fused: $(cat "$DIR/err")"
[ "$(kernel_of "$DIR/f.off.json" "$HELD")" = "fused 0" ] && ok || bad "$HELD left HBM against compute_kernels [fused]"
json_check "$DIR/f.off.json" 'any(t.get("compute_kernel") == "fused_uvm_caching" for t in d["tables"])'
# Every table held fused with HBM for 40 %: refused, naming the largest and
# what would plan it.
trec "$DIR/all.json" "$(python3 -c "import json,sys; print(json.dumps({t['name']: {'compute_kernels': ['fused']} for t in json.load(open(sys.argv[1]))['tables']}))" "$DIR/t.json")"
"$CTL" plan --offline --tables "$DIR/all.json" --devices 8 --mem-gb "$MEM" --host-dram-gb "$DRAM" >/dev/null 2>"$DIR/err"
[ $? -eq 2 ] && grep -q 'table "table_[0-9]*" the largest .*allow fused_uvm_caching or fused_uvm' "$DIR/err" && ok ||
    bad "all tables held fused: $(cat "$DIR/err")"

# --- eval: a plan with tables off HBM measured on the cpu backend -----------------
# The cpu backend times tables in device memory only: each table off HBM is
# timed there and its host-link time modelled, and every output says so
# (on cuda the tiers are timed: scripts/gpu-check.sh).  Six of the tables,
# cut to 20,000 rows; table_0001 in fused_uvm, table_0002 cached at 0.1.
python3 - "$DIR/t.json" "$DIR/e6.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["tables"][:6]
for x in t:
    x["rows"] = min(x["rows"], 20000)
json.dump({"tables": t}, open(sys.argv[2], "w"))
PY
"$CTL" plan --offline --tables "$DIR/e6.json" --devices 2 --mem-gb 1 --json --out "$DIR/e6p.json" && ok ||
    bad "plan of the six tables"
python3 - "$DIR/e6p.json" "$DIR/e6u.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for t in d["tables"]:
    if t["name"] == "table_0001":
        t["compute_kernel"] = "fused_uvm"
    if t["name"] == "table_0002":
        t["compute_kernel"] = "fused_uvm_caching"
        t["cache_load_factor"] = 0.1
json.dump(d, open(sys.argv[2], "w"))
PY
EVAL="eval --tables $DIR/e6.json --plan $DIR/e6u.json --backend cpu --batch-size 256 --warmup 0 --repeats 2 --no-flush"
"$CTL" $EVAL --json >"$DIR/e6.out.json" 2>"$DIR/err" && ok || bad "eval of a tiered plan: $(cat "$DIR/err")"
json_check "$DIR/e6.out.json" 'd["cost_model"] == "measured:cpu + host-link misses (modelled)"'
json_check "$DIR/e6.out.json" 'sum(x["cost_ms"].get("tier_modelled", 0) > 0 for x in d["devices"]) >= 1 and not any("tier_measured" in x["cost_ms"] for x in d["devices"])'
json_check "$DIR/e6.out.json" 'all(x["cost_ms"]["compute"] > x["cost_ms"].get("tier_modelled", 0) for x in d["devices"])'
"$CTL" $EVAL >"$DIR/e6.txt" 2>"$DIR/err" && ok || bad "eval of a tiered plan, text: $(cat "$DIR/err")"
grep -q '^memory tiers (host DRAM unbounded; host-link time modelled):$' "$DIR/e6.txt" && ok ||
    bad "eval text does not say the host-link time is modelled: $(cat "$DIR/e6.txt")"
grep -q '^  table_0001 *fused_uvm$' "$DIR/e6.txt" && ok || bad "eval text lacks table_0001's kernel"
grep -q '^predicted (neural:.* + host-link misses (modelled) model, batch 256) beside measured' "$DIR/e6.txt" && ok ||
    bad "eval text: the prediction does not say how tiers were costed"
# --host-dram-gb bounds the host tier as plan's does.
"$CTL" $EVAL --host-dram-gb 0.000001 >/dev/null 2>"$DIR/err"
[ $? -eq 2 ] && grep -q 'host 0: [0-9.]* [KMG]iB of tables in host DRAM (UVM), where the host has' "$DIR/err" && ok || bad "eval with too little host DRAM: $(cat "$DIR/err")"

# --- online: the same plan from the daemon ---------------------------------------
ADDR="unix:$DIR/shardd.sock"
mkdir -p "$DIR/data"
"$SHARDD" --listen "$ADDR" --data-dir "$DIR/data" --profiler-idle-ms 3600000 \
    >"$DIR/shardd.log" 2>&1 &
PID=$!
up=no
for _ in $(seq 1 100); do
    if "$CTL" --addr "$ADDR" health >/dev/null 2>&1; then up=yes; break; fi
    sleep 0.2
done
if [ $up = yes ]; then
    ok
    "$CTL" --addr "$ADDR" $PLAN >/dev/null 2>"$DIR/err"
    [ $? -eq 2 ] && ok || bad "online, without host DRAM: refused"
    "$CTL" --addr "$ADDR" $PLAN --host-dram-gb "$DRAM" --json --out "$DIR/on.json" 2>"$DIR/err" && ok ||
        bad "online with host DRAM: $(cat "$DIR/err")"
    if python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if all(a[k] == b[k] for k in ('tables', 'devices', 'hosts', 'plan_cost_ms')) else 1)" \
        "$DIR/off.json" "$DIR/on.json"; then ok; else bad "online tiered plan differs from offline"; fi
    "$CTL" --addr "$ADDR" $PLAN --host-dram-gb "$DRAM" >"$DIR/on.txt" 2>"$DIR/err" && ok || bad "online text"
    grep -q '^host 0: HBM GiB .* DDR GiB ' "$DIR/on.txt" && ok || bad "online text lacks HBM and DDR per host"
    # compute_kernels and cache_params through the daemon: the same plans
    # and refusals.
    "$CTL" --addr "$ADDR" $KPLAN --host-dram-gb 512 --json --out "$DIR/k.on.json" 2>"$DIR/err" && ok ||
        bad "online compute_kernels: $(cat "$DIR/err")"
    if python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if all(a[k] == b[k] for k in ('tables', 'devices', 'notes', 'plan_cost_ms')) else 1)" \
        "$DIR/k.off.json" "$DIR/k.on.json"; then ok; else bad "online compute_kernels plan differs from offline"; fi
    "$CTL" --addr "$ADDR" $KPLAN --host-dram-gb 512 >"$DIR/k.on.txt" && ok || bad "online compute_kernels text"
    grep -v -e '^search:' -e '^why:' "$DIR/k.txt" >"$DIR/k.off.cut"
    grep -v -e '^search:' -e '^why:' "$DIR/k.on.txt" >"$DIR/k.on.cut"
    cmp -s "$DIR/k.off.cut" "$DIR/k.on.cut" && ok || bad "online text differs: $(diff "$DIR/k.off.cut" "$DIR/k.on.cut")"
    "$CTL" --addr "$ADDR" plan --tables "$DIR/f.json" --devices 8 --mem-gb "$MEM" --host-dram-gb "$DRAM" \
        --json --out "$DIR/f.on.json" && ok || bad "online, one table held fused"
    [ "$(kernel_of "$DIR/f.on.json" "$HELD")" = "fused 0" ] && ok || bad "online: $HELD left HBM"
    "$CTL" --addr "$ADDR" $KPLAN >/dev/null 2>"$DIR/err"
    [ $? -eq 2 ] && grep -q '"table_0002": .*give host_dram_bytes' "$DIR/err" && ok ||
        bad "online, no host DRAM for a cached table: $(cat "$DIR/err")"
    "$CTL" --addr "$ADDR" plan --tables "$DIR/all.json" --devices 8 --mem-gb "$MEM" --host-dram-gb "$DRAM" >/dev/null 2>"$DIR/err"
    [ $? -eq 2 ] && grep -q 'allow fused_uvm_caching or fused_uvm' "$DIR/err" && ok ||
        bad "online, all tables held fused: $(cat "$DIR/err")"
else
    bad "shardd did not answer: $(cat "$DIR/shardd.log")"
fi

finish
