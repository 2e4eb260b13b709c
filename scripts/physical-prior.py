#!/usr/bin/python3
"""A physical cost model of a shard under the net, measured with whole
families held out (issue #22; docs/models.md, "A physical prior").

The physical model: a shard's time is a non-negative sum of what its tables
do per step, B bags each (B the profile's batch): per table, per bag column,
per lookup, per looked-up column, per byte of the distinct rows a step
touches (the tiers' estimate from the access histogram), per column of a
16-bit table (conversions), and the re-reads of rows that no longer sit in
the L2 when the shard's distinct rows outgrow it.  Its coefficients are
fitted by non-negative least squares on the relative error, reweighted
towards its absolute value (MAPE).

For each family F held out it prints the MAPE on the shards with a table of
F of
  - the physical model fitted on the other shards,
  - the plain net (`shardctl train --hold-out-family F --features v2`) on
    the measured times,
  - the net trained on measured / physical (the labels divided by the
    physical model fitted without F), whose MAPE on that ratio is the MAPE
    of physical x net in ms;
  - with --v3, `shardctl train --features v3`: the same physical x net as
    shardd builds it (the prior fitted in C on the training split, inside
    the model; per-table L2 re-reads), scored in ms.
Runs shardctl (train, score) on copies of the store in a temporary folder;
the store itself is only read.  Needs numpy and scipy (python3-numpy,
python3-scipy).

usage: physical-prior.py --db STORE [--hold HOLD] [--shardctl PATH]
                         [--epochs N] [--families dlrm,seq,...] [--core C]
                         [--train-arg ARG ...]
"""
import argparse
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile

import numpy as np
from scipy.optimize import nnls

ELEM_BYTES = {0: 4, 1: 2, 2: 2, 3: 1}  # fp32, fp16, bf16, int8
# Mean access count of each histogram bin (table.c, the tiers' estimate).
BIN_COUNT = np.array([1.0] + [0.75 * 2 ** k + 0.5 for k in range(1, 16)] +
                     [2.0 ** 16])
L2_BYTES = 2 << 20
FAMILIES = ["dlrm", "zipf", "exp", "uniform", "bimodal", "seq", "onehot"]
TERMS = ["tables", "bags", "bag_cols", "lookups", "lookup_cols",
         "unique_bytes", "l2_rereads", "half_cols"]


