#!/bin/sh
# shardctl's online mode against a real shardd on a private unix socket:
# online plans equal offline ones (JSON, text and TorchRec formats), estimate
# agrees with the plan it costs, and failures keep the exit-status contract
# (2 for bad input, 1 for an unreachable daemon; one message on stderr,
# nothing on stdout), and the Admin and health commands: health, status,
# models, jobs, pausing the profiler, a refused retrain and a forced one
# that activates its model.  Every part runs: nothing is skipped.
# usage: test_online.sh PATH/TO/shardctl PATH/TO/shardd
set -u
CTL=$1
SHARDD=$2
. "$(dirname "$0")/lib.sh"

ADDR="unix:$DIR/shardd.sock"
# Globals go before the command too; SHARDD_ADDR is the fallback.
ctl() { "$CTL" --addr "$ADDR" "$@"; }

# --- start the daemon ---------------------------------------------------------
mkdir -p "$DIR/data"
# The profiler is on (pausing and resuming are tested) but measures nothing:
# no random samples (max 0), and plans' shards wait an hour of idle.
# Retrains back to back (the rate limit is test_service's).
"$SHARDD" --listen "$ADDR" --data-dir "$DIR/data" --profiler-idle-ms 3600000 \
    --profiler-max-samples 0 --retrain-min-interval-s 0 \
    >"$DIR/shardd.log" 2>&1 &
PID=$!
# Up when health says SERVING.
up=no
i=0
while [ $i -lt 100 ]; do
    if ctl health --timeout-s 2 >"$DIR/out" 2>"$DIR/err" &&
        grep -qx SERVING "$DIR/out"; then
        up=yes
        break
    fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
    i=$((i + 1))
done
if [ "$up" != yes ]; then
    echo "FAIL: shardd did not come up: $(cat "$DIR/err" "$DIR/out")" >&2
    cat "$DIR/shardd.log" >&2
    exit 1
fi

# --- plan: online equals offline ------------------------------------------------
"$CTL" gen-tables --count 40 --seed 1 --batch-size 4096 --out "$DIR/t.json" &&
    ok || bad "gen-tables"

# same_plan OFFLINE ONLINE: the two plan JSONs are equal except the figures
# the daemon's API does not carry (null online: the drivers' own costs, and
# the search's states, beam levels and local moves) and the search time,
# which is a measurement.  Everything else, costs included, is bit-equal:
# the daemon runs the same planner with the same embedded model.
same_plan() {
    python3 - "$1" "$2" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
def strip(d, online):
    s = d.get("search")
    if s is not None:
        for k in ("time_ms", "states", "beam_levels", "local_moves"):
            v = s.pop(k)
            assert (v is None) == (online and k != "time_ms"), (k, v)
    for dr in d.get("explanation", {}).get("drivers", []):
        v = dr.pop("cost_ms")
        assert (v is None) == online, v
    return d
a, b = strip(off, False), strip(on, True)
if a != b:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            print("differs at", k, ":", json.dumps(a.get(k))[:300], "vs",
                  json.dumps(b.get(k))[:300], file=sys.stderr)
    sys.exit(1)
PY
}

# The first case is the issue's contract word for word: no batch size, so
# both sides plan at the cost model's own batch.
P0="--tables $DIR/t.json --devices 4"
for args in "--mem-gb 8" \
    "--mem-gb 8 --batch-size 4096 --alg neuroshard" \
    "--mem-gb 8 --batch-size 4096 --alg torchrec_greedy" \
    "--mem-gb 8 --batch-size 65536 --alg size_greedy" \
    "--mem-gb 24 --batch-size 4096 --alg random --seed 7 --no-splits --optimizer adam --devices-per-host 2" \
    "--mem-gb 8,8,2,4 --pin table_0003=3 --pin table_0000=0" \
    "--mem-gb 8,8,2,4 --pin table_0003=2 --alg torchrec_greedy" \
    "--mem-gb 16 --batch-size 4096 --alg neuroshard --no-splits --optimizer rowwise_adagrad" \
    "--mem-gb 8 --quantile 0.9"; do
    # shellcheck disable=SC2086 # word splitting of the option lists wanted
    if "$CTL" plan --offline $P0 $args --json >"$DIR/off.json" 2>"$DIR/err" &&
        ctl plan $P0 $args --json >"$DIR/on.json" 2>>"$DIR/err"; then
        same_plan "$DIR/off.json" "$DIR/on.json" && ok ||
            bad "online plan differs from offline: $args"
    else
        bad "plan $args: $(cat "$DIR/err")"
    fi
