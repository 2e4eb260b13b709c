#!/bin/sh
# The shardctl command-line contract, driven through the real binary:
# generation, every algorithm and output format, and bad input (exit 2, one
# message naming the table and the field, nothing on stdout).
# usage: test_shardctl.sh PATH/TO/shardctl
set -u
CTL=$1
. "$(dirname "$0")/lib.sh"

# --- generation -------------------------------------------------------------
"$CTL" gen-tables --count 120 --seed 3 --batch-size 4096 --out "$DIR/t.json" &&
    ok || bad "gen-tables"
"$CTL" gen-tables --count 120 --seed 3 --batch-size 4096 --threads 1 \
    >"$DIR/t2.json" && ok || bad "gen-tables to stdout"
cmp -s "$DIR/t.json" "$DIR/t2.json" && ok || bad "gen-tables not deterministic"
json_check "$DIR/t.json" 'len(d["tables"]) == 120 and all(len(t["bins"]) == 17 for t in d["tables"])'
"$CTL" gen-tasks --count 5 --seed 1 --tables "$DIR/t.json" --out "$DIR/k.json" &&
    ok || bad "gen-tasks"
json_check "$DIR/k.json" 'len(d["tasks"]) == 5 and all(10 <= len(k["tables"]) <= 59 for k in d["tasks"])'

# --- planning: every algorithm, every format --------------------------------
for alg in random dim_greedy size_greedy lookup_greedy size_lookup_greedy \
    torchrec_greedy dreamshard neuroshard; do
    if "$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
        --mem-gb 4 --alg "$alg" --json >"$DIR/p.json" 2>"$DIR/err"; then
        ok
        json_check "$DIR/p.json" "d['algorithm'] == '$alg' and len(d['devices']) == 4 and d['plan_cost_ms'] > 0 and all(sum(s['col_width'] for s in t['shards']) > 0 for t in d['tables']) and d['cost_model'].startswith('neural:') and 0 <= d['explanation']['critical_device'] < 4 and d['explanation']['lower_bound_ms'] <= d['plan_cost_ms'] * (1 + 1e-9)"
    else
        bad "plan --alg $alg: $(cat "$DIR/err")"
    fi
done
json_check "$DIR/p.json" "d['search']['states'] >= 1 and d['search']['greedy_runs'] >= d['search']['states'] and not d['search']['budget_exhausted']"
# Every column of every table placed once, and the plan cost is the max.
python3 - "$DIR/k.json" "$DIR/p.json" <<'PY' && ok || bad "plan JSON covers the task"
import json, sys
task = json.load(open(sys.argv[1]))["tasks"][2]["tables"]
plan = json.load(open(sys.argv[2]))
dims = {t["name"]: t["dim"] for t in task}
got = {t["name"]: sorted((s["col_offset"], s["col_width"]) for s in t["shards"]) for t in plan["tables"]}
assert set(got) == set(dims), "tables differ"
rows = {t["name"]: t["rows"] for t in task}
# A replicated table: every device holds all of its columns, once.
for t in plan["tables"]:
    if t.get("scheme") == "data_parallel":
        assert sorted(s["device"] for s in t["shards"]) == list(range(4)), t
        assert all((s["col_offset"], s["col_width"]) == (0, dims[t["name"]]) for s in t["shards"]), t
        got[t["name"]] = [(0, dims[t["name"]])]
    # A table in row blocks: each of its column spans' blocks cover its
    # rows once, in order.
    if t.get("scheme") in ("table_row_wise", "row_wise"):
        spans = {}
        for s in t["shards"]:
            spans.setdefault((s["col_offset"], s["col_width"]), []).append(
                (s["row_offset"], s["row_count"]))
        for blocks in spans.values():
            pos = 0
            for off, n in sorted(blocks):
                assert off == pos and n > 0, (t["name"], blocks)
                pos += n
            assert pos == rows[t["name"]], (t["name"], pos)
        got[t["name"]] = sorted(spans)
for name, spans in got.items():
    pos = 0
    for off, width in spans:
        assert off == pos, (name, spans)
        pos += width
    assert pos == dims[name], (name, pos)
assert abs(plan["plan_cost_ms"] - max(d["cost_ms"]["total"] for d in plan["devices"])) < 1e-9
PY
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 \
    --torchrec >"$DIR/tr.json" && ok || bad "plan --torchrec"
# TorchRec's format: placed shards fused on ranks, replicas dense on every
# rank; a table in row blocks (if the plan has one) has blocks whose sizes
# add up to its rows.
json_check "$DIR/tr.json" 'all((v["sharding_type"] in ("table_wise", "column_wise", "table_row_wise", "row_wise") and v["compute_kernel"] == "fused" and all(s["placement"].startswith("rank:") for s in v["shards"])) or (v["sharding_type"] == "data_parallel" and v["compute_kernel"] == "dense" and v["ranks"] == [0, 1, 2, 3]) for v in d["plan"]["embedding_bags"].values())'
python3 - "$DIR/k.json" "$DIR/tr.json" <<'PY' && ok || bad "--torchrec row blocks do not cover their tables"
import json, sys
rows = {t["name"]: t["rows"] for t in json.load(open(sys.argv[1]))["tasks"][0]["tables"]}
for name, v in json.load(open(sys.argv[2]))["plan"]["embedding_bags"].items():
    if v["sharding_type"] in ("table_row_wise", "row_wise"):
        assert sum(s["shard_sizes"][0] for s in v["shards"]) == rows[name], name
PY
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 \
    >"$DIR/human.txt" && ok || bad "plan (human table)"
grep -q "plan: neuroshard" "$DIR/human.txt" && grep -q "plan cost:" \
    "$DIR/human.txt" && grep -q "fwd_comm" "$DIR/human.txt" &&
    ok || bad "human table lacks its header (neuroshard is the default)"
grep -q "^why: device [0-9]* is the slowest; driven by" "$DIR/human.txt" &&
    grep -q "^lower bound: " "$DIR/human.txt" &&
    grep -q "^search: .* states" "$DIR/human.txt" &&
    ok || bad "human table lacks the explanation"
[ "$(grep -cE '^ +[0-9]+ ' "$DIR/human.txt")" -eq 4 ] && ok ||
    bad "human table does not list 4 devices"
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 --json \
    --out "$DIR/o.json" && [ -s "$DIR/o.json" ] && [ ! -e "$DIR/o.json.tmp" ] &&
    ok || bad "plan --out"
# --out to a FIFO (or a device) writes in place: a rename would replace it
# with a file.  A directory, or one missing, is the user's error.
mkfifo "$DIR/fifo"
timeout 20 cat "$DIR/fifo" >"$DIR/fifo.txt" &
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 --json \
    --out "$DIR/fifo" && wait $! && [ -p "$DIR/fifo" ] &&
    grep -q '"algorithm": "neuroshard"' "$DIR/fifo.txt" && ok ||
    bad "plan --out to a FIFO: $(ls -l "$DIR/fifo")"
# A symbolic link is written through: its file replaced, the link kept;
# /dev/stdout (a link to the process's fd) lands in the shell's redirect.
echo old >"$DIR/target.json"
ln -s "$DIR/target.json" "$DIR/link.json"
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 --json \
    --out "$DIR/link.json" && [ -L "$DIR/link.json" ] &&
    grep -q '"algorithm": "neuroshard"' "$DIR/target.json" && ok ||
    bad "plan --out to a symlink: $(ls -l "$DIR/link.json")"
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 --json \
    --out /dev/stdout >"$DIR/stdout.json" &&
    grep -q '"algorithm": "neuroshard"' "$DIR/stdout.json" && ok ||
    bad "plan --out /dev/stdout into a file"
