#!/usr/bin/python3
"""Writes a small fixture in the dlrm_datasets layout (docs/trace-format.md)
and the tables `shardctl features` must make of it, computed here in plain
Python (no NumPy, nothing downloaded).

usage: make_dlrm_fixture.py OUTDIR raw|npy [TABLES BAGS SEED]

OUTDIR gets indices, offsets and lengths (int32 indices, int64 offsets,
int32 lengths: the widths of the 2021 files) as .bin (raw little-endian) or
.npy (NumPy's format, lengths 2-D [tables, bags]), and expected.json:
{"tables": [{"name", "rows", "dim", "pooling_factor", "bins"}]}, dim 64.
The last table is never read (all bags empty), as about 4 % of the real
tables are.
"""
import json
import os
import random
import struct
import sys


def npy_header(descr, shape):
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode("ascii")


def write(path, fmt, descr, values, shape):
    code = {"<i4": "<%di", "<i8": "<%dq"}[descr] % len(values)
    with open(path + (".npy" if fmt == "npy" else ".bin"), "wb") as f:
        if fmt == "npy":
            f.write(npy_header(descr, shape))
        f.write(struct.pack(code, *values))


def bin_of(c):
    k = 0
    while k < 16 and c > (1 << k):
        k += 1
    return k


def main(out, fmt, ntables=5, nbags=64, seed=1):
    rng = random.Random(seed)
    lengths, indices, expected = [], [], []
    for t in range(ntables):
        vocab = [rng.randrange(1 << 20) for _ in range(rng.choice([3, 50, 400]))]
        lens = [0 if t == ntables - 1 else rng.randrange(0, 20) for _ in range(nbags)]
        idx = []
        for n in lens:
            # Skewed: earlier vocabulary entries far more often.
            idx += [vocab[min(int(rng.paretovariate(1.2)) - 1, len(vocab) - 1)]
                    for _ in range(n)]
        counts = {}
        for i in idx:
            counts[i] = counts.get(i, 0) + 1
        hist = [0] * 17
        for c in counts.values():
            hist[bin_of(c)] += 1
        expected.append({
            "name": "table_%04d" % t,
            "rows": max(100, max(idx) + 1) if idx else 100,
            "dim": 64,
            "pooling_factor": len(idx) / nbags,
            "bins": [h / len(counts) if counts else 0.0 for h in hist],
        })
        lengths += lens
        indices += idx
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "indices"), fmt, "<i4", indices, (len(indices),))
    write(os.path.join(out, "offsets"), fmt, "<i8", offsets, (len(offsets),))
    write(os.path.join(out, "lengths"), fmt, "<i4", lengths, (ntables, nbags))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"tables": expected}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 6) or sys.argv[2] not in ("raw", "npy"):
        sys.exit(__doc__)
    extra = [int(x) for x in sys.argv[3:]]
    main(sys.argv[1], sys.argv[2], *extra)
