#!/usr/bin/python3
"""A fleet on this machine (docs/fleet.md), every daemon the real shardd on
loopback: one trainer, two profiling nodes and two planners.

 - samples flow: both profilers' samples reach the trainer, each once
   (origin node and id), and the trainer's count is exactly theirs;
 - a retrain on the trainer activates a model, and both planners fetch it
   and serve it: the same request gets the same plan from each, and not
   the embedded model's;
 - killing any one process (SIGKILL: a profiler, the trainer, a planner)
   loses no committed sample: after restarts the trainer holds exactly
   what the profilers committed, none twice, and a restarted planner
   serves the model again without storing a second copy;
 - Fleet calls need the admin token over TCP.

usage: /usr/bin/python3 tests/integration/test_fleet.py PATH/TO/shardd
Exits 77 (ctest: skipped) when /usr/bin/python3 lacks grpc or grpc_tools.
"""
import os
import signal
import sqlite3
import struct
import sys
import time
import unittest

try:
    import grpc
    import grpc_tools  # noqa: F401
except ImportError as e:  # pragma: no cover
    print("SKIP: python3 lacks %s (install python3-grpcio python3-grpc-tools)"
          % e.name, file=sys.stderr)
    sys.exit(77)

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardd_harness as H  # noqa: E402

SHARDD = None
TOKEN = "fleet-token-0123456789"
SYNC_MS = "300"


def status(d):
    with grpc.insecure_channel(d.unix) as ch:
        return H.call(ch, H.STATUS, H.admin_pb2.GetStatusRequest(), timeout=10)


def wait_for(what, fn, timeout=60.0, every=0.3):
    # A sanitized shardd profiles and trains several times slower.
    timeout *= 3 if H.sanitized(SHARDD) else 1
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = fn()
            if last:
                return last
        except grpc.RpcError as e:
            last = e
        time.sleep(every)
    raise AssertionError("%s: not within %.0f s (last: %r)" % (what, timeout, last))


def load_fleet_proto():
    """fleet_pb2, compiled beside the harness's modules."""
    import subprocess
    src = os.path.join(H._PROTO_DIR, "src")
    out = os.path.join(H._PROTO_DIR, "gen")
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + src,
                        "--python_out=" + out, "shardd/v1/fleet.proto"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("protoc failed: " + r.stderr)
    from shardd.v1 import fleet_pb2
    return fleet_pb2


def set_paused(d, paused):
    with grpc.insecure_channel(d.unix) as ch:
        H.call(ch, H.SET_PROFILER, H.admin_pb2.SetProfilerRequest(paused=paused))