# An endless input is refused at a size, not read until memory runs out.
expect_fail 2 "over 256 MiB: too large for a JSON input file" plan --offline \
    --tables /dev/zero --devices 4 --mem-gb 4
expect_fail 2 "Is a directory" plan --offline --tables "$DIR/k.json" \
    --devices 4 --mem-gb 4 --out "$DIR"
expect_fail 2 "No such file or directory" plan --offline --tables \
    "$DIR/k.json" --devices 4 --mem-gb 4 --json --out "$DIR/none/p.json"
# The human table through --out: the same text, but for the search's time.
"$CTL" plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 4 \
    --out "$DIR/human.out" && [ ! -e "$DIR/human.out.tmp" ] &&
    grep -v '^search: ' "$DIR/human.txt" >"$DIR/human.cut" &&
    grep -v '^search: ' "$DIR/human.out" | cmp -s - "$DIR/human.cut" &&
    ok || bad "plan --out (human table): $(head -3 "$DIR/human.out")"
"$CTL" --help | grep -q "gen-tables" && ok || bad "--help"
# A command's --help (and "help COMMAND"): that command's usage alone.
"$CTL" eval --tables x --help >"$DIR/help.txt" &&
    grep -q "^usage: shardctl eval .*--tables FILE --plan FILE" "$DIR/help.txt" &&
    grep -q "Measure a plan on the device" "$DIR/help.txt" &&
    ! grep -q "gen-tables" "$DIR/help.txt" && ok || bad "eval --help"
"$CTL" help gen-tasks | grep -q "^usage: shardctl gen-tasks .*--count N" &&
    ! "$CTL" help gen-tasks | grep -q "Measure a plan" && ok ||
    bad "help gen-tasks"

# --- measuring: profile (resumable) and eval ---------------------------------
FAST="--batch-size 64 --warmup 0 --repeats 2 --no-flush"
# Profiles beside other tests: the quiet check would retime every sample
# (it is checked on its own below and in test_profiler).
QUIET="--quiet-tolerance 0"
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/p.db" --samples 3 --max-gb 0.05 --seed 2 $FAST $QUIET \
    2>"$DIR/err" && grep -q "3 samples added, 3 in the store" "$DIR/err" &&
    ok || bad "profile: $(cat "$DIR/err")"
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/p.db" --samples 5 --max-gb 0.05 --seed 2 $FAST $QUIET \
    2>"$DIR/err" && grep -q "2 samples added, 5 in the store" "$DIR/err" &&
    ok || bad "profile resume: $(cat "$DIR/err")"
# A store of two profiles (batch 64 and 32): train and train-policy name
# both and ask for --profile.
cp "$DIR/p.db" "$DIR/two.db"
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/two.db" --samples 1 --max-gb 0.05 --seed 2 \
    --batch-size 32 --warmup 0 --repeats 2 --no-flush $QUIET 2>"$DIR/err" &&
    ok || bad "profile of a second batch: $(cat "$DIR/err")"
for cmd in train train-policy; do
    expect_fail 2 "the store has 2 profiles (cpu/" $cmd --db "$DIR/two.db"
done
# The quiet check's path on the real backend: two samples, each between
# two probe timings (a tolerance of 9: a busy CI machine does not retime
# them), and a tolerance out of range named.
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/q.db" --samples 2 --max-gb 0.05 --seed 2 $FAST \
    --quiet-tolerance 9 \
    2>"$DIR/err" && grep -q "2 samples added, 2 in the store" "$DIR/err" &&
    ok || bad "profile with the quiet check: $(cat "$DIR/err")"
expect_fail 2 'quiet-tolerance' profile --db "$DIR/q.db" --samples 3 \
    --quiet-tolerance -1
# Profiles into store $1 with the options after $2 (and $FAST), then checks
# the tables a shard of its samples by the Python expression $2 over their
# list n.
profile_sizes() {
    db=$1
    expr=$2
    shift 2
    # shellcheck disable=SC2086
    "$CTL" profile --db "$db" "$@" $FAST $QUIET 2>"$DIR/err" || return 1
    python3 - "$db" "$expr" <<'PY'
import sqlite3, sys
n = [r[0] for r in sqlite3.connect(sys.argv[1]).execute(
    "select ntables from samples where kind = 'compute'")]
assert eval(sys.argv[2]), n
PY
}
# --max-tables K: shards of 1 .. K tables (default 15; a device of a plan
# often holds more).
profile_sizes "$DIR/mt.db" 'len(n) == 12 and max(n) <= 40 and max(n) > 15' \
    --samples 12 --max-gb 0.2 --seed 4 --family onehot --max-tables 40 &&
    ok || bad "profile --max-tables 40: $(cat "$DIR/err")"
expect_fail 2 'at most 64 tables' profile --db "$DIR/mt.db" --samples 13 \
    --max-tables 65
# --plan-devices N: shards shaped like a device of a greedy plan of a task of
# 10 .. 59 tables; on one device, the device holds the whole task.
profile_sizes "$DIR/pd.db" 'len(n) == 3 and min(n) >= 10 and max(n) <= 59' \
    --samples 3 --max-gb 0.2 --seed 4 --family onehot --plan-devices 1 &&
    ok || bad "profile --plan-devices 1: $(cat "$DIR/err")"
expect_fail 2 '--plan-devices' profile --db "$DIR/pd.db" --samples 4 \
    --plan-devices 65
# --alg A: devices of A's plans, each piece cut as the plan cuts it: TorchRec
# puts a row block of every table on each device (source row-blocks).
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/pa.db" --samples 2 --max-gb 0.5 --seed 4 \
    --family zipf --plan-devices 2 --alg torchrec_greedy $FAST $QUIET \
    2>"$DIR/err" && python3 - "$DIR/pa.db" <<'PY' &&
import sqlite3, sys
s = [r[0] for r in sqlite3.connect(sys.argv[1]).execute(
    "select source from samples where kind = 'compute'")]
assert s == ["row-blocks"] * 2, s
PY
    ok || bad "profile --alg torchrec_greedy: $(cat "$DIR/err")"
expect_fail 2 'give --plan-devices N' profile --db "$DIR/pa.db" --samples 3 \
    --alg neuroshard
expect_fail 2 'dreamshard' profile --db "$DIR/pa.db" --samples 3 \
    --plan-devices 2 --alg dreamshard
expect_fail 2 '--model plans the shards of --alg neuroshard' profile \
    --db "$DIR/pa.db" --samples 3 --plan-devices 2 --model x.sdcn
# eval measures a plan made for small tables (real weights are allocated).
python3 - "$DIR/t.json" "$DIR/small.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["tables"][:12]
for x in t:
    x["rows"] = min(x["rows"], 20000)
json.dump({"tables": t}, open(sys.argv[2], "w"))
PY
"$CTL" plan --offline --tables "$DIR/small.json" --devices 3 --mem-gb 1 \
    --json --out "$DIR/sp.json" && ok || bad "plan of small tables"
# shellcheck disable=SC2086
"$CTL" eval --tables "$DIR/small.json" --plan "$DIR/sp.json" --json $FAST \
    >"$DIR/e.json" 2>"$DIR/err" && ok || bad "eval: $(cat "$DIR/err")"
json_check "$DIR/e.json" 'd["cost_model"] == "measured:cpu" and d["plan_cost_ms"] > 0 and len(d["devices"]) == 3'
expect_fail 2 'not in the tables file' eval --tables "$DIR/small.json" \
    --plan "$DIR/o.json"
# train: a model from the store's samples, stored and written to a file that
# plan --model uses; damaged or foreign files are refused.
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/p.db" --samples 24 --max-gb 0.05 --seed 2 $FAST $QUIET \
    2>"$DIR/err" && ok || bad "profile for train: $(cat "$DIR/err")"