def load(path):
    """(tables, measured ms, family) of each compute sample, in id order;
    a table is (rows, dim, dtype, pooling factor, bins[17])."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    out = []
    for sid, blob, ms, fam in con.execute(
            "select id, shard, measured_ms, family from samples "
            "where kind = 'compute' order by id"):
        tables = []
        for o in range(0, len(blob), 160):
            rows, dim, dtype, pf = struct.unpack_from("<qiid", blob, o)
            bins = np.array(struct.unpack_from("<17d", blob, o + 24))
            tables.append((rows, dim, dtype, pf, bins))
        out.append((sid, tables, ms, fam))
    con.close()
    return out


def batch_of(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    b = con.execute("select batch_size from profiles").fetchone()[0]
    con.close()
    return b


def terms(tables, batch):
    """The physical terms of one shard."""
    f = np.zeros(len(TERMS))
    unique_total = rereads = 0.0
    for rows, dim, dtype, pf, bins in tables:
        row_bytes = dim * ELEM_BYTES.get(dtype, 4) + (8 if dtype == 3 else 0)
        lookups = pf * batch
        denom = float(bins @ BIN_COUNT)
        unique = min(rows, lookups / denom) if denom > 0 else 0.0
        f[0] += 1
        f[1] += batch
        f[2] += batch * dim
        f[3] += lookups
        f[4] += lookups * dim
        f[5] += unique * row_bytes
        if dtype in (1, 2):
            f[7] += lookups * dim
        unique_total += unique * row_bytes
        rereads += (lookups - unique) * row_bytes
    if unique_total > L2_BYTES:
        f[6] = rereads * (unique_total - L2_BYTES) / unique_total
    return f


def fit(x, y, rounds=8):
    """Non-negative coefficients minimising the relative error, reweighted
    towards its absolute value."""
    a = x / y[:, None]
    scale = a.max(axis=0)
    scale[scale == 0] = 1
    a = a / scale
    w = np.ones(len(y))
    for _ in range(rounds + 1):
        beta, _ = nnls(a * w[:, None], w)
        w = 1 / np.sqrt(np.maximum(np.abs(a @ beta - 1), 0.02))
    return beta / scale


def mape(pred, y):
    return 100 * float(np.mean(np.abs(pred / y - 1)))


def run(cmd, core):
    if core is not None:
        cmd = ["taskset", "-c", str(core)] + cmd
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def copy_store(src, dst, keep=None, labels=None):
    """src into dst (a consistent copy); only the sample ids in keep (None:
    all); labels: {id: new measured_ms} (spread scaled alike)."""
    con = sqlite3.connect(src)
    con.execute("vacuum into ?", (dst,))
    con.close()
    con = sqlite3.connect(dst)
    if labels is not None:
        con.executemany(
            "update samples set spread_ms = spread_ms * ? / measured_ms, "
            "measured_ms = ? where id = ? and measured_ms > 0",
            [(v, v, k) for k, v in labels.items()])
    if keep is not None:
        con.execute("create temp table keep (id integer primary key)")
        con.executemany("insert into keep values (?)", [(i,) for i in keep])
        con.execute("delete from sample_origins where sample_id not in "
                    "(select id from keep)")
        con.execute("delete from samples where kind = 'compute' and id not "
                    "in (select id from keep)")
    con.commit()
    con.close()


def score_mape(out):
    for line in out.splitlines():
        if line.startswith("MAPE "):
            return float(line.split()[1].rstrip("%,"))
    raise RuntimeError("no MAPE line in shardctl score's output:\n" + out)


def print_hold(a, x, y, ids, batch, beta, tmp):
    """The "none" row: physical, net and physical x net fitted and trained
    on every sample of a.db, scored on a.hold's."""
    hold = load(a.hold)
    if batch_of(a.hold) != batch:
        sys.exit("--hold: batch %d, --db's is %d" % (batch_of(a.hold), batch))
    hx = np.array([terms(s[1], batch) for s in hold])
    hy = np.array([s[2] for s in hold])
    hbase = hx @ beta
    row = [mape(hbase, hy)]
    base = x @ beta
    variants = [("plain", None, None),
                ("ratio", {i: float(v / p) for i, v, p in zip(ids, y, base)
                           if p > 0},
                 {s[0]: float(v / p) for s, v, p in zip(hold, hy, hbase)
                  if p > 0})]
    if a.v3:
        variants.append(("v3", None, None))
    for name, labels, hlabels in variants:
        db = os.path.join(tmp, "%s-all.db" % name)
        ho = os.path.join(tmp, "%s-hold.db" % name)
        model = os.path.join(tmp, "%s-all.sdcn" % name)
        copy_store(a.db, db, labels=labels)
        copy_store(a.hold, ho, labels=hlabels)
        run([a.shardctl, "train", "--db", db, "--seed", "0", "--epochs",
             str(a.epochs), "--out", model] + a.train_arg +
            ["--features", "v3" if name == "v3" else "v2"], a.core)
        row.append(score_mape(run([a.shardctl, "score", "--db", ho,
                                   "--model", model], a.core)))
    print(("%-8s %7d %9.1f%% %9.1f%% %13.1f%%" + " %9.1f%%" * (len(row) - 3))
          % (("none", len(hold)) + tuple(row)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--hold", default=None,
                    help="score models trained on all of --db on this store")
    ap.add_argument("--shardctl", default="build/shardctl")
    ap.add_argument("--epochs", type=int, default=400)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--core", type=int, default=None,
                    help="run shardctl pinned to this CPU")
    ap.add_argument("--v3", action="store_true",
                    help="also train shardd's own prior model "
                    "(train --features v3)")
    ap.add_argument("--train-arg", action="append", default=[],
                    help="passed to shardctl train (repeat: "
                    "--train-arg=--weight-decay --train-arg=0.3)")
    a = ap.parse_args()

    samples = load(a.db)
    batch = batch_of(a.db)
    x = np.array([terms(s[1], batch) for s in samples])
    y = np.array([s[2] for s in samples])
    ids = [s[0] for s in samples]
    print("%d samples, batch %d" % (len(samples), batch))
    beta = fit(x, y)
    print("physical model on every sample: MAPE %.1f %%; coefficients (ms): "
          "%s" % (mape(x @ beta, y), ", ".join(
              "%s %.3g" % t for t in zip(TERMS, beta))))
    print("%-8s %7s %10s %10s %14s%s" % ("held out", "shards", "physical",
                                         "net", "physical x net",
                                         " %10s" % "v3" if a.v3 else ""))
    tmp = tempfile.mkdtemp(prefix="physical-prior-")
    try:
        for fam in a.families.split(","):
            held = np.array([fam in s[3].split("+") for s in samples])
            if not held.any():
                print("%-8s no shard has a table of it" % fam)
                continue
            b = fit(x[~held], y[~held])
            base = x @ b
            held_ids = [i for i, h in zip(ids, held) if h]
            row = [mape(base[held], y[held])]
            variants = [("plain", None),
                        ("ratio", {i: float(v / p) for i, v, p in
                                   zip(ids, y, base) if p > 0})]
            if a.v3:
                variants.append(("v3", None))
            for name, labels in variants:
                db = os.path.join(tmp, "%s-%s.db" % (name, fam))
                ho = os.path.join(tmp, "%s-%s-held.db" % (name, fam))
                model = os.path.join(tmp, "%s-%s.sdcn" % (name, fam))
                copy_store(a.db, db, labels=labels)
                copy_store(db, ho, keep=held_ids)
                run([a.shardctl, "train", "--db", db, "--seed", "0",
                     "--epochs", str(a.epochs), "--hold-out-family", fam,
                     "--out", model] + a.train_arg +
                    ["--features", "v3" if name == "v3" else "v2"], a.core)
                row.append(score_mape(run([a.shardctl, "score", "--db", ho,
                                           "--model", model], a.core)))
            print(("%-8s %7d %9.1f%% %9.1f%% %13.1f%%" +
                   " %9.1f%%" * (len(row) - 3)) % ((fam, held.sum()) +
                                                   tuple(row)))
            sys.stdout.flush()
        if a.hold:
            print_hold(a, x, y, ids, batch, beta, tmp)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