class Fleet(unittest.TestCase):
    def trainer(self, data_dir=None, port=None):
        d = H.Daemon(SHARDD, data_dir=data_dir, admin_token=TOKEN,
                     args=["--fleet-role", "trainer", "--profiler", "off"])
        if port is not None:  # a restart keeps its address
            d.port, d.tcp = port, "127.0.0.1:%d" % port
            d.argv[d.argv.index("--listen") + 1] = d.tcp
        return d.start()

    def profiler(self, name, trainer, data_dir=None):
        return H.Daemon(SHARDD, data_dir=data_dir, admin_token=TOKEN,
                        profiler_idle_ms=0,
                        args=["--fleet-role", "profiler", "--fleet-node", name,
                              "--fleet-trainer", trainer.tcp,
                              "--fleet-sync-ms", SYNC_MS]).start()

    def planner(self, trainer, data_dir=None):
        return H.Daemon(SHARDD, data_dir=data_dir, admin_token=TOKEN,
                        args=["--fleet-role", "planner", "--profiler", "off",
                              "--fleet-trainer", trainer.tcp,
                              "--fleet-sync-ms", SYNC_MS]).start()

    def test_fleet(self):
        # Every daemon started, restarted ones too: a restart runs on the
        # data directory inside its predecessor's temporary directory, so
        # they are cleaned up newest first.
        live = []
        try:
            self._run(live)
        finally:
            for d in reversed(live):
                d.cleanup()

    def _run(self, live):
        tr = self.trainer()
        live.append(tr)
        p1, p2 = self.profiler("p1", tr), self.profiler("p2", tr)
        q1, q2 = self.planner(tr), self.planner(tr)
        live += [p1, p2, q1, q2]

        # Samples flow from both profilers.
        wait_for("samples at the trainer",
                 lambda: status(tr).compute_samples >= 60)

        # Kill -9 a profiler mid-flow and restart it on its store.
        p1.signal(signal.SIGKILL)
        p1.wait(10)
        p1.stop()
        p1 = self.profiler("p1", tr, data_dir=p1.data_dir)
        live.append(p1)

        # Kill -9 the trainer mid-flow; the profilers keep measuring into
        # their stores meanwhile, and resume when it is back.
        time.sleep(1.0)
        port, tdir = tr.port, tr.data_dir
        tr.signal(signal.SIGKILL)
        tr.wait(10)
        tr.stop()
        time.sleep(1.5)
        tr = self.trainer(data_dir=tdir, port=port)
        live.append(tr)

        # Stop measuring; everything committed must arrive, exactly once.
        time.sleep(1.0)
        for p in (p1, p2):
            set_paused(p, True)
        time.sleep(1.0)  # a measurement under way commits or is dropped
        want = status(p1).compute_samples + status(p2).compute_samples
        self.assertGreater(want, 60)
        got = wait_for("every committed sample at the trainer",
                       lambda: status(tr).compute_samples >= want and
                       status(tr).compute_samples)
        time.sleep(3 * int(SYNC_MS) / 1000.0)
        self.assertEqual(status(tr).compute_samples, want,
                         "the trainer holds each committed sample once")
        self.assertEqual(got, want)

        # A retrain on the trainer activates a model (forced: the gate is
        # test_rpc's); both planners fetch and serve it.
        with grpc.insecure_channel(tr.unix) as ch:
            job = H.call(ch, H.RETRAIN, H.admin_pb2.RetrainRequest(force=True))
            for j in H.stream(ch, H.WATCH_JOB,
                              H.admin_pb2.WatchJobRequest(id=job.id)):
                pass
            self.assertEqual(j.state, H.admin_pb2.JOB_STATE_SUCCEEDED, j.message)
        version = status(tr).active_model_version
        self.assertNotEqual(version, "")
        for q in (q1, q2):
            wait_for("the planner serves the trainer's model",
                     lambda q=q: status(q).active_model_version not in ("", "embedded"))

        req = H.plan_request(H.make_tables(12, seed=11), num_devices=4,
                             budget_ms=20000, seed=3)
        plans = []
        for q in (q1, q2):
            with grpc.insecure_channel(q.unix) as ch:
                plans.append(H.call(ch, H.PLAN, req))
        self.assertFalse(plans[0].search.time_budget_exhausted,
                         "the search ran to its end: the plan is a function "
                         "of the request and the model")
        self.assertEqual(H.placement_key(plans[0]), H.placement_key(plans[1]))
        self.assertEqual(plans[0].plan_cost_ms, plans[1].plan_cost_ms)
        with grpc.insecure_channel(tr.unix) as ch:
            on_trainer = H.call(ch, H.PLAN, req)
        self.assertEqual(plans[0].plan_cost_ms, on_trainer.plan_cost_ms,
                         "the planners score with the trainer's model")
        self.assertNotEqual(plans[0].basis.model_version, "embedded")

        # Kill -9 a planner; restarted, it serves the model again without
        # storing a second copy.
        with grpc.insecure_channel(q1.unix) as ch:
            before = len(H.call(ch, H.LIST_MODELS, H.admin_pb2.ListModelsRequest()).models)
        q1.signal(signal.SIGKILL)
        q1.wait(10)
        q1.stop()
        q1 = self.planner(tr, data_dir=q1.data_dir)
        live.append(q1)
        wait_for("the restarted planner serves the model",
                 lambda: status(q1).active_model_version not in ("", "embedded"))
        time.sleep(3 * int(SYNC_MS) / 1000.0)
        with grpc.insecure_channel(q1.unix) as ch:
            after = H.call(ch, H.LIST_MODELS, H.admin_pb2.ListModelsRequest()).models
            again = H.call(ch, H.PLAN, req)
        self.assertEqual(len(after), before, "no second copy of the model")
        self.assertEqual(H.placement_key(again), H.placement_key(plans[0]))

        # A push repeated (its answer lost) stores nothing twice.
        fleet_pb2 = load_fleet_proto()

        def one(origin_id):
            return fleet_pb2.FleetSample(
                origin_id=origin_id, kind=fleet_pb2.SAMPLE_KIND_COMPUTE,
                measured_ms=1.5, spread_ms=0.01, device="test", source="test",
                tables=[fleet_pb2.ShardTable(rows=1000, dim=16, dtype=0,
                                             pooling_factor=2.0,
                                             bins=[0.5] + [0.0] * 16)])
        profile = fleet_pb2.FleetProfile(name="test/replay/4096", backend="cpu",
                                         device_model="replay", batch_size=4096)
        with grpc.insecure_channel(tr.unix) as ch:
            fn = ch.unary_unary("/shardd.v1.Fleet/PushSamples",
                                request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=fleet_pb2.PushSamplesResponse.FromString)
            push = fleet_pb2.PushSamplesRequest(origin="replayer", profile=profile,
                                                samples=[one(7)])
            first, second = fn(push, timeout=10), fn(push, timeout=10)
            third = fn(fleet_pb2.PushSamplesRequest(
                origin="replayer", profile=profile, samples=[one(7), one(8)]),
                timeout=10)
            other = fn(fleet_pb2.PushSamplesRequest(
                origin="other", profile=profile, samples=[one(7)]), timeout=10)
        self.assertEqual((first.stored, first.duplicates, first.last_id), (1, 0, 7))
        self.assertEqual((second.stored, second.duplicates, second.last_id), (0, 1, 7))
        self.assertEqual((third.stored, third.duplicates, third.last_id), (1, 1, 8))
        self.assertEqual((other.stored, other.last_id), (1, 7),
                         "ids are per origin node")

        # A node from before store schema 5 (no dtypes_timed) timed its
        # fp16 tables in fp32: the trainer stores what was measured.  A
        # node since then keeps its dtype; an unknown dtype is refused.
        def half(origin_id):
            s = one(origin_id)
            s.tables[0].dtype = 1  # the planner's table_dtype: fp16
            return s
        with grpc.insecure_channel(tr.unix) as ch:
            fn = ch.unary_unary("/shardd.v1.Fleet/PushSamples",
                                request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=fleet_pb2.PushSamplesResponse.FromString)
            fn(fleet_pb2.PushSamplesRequest(origin="schema4", profile=profile,
                                            samples=[half(1)]), timeout=10)
            fn(fleet_pb2.PushSamplesRequest(origin="schema5", profile=profile,
                                            samples=[half(1)], dtypes_timed=True),
               timeout=10)
            bad = half(2)
            bad.tables[0].dtype = 9
            with self.assertRaises(grpc.RpcError) as e:
                fn(fleet_pb2.PushSamplesRequest(origin="schema5", profile=profile,
                                                samples=[bad], dtypes_timed=True),
                   timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("dtype 9 unknown", e.exception.details())
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(tr.data_dir, "shardd.db"),
                             uri=True)
        try:
            got = dict(db.execute(
                "SELECT o.origin, s.shard FROM samples s JOIN sample_origins o "
                "ON o.sample_id = s.id "
                "WHERE o.origin IN ('schema4', 'schema5')").fetchall())
        finally:
            db.close()
        # A table record: int64 rows, int32 dim, int32 dtype, ...
        self.assertEqual({k: struct.unpack_from("<i", v, 12)[0]
                          for k, v in got.items()},
                         {"schema4": 0, "schema5": 1})

        # Fleet calls over TCP need the token.
        with grpc.insecure_channel(tr.tcp) as ch:
            fn = ch.unary_unary("/shardd.v1.Fleet/PushSamples",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
            with self.assertRaises(grpc.RpcError) as e:
                fn(b"", timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_fleet.py PATH/TO/shardd", file=sys.stderr)
        sys.exit(2)
    SHARDD = os.path.abspath(sys.argv.pop(1))
    H.load_protos()
    try:
        r = unittest.main(exit=False, verbosity=2).result
    finally:
        H.cleanup_protos()
    sys.exit(0 if r.wasSuccessful() else 1)