"$CTL" train --db "$DIR/p.db" --epochs 5 --activate --out "$DIR/m.sdcn" \
    >"$DIR/train.txt" 2>"$DIR/err" && ok || bad "train: $(cat "$DIR/err")"
grep -q "^model 1 for profile cpu/.*/64 (active)" "$DIR/train.txt" &&
    grep -q "^samples: [0-9]* train, [0-9]* validation, [0-9]* test" \
        "$DIR/train.txt" && grep -q "^MAPE: " "$DIR/train.txt" &&
    ok || bad "train report: $(cat "$DIR/train.txt")"
# The default is v4: the physical prior, its pair term counting tables by
# their lookups a bag.
grep -q "^physical prior, .*, pair_tables x bag columns " "$DIR/train.txt" &&
    ok || bad "train's default is not v4: $(grep prior "$DIR/train.txt")"
"$CTL" train --db "$DIR/p.db" --epochs 5 >"$DIR/train.txt" 2>"$DIR/err" &&
    grep -q "^model 2 " "$DIR/train.txt" && ok || bad "train: a second version"
# The same training with a much stronger weight decay fits otherwise.
"$CTL" train --db "$DIR/p.db" --epochs 5 --weight-decay 50 >"$DIR/wd.txt" \
    2>"$DIR/err" && grep -q "^model 3 " "$DIR/wd.txt" && ok ||
    bad "train --weight-decay: $(cat "$DIR/err")"
[ "$(grep '^MAPE' "$DIR/wd.txt")" != "$(grep '^MAPE' "$DIR/train.txt")" ] &&
    ok || bad "train --weight-decay 50 changed nothing"
expect_fail 2 '--weight-decay' train --db "$DIR/p.db" --weight-decay -1
# --newest: train and score on the newest samples only (12 and 7 of 24).
"$CTL" train --db "$DIR/p.db" --epochs 5 --newest 12 >"$DIR/new.txt" \
    2>"$DIR/err" && ok || bad "train --newest: $(cat "$DIR/err")"
awk '/^samples:/ { n = $2 + $4 + $6 } END { exit n != 12 }' "$DIR/new.txt" &&
    ok || bad "train --newest 12: $(grep '^samples' "$DIR/new.txt")"
"$CTL" score --db "$DIR/p.db" --model "$DIR/m.sdcn" --newest 7 \
    >"$DIR/score7.txt" 2>"$DIR/err" && grep -q " on 7 samples of " \
    "$DIR/score7.txt" && ok || bad "score --newest 7: $(cat "$DIR/err")"
# --out: a CSV row a sample scored, its error the prediction's over the
# measured time, and the physical prior alone beside it (train's default,
# v4, has one).
CSV_HEAD="id,family,source,tables,measured_ms,predicted_ms,error,prior_ms"
# Rows of $1 whose fields hold together; $2 1: prior_ms given, 0: empty.
csv_rows() {
    awk -F, -v prior="$2" 'NR > 1 && NF == 8 && $1 ~ /^[0-9]+$/ &&
        $4 >= 1 && $5 > 0 && $6 > 0 &&
        ($6 / $5 - 1 - $7) ^ 2 < 1e-6 &&
        (prior ? $8 > 0 : $8 == "") { n++ } END { print n + 0 }' "$1"
}
"$CTL" score --db "$DIR/p.db" --model "$DIR/m.sdcn" --newest 7 \
    --out "$DIR/s7.csv" >/dev/null 2>"$DIR/err" &&
    [ "$(head -1 "$DIR/s7.csv")" = "$CSV_HEAD" ] &&
    [ "$(csv_rows "$DIR/s7.csv" 1)" = 7 ] && ok ||
    bad "score --out: $(cat "$DIR/err" "$DIR/s7.csv")"
# score splits the errors by tables a shard: the --max-tables shards apart.
MANY=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from samples where ntables > 15").fetchone()[0])' "$DIR/mt.db")
"$CTL" score --db "$DIR/mt.db" --model "$DIR/m.sdcn" >"$DIR/score_mt.txt" \
    2>"$DIR/err" && grep -q "^16 or more  *all  *$MANY " "$DIR/score_mt.txt" &&
    grep -q "^1 \.\. 15  *all  *$((12 - MANY)) " "$DIR/score_mt.txt" && ok ||
    bad "score by tables a shard: $(cat "$DIR/score_mt.txt" "$DIR/err")"
# ... and by shape: the devices of TorchRec's row-wise plans (profile --alg
# above) are row blocks; no replica among them, so no replicas line.
"$CTL" score --db "$DIR/pa.db" --model "$DIR/m.sdcn" >"$DIR/score_pa.txt" \
    2>"$DIR/err" && grep -q "^row blocks  *all  *2 " "$DIR/score_pa.txt" &&
    ! grep -q "^replicas " "$DIR/score_pa.txt" && ok ||
    bad "score by shape: $(cat "$DIR/score_pa.txt" "$DIR/err")"
# The embedded model (its profile is batch 4096's, p.db's batch 64's): not
# scored on another profile's samples unless asked, and the refusal names
# the store's profile; asked with --profile, scored, and said so.
PNAME=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select name from profiles").fetchone()[0])' "$DIR/p.db")
expect_fail 2 "the store has \"$PNAME\"" score --db "$DIR/p.db"
"$CTL" score --db "$DIR/p.db" --profile "$PNAME" >"$DIR/out" 2>"$DIR/err" &&
    grep -q "^model (embedded) on 24 samples of " "$DIR/out" &&
    grep -qF "scored on the samples of \"$PNAME\" as asked" "$DIR/err" &&
    ok || bad "score --profile of another profile: $(cat "$DIR/err")"
# The embedded model has no physical prior (v2): prior_ms left empty.
"$CTL" score --db "$DIR/p.db" --profile "$PNAME" --out "$DIR/s24.csv" \
    >/dev/null 2>"$DIR/err" && [ "$(csv_rows "$DIR/s24.csv" 0)" = 24 ] &&
    ok || bad "score --out of a model without a prior: $(cat "$DIR/err")"
expect_fail 2 '--newest' train --db "$DIR/p.db" --newest 0
# Families: every sample records the families of its tables (the profile's
# pool mixes them); train --hold-out-family keeps every sample with a table
# of that family out of training, reports it, and stores its figures.
python3 - "$DIR/p.db" >"$DIR/fam.txt" <<'PY'
import collections, sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "select family from samples where kind = 'compute'").fetchall()
assert rows and all(r[0] for r in rows), rows
single = collections.Counter(r[0] for r in rows if "+" not in r[0])
fam = single.most_common(1)[0][0]
held = sum(1 for r in rows if fam in r[0].split("+"))
print(fam, held, len(rows), single[fam])
PY
read -r HFAM HELD TOTAL PURE <"$DIR/fam.txt"
"$CTL" train --db "$DIR/p.db" --epochs 5 --hold-out-family "$HFAM" \
    >"$DIR/hold.txt" 2>"$DIR/err" && ok || bad "train --hold-out-family: $(cat "$DIR/err")"
python3 - "$DIR/hold.txt" "$DIR/p.db" "$HFAM" "$HELD" "$TOTAL" "$PURE" <<'PY' && ok || bad "hold-out: $(cat "$DIR/hold.txt")"
import re, sqlite3, sys
text, db, fam = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
held, total, pure = map(int, sys.argv[4:7])
m = re.search(r"samples: (\d+) train, (\d+) validation, (\d+) test, (\d+) held out", text)
assert m and int(m.group(4)) == held and sum(map(int, m.group(1, 2, 3))) == total - held, text
row = re.search(r"^%s +held out +(\d+) " % fam, text, re.M)
assert row and int(row.group(1)) == pure, text
model = int(re.search(r"^model (\d+) ", text, re.M).group(1))
stored = sqlite3.connect(db).execute(
    "select held_out, samples from model_families where model_id = ? and family = ?",
    (model, fam)).fetchall()