done
# The last case: the daemon planned for the ensemble's 0.9 quantile.
json_check "$DIR/on.json" "'(q0.90 of 5)' in d['cost_model']"
ctl plan $P0 --mem-gb 16 --batch-size 4096 --alg neuroshard --no-splits \
    --optimizer rowwise_adagrad --json >"$DIR/on.json" && ok ||
    bad "plan --no-splits online"
json_check "$DIR/on.json" "d['algorithm'] == 'neuroshard' and d['search']['greedy_runs'] >= 1 and d['search']['column_splits'] == 0"
# The pins and capacities reached the daemon (not only equal to offline).
ctl plan $P0 --mem-gb 8,8,2,4 --pin table_0003=2 --json >"$DIR/on.json" &&
    ok || bad "plan --pin online"
json_check "$DIR/on.json" "[[(s['device'], s['col_offset']) for s in t['shards']] for t in d['tables'] if t['name'] == 'table_0003'] == [[(2, 0)]] and all(dv['memory_bytes'] <= g * 2**30 for dv, g in zip(d['devices'], (8, 8, 2, 4)))"
expect_fail 2 'options.constraints.pins: device 2' --addr "$ADDR" plan $P0 \
    --mem-gb 8,8,0.01,4 --pin table_0003=2
# Row blocks from the scheme pass (a TorchRec sharding_types constraint):
# the same plan both ways, and the same column splits (the client counted
# the row blocks as splits: 4 online against 1 offline here).
cat >"$DIR/rw.json" <<'EOF_RW'
{"tables":[
 {"name":"big","num_embeddings":4000000,"embedding_dim":64,"feature_names":["f0"],"data_type":"FP32","pooling":"SUM"},
 {"name":"t1","num_embeddings":200000,"embedding_dim":32,"feature_names":["f1"],"data_type":"FP32","pooling":"SUM"},
 {"name":"t2","num_embeddings":500000,"embedding_dim":64,"feature_names":["f2"],"data_type":"FP32","pooling":"SUM"},
 {"name":"t3","num_embeddings":100000,"embedding_dim":128,"feature_names":["f3"],"data_type":"FP32","pooling":"SUM"},
 {"name":"t4","num_embeddings":300000,"embedding_dim":16,"feature_names":["f4"],"data_type":"FP32","pooling":"SUM"}],
 "constraints":{"big":{"sharding_types":["row_wise"],"pooling_factors":[20.0]},
                "t1":{"pooling_factors":[4.0]},"t2":{"pooling_factors":[8.0]}}}
EOF_RW
RW="--tables $DIR/rw.json --devices 4 --mem-gb 4 --batch-size 4096 --json"
# shellcheck disable=SC2086
if "$CTL" plan --offline $RW >"$DIR/off.json" 2>"$DIR/err" &&
    ctl plan $RW >"$DIR/on.json" 2>>"$DIR/err"; then
    same_plan "$DIR/off.json" "$DIR/on.json" && ok ||
        bad "online plan with row blocks differs from offline"
    json_check "$DIR/on.json" "[t['scheme'] for t in d['tables'] if t['name'] == 'big'] == ['row_wise'] and d['search']['column_splits'] == sum(len(t['shards']) - 1 for t in d['tables'] if t['scheme'] == 'column_wise')"
else
    bad "plan with row blocks: $(cat "$DIR/err")"
fi
P="$P0 --mem-gb 8 --batch-size 4096"

# The human report: equal but for the lines with figures the API lacks.
# shellcheck disable=SC2086
"$CTL" plan --offline $P >"$DIR/off.txt" 2>"$DIR/err" &&
    SHARDD_ADDR=$ADDR "$CTL" plan $P >"$DIR/on.txt" 2>>"$DIR/err" ||
    bad "plan text: $(cat "$DIR/err")"
grep -v '^search: \|^why: ' "$DIR/off.txt" >"$DIR/off.cut"
grep -v '^search: \|^why: ' "$DIR/on.txt" >"$DIR/on.cut"
cmp -s "$DIR/off.cut" "$DIR/on.cut" && ok ||
    bad "plan text differs: $(diff "$DIR/off.cut" "$DIR/on.cut" | head -5)"
