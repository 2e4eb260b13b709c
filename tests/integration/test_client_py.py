#!/usr/bin/python3
"""The Python client package (client/python) installed with pip and planning
through the real shardd.

usage: /usr/bin/python3 tests/integration/test_client_py.py PATH/TO/shardd
       PATH/TO/shardctl

Outside: a venv over Debian's packages (--system-site-packages: grpcio and
protobuf come from python3-grpcio and python3-protobuf), the package
installed into it from a copy of client/python with pip, offline
(--no-index --no-build-isolation: setuptools and wheel from Debian too).
Inside (this file again, run by the venv's python from a folder outside
the repository, so that `import shardd` is the installed package): the
daemon started on a private unix socket, and the cases below.

Exits 77 (ctest: skipped) when /usr/bin/python3 lacks grpc or cannot make a
venv (python3-venv); a failed pip install fails the test.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIB = 1 << 30


def outside(shardd_bin, shardctl_bin):
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("SKIP: python3 lacks grpc (install python3-grpcio)", file=sys.stderr)
        return 77
    tmp = tempfile.mkdtemp(prefix="sd-client-py-")
    try:
        venv = os.path.join(tmp, "venv")
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("SKIP: cannot make a venv (install python3-venv): " + r.stderr.strip(),
                  file=sys.stderr)
            return 77
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(ROOT, "client", "python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        py = os.path.join(venv, "bin", "python")
        r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                            "--disable-pip-version-check", "-q", src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL: pip install client/python:\n" + r.stdout + r.stderr, file=sys.stderr)
            return 1
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        return subprocess.run([py, os.path.abspath(__file__), "--inside", shardd_bin,
                               shardctl_bin], cwd=run).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# Inside the venv

def inside(shardd_bin, shardctl_bin):
    import enum
    import json
    import time
    import unittest
    from dataclasses import dataclass, field
    from typing import List, Optional

    import shardd

    class DataType(enum.Enum):  # TorchRec's enums, as far as read here
        FP32 = "FP32"
        FP16 = "FP16"

    class ShardingType(enum.Enum):
        TABLE_WISE = "table_wise"
        COLUMN_WISE = "column_wise"

    @dataclass
    class EmbeddingBagConfig:  # its fields a plan reads
        num_embeddings: int
        embedding_dim: int
        name: str
        feature_names: List[str] = field(default_factory=list)
        data_type: DataType = DataType.FP32
        weight_init_max: Optional[float] = None

    @dataclass
    class ParameterConstraints:
        sharding_types: Optional[List[str]] = None
        pooling_factors: List[float] = field(default_factory=lambda: [1.0])
        num_poolings: Optional[List[float]] = None
        cache_params: Optional[object] = None

    tmp = tempfile.mkdtemp(prefix="sd-client-")
    sock = "unix:" + os.path.join(tmp, "s.sock")
    log = open(os.path.join(tmp, "shardd.log"), "wb")
    proc = subprocess.Popen([shardd_bin, "--listen", sock, "--data-dir",
                             os.path.join(tmp, "data"), "--profiler-idle-ms", "3600000",
                             "--retrain-every-hours", "0"], stdout=log, stderr=subprocess.STDOUT)

    def ctl(*args):
        return subprocess.run([shardctl_bin, "--addr", sock] + list(args),
                              capture_output=True, text=True)

    t0 = time.monotonic()
    while ctl("health").returncode != 0:
        if proc.poll() is not None or time.monotonic() - t0 > 60:
            proc.kill()
            print("FAIL: shardd did not start", file=sys.stderr)
            return 1
        time.sleep(0.2)

    def trec_tables(n):
        """n TorchRec tables as dicts, no bins, and their constraints."""
        tables, cons = [], {}
        for i in range(n):
            name = "t%02d" % i
            tables.append({"name": name, "num_embeddings": [1000, 50000, 400000, 4000000][i % 4],
                           "embedding_dim": [16, 32, 64, 128][(i * 7) % 4],
                           "feature_names": ["f%d" % i], "data_type": "FP32"})
            cons[name] = {"pooling_factors": [1.0 + 2.5 * (i % 9)]}
        cons["t03"]["cache_params"] = {"algorithm": "LRU", "load_factor": 0.2}
        return tables, cons

    class ClientCase(unittest.TestCase):
        def setUp(self):
            self.c = shardd.Client(sock)

        def tearDown(self):
            self.c.close()

        def test_0_installed(self):
            """The package is the installed one, not the repository's."""
            self.assertNotIn(ROOT, os.path.abspath(shardd.__file__))
            self.assertIn("site-packages", shardd.__file__)

        def check_plan(self, plan, tables, num_devices):
            self.assertEqual(list(plan.tables), [t["name"] for t in tables],
                             "every table, in request order")
            for t in tables:
                dim = t.get("embedding_dim", t.get("dim"))
                col = 0
                for s in plan.tables[t["name"]]:
                    self.assertEqual(s.col_offset, col)
                    self.assertTrue(0 <= s.device < num_devices)
                    col += s.col_width
                self.assertEqual(col, dim, "columns of %s covered" % t["name"])
            self.assertEqual(len(plan.devices), num_devices)
            self.assertAlmostEqual(plan.cost_ms, max(d.total_ms for d in plan.devices))

        def test_1_torchrec_without_bins(self):
            tables, cons = trec_tables(20)
            plan = self.c.plan(tables, shardd.Topology(num_devices=4, mem_gb=16),
                               constraints=cons)
            self.check_plan(plan, tables, 4)
            derived = [n for n in plan.notes if n.field == "bins"]
            self.assertEqual([n.table for n in derived], [t["name"] for t in tables])
            for n in derived:
                self.assertEqual(n.kind, "assumed")
                self.assertTrue(n.message.startswith("bins of %s derived: Zipf s=2.6 (the "
                                                     "default) over " % n.table), n.message)
            cache = [n for n in plan.notes if n.field == "constraints.cache_params"]
            # A load factor for when t03 is cached; HBM holds it, so it is not.
            self.assertEqual([(n.kind, n.table) for n in cache], [("applied", "t03")])
            self.assertEqual({s.compute_kernel for ss in plan.tables.values() for s in ss},
                             {"fused"})

        def test_2_objects_whole_tables(self):
            """TorchRec's own objects (read by attribute, enums by value);
            table_wise only on every table keeps every table whole."""
            tables = [EmbeddingBagConfig(num_embeddings=20000, embedding_dim=128,
                                         name="o%d" % i, feature_names=["a", "b"],
                                         data_type=DataType.FP16) for i in range(6)]
            cons = {t.name: ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE],
                                                 pooling_factors=[4.0, 2.0],
                                                 num_poolings=[1.0, 3.0]) for t in tables}
            plan = self.c.plan(tables, shardd.Topology(num_devices=2, mem_gb=4),
                               constraints=cons)
            for t in tables:
                self.assertEqual(len(plan.tables[t.name]), 1, "%s whole" % t.name)
            applied = [n for n in plan.notes if n.kind == "applied"]
            self.assertEqual(len(applied), 1)
            self.assertIn("no column splits", applied[0].message)
            pf = [n for n in plan.notes if n.field == "constraints.pooling_factors"]
            self.assertEqual(len(pf), 6)
            self.assertIn("10.0 lookups per sample over its 2 features", pf[0].message)
            # fp16: 20000 x 128 x 2 bytes a table.
            self.assertEqual(sum(d.memory_bytes for d in plan.devices), 6 * 20000 * 128 * 2)
            # A robust plan: the ensemble's 0.9 quantile scored it.
            robust = self.c.plan(tables, shardd.Topology(num_devices=2, mem_gb=4),
                                 constraints=cons, quantile=0.9)
            self.assertIn("(q0.90 of 5)", robust.cost_model)
            self.assertNotIn("of 5)", plan.cost_model)
            with self.assertRaises(shardd.ShardError) as e:
                self.c.plan(tables, shardd.Topology(num_devices=2, mem_gb=4), quantile=2)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn("options.quantile.value", e.exception.message)

        def test_3_to_torchrec_matches_shardctl(self):
            tables, cons = trec_tables(20)
            path = os.path.join(tmp, "trec.json")
            with open(path, "w") as f:
                json.dump({"tables": tables, "constraints": cons}, f)
            r = ctl("plan", "--tables", path, "--devices", "4", "--mem-gb", "16",
                    "--torchrec")
            self.assertEqual(r.returncode, 0, r.stderr)
            ref = json.loads(r.stdout)
            plan = self.c.plan(tables, shardd.Topology(num_devices=4, mem_gb=16),
                               constraints=cons)
            self.assertEqual(shardd.to_torchrec(plan)["plan"], ref["plan"])
            self.assertEqual([n.message for n in plan.notes],
                             [n["message"] for n in ref["notes"]])

        def test_4_features(self):
            """Traces into tables: the histogram counted here by hand."""
            indices = [7, 7, 7, 9, 9, 11, 7, 7, 7]  # 7: 6 times, 9: twice, 11 once
            tables, notes = self.c.features(
                traces=[{"name": "tr", "dim": 16, "lengths": [3, 3, 0, 3],
                         "indices": indices}],
                tables=[{"name": "st", "rows": 100000, "dim": 32, "pooling_factor": 5.0,
                         "zipf_exponent": 1.1}],
                batch_size=2048)
            self.assertEqual([t["name"] for t in tables], ["tr", "st"])
            tr = tables[0]
            self.assertEqual(tr["rows"], 100)  # max(100, 11 + 1)
            self.assertAlmostEqual(tr["pooling_factor"], 9 / 4)
            want = [0.0] * 17
            want[0] = want[1] = want[3] = 1 / 3  # counts 1, 2 and 6 (in (4, 8])
            for a, b in zip(tr["bins"], want):
                self.assertAlmostEqual(a, b)
            self.assertEqual(len(tables[1]["bins"]), 17)
            self.assertAlmostEqual(sum(tables[1]["bins"]), 1.0)
            self.assertEqual([(n.table, n.field) for n in notes], [("st", "bins")])
            self.assertIn("s=1.1 over 100,000 rows, 2,048 bags x 5.0 lookups",
                          notes[0].message)
            # The tables plan as they are.
            plan = self.c.plan(tables, shardd.Topology(num_devices=2, mem_gb=1))
            self.assertEqual(plan.notes, [])
            self.check_plan(plan, tables, 2)

        def test_6_tiers(self):
            """HBM for 40 % of the tables, host DRAM for all: UVM caches,
            their kernel and load factor in the plan and in to_torchrec, as
            shardctl says."""
            bins = [0.0] * 17
            bins[0], bins[2], bins[8], bins[16] = 0.6, 0.3, 0.09, 0.01
            tables = [{"name": "u%02d" % i, "rows": 100000, "dim": 64,
                       "pooling_factor": 2.0 + i, "bins": bins} for i in range(10)]
            mem_gb = 0.4 * 10 * 100000 * 64 * 4 / 4 / (1 << 30)
            with self.assertRaises(shardd.ShardError) as e:
                self.c.plan(tables, shardd.Topology(4, mem_gb=mem_gb))
            self.assertEqual(e.exception.code, "RESOURCE_EXHAUSTED")
            topo = shardd.Topology(4, mem_gb=mem_gb, host_dram_gb=1.0)
            plan = self.c.plan(tables, topo)
            kernels = {s.compute_kernel for ss in plan.tables.values() for s in ss}
            self.assertIn("fused_uvm_caching", kernels)
            self.assertGreater(sum(d.ddr_bytes for d in plan.devices), 0)
            self.assertIn("(modelled)", plan.cost_model)
            path = os.path.join(tmp, "tiers.json")
            with open(path, "w") as f:
                json.dump({"tables": tables}, f)
            r = ctl("plan", "--tables", path, "--devices", "4", "--mem-gb",
                    repr(mem_gb), "--host-dram-gb", "1", "--torchrec")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(shardd.to_torchrec(plan)["plan"], json.loads(r.stdout)["plan"])

        def test_7_compute_kernels(self):
            """A user's compute_kernels and cache_params through the daemon:
            t03 asked for fused_uvm_caching at 0.2 is cached at 0.2 though HBM
            would hold it, t05 asked for fused_uvm is in UVM, the rest stay
            fused; without host DRAM the request is refused naming t03."""
            tables, cons = trec_tables(20)
            cons["t03"]["compute_kernels"] = ["fused_uvm_caching"]
            cons["t05"]["compute_kernels"] = ["FUSED_UVM"]
            with self.assertRaises(shardd.ShardError) as e:
                self.c.plan(tables, shardd.Topology(4, mem_gb=16), constraints=cons)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn('"t03"', e.exception.message)
            self.assertIn("--host-dram-gb", e.exception.message)
            plan = self.c.plan(tables, shardd.Topology(4, mem_gb=16, host_dram_gb=64),
                               constraints=cons)
            self.check_plan(plan, tables, 4)
            kernels = {name: {(s.compute_kernel, round(s.cache_load_factor, 6)) for s in ss}
                       for name, ss in plan.tables.items()}
            self.assertEqual(kernels["t03"], {("fused_uvm_caching", 0.2)})
            self.assertEqual(kernels["t05"], {("fused_uvm", 0.0)})
            self.assertEqual({k for n, ks in kernels.items() if n not in ("t03", "t05")
                              for k in ks}, {("fused", 0.0)})
            bags = shardd.to_torchrec(plan)["plan"]["embedding_bags"]
            self.assertEqual(bags["t03"]["compute_kernel"], "fused_uvm_caching")
            self.assertEqual(bags["t03"]["cache_params"]["load_factor"], 0.2)
            self.assertEqual(bags["t05"]["compute_kernel"], "fused_uvm")

        def test_5_errors(self):
            with self.assertRaises(shardd.ShardError) as e:
                self.c.plan([{"name": "a", "num_embeddings": 10, "embedding_dim": 8,
                              "data_type": "INT4"}], shardd.Topology(2, mem_gb=1))
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn('torchrec_tables[0] "a": data_type "INT4" is not planned yet',
                          e.exception.message)
            with self.assertRaises(ValueError):
                self.c.plan([{"name": "a", "num_embeddings": 10, "embedding_dim": 8},
                             {"name": "b", "rows": 10, "dim": 8, "pooling_factor": 1}],
                            shardd.Topology(2, mem_gb=1))
            with self.assertRaises(ValueError):
                self.c.plan([{"name": "a", "num_embeddings": 10, "embedding_dim": 8}],
                            shardd.Topology(2, mem_gb=1), constraints={"b": {}})
            with shardd.Client("unix:" + os.path.join(tmp, "none.sock"), timeout=3) as c:
                with self.assertRaises(shardd.ShardError) as e:
                    c.plan([{"name": "a", "rows": 10, "dim": 8, "pooling_factor": 1}],
                           shardd.Topology(2, mem_gb=1))
            self.assertIn(e.exception.code, ("UNAVAILABLE", "DEADLINE_EXCEEDED"))

    try:
        suite = unittest.TestLoader().loadTestsFromTestCase(ClientCase)
        ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    if len(sys.argv) == 4 and sys.argv[1] == "--inside":
        sys.exit(inside(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(outside(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