assert stored == [(1, pure)], stored
PY
# The decay by sample count counts the held-out samples too (a hold-out
# trains as the model of them all would).
grep -q "weight decay 1 (by the sample count: $TOTAL, held out too)" "$DIR/err" &&
    ok || bad "hold-out decay by all $TOTAL samples: $(cat "$DIR/err")"
expect_fail 2 'family "bogus" is unknown' train --db "$DIR/p.db" \
    --hold-out-family bogus
"$CTL" score --db "$DIR/p.db" --model "$DIR/m.sdcn" >"$DIR/fscore.txt" \
    2>"$DIR/err" && grep -q "^$HFAM  *all  *$PURE " "$DIR/fscore.txt" && ok ||
    bad "score by family: $(cat "$DIR/fscore.txt" "$DIR/err")"
# An ensemble: --out writes its file; plan --model takes it, shows the
# spread and plans for a quantile; a single model has no quantile to plan.
"$CTL" train --db "$DIR/p.db" --epochs 3 --ensemble 3 --out "$DIR/e.sdce" \
    >"$DIR/ens.txt" 2>"$DIR/err" && head -c 4 "$DIR/e.sdce" | grep -q SDCE &&
    ok || bad "train --ensemble: $(cat "$DIR/err")"
# ... and the store keeps its members too (a daemon serving it has the
# spread): the model's blob is the same ensemble file.
python3 - "$DIR/p.db" "$DIR/e.sdce" "$(awk '/^model / { print $2; exit }' \
    "$DIR/ens.txt")" <<'PY' && ok || bad "train --ensemble --db stores the members"
import sqlite3, sys
(w,) = sqlite3.connect(sys.argv[1]).execute(
    "select weights from models where id = ?", (int(sys.argv[3]),)).fetchone()
assert w == open(sys.argv[2], "rb").read(), (len(w), w[:4])
PY
"$CTL" plan --offline --tables "$DIR/small.json" --devices 3 --mem-gb 1 \
    --model "$DIR/e.sdce" --quantile 0.9 >"$DIR/q.txt" 2>"$DIR/err" &&
    grep -q "^spread: plan cost [0-9.]* to [0-9.]* ms over the 3 members" \
    "$DIR/q.txt" && grep -q "compute range" "$DIR/q.txt" &&
    grep -q "(q0.90 of 3)" "$DIR/q.txt" && ok ||
    bad "plan --quantile: $(cat "$DIR/q.txt" "$DIR/err")"
expect_fail 2 '--quantile needs an ensemble' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --model "$DIR/m.sdcn" \
    --quantile 0.5
# score --quantile: the members' quantile of each sample, the least (0)
# never above the greatest (1) and the median between, apart from member
# 0's predictions; no one prior to print.
for q in 0 0.5 1; do
    "$CTL" score --db "$DIR/p.db" --model "$DIR/e.sdce" --quantile $q \
        --out "$DIR/sq$q.csv" >"$DIR/sq$q.txt" 2>"$DIR/err" &&
        grep -q "^the $q-quantile of the ensemble's members$" "$DIR/sq$q.txt" &&
        [ "$(csv_rows "$DIR/sq$q.csv" 0)" = 24 ] && ok ||
        bad "score --quantile $q: $(cat "$DIR/err" "$DIR/sq$q.txt")"
done
"$CTL" score --db "$DIR/p.db" --model "$DIR/e.sdce" --out "$DIR/sqm0.csv" \
    >/dev/null 2>"$DIR/err" && ok || bad "score of an ensemble: $(cat "$DIR/err")"
paste -d, "$DIR/sq0.csv" "$DIR/sq0.5.csv" "$DIR/sq1.csv" "$DIR/sqm0.csv" |
    awk -F, 'NR > 1 { n++; if ($6 <= $14 && $14 <= $22 && $6 < $22) ok++;
        if ($14 != $30) moved++ } END { exit !(n == 24 && ok == n && moved > 0) }' &&
    ok || bad "score --quantile: 0 <= 0.5 <= 1, the median not member 0's"
expect_fail 2 '--quantile needs an ensemble' score --db "$DIR/p.db" \
    --model "$DIR/m.sdcn" --quantile 0.5
expect_fail 2 'leave --backend out' score --db "$DIR/p.db" \
    --model "$DIR/e.sdce" --quantile 0.5 --backend cpu
# An ensemble held out: train's row of the members' median on the family's
# own samples is what score --quantile 0.5 finds on them.
"$CTL" train --db "$DIR/p.db" --epochs 3 --ensemble 3 --hold-out-family \
    "$HFAM" --out "$DIR/eh.sdce" >"$DIR/eh.txt" 2>"$DIR/err" &&
    "$CTL" score --db "$DIR/p.db" --model "$DIR/eh.sdce" --quantile 0.5 \
        >"$DIR/ehs.txt" 2>>"$DIR/err" && ok ||
    bad "train --ensemble --hold-out-family: $(cat "$DIR/err")"
[ -n "$(awk -v f="$HFAM" '$1 == f && $2 == "all" { print $4 }' "$DIR/ehs.txt")" ] &&
    [ "$(awk -v f="$HFAM" '$1 == f && $2 == "all" { print $3, $4 }' "$DIR/ehs.txt")" = \
        "$(awk -v f="$HFAM" '/^ensemble of 3/ { on = 1 } on && $1 == f { print $2, $3 }' "$DIR/eh.txt")" ] &&
    ok || bad "ensemble held out: $(cat "$DIR/eh.txt" "$DIR/ehs.txt")"
# The H200's compiled-in model plans with its compiled-in ensemble: a
# spread over its 5 members and a quantile; the reference set has none.
"$CTL" plan --offline --tables "$DIR/small.json" --devices 3 --mem-gb 1 \
    --profile "cuda/NVIDIA H200/4096" --quantile 0.9 >"$DIR/h.txt" \
    2>"$DIR/err" &&
    grep -q "^spread: plan cost [0-9.]* to [0-9.]* ms over the 5 members" \
    "$DIR/h.txt" && grep -q "neural:cuda/NVIDIA H200/4096 (q0.90 of 5)" \
    "$DIR/h.txt" && ok || bad "plan --profile H200: $(cat "$DIR/h.txt" "$DIR/err")"
expect_fail 2 '--quantile needs an ensemble' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --profile neuroshard/V100/65536 \
    --quantile 0.5
expect_fail 2 '--quantile: "1.5" is not a number in [0, 1]' plan --offline \
    --tables "$DIR/small.json" --devices 3 --mem-gb 1 --quantile 1.5