# The same text through --out (written whole, then renamed).
# shellcheck disable=SC2086
ctl plan $P --out "$DIR/on.out" && [ ! -e "$DIR/on.out.tmp" ] &&
    grep -v '^search: \|^why: ' "$DIR/on.out" | cmp -s - "$DIR/on.cut" && ok ||
    bad "plan text through --out differs: $(head -3 "$DIR/on.out")"
grep -q '^why: device [0-9]* is the slowest; driven by table_' "$DIR/on.txt" &&
    grep -q '^search: .* greedy runs, [0-9]* column splits' "$DIR/on.txt" &&
    ok || bad "online text lacks why/search: $(tail -4 "$DIR/on.txt")"

# TorchRec's format, through --out.
# shellcheck disable=SC2086
"$CTL" plan --offline $P --torchrec --out "$DIR/off.trec" &&
    ctl plan $P --torchrec --out "$DIR/on.trec" &&
    cmp -s "$DIR/off.trec" "$DIR/on.trec" && ok || bad "--torchrec differs"

# --- estimate: costs the placement it is given ---------------------------------
# shellcheck disable=SC2086
"$CTL" plan --offline $P --alg size_greedy --json --out "$DIR/sg.json" || bad "sg"
if ctl estimate --tables "$DIR/t.json" --plan "$DIR/sg.json" --mem-gb 8 \
    --batch-size 4096 --json >"$DIR/est.json" 2>"$DIR/err"; then
    ok
    python3 - "$DIR/sg.json" "$DIR/est.json" <<'PY' && ok || bad "estimate disagrees with the plan"
import json, sys
plan, est = (json.load(open(p)) for p in sys.argv[1:3])
assert est["fits_memory"] is True
assert est["plan_cost_ms"] == plan["plan_cost_ms"], (est["plan_cost_ms"], plan["plan_cost_ms"])
assert len(est["devices"]) == len(plan["devices"])
for e, p in zip(est["devices"], plan["devices"]):
    assert e["device"] == p["id"] and e["memory_bytes"] == p["memory_bytes"]
    assert e["total_ms"] == p["cost_ms"]["total"]
assert est["basis"]["comm_model"] == plan["comm_model"]
PY
else
    bad "estimate: $(cat "$DIR/err")"
fi
ctl estimate --tables "$DIR/t.json" --plan "$DIR/sg.json" --mem-gb 8 \
    --batch-size 4096 >"$DIR/est.txt" 2>"$DIR/err" &&
    grep -q '^plan: estimate, 40 tables' "$DIR/est.txt" &&
    grep -q '^memory: every device fits' "$DIR/est.txt" && ok ||
    bad "estimate text: $(cat "$DIR/err" "$DIR/est.txt")"
# Too little memory is costed, not refused, and said.
ctl estimate --tables "$DIR/t.json" --plan "$DIR/sg.json" --mem-gb 1 \
    --batch-size 4096 >"$DIR/est.txt" 2>"$DIR/err" &&
    grep -q '^memory: over capacity on device 0' "$DIR/est.txt" && ok ||
    bad "estimate over capacity: $(cat "$DIR/err" "$DIR/est.txt")"

# --- failures keep the contract ------------------------------------------------
B='[0.5,0.5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]'
printf '{"tables":[{"name":"x","rows":9,"dim":8,"pooling_factor":1,"bins":%s},{"name":"y","rows":9,"dim":30,"pooling_factor":1,"bins":%s}]}' \
    "$B" "$B" >"$DIR/bad.json"
expect_fail 2 'tables[1] "y": dim 30 is not a multiple of 4' \
    --addr "$ADDR" plan --tables "$DIR/bad.json" --devices 2 --mem-gb 1
printf '{"tables":[{"name":"huge","rows":100000000,"dim":128,"pooling_factor":1,"bins":%s}]}' \
    "$B" >"$DIR/huge.json"
# Refused by the daemon (RESOURCE_EXHAUSTED): exit 2, its message.
expect_fail 2 'table "huge": needs 47.7 GiB but the largest free space on any device is 1.00 GiB (short by 46.7 GiB)' --addr "$ADDR" plan \
    --tables "$DIR/huge.json" --devices 2 --mem-gb 1 --alg size_greedy
expect_fail 2 'algorithm "best" is unknown' --addr "$ADDR" plan \
    --tables "$DIR/t.json" --devices 2 --mem-gb 8 --alg best
