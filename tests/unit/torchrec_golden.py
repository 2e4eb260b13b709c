#!/usr/bin/python3
"""The golden values of tests/unit/test_torchrec.c, derived again.

TorchRec's perf estimator (EmbeddingPerfEstimator) and storage formulas as
reference/torchrec_planner.md writes them (sections 1.5, 1.6 and 2.1-2.5),
written out here in plain Python, independently of planner/models/trec.c,
for the cases the C test checks: the Planner_Introduction notebook (one
10M x 64 fp32 table, B = 512) and the 16-rank table (B = 512, PF = 20,
d = 128 fp32, ws = 16, lws = 8).

usage: torchrec_golden.py            print every case at full precision
       torchrec_golden.py --check C  also check the C file: every value here
                                     appears in it (to 1e-15), every literal
                                     of 12 or more significant digits in it
                                     is one of these values, and each value
                                     rounds to the reference's 6 decimals.
Exit status 1 when a check fails.
"""
import math
import re
import sys

# Section 1.5: X GiB/s as bytes per ms.
GIB = 1024 ** 3
HBM_MEM_BW = 897 * GIB / 1000
INTRA_NODE_BANDWIDTH = 600 * GIB / 1000
CROSS_NODE_BANDWIDTH = 12.5 * GIB / 1000
BWD_COMPUTE_MULTIPLIER = 2
BATCHED_COPY_PERF_FACTOR = 2.455
DP_ELEMENTWISE_KERNELS_PERF_FACTOR = 9.22
HALF_BLOCK_PENALTY = 1.15
QUARTER_BLOCK_PENALTY = 1.75
BIGINT = 8  # indices are counted as int64


def device_bw(kernel):
    """2.1, cuda: fused at the full HBM bandwidth, dense at half."""
    return HBM_MEM_BW * (0.5 if kernel == "dense" else 1.0)


def comms_bw(ws, lws):
    """1.5 BasicCommsBandwidths for all-to-all, reduce-scatter and
    all-gather: intra-host when the ranks fit one host."""
    return INTRA_NODE_BANDWIDTH if ws <= lws else CROSS_NODE_BANDWIDTH


def perf(parts):
    fc, fcomm, bc, bcomm = parts
    return [fc, fcomm, bc, bcomm, fc + fcomm + bc + bcomm]


def table_wise(B, pf, d, ws, lws, esz=4, kernel="fused"):
    """2.2: TW, CW and TWCW (each shard pays for the global batch)."""
    batch_inputs = pf * B
    batch_outputs = B
    input_read = math.ceil(batch_inputs * ws * BIGINT)
    lookup = batch_inputs * ws * max(d, 32) * esz
    fwd_out = batch_outputs * ws * d * esz
    bwd_out = fwd_out
    penalty = 1.0 if d >= 128 else HALF_BLOCK_PENALTY if d >= 64 else QUARTER_BLOCK_PENALTY
    fc = (input_read + lookup + fwd_out) * penalty / device_bw(kernel)
    return perf([fc, fwd_out / comms_bw(ws, lws), BWD_COMPUTE_MULTIPLIER * fc,
                 bwd_out / comms_bw(ws, lws)])


def row_wise(B, pf, d, ws, lws, esz=4, kernel="fused"):
    """2.3: each shard sees 1/ws of the ids; reduce-scatter forward,
    all-gather and the batched copy backward."""
    batch_inputs = pf * B / ws
    batch_outputs = B
    input_read = math.ceil(batch_inputs * ws * BIGINT)
    lookup = batch_inputs * ws * d * esz
    fwd_out = batch_outputs * ws * d * esz
    bwd_out = fwd_out
    fc = (input_read + lookup + fwd_out) / device_bw(kernel)
    bcomm = bwd_out / comms_bw(ws, lws) + bwd_out * BATCHED_COPY_PERF_FACTOR / device_bw(kernel)
    return perf([fc, fwd_out / comms_bw(ws, lws), BWD_COMPUTE_MULTIPLIER * fc, bcomm])


def table_row_wise(B, pf, d, ws, lws, esz=4, kernel="fused"):
    """2.4: row-wise within a host (ids / lws), an intra-host
    reduce-scatter and, across hosts, an all-to-all of ws / lws slices."""
    batch_inputs = pf * B / lws
    batch_outputs = B
    input_read = math.ceil(batch_inputs * ws * BIGINT)
    lookup = batch_inputs * ws * d * esz
    fwd_out = batch_outputs * ws * d * esz
    bwd_out = fwd_out
    fc = (input_read + lookup + fwd_out) / device_bw(kernel)
    cross = batch_outputs * (ws / lws) * d * esz / CROSS_NODE_BANDWIDTH if ws > lws else 0.0
    fcomm = fwd_out / INTRA_NODE_BANDWIDTH + cross
    bcomm = (bwd_out / INTRA_NODE_BANDWIDTH + cross
             + bwd_out * BATCHED_COPY_PERF_FACTOR / device_bw(kernel))
    return perf([fc, fcomm, BWD_COMPUTE_MULTIPLIER * fc, bcomm])