# eval measures at the model's batch unless told, as plan predicts, and
# prints the prediction beside the measurement.
"$CTL" eval --tables "$DIR/small.json" --plan "$DIR/sp.json" --warmup 0 \
    --repeats 2 --no-flush >"$DIR/ev.txt" 2>"$DIR/err" &&
    grep -q "^measured at batch 4096 (the model's), on lookups made from the tables' features$" \
        "$DIR/ev.txt" &&
    grep -q "^predicted (neural:cpu/.*/4096 model, batch 4096) beside measured" \
        "$DIR/ev.txt" && [ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[+-][0-9.]+%' "$DIR/ev.txt")" -eq 3 ] &&
    grep -qE '^  plan +[0-9.]+ +[0-9.]+ +[+-][0-9.]+%$' "$DIR/ev.txt" &&
    ok || bad "eval beside the prediction: $(cat "$DIR/ev.txt" "$DIR/err")"
# --profile picks the model as plan's does, and with it the batch; --out
# takes the text (stdout stays empty).
"$CTL" eval --tables "$DIR/small.json" --plan "$DIR/sp.json" --warmup 0 \
    --repeats 1 --no-flush --profile neuroshard/V100/65536 \
    --out "$DIR/ev.txt" >"$DIR/ev.stdout" 2>"$DIR/err" &&
    [ ! -s "$DIR/ev.stdout" ] && [ ! -e "$DIR/ev.txt.tmp" ] &&
    grep -q "^measured at batch 65536 (the model's)" "$DIR/ev.txt" &&
    grep -q "^predicted (neural:neuroshard/V100/65536 model, batch 65536)" "$DIR/ev.txt" &&
    ok || bad "eval --profile: $(cat "$DIR/ev.txt" "$DIR/err")"
# eval --traces F: each table timed on its own lookups from a trace file
# (by name; docs/trace-format.md), at the traces' batch; a table without a
# trace, or a trace of another batch, is refused by name.
python3 - "$DIR/tr.bin" <<'PY'
import random, struct, sys
random.seed(7)
out = [b"SDTRACE1", struct.pack("<II", 1, 3)]
for k, (name, rows) in enumerate([("ta", 3000), ("tb", 500), ("tc", 8000)]):
    nbags, pf = 64, 2 + k
    idx = [random.randrange(rows) for _ in range(nbags * pf)]
    out.append(struct.pack("<H", len(name)) + name.encode())
    out.append(struct.pack("<QIQQ", rows, 16, nbags, len(idx)))
    out.append(struct.pack("<%dQ" % (nbags + 1), *[b * pf for b in range(nbags + 1)]))
    out.append(struct.pack("<%dQ" % len(idx), *idx))
open(sys.argv[1], "wb").write(b"".join(out))
PY
"$CTL" features --trace "$DIR/tr.bin" --out "$DIR/trt.json" 2>"$DIR/err" &&
    "$CTL" plan --offline --tables "$DIR/trt.json" --devices 2 --mem-gb 1 \
        --batch-size 64 --json --out "$DIR/trp.json" 2>>"$DIR/err" &&
    ok || bad "tables and plan of a trace file: $(cat "$DIR/err")"
# shellcheck disable=SC2086
"$CTL" eval --tables "$DIR/trt.json" --plan "$DIR/trp.json" \
    --traces "$DIR/tr.bin" $FAST >"$DIR/evt.txt" 2>"$DIR/err" &&
    grep -q "^measured at batch 64 (--batch-size), on the traces' lookups$" \
        "$DIR/evt.txt" && ok ||
    bad "eval --traces: $(cat "$DIR/evt.txt" "$DIR/err")"
expect_fail 2 'the trace of table "ta" has 64 bags, eval measures at batch 128: pass --batch-size 64' \
    eval --tables "$DIR/trt.json" --plan "$DIR/trp.json" --traces "$DIR/tr.bin" \
    --batch-size 128
expect_fail 2 'has no trace of table "table_' eval --tables "$DIR/small.json" \
    --plan "$DIR/sp.json" --traces "$DIR/tr.bin" --batch-size 64
"$CTL" plan --offline --tables "$DIR/small.json" --devices 3 --mem-gb 1 \
    --model "$DIR/m.sdcn" --json --out "$DIR/mp.json" && ok ||
    bad "plan --model"
json_check "$DIR/mp.json" 'd["cost_model"].startswith("neural:cpu/") and d["cost_model"].endswith("/64")'
printf 'garbage' >"$DIR/bad.sdcn"
expect_fail 2 'not a shardd cost model' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --model "$DIR/bad.sdcn"
python3 - "$DIR/m.sdcn" "$DIR/flip.sdcn" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[1000] ^= 1
open(sys.argv[2], "wb").write(b)
PY
expect_fail 2 'checksum' plan --offline --tables "$DIR/small.json" \
    --devices 3 --mem-gb 1 --model "$DIR/flip.sdcn"
expect_fail 2 'not "cuda/H100/65536"' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --model "$DIR/m.sdcn" \
    --profile cuda/H100/65536
"$CTL" score --db "$DIR/p.db" --model "$DIR/m.sdcn" >"$DIR/score.txt" \
    2>"$DIR/err" && grep -q "^MAPE [0-9.]*%, median [0-9.]*%, p90" \
    "$DIR/score.txt" && grep -q "^signed median [+-][0-9.]*%" \
    "$DIR/score.txt" && ok || bad "score: $(cat "$DIR/err")"
expect_fail 2 'no such profile' score --db "$DIR/p.db"
expect_fail 2 'no such profile' train --db "$DIR/p.db" --profile nope
# --backend: the model scored in one batch on a device (the cpu's: the same
# figures), training's products on a device (the cpu's: plain loops).
"$CTL" score --db "$DIR/p.db" --model "$DIR/m.sdcn" --backend cpu \
    >"$DIR/scored.txt" 2>"$DIR/err" && grep -q ", scored on cpu$" \
    "$DIR/scored.txt" && [ "$(sed 1d "$DIR/scored.txt")" = \
    "$(sed 1d "$DIR/score.txt")" ] && ok ||
    bad "score --backend cpu: $(cat "$DIR/err" "$DIR/scored.txt")"
"$CTL" train --db "$DIR/p.db" --epochs 5 --backend cpu >"$DIR/tb.txt" \
    2>"$DIR/err" && grep -q "products on cpu device 0" "$DIR/err" &&
    grep -q "^model [0-9]* " "$DIR/tb.txt" && ok ||
    bad "train --backend cpu: $(cat "$DIR/err")"
expect_fail 2 '--backend' score --db "$DIR/p.db" --model "$DIR/m.sdcn" \
    --backend tpu
expect_fail 2 '--db is required' train

# train-policy: a dreamshard policy for a model file, written to a file that
# plan --policy uses (the same file for the same seed); for the store's
# active model, stored as a version; damaged files and a policy of another
# model are refused, naming what to do.
"$CTL" train-policy --model "$DIR/m.sdcn" --iterations 20 --out "$DIR/p.sdpol" \
    >"$DIR/tp.txt" 2>"$DIR/err" && ok || bad "train-policy: $(cat "$DIR/err")"
grep -q "^tasks: 200 train, 16 validation, 40 held out, on 4 devices" \
    "$DIR/tp.txt" && grep -q "^gate: held-out mean plan cost " "$DIR/tp.txt" &&
    ok || bad "train-policy report: $(cat "$DIR/tp.txt")"
"$CTL" train-policy --model "$DIR/m.sdcn" --iterations 20 \
    --out "$DIR/p2.sdpol" >/dev/null 2>&1 && cmp -s "$DIR/p.sdpol" \
    "$DIR/p2.sdpol" && ok || bad "train-policy is not deterministic"
"$CTL" plan --offline --tables "$DIR/small.json" --devices 3 --mem-gb 1 \
    --model "$DIR/m.sdcn" --alg dreamshard --policy "$DIR/p.sdpol" --json \
    --out "$DIR/dp.json" 2>"$DIR/err" && ok ||
    bad "plan --policy: $(cat "$DIR/err")"
json_check "$DIR/dp.json" 'd["algorithm"] == "dreamshard" and all(len(t["shards"]) == 1 for t in d["tables"])'
expect_fail 2 'shardctl train-policy' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --model "$DIR/m.sdcn" \
    --alg dreamshard
printf 'garbage' >"$DIR/bad.sdpol"
expect_fail 2 'policy file: magic' plan --offline --tables "$DIR/small.json" \
    --devices 3 --mem-gb 1 --model "$DIR/m.sdcn" --alg dreamshard \
    --policy "$DIR/bad.sdpol"
python3 - "$DIR/p.sdpol" "$DIR/flip.sdpol" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[1000] ^= 1
open(sys.argv[2], "wb").write(b)
PY
expect_fail 2 'policy file: crc32' plan --offline --tables "$DIR/small.json" \
    --devices 3 --mem-gb 1 --model "$DIR/m.sdcn" --alg dreamshard \
    --policy "$DIR/flip.sdpol"
expect_fail 2 '--policy is for --alg dreamshard' plan --offline --tables \
    "$DIR/small.json" --devices 3 --mem-gb 1 --policy "$DIR/p.sdpol"
"$CTL" train-policy --db "$DIR/p.db" --iterations 20 --activate \
    >"$DIR/tp.txt" 2>"$DIR/err"
rc=$?
grep -q "^policy [0-9]* for profile cpu/.*/64, trained against model 1" \
    "$DIR/tp.txt" && ok || bad "train-policy --db: $(cat "$DIR/tp.txt" "$DIR/err")"
# --activate: active when it passed its gate, else exit 1 saying so.
if grep -q "passed$" "$DIR/tp.txt"; then
    [ "$rc" -eq 0 ] && grep -q "(active)$" "$DIR/tp.txt" && ok ||
        bad "train-policy --activate: exit $rc"
else
    [ "$rc" -eq 1 ] && grep -q "not activated" "$DIR/err" && ok ||
        bad "train-policy --activate, gate failed: exit $rc"
fi
"$CTL" train-policy --model "$DIR/m.sdcn" --tasks "$DIR/k.json" \
    --iterations 10 --out "$DIR/p3.sdpol" >"$DIR/tp.txt" 2>"$DIR/err" &&
    grep -q "^tasks: 4 train, 4 validation, 1 held out" "$DIR/tp.txt" && ok ||
    bad "train-policy --tasks: $(cat "$DIR/tp.txt" "$DIR/err")"
# A store whose active model is an ensemble: the policy is trained against
# its member 0 (the model plans are made with).
cp "$DIR/p.db" "$DIR/pe.db"
"$CTL" train --db "$DIR/pe.db" --epochs 3 --ensemble 2 --activate \
    >"$DIR/pe.txt" 2>"$DIR/err" &&
    "$CTL" train-policy --db "$DIR/pe.db" --iterations 5 --out "$DIR/pe.sdpol" \
        >"$DIR/tp.txt" 2>"$DIR/err" &&
    grep -q "trained against model $(awk '/^model / { print $2; exit }' \
        "$DIR/pe.txt")" "$DIR/tp.txt" && ok ||
    bad "train-policy --db, an ensemble active: $(cat "$DIR/tp.txt" "$DIR/err")"
expect_fail 2 '--db or --out' train-policy
expect_fail 2 'need --db' train-policy --out "$DIR/x.sdpol" --activate
expect_fail 2 '--model is for training without --db' train-policy \
    --db "$DIR/p.db" --model "$DIR/m.sdcn"
# Ctrl-C: the run stops after its current sample, keeps every committed
# one (exit 130), and the same command resumes from there.
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/int.db" --samples 100000 --max-gb 0.05 $FAST $QUIET \
    2>"$DIR/int.err" &
pid=$!
# Interrupt once the first batch is committed (its progress line is out).
i=0
while [ $i -lt 100 ] && ! grep -q "^profile: [0-9]" "$DIR/int.err"; do
    sleep 0.1
    i=$((i + 1))
done
kill -INT $pid
wait $pid
rc=$?
kept=$(sed -n 's/.* samples added, \([0-9]*\) in the store/\1/p' "$DIR/int.err")
if [ "$rc" -eq 130 ] && grep -q "stopped early" "$DIR/int.err" &&
    [ "${kept:-0}" -gt 0 ]; then
    ok
else
    bad "profile interrupted: rc $rc, $(cat "$DIR/int.err")"
fi
# shellcheck disable=SC2086
"$CTL" profile --db "$DIR/int.db" --samples $((kept + 1)) --max-gb 0.05 \
    $FAST $QUIET 2>"$DIR/err" &&
    grep -q "1 samples added, $((kept + 1)) in the store" "$DIR/err" &&
    ok || bad "profile resume after Ctrl-C: $(cat "$DIR/err")"
expect_fail 2 '--backend' profile --db "$DIR/p.db" --samples 1 \
    --backend tpu
expect_fail 2 'profile: --db is missing (--db and --samples are required)' \
    profile --samples 3

# --- comm-profile: NeuroShard comm samples on cpu "devices" (threads) -------
"$CTL" comm-profile --backend cpu --devices 3 --samples 2 --batch-size 300 \
    --warmup 0 --repeats 1 --db "$DIR/c.db" >"$DIR/comm.txt" 2>"$DIR/err" &&
    [ "$(grep -c '^plan [0-9]*: .* dev 2 dim [0-9]* sleep' "$DIR/comm.txt")" \
    -eq 2 ] && grep -q "3 devices, 2 plans timed, 2 stored" "$DIR/err" && ok ||
    bad "comm-profile: $(cat "$DIR/err" "$DIR/comm.txt")"
# A second run resumes the sequence: its plan is the third of a run of 3.
plans() { sed 's/fwd [0-9.]* bwd [0-9.]*//g; s/^plan [0-9]*: [0-9.]* ms//' "$1"; }
"$CTL" comm-profile --backend cpu --devices 3 --samples 1 --batch-size 300 \
    --warmup 0 --repeats 1 --db "$DIR/c.db" >"$DIR/comm2.txt" 2>"$DIR/err" &&
    "$CTL" comm-profile --backend cpu --devices 3 --samples 3 \
        --batch-size 300 --warmup 0 --repeats 1 >"$DIR/comm3.txt" 2>&1 &&
    [ "$(plans "$DIR/comm2.txt")" = "$(plans "$DIR/comm3.txt" | sed -n 3p)" ] &&
    ok || bad "comm-profile resume: $(cat "$DIR/err" "$DIR/comm2.txt")"
"$CTL" comm-profile --backend cpu --devices 1 --samples 1 --batch-size 300 \
    --warmup 0 --repeats 1 --db "$DIR/c.db" >/dev/null 2>"$DIR/err" &&
    grep -q "not stored" "$DIR/err" && grep -q "1 plans timed, 0 stored" \
    "$DIR/err" && ok || bad "comm-profile one device: $(cat "$DIR/err")"
expect_fail 2 '--backend' comm-profile --backend tpu
expect_fail 2 'no option --model' comm-profile --model x

# --- bad input: exit 2, one message naming table and field -----------------
B='[0.5,0.5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]'
tbl() { printf '{"tables":[%s]}' "$1" >"$DIR/bad.json"; }
plan_bad() { expect_fail 2 "$1" plan --offline --tables "$DIR/bad.json" \
    --devices 2 --mem-gb 1; }

tbl '{"name":"x","dim":8,"pooling_factor":1,"bins":'"$B"'}'
plan_bad 'tables[0] "x": rows is missing'
tbl '{"name":"x","rows":-5,"dim":8,"pooling_factor":1,"bins":'"$B"'}'
plan_bad 'tables[0] "x": rows -5'
tbl '{"name":"x","rows":0,"dim":8,"pooling_factor":1,"bins":'"$B"'}'
plan_bad '"x": rows 0'
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":1,"bins":'"$B"'},{"name":"y","rows":9,"dim":30,"pooling_factor":1,"bins":'"$B"'}'
plan_bad 'tables[1] "y": dim 30 is not a multiple of 4'
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":NaN,"bins":'"$B"'}'
plan_bad 'malformed JSON'
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":1e999,"bins":'"$B"'}'
plan_bad 'real number overflow'
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":1,"bins":[1]}'
plan_bad '"x": bins'
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":1,"bins":'"$B"'}'
printf '{"tables":[' >"$DIR/bad.json"
plan_bad 'malformed JSON at line 1'
# A table larger than every device: named, with the shortfall in bytes.
tbl '{"name":"huge","rows":100000000,"dim":128,"pooling_factor":1,"bins":'"$B"'}'
plan_bad 'table "huge" needs 47.7 GiB: even in row blocks over all 2 devices a block needs 23.8 GiB'
expect_fail 2 'table "huge": needs 47.7 GiB but the largest free space on any device is 1.00 GiB (short by 46.7 GiB)' plan --offline \
    --tables "$DIR/bad.json" --devices 2 --mem-gb 1 --alg size_greedy
expect_fail 2 'short by' plan --offline --tables "$DIR/bad.json" --devices 2 \
    --mem-gb 1 --alg torchrec_greedy
tbl '{"name":"x","rows":9,"dim":8,"pooling_factor":1,"bins":'"$B"'}'
expect_fail 2 'algorithm "best" is unknown' plan --offline --tables \
    "$DIR/bad.json" --devices 2 --mem-gb 1 --alg best
expect_fail 2 '--devices' plan --offline --tables "$DIR/bad.json" \
    --devices 0 --mem-gb 1
expect_fail 2 '--mem-gb' plan --offline --tables "$DIR/bad.json" \
    --devices 2 --mem-gb -1
expect_fail 2 '--mem-gb' plan --offline --tables "$DIR/bad.json" \
    --devices 2 --mem-gb nan
expect_fail 2 'devices_per_host' plan --offline --tables "$DIR/bad.json" \
    --devices 4 --devices-per-host 3 --mem-gb 1
expect_fail 2 'No such file' plan --offline --tables "$DIR/missing.json" \
    --devices 2 --mem-gb 1
expect_fail 2 'task 9 requested' plan --offline --tables "$DIR/k.json" \
    --task 9 --devices 2 --mem-gb 8
# --task on a tables file (one task) was ignored: the wrong file, likely.
expect_fail 2 'task 1 requested, but the file is one task' plan --offline \
    --tables "$DIR/t.json" --task 1 --devices 2 --mem-gb 8
# --- constraints: pins and devices of different capacities ------------------
# Task 2 on 4 devices: its first two tables pinned to device 3, capacities
# 8, 8, 2 and 4 GiB; every algorithm keeps both.
T0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"][2]["tables"][0]["name"])' "$DIR/k.json")
T1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"][2]["tables"][1]["name"])' "$DIR/k.json")
for alg in random size_greedy torchrec_greedy neuroshard; do
    if "$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
        --mem-gb 8,8,2,4 --pin "$T0=3" --pin "$T1=3" --alg "$alg" --json \
        >"$DIR/pin.json" 2>"$DIR/err"; then
        ok
        json_check "$DIR/pin.json" "[[(s['device'], s['col_offset']) for s in t['shards']] for t in d['tables'] if t['name'] in ('$T0', '$T1')] == [[(3, 0)], [(3, 0)]] and all(dv['memory_bytes'] <= g * 2**30 for dv, g in zip(d['devices'], (8, 8, 2, 4)))"
    else
        bad "plan --pin --mem-gb list, $alg: $(cat "$DIR/err")"
    fi
done
"$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
    --mem-gb 8,8,2,4 >"$DIR/human.txt" && grep -qE '^ +2  [0-9.]+ \([0-9.]+%\)' \
    "$DIR/human.txt" && ok || bad "plan with capacities (human table)"
expect_fail 2 '3 capacities for 4 devices' plan --offline --tables \
    "$DIR/k.json" --devices 4 --mem-gb 8,8,2
expect_fail 2 'comma-separated' plan --offline --tables "$DIR/k.json" \
    --devices 2 --mem-gb 8,,2
expect_fail 2 'no table "nope"' plan --offline --tables "$DIR/k.json" \
    --devices 2 --mem-gb 8 --pin nope=1
expect_fail 2 'is not in [0, 2)' plan --offline --tables "$DIR/k.json" \
    --devices 2 --mem-gb 8 --pin "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"][0]["tables"][0]["name"])' "$DIR/k.json")=2"