expect_fail 2 'devices_per_host' --addr "$ADDR" plan --tables "$DIR/t.json" \
    --devices 4 --devices-per-host 3 --mem-gb 8
expect_fail 2 '--model, --threads work only with --offline' --addr "$ADDR" \
    plan --tables "$DIR/t.json" --devices 2 --mem-gb 8 --model m --threads 2
expect_fail 2 'No such file' --addr "$ADDR" plan --tables "$DIR/missing.json" \
    --devices 2 --mem-gb 1
expect_fail 1 "cannot reach shardd at unix:$DIR/nope.sock: is it running?" \
    --addr "unix:$DIR/nope.sock" plan --tables "$DIR/t.json" --devices 2 \
    --mem-gb 8
expect_fail 1 "cannot reach shardd at unix:$DIR/nope.sock: is it running?" \
    status --addr "unix:$DIR/nope.sock"
expect_fail 2 'missing argument' --addr "$ADDR" job
expect_fail 2 'unexpected argument "x"' --addr "$ADDR" status x
expect_fail 2 'neither pause nor resume' --addr "$ADDR" profiler stop
expect_fail 2 '--token and --token-file' --addr "$ADDR" status --token a \
    --token-file "$DIR/t.json"
# A token file: its first line, trimmed; what cannot be one says why.
expect_fail 2 "token-file: $DIR: Is a directory" --addr "$ADDR" status \
    --token-file "$DIR"
printf '\n  tok\n' >"$DIR/tok.blank"
expect_fail 2 'no token in its first line' --addr "$ADDR" status \
    --token-file "$DIR/tok.blank"
printf '  tok  \nsecond\n' >"$DIR/tok"
ctl status --token-file "$DIR/tok" >/dev/null 2>"$DIR/err" && ok ||
    bad "status with a token file: $(cat "$DIR/err")"

# --- admin and health ------------------------------------------------------------
ctl health >"$DIR/out" 2>"$DIR/err" && grep -qx SERVING "$DIR/out" && ok ||
    bad "health: $(cat "$DIR/err")"
ctl health shardd.v1.Planner --json >"$DIR/h.json" 2>"$DIR/err" && ok ||
    bad "health Planner: $(cat "$DIR/err")"
json_check "$DIR/h.json" "d == {'status': 'SERVING'}"
expect_fail 2 'service: unknown service "no.such.Service"' --addr "$ADDR" \
    health no.such.Service
ctl status --json >"$DIR/s.json" 2>"$DIR/err" && ok ||
    bad "status: $(cat "$DIR/err")"
json_check "$DIR/s.json" "d['version'] != '' and d['backend'] in ('cpu', 'cuda') and d['profiler'] == 'PROFILER_STATE_RUNNING' and d.get('compute_samples', 0) == 0"
# A fresh store: the embedded model answers requests naming no profile,
# and is the active model of the server's own profile only where this
# machine is the one it was measured on.
json_check "$DIR/s.json" "d['serving_model_version'] == 'embedded' and d['serving_profile'] != '' and d['active_model_version'] == ('embedded' if d['profile'] == d['serving_profile'] else '')"
# The embedded model serves with its 5 members.
json_check "$DIR/s.json" "d.get('serving_model_members') == 5"
ctl status >"$DIR/out" 2>"$DIR/err" && grep -q '^shardd .* up ' "$DIR/out" &&
    grep -q '^serving model: an ensemble of 5 ' "$DIR/out" &&
    ok || bad "status text: $(cat "$DIR/err" "$DIR/out")"
ctl models --json >"$DIR/m.json" 2>"$DIR/err" && ok ||
    bad "models: $(cat "$DIR/err")"
json_check "$DIR/m.json" "[m['version'] for m in d['models']] == ['embedded']"
ctl models --limit 1 >"$DIR/out" 2>"$DIR/err" && grep -q 'embedded' "$DIR/out" &&
    ok || bad "models text: $(cat "$DIR/err" "$DIR/out")"
expect_fail 2 'id: no job "no-such-job"' --addr "$ADDR" job no-such-job
expect_fail 2 'id: no job "no-such-job"' --addr "$ADDR" job no-such-job --watch
expect_fail 2 'id: no job 424242' --addr "$ADDR" job 424242
expect_fail 2 'version: no model "no-such-version"' --addr "$ADDR" activate \
    no-such-version