def data_parallel(B, pf, d, ws, lws, rows, esz=4, kernel="dense"):
    """2.5: the local batch only; an all-reduce of the table (one NIC per
    GPU: inter-host bandwidth x lws) and the optimizer's kernels."""
    batch_inputs = pf * B
    batch_outputs = B
    fc = (math.ceil(batch_inputs * BIGINT) + batch_inputs * d * esz
          + batch_outputs * d * esz) / device_bw(kernel)
    table_size = rows * d * esz
    num_nodes = min(ws / lws, 2)
    all_reduce = (table_size * (2 * num_nodes - 1) / num_nodes
                  / (CROSS_NODE_BANDWIDTH * lws))
    if ws > 2 * lws:
        all_reduce *= 2
    bcomm = all_reduce + table_size * DP_ELEMENTWISE_KERNELS_PERF_FACTOR / device_bw(kernel)
    return perf([fc, 0.0, BWD_COMPUTE_MULTIPLIER * fc, bcomm])


# name, [fwd_compute, fwd_comms, bwd_compute, bwd_comms, total], the
# reference's 6-decimal figures for the same (None: not printed).
def cases():
    out = []
    nb = dict(B=512, d=64)
    out.append(("notebook TW ws=1 PF=1", table_wise(pf=1, ws=1, lws=1, **nb),
                [0.000318, 0.000203, 0.000636, 0.000203, 0.001361]))
    out.append(("notebook TW ws=2 PF=1", table_wise(pf=1, ws=2, lws=2, **nb),
                [None, None, None, None, 0.002721]))
    out.append(("notebook RW ws=2 PF=1", row_wise(pf=1, ws=2, lws=2, **nb),
                [None, None, None, None, 0.002720]))
    out.append(("notebook RW ws=2 PF=200", row_wise(pf=200, ws=2, lws=2, **nb),
                [None, None, None, None, 0.086503]))
    r16 = dict(B=512, pf=20, d=128, ws=16, lws=8)
    out.append(("16 ranks TW", table_wise(**r16),
                [0.092812, 0.312500, 0.185623, 0.312500, 0.903435]))
    out.append(("16 ranks RW", row_wise(**r16),
                [0.009883, 0.312500, 0.019767, 0.323191, 0.665341]))
    out.append(("16 ranks TWRW", table_row_wise(**r16),
                [0.015412, 0.045573, 0.030824, 0.056264, 0.148073]))
    out.append(("16 ranks DP 1000 rows dense", data_parallel(rows=1000, **r16),
                [0.011601, 0.0, 0.023203, 0.016955, 0.051759]))
    return out


FIELDS = ("fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms", "total")


def significant_digits(lit):
    mant = re.sub(r"[eE].*", "", lit).replace(".", "").lstrip("0")
    return len(mant)


def check(cfile, all_cases):
    src = open(cfile).read()
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)  # comments hold figures too
    lits = re.findall(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?)(?![\w.])", src)
    values = [float(x) for x in lits]
    bad = 0

    def near(a, b):
        return abs(a - b) <= 1e-15 * max(abs(a), abs(b), 1e-300)

    # Values the C test compares with (0 and exact binary fractions such as
    # 0.3125 are written short there, which is the same double).
    for name, full, doc in all_cases:
        for f, v, dv in zip(FIELDS, full, doc):
            if dv is not None and abs(round(v, 6) - dv) > 1e-12:
                print("FAIL: %s %s = %.17g does not round to the reference's %.6f"
                      % (name, f, v, dv))
                bad += 1
        # The notebook's ws=2 cases check only some fields in C.
        wanted = FIELDS if all(x is not None for x in doc) else ()
        if name == "notebook TW ws=2 PF=1":
            wanted = ("total",)
        elif name == "notebook RW ws=2 PF=1":
            wanted = ("total", "fwd_compute", "bwd_comms")
        elif name == "notebook RW ws=2 PF=200":
            wanted = ("total", "fwd_compute")
        elif name.endswith("dense"):
            wanted = ("fwd_compute", "bwd_compute", "bwd_comms", "total")
        for f, v in zip(FIELDS, full):
            if f in wanted and not any(near(v, x) for x in values):
                print("FAIL: %s %s = %.17g is not in %s" % (name, f, v, cfile))
                bad += 1
    every = [v for _, full, _ in all_cases for v in full]
    for lit, x in zip(lits, values):
        if significant_digits(lit) >= 12 and not any(near(x, v) for v in every):
            print("FAIL: %s holds %s, which no case here derives" % (cfile, lit))
            bad += 1
    return bad


def main():
    all_cases = cases()
    for name, full, _ in all_cases:
        print(name)
        for f, v in zip(FIELDS, full):
            print("    %-12s %.17g" % (f, v))
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        bad = check(sys.argv[2], all_cases)
        print("%s: %s" % (sys.argv[2], "every golden value re-derived" if bad == 0
                          else "%d mismatch(es)" % bad))
        return 1 if bad else 0
    if len(sys.argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