expect_fail 2 'TABLE=DEVICE' plan --offline --tables "$DIR/k.json" \
    --devices 2 --mem-gb 8 --pin justaname
expect_fail 2 'pins: device 0' plan --offline --tables "$DIR/k.json" \
    --task 2 --devices 2 --mem-gb 0.001,8 --pin "$T0=0"

# --- NeuroShard's released models, the reference profile, comm-fit ----------
SRC=$(cd "$(dirname "$0")/../.." && pwd)
REL="$SRC/models/neuroshard-released"
# import-model: the committed conversion again, byte for byte; stored too.
"$CTL" import-model --neuroshard "$REL/compute.pt" --comm-fw \
    "$REL/comm_4_fw.pt" --comm-bw "$REL/comm_4_bw.pt" --profile \
    neuroshard/V100/65536 --notice "$REL/NOTICE" --out "$DIR/ns.sdcn" \
    --db "$DIR/ns.db" --activate >"$DIR/imp.txt" 2>"$DIR/err" &&
    ok || bad "import-model: $(cat "$DIR/err")"
cmp -s "$DIR/ns.sdcn" "$SRC/models/neuroshard-v100.sdcn" && ok ||
    bad "import-model: not the committed conversion"
grep -q 'comm forward, 4 devices: 8-128-64-32-16-4' "$DIR/imp.txt" &&
    grep -q 'model 1 for profile neuroshard/V100/65536 (active)' \
        "$DIR/imp.txt" && ok || bad "import-model output: $(cat "$DIR/imp.txt")"