# The daemon always has a backend to measure with (cpu at least): pausing
# and resuming work.
ctl profiler pause >"$DIR/out" 2>"$DIR/err" &&
    grep -q '^profiler: paused' "$DIR/out" && ok ||
    bad "profiler pause: $(cat "$DIR/err" "$DIR/out")"
ctl status --json >"$DIR/s.json" 2>"$DIR/err" || bad "status: $(cat "$DIR/err")"
json_check "$DIR/s.json" "d['profiler'] == 'PROFILER_STATE_PAUSED'"
ctl profiler resume >"$DIR/out" 2>"$DIR/err" &&
    grep -q '^profiler: running' "$DIR/out" && ok ||
    bad "profiler resume: $(cat "$DIR/err" "$DIR/out")"
# No sample in the store: a retrain, even forced, is refused up front and
# says why; no job is made.
expect_fail 2 'has 0 samples; training needs at least 20' --addr "$ADDR" \
    retrain --force --wait --json
ctl status --json >"$DIR/s.json" 2>"$DIR/err" || bad "status: $(cat "$DIR/err")"
json_check "$DIR/s.json" "d['profiler'] == 'PROFILER_STATE_RUNNING' and d.get('jobs_queued', 0) == 0 and d.get('jobs_running', 0) == 0"
# With samples in the daemon's store (measured by offline profile, a few
# tiny shards on the cpu), a forced retrain runs and activates its model
# whatever the gate says (admin.proto RetrainRequest.force): watch it,
# then see it active and activate it again.
if "$CTL" profile --db "$DIR/data/shardd.db" --samples 25 --backend cpu \
    --batch-size 4096 --max-gb 0.01 --warmup 0 --repeats 1 \
    --quiet-tolerance 0 >/dev/null 2>"$DIR/prof.err"; then
    ok
else
    bad "profile into the daemon's store: $(cat "$DIR/prof.err")"
fi
PROF=$(sed -n 's/^profile \(.*\): [0-9]* samples added.*/\1/p' "$DIR/prof.err")
ctl retrain --profile "$PROF" --force --wait --json >"$DIR/j.json" \
    2>"$DIR/err" && ok || bad "retrain $PROF: $(cat "$DIR/err")"
json_check "$DIR/j.json" "d['state'] == 'JOB_STATE_SUCCEEDED' and d['progress'] == 1 and d['result_model_version'] != '' and d['kind'] == 'JOB_KIND_RETRAIN' and ' activated' in d['message'] and 'not activated' not in d['message']"
JOB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$DIR/j.json")
VER=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["result_model_version"])' "$DIR/j.json")
ctl models --profile "$PROF" --json >"$DIR/m.json" 2>"$DIR/err" ||
    bad "models --profile: $(cat "$DIR/err")"
json_check "$DIR/m.json" "[m['version'] for m in d['models'] if m['active']] == ['$VER']"
# A retrain trains 5 members by default (retrain_ensemble): listed, and
# told in the table.
json_check "$DIR/m.json" "[m.get('members') for m in d['models'] if m['version'] == '$VER'] == [5]"
ctl models --profile "$PROF" >"$DIR/out" 2>"$DIR/err" &&
    grep -q "^\* $VER .*  ensemble of 5$" "$DIR/out" && ok ||
    bad "models text, members: $(cat "$DIR/err" "$DIR/out")"
# Watching a finished job: its state, then the end (a log line).
ctl job "$JOB" --watch >"$DIR/out" 2>"$DIR/err" &&
    grep -q "^job $JOB: retrain of profile .*, succeeded" "$DIR/out" &&
    grep -q "^job $JOB: succeeded 100%" "$DIR/err" && ok ||
    bad "job --watch: $(cat "$DIR/err" "$DIR/out")"
ctl job "$JOB" >"$DIR/out" 2>"$DIR/err" &&
    grep -q "model: $VER" "$DIR/out" && ok ||
    bad "job: $(cat "$DIR/err" "$DIR/out")"
ctl activate "$VER" >"$DIR/out" 2>"$DIR/err" &&
    grep -q "^model $VER is active for profile $PROF" "$DIR/out" &&
    ok || bad "activate: $(cat "$DIR/err" "$DIR/out")"
ctl models --profile "$PROF" --json >"$DIR/m.json" 2>"$DIR/err" ||
    bad "models --profile: $(cat "$DIR/err")"
json_check "$DIR/m.json" "[m['version'] for m in d['models'] if m['active']] == ['$VER']"

finish
