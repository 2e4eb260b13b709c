#!/usr/bin/python3
"""dreamshard end to end against the real daemon binary.

usage: /usr/bin/python3 tests/integration/test_dreamshard.py PATH/TO/shardd [unittest args]

Checks, over gRPC: a Plan with algorithm "dreamshard" on a fresh daemon
(the embedded model and policy), the same placement as `shardctl plan
--offline --alg dreamshard`; with a stored compute model active (made by
`shardctl profile` and `train --activate`), dreamshard refused until a
policy is trained for it, an Admin.Retrain of kind policy followed with
WatchJob (progress per validation, then the gate's verdict), the policy
serving dreamshard and listed with its model, a policy retrain queued by
ActivateModel (policy_after_activation), and a restart keeping the policy;
and a store of schema version 2 (built from the released migrations of
store/sql.c) migrated through 3 (policies), 4 (table families) and 5
(samples timed in fp32 say so) with its ids, AUTOINCREMENT marks and
foreign keys kept.

Exits 77 (ctest: skipped) when /usr/bin/python3 lacks grpc or grpc_tools.
"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import unittest

try:
    import grpc  # noqa: F401
    import grpc_tools  # noqa: F401
    import google.protobuf  # noqa: F401
except ImportError as e:  # pragma: no cover
    print("SKIP: python3 lacks %s (install python3-grpcio python3-grpc-tools "
          "python3-protobuf)" % e.name, file=sys.stderr)
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardd_harness as H  # noqa: E402

SHARDD = None
SC = grpc.StatusCode
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Policy training steps: a few seconds, validated every 25 steps, so that
# WatchJob (polled every 100 ms) sees the progress between validations.
ITERATIONS = "200"


def note(fmt, *args):
    print("    [measured] " + (fmt % args if args else fmt), file=sys.stderr, flush=True)


def ctl():
    return os.path.join(os.path.dirname(SHARDD), "shardctl")


def run(*argv):
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (argv[:2], p.returncode, p.stderr))
    return p.stdout


class Base(unittest.TestCase):
    def expect(self, code, fn, *words):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.code(), code, "details: %r" % e.details())
        for w in words:
            self.assertIn(w, e.details() or "")
        return e

    def check_whole(self, req, resp):
        """Every table whole on one existing device, within memory."""
        self.assertEqual(resp.algorithm, "dreamshard")
        self.assertEqual(len(resp.tables), len(req.tables))
        dims = {t.name: t.dim for t in req.tables}
        for p in resp.tables:
            self.assertEqual(len(p.shards), 1, "dreamshard never splits")
            s = p.shards[0]
            self.assertEqual((s.col_offset, s.col_width), (0, dims[p.table]))
            self.assertLess(s.device, req.topology.num_devices)
        for dv in resp.devices:
            self.assertLessEqual(dv.memory_bytes, req.topology.mem_bytes_per_device)


def dreamshard_request(n=40, devices=4, seed=3, profile=""):
    req = H.plan_request(H.make_tables(n, seed), num_devices=devices, mem=16 * H.GIB,
                         algorithm="dreamshard")
    if profile:
        req.options.profile = profile
    return req


# ---------------------------------------------------------------------------
# The embedded model and policy

class EmbeddedTest(Base):
    @classmethod
    def setUpClass(cls):
        cls.d = H.Daemon(SHARDD, args=["--profiler", "off"]).start()
        cls.unix = cls.d.channel("unix")

    @classmethod
    def tearDownClass(cls):
        cls.d.cleanup()

    def test_plan_like_offline(self):
        st = H.call(self.unix, H.STATUS, H.admin_pb2.GetStatusRequest())
        req = dreamshard_request(profile=st.serving_profile)
        t0 = time.monotonic()
        r = H.call(self.unix, H.PLAN, req)
        note("dreamshard, 40 tables on 4 devices: %.1f ms over gRPC, policy %s, "
             "%d devices scored", (time.monotonic() - t0) * 1e3,
             r.basis.policy_version, r.search.candidates_evaluated)
        self.check_whole(req, r)
        self.assertEqual(r.basis.policy_version, "embedded")
        self.assertEqual(r.basis.model_version, "embedded")
        self.assertGreater(r.search.candidates_evaluated, 0)
        # The same tables offline: the same placement and cost.
        tables = os.path.join(self.d.tmp, "tables.json")
        with open(tables, "w") as f:
            json.dump({"tables": [{"name": t.name, "rows": t.rows, "dim": t.dim,
                                   "pooling_factor": t.pooling_factor,
                                   "bins": list(t.bins)} for t in req.tables]}, f)
        off = json.loads(run(ctl(), "plan", "--offline", "--tables", tables,
                             "--devices", "4", "--mem-gb", "16", "--alg",
                             "dreamshard", "--json"))
        online = {p.table: p.shards[0].device for p in r.tables}
        self.assertEqual({t["name"]: t["shards"][0]["device"] for t in off["tables"]},
                         online)
        self.assertTrue(H.rel_close(off["plan_cost_ms"], r.plan_cost_ms))

    def test_listed(self):
        ms = H.call(self.unix, H.LIST_MODELS,
                    H.admin_pb2.ListModelsRequest(kind=H.admin_pb2.MODEL_KIND_POLICY)).models
        self.assertEqual([(m.version, m.active) for m in ms], [("embedded", True)])
        self.assertEqual(ms[0].kind, H.admin_pb2.MODEL_KIND_POLICY)
        self.assertEqual(ms[0].base_model_version, "embedded")
        self.assertGreater(ms[0].gate_ratio, 0)
        self.assertLess(ms[0].gate_ratio, 1, "the embedded policy passed its gate")
        plain = H.call(self.unix, H.LIST_MODELS, H.admin_pb2.ListModelsRequest()).models
        self.assertTrue(all(m.kind != H.admin_pb2.MODEL_KIND_POLICY for m in plain))


# ---------------------------------------------------------------------------
# A stored compute model, its policy retrain, the hook, a restart

class StoredModelTest(Base):
    @classmethod
    def setUpClass(cls):
        cls.data = H.tempfile.mkdtemp(prefix="sdi-dream-")
        db = os.path.join(cls.data, "shardd.db")
        run(ctl(), "profile", "--db", db, "--samples", "24", "--max-gb", "0.05",
            "--warmup", "1", "--repeats", "3", "--no-flush",
            "--quiet-tolerance", "0")
        # Stored with its members (--ensemble 2): the policy binds to member
        # 0, the model the daemon plans with.
        out = run(ctl(), "train", "--db", db, "--epochs", "20", "--ensemble", "2",
                  "--activate")
        cls.model = re.match(r"model (\d+)", out).group(1)
        cls.d = H.Daemon(SHARDD, data_dir=cls.data,
                         args=["--profiler", "off", "--policy-iterations", ITERATIONS,
                               "--policy-after-activation", "on"]).start()
        cls.unix = cls.d.channel("unix")

    @classmethod
    def tearDownClass(cls):
        cls.d.cleanup()
        H.shutil.rmtree(cls.data, ignore_errors=True)

    def status(self):
        return H.call(self.unix, H.STATUS, H.admin_pb2.GetStatusRequest())

    def policies(self):
        return H.call(self.unix, H.LIST_MODELS, H.admin_pb2.ListModelsRequest(
            kind=H.admin_pb2.MODEL_KIND_POLICY)).models

    def watch(self, job_id):
        seen = list(H.stream(self.unix, H.WATCH_JOB, H.admin_pb2.WatchJobRequest(id=job_id)))
        self.assertTrue(seen)
        return seen

    def test_a_refused_without_policy(self):
        self.assertEqual(self.status().active_model_version, self.model)
        # The stored members answer with the model: its plans' spread.
        r = H.call(self.unix, H.PLAN, H.plan_request(H.make_tables(8, seed=3)))
        self.assertEqual((r.basis.model_version, r.spread.members), (self.model, 2))
        self.expect(SC.FAILED_PRECONDITION,
                    lambda: H.call(self.unix, H.PLAN, dreamshard_request()),
                    "options.algorithm", "no placement policy", self.model,
                    "retrain --kind policy")
        # The other algorithms are not affected.
        req = dreamshard_request()
        req.options.algorithm = "size_lookup_greedy"
        H.call(self.unix, H.PLAN, req)

    def test_b_retrain_policy_watched(self):
        A = H.admin_pb2
        t0 = time.monotonic()
        job = H.call(self.unix, H.RETRAIN, A.RetrainRequest(kind=A.MODEL_KIND_POLICY,
                                                            force=True))
        self.assertEqual(job.kind, A.JOB_KIND_RETRAIN_POLICY)
        again = H.call(self.unix, H.RETRAIN, A.RetrainRequest(kind=A.MODEL_KIND_POLICY))
        self.assertEqual(again.id, job.id, "an open policy retrain is joined")
        seen = self.watch(job.id)
        last = seen[-1]
        note("policy retrain: %.1f s, %d messages; %s", time.monotonic() - t0, len(seen),
             last.message)
        self.assertEqual(last.state, A.JOB_STATE_SUCCEEDED, last.message)
        steps = [m for m in seen if "training the policy: step" in m.message]
        self.assertGreaterEqual(len(steps), 1, [m.message for m in seen])
        progress = [m.progress for m in seen]
        self.assertEqual(progress, sorted(progress), "progress never goes back")
        self.assertEqual(last.progress, 1.0)
        self.assertTrue(last.result_model_version)
        self.assertIn("size_lookup_greedy", last.message)
        # Forced: active whatever the gate said.
        self.assertIn("activated (was", last.message)
        StoredModelTest.policy = last.result_model_version

        r = H.call(self.unix, H.PLAN, dreamshard_request())
        self.check_whole(dreamshard_request(), r)
        self.assertEqual(r.basis.policy_version, self.policy)
        self.assertEqual(r.basis.model_version, self.model)

        mine = [m for m in self.policies() if m.version == self.policy]
        self.assertEqual(len(mine), 1)
        self.assertTrue(mine[0].active)
        self.assertEqual(mine[0].base_model_version, self.model)
        self.assertGreater(mine[0].gate_ratio, 0)
        self.assertEqual(mine[0].validation_samples, 20, "held-out tasks")

    def test_c_activation_queues_a_policy(self):
        A = H.admin_pb2
        before = {m.version for m in self.policies()}
        H.call(self.unix, H.ACTIVATE, A.ActivateModelRequest(version=self.model))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            new = [m for m in self.policies() if m.version not in before]
            st = self.status()
            if new and st.jobs_queued + st.jobs_running == 0:
                break
            time.sleep(0.2)
        note("ActivateModel: a new policy after %.1f s", time.monotonic() - t0)
        self.assertEqual(len(new), 1, "one policy retrain per activation")
        self.assertEqual(new[0].base_model_version, self.model)
        # Activated or not, by its gate; dreamshard plans with the active one.
        r = H.call(self.unix, H.PLAN, dreamshard_request(seed=4))
        # The embedded policy is active for its own profile too: on a machine
        # whose profile is not the embedded model's, both are listed active.
        active = [m.version for m in self.policies()
                  if m.active and m.profile == new[0].profile]
        self.assertEqual([r.basis.policy_version], active)
        note("the hook's policy %s: gate %.3f, %s", new[0].version, new[0].gate_ratio,
             "active" if new[0].active else "not activated")
        self.assertEqual(new[0].active, new[0].gate_ratio < 1)

    def test_d_restart_keeps_policy(self):
        served = H.call(self.unix, H.PLAN, dreamshard_request(seed=5))
        self.assertEqual(self.d.stop(), 0)
        self.d.start()
        StoredModelTest.unix = self.d.channel("unix")
        r = H.call(self.unix, H.PLAN, dreamshard_request(seed=5))
        self.assertEqual(r.basis.policy_version, served.basis.policy_version)
        self.assertEqual(H.placement_key(r), H.placement_key(served))


# ---------------------------------------------------------------------------
# Schema 2 to 3 (and on to 5)

def released_migrations(n):
    """The first n migrations of store/sql.c, as SQL text (released steps
    never change, so the test builds a store exactly as an older shardd
    did)."""
    with open(os.path.join(ROOT, "store", "sql.c")) as f:
        src = f.read()
    body = src[src.index("store__migrations[STORE_SCHEMA_VERSION] = {"):]
    body = body[body.index("{") + 1:]
    steps, cur, i = [], [], 0
    while len(steps) < n:
        c = body[i]
        if body.startswith("/*", i):
            i = body.index("*/", i) + 2
        elif c == '"':
            j = i + 1
            while body[j] != '"':
                j += 2 if body[j] == "\\" else 1
            cur.append(body[i + 1:j].encode().decode("unicode_escape"))
            i = j + 1
        elif c in ",}":
            steps.append("".join(cur))
            cur = []
            i += 1
        else:
            i += 1
    return steps


class MigrationTest(Base):
    def test_schema_2_to_3(self):
        tmp = H.tempfile.mkdtemp(prefix="sdi-mig-")
        db = os.path.join(tmp, "shardd.db")
        try:
            c = sqlite3.connect(db)
            for step in released_migrations(2):
                c.executescript(step)
            c.executescript(
                "PRAGMA user_version = 2;"
                "INSERT INTO profiles VALUES (1, 'cpu/old/4096', 'cpu', 'old', 4096, 1);"
                "INSERT INTO models (profile_id, kind, format_version, weights, norm,"
                " val_mape, test_mape, train_samples, val_samples, test_samples,"
                " created_ms, active) VALUES"
                " (1, 'compute', 1, x'01', x'', 0.1, 0.1, 10, 1, 1, 10, 0),"
                " (1, 'compute', 1, x'02', x'', 0.1, 0.1, 10, 1, 1, 20, 0),"
                " (1, 'compute', 1, x'03', x'', 0.1, 0.1, 10, 1, 1, 30, 0);"
                "DELETE FROM models WHERE id = 3;"
                "INSERT INTO jobs (kind, state, progress, message, profile_id, params,"
                " result_model_id, created_ms) VALUES"
                " ('retrain', 'succeeded', 1, 'done', 1, '{}', 2, 5);"
                "INSERT INTO plan_audit (request_hash, algorithm, model_id, ntables,"
                " ndevices, plan_cost_ms, created_ms, plan) VALUES"
                " ('ab', 'neuroshard', 1, 1, 1, 1.0, 5, '{}');")
            c.commit()
            c.close()

            d = H.Daemon(SHARDD, data_dir=tmp, args=["--profiler", "off"]).start()
            try:
                ms = H.call(d.channel("unix"), H.LIST_MODELS,
                            H.admin_pb2.ListModelsRequest(profile="cpu/old/4096")).models
                self.assertEqual([m.version for m in ms], ["2", "1"])
                self.assertTrue(all(m.kind == H.admin_pb2.MODEL_KIND_COMPUTE for m in ms))
            finally:
                self.assertEqual(d.stop(), 0)
                d.cleanup()

            c = sqlite3.connect(db)
            self.assertEqual(c.execute("PRAGMA user_version").fetchone()[0], 5)
            self.assertIn("family", [r[1] for r in c.execute("PRAGMA table_info(samples)")])
            self.assertEqual(c.execute("PRAGMA foreign_key_check").fetchall(), [])
            self.assertEqual(c.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            seq = dict(c.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
            self.assertEqual(seq.get("models"), 3, "id 3 is never given again")
            self.assertEqual(seq.get("jobs"), 1)
            self.assertNotIn("models_v3", seq)
            self.assertEqual(c.execute("SELECT result_model_id FROM jobs").fetchone()[0], 2)
            c.execute("PRAGMA foreign_keys = ON")
            c.execute("INSERT INTO models (profile_id, kind, format_version, weights,"
                      " norm, val_mape, test_mape, train_samples, val_samples,"
                      " test_samples, created_ms, base_model_id, gate_ratio) VALUES"
                      " (1, 'policy', 1, x'04', x'', 0, 0, 1, 1, 0, 40, 1, 0.9)")
            self.assertEqual(c.execute("SELECT max(id) FROM models").fetchone()[0], 4)
            for bad in ("(1, 'compute', 1, x'05', x'', 0, 0, 1, 1, 0, 50, 1, 0)",
                        "(1, 'policy', 1, x'05', x'', 0, 0, 1, 1, 0, 50, 99, 0)",
                        "(1, 'other', 1, x'05', x'', 0, 0, 1, 1, 0, 50, NULL, 0)"):
                with self.assertRaises(sqlite3.IntegrityError):
                    c.execute("INSERT INTO models (profile_id, kind, format_version,"
                              " weights, norm, val_mape, test_mape, train_samples,"
                              " val_samples, test_samples, created_ms, base_model_id,"
                              " gate_ratio) VALUES " + bad)
            c.execute("INSERT INTO jobs (kind, state, progress, message, params,"
                      " created_ms) VALUES ('retrain_policy', 'queued', 0, '', '{}', 6)")
            c.rollback()
            c.close()
        finally:
            H.shutil.rmtree(tmp, ignore_errors=True)


def main():
    global SHARDD
    args = sys.argv[1:]
    if args and not args[0].startswith("-"):
        SHARDD = os.path.abspath(args.pop(0))
    else:
        SHARDD = os.environ.get("SHARDD_BIN")
    if not SHARDD or not os.access(SHARDD, os.X_OK):
        print("usage: test_dreamshard.py PATH/TO/shardd [unittest args]", file=sys.stderr)
        return 2
    H.load_protos()
    try:
        prog = unittest.main(argv=[sys.argv[0]] + args, exit=False, verbosity=2)
    finally:
        H.cleanup_protos()
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