expect_fail 2 'go together' import-model --neuroshard "$REL/compute.pt" \
    --comm-fw "$REL/comm_4_fw.pt" --profile p/x/1 --out "$DIR/x.sdcn"
expect_fail 2 'required' import-model --neuroshard "$REL/compute.pt" \
    --profile p/x/1
expect_fail 2 'give --batch-size' import-model --neuroshard \
    "$REL/compute.pt" --profile nobatch --out "$DIR/x.sdcn"
expect_fail 2 'num_table_features' import-model --neuroshard \
    "$REL/comm_4_fw.pt" --profile p/x/1 --out "$DIR/x.sdcn"
head -c 20000 "$REL/compute.pt" >"$DIR/cut.pt"
expect_fail 2 'not a PyTorch zip checkpoint' import-model --neuroshard \
    "$DIR/cut.pt" --profile p/x/1 --out "$DIR/x.sdcn"
# The imported set plans, its comm models pricing the all-to-all at 4
# devices and alpha-beta elsewhere; the same with --profile alone (the
# compiled-in reference); without either, the embedded cpu model.
"$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
    --mem-gb 8 --model "$DIR/ns.sdcn" --json --out "$DIR/ns1.json" &&
    ok || bad "plan --model ns.sdcn"
json_check "$DIR/ns1.json" 'd["comm_model"] == "neural_comm:neuroshard/V100/65536 (4 devices)" and d["cost_model"] == "neural:neuroshard/V100/65536"'
"$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
    --mem-gb 8 --profile neuroshard/V100/65536 --json --out "$DIR/ns2.json" &&
    ok || bad "plan --profile neuroshard/V100/65536"
