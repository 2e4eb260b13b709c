#!/bin/sh
# Memory tiers and precisions through the real binaries: 40 tables that the
# devices' memory holds only 40 % of are refused without host DRAM and
# planned with UVM caches with it (offline and by the built shardd on a
# private unix socket, the same plan both ways), with HBM and DDR per device
# and per host and the modelled host-link time in every output; with memory
# to spare the host tier changes nothing; cache-curve shows a table's
# miss-rate curve; --comm-precision fp16 halves the exchanges' bytes.
# usage: test_tiers.sh PATH/TO/shardctl PATH/TO/shardd
set -u
CTL=$1
SHARDD=$2
DIR=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
json_check() { # FILE PYTHON-EXPRESSION (on d)
    if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; then
        ok
    else
        bad "json check failed on $1: $2"
    fi
}

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
"$CTL" $PLAN --offline --host-dram-gb "$SMALL" >/dev/null 2>"$DIR/err"
[ $? -eq 2 ] && ok || bad "too little host DRAM is refused"

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
"$CTL" cache-curve --tables "$DIR/t.json" --table nope >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "cache-curve of an unknown table"

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
else
    bad "shardd did not answer: $(cat "$DIR/shardd.log")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