json_check "$DIR/ns2.json" 'd["comm_model"].startswith("neural_comm:") and d["plan_cost_ms"] == json.load(open(sys.argv[1].replace("ns2", "ns1")))["plan_cost_ms"]'
"$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 2 \
    --mem-gb 8 --profile neuroshard/V100/65536 --json --out "$DIR/ns3.json" &&
    ok || bad "plan --profile reference, 2 devices"
json_check "$DIR/ns3.json" 'd["comm_model"] == "alpha_beta" and d["cost_model"] == "neural:neuroshard/V100/65536"'
"$CTL" plan --offline --tables "$DIR/k.json" --task 2 --devices 4 \
    --mem-gb 8 --json --out "$DIR/def.json" && ok || bad "plan default"
json_check "$DIR/def.json" 'd["cost_model"].startswith("neural:cpu/") and d["comm_model"] == "alpha_beta"'
# estimate --offline: a plan costed again as it was planned.
"$CTL" estimate --offline --tables "$DIR/k.json" --task 2 --plan \
    "$DIR/ns1.json" --mem-gb 8 --model "$DIR/ns.sdcn" --json \
    --out "$DIR/est.json" && ok || bad "estimate --offline"
json_check "$DIR/est.json" 'abs(d["plan_cost_ms"] - json.load(open(sys.argv[1].replace("est", "ns1")))["plan_cost_ms"]) < 1e-9 and d["algorithm"] == "estimate"'
# ... as text, to stdout or through --out: the same text.
"$CTL" estimate --offline --tables "$DIR/k.json" --task 2 --plan \
    "$DIR/ns1.json" --mem-gb 8 --model "$DIR/ns.sdcn" >"$DIR/est.txt" &&
    "$CTL" estimate --offline --tables "$DIR/k.json" --task 2 --plan \
        "$DIR/ns1.json" --mem-gb 8 --model "$DIR/ns.sdcn" --out "$DIR/est.out" &&
    grep -q '^memory: every device fits' "$DIR/est.txt" &&
    cmp -s "$DIR/est.txt" "$DIR/est.out" && ok ||
    bad "estimate --out text: $(diff "$DIR/est.txt" "$DIR/est.out" | head -3)"
expect_fail 2 'only with --offline' estimate --tables "$DIR/k.json" \
    --task 2 --plan "$DIR/ns1.json" --mem-gb 8 --model "$DIR/ns.sdcn"
# comm-fit: every committed nccl-tests output within 10 % with bands.
"$CTL" comm-fit "$SRC"/tests/fixtures/nccl/*.txt --json \
    --out "$DIR/fit.json" && ok || bad "comm-fit"
json_check "$DIR/fit.json" 'len(d["fits"]) == 4 and all(f["mape"] < 0.10 and len(f["bands"]) == 3 for f in d["fits"])'
"$CTL" comm-fit "$SRC/tests/fixtures/nccl/h100-2x8-all_gather-gcp-a3-mega.txt" \
    --bands 1 >"$DIR/fit.txt" && grep -q 'all_gather, 16 ranks' "$DIR/fit.txt" &&
    ok || bad "comm-fit --bands 1: $(cat "$DIR/fit.txt")"
# From a pipe (no size to ask it for): read to its end, the same fit.
cat "$SRC/tests/fixtures/nccl/h100-2x8-all_gather-gcp-a3-mega.txt" |
    "$CTL" comm-fit /dev/stdin --bands 1 --collective all_gather \
        >"$DIR/fit-pipe.txt" &&
    [ "$(sed 1d "$DIR/fit.txt")" = "$(sed 1d "$DIR/fit-pipe.txt")" ] && ok ||
    bad "comm-fit from a pipe: $(diff "$DIR/fit.txt" "$DIR/fit-pipe.txt")"
expect_fail 2 'no nccl-tests data row' comm-fit "$DIR/k.json"
expect_fail 2 'missing argument' comm-fit
expect_fail 2 '--collective' comm-fit --collective bogus "$DIR/k.json"

expect_fail 2 'unknown option "--bogus"' plan --bogus
expect_fail 2 'unknown command' frobnicate
expect_fail 2 'help: unknown command "nosuch"' help nosuch
expect_fail 2 '"1e300" is not a positive number up to 1e+09' plan --offline \
    --tables "$DIR/k.json" --devices 4 --mem-gb 4 --host-link-gbps 1e300
expect_fail 2 'help: unknown command "nosuch"' nosuch --help
expect_fail 2 'is --out'"'"'s file too' plan --offline --tables "$DIR/k.json" \
    --devices 4 --mem-gb 4 --out "$DIR/same" --svg "$DIR/same"
# --svg's errors name --svg (they said --out).
expect_fail 2 '--svg: ' plan --offline --tables "$DIR/k.json" --devices 4 \
    --mem-gb 4 --json --out "$DIR/svgtest.json" --svg "$DIR"
expect_fail 2 '--count' gen-tables --count 0
expect_fail 2 'gen-tasks: --tables is missing' gen-tasks --count 2
expect_fail 2 'gen-tasks: --min-tables 50 is above --max-tables 10' gen-tasks \
    --count 2 --tables "$DIR/t.json" --min-tables 50 --max-tables 10
expect_fail 2 'is below the default --min-tables 10: give --min-tables too' \
    gen-tasks --count 2 --tables "$DIR/t.json" --max-tables 5
# Too little device memory: in GiB, with what would help (the host tier
# too, where no host DRAM was given; only more memory where it was).
expect_fail 2 'a block needs 333 MiB, and the most a device has left is 1.02 MiB; give the devices more memory, or the hosts DRAM for the UVM tier' \
    plan --offline --tables "$DIR/k.json" --devices 4 --mem-gb 0.001
expect_fail 2 'host DRAM' plan --offline --tables "$DIR/k.json" --devices 4 \
    --mem-gb 0.001 --host-dram-gb 0.001
expect_fail 2 'plan: --devices and --mem-gb are missing' plan --offline \
    --tables "$DIR/k.json"
expect_fail 2 'eval: --tables and --plan are required' eval
# --profile names the hardware the costs are for: every command that prices
# refuses a profile no model it has is for (eval and cache-curve took the
# embedded model's silently).
for cmd in "plan --offline --devices 4 --mem-gb 4" "cache-curve" \
    "eval --plan $DIR/o.json --backend cpu"; do
    # shellcheck disable=SC2086 # the command's words
    expect_fail 2 'not "nosuch"' $cmd --tables "$DIR/k.json" --profile nosuch
done
# train and train-policy add to a store that profile made: a mistyped --db
# is refused and left uncreated (it was made empty, then refused).
expect_fail 2 'no database at' train --db "$DIR/typo.db" --epochs 1
expect_fail 2 'no database at' train-policy --db "$DIR/typo.db"
[ ! -e "$DIR/typo.db" ] && ok || bad "train --db made a store at a typo"
# A daemon address is checked before any call: a port past 65535 would be
# wrapped by gRPC onto another port (99999 onto 34463), an empty one is not
# the default.
expect_fail 2 '--addr "127.0.0.1:99999" has a port that is not an integer in [0, 65535]' \
    status --addr 127.0.0.1:99999
expect_fail 2 '--addr "" is empty' status --addr ''
# An empty word is no value (it took the default module name, no file).
expect_fail 2 '--torchrec-module "" is empty' plan --offline --tables \
    "$DIR/k.json" --devices 4 --mem-gb 4 --torchrec --torchrec-module ''
expect_fail 2 '--out "" is empty' gen-tables --count 3 --out ''
SHARDD_ADDR='host:70000' expect_fail 2 '$SHARDD_ADDR "host:70000" has a port' \
    health

finish
