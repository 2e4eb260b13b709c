#!/usr/bin/python3
"""Crash safety: shardd killed with SIGKILL while it profiles, retrains and
plans, again and again, on one data directory.

usage: /usr/bin/python3 tests/integration/test_crash.py PATH/TO/shardd

Each round starts the daemon on the same data directory, checks what the
last kill left, starts one kind of work, and kills the daemon (SIGKILL, no
chance to clean up) at a random moment of it.  After every kill:
  - SQLite's integrity_check and foreign_key_check pass on the store;
  - no committed sample is lost: the restarted daemon counts at least as
    many samples as it reported before the kill (the profiler commits each
    sample as it is measured);
  - the active model loads: a Plan is answered with basis.model_version
    equal to GetStatus.active_model_version, which is the version active
    before the kill or the one a retrain that finished activated;
  - no job is left QUEUED or RUNNING: a retrain cut off is CANCELLED.
Seeded (SHARDD_CRASH_SEED, default 1) so that a failure can be replayed.

Exits 77 (ctest: skipped) when /usr/bin/python3 lacks grpc or grpc_tools.
"""
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

try:
    import grpc
    import grpc_tools  # noqa: F401
except ImportError as e:  # pragma: no cover
    print("SKIP: python3 lacks %s (install python3-grpcio python3-grpc-tools)"
          % e.name, file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardd_harness as h  # noqa: E402

SHARDD = None
ROUNDS = ("profile", "retrain", "plan", "profile", "retrain", "plan")


def integrity(db):
    """integrity_check and foreign_key_check of the store, after a kill."""
    con = sqlite3.connect(db, timeout=10)
    try:
        ok = con.execute("PRAGMA integrity_check").fetchall()
        fk = con.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        con.close()
    return ok, fk


class CrashTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        h.load_protos()
        cls.rng = random.Random(int(os.environ.get("SHARDD_CRASH_SEED", "1")))
        cls.tmp = __import__("tempfile").mkdtemp(prefix="sdcrash-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        cls.db = os.path.join(cls.data, "shardd.db")
        # Samples to retrain on, made quickly: small shards, few steps.  The
        # daemon's profiler fills the same profile (cpu, batch 4096).
        ctl = os.path.join(os.path.dirname(SHARDD), "shardctl")
        r = subprocess.run([ctl, "profile", "--db", cls.db, "--samples", "24",
                            "--max-gb", "0.05", "--warmup", "1", "--repeats",
                            "3", "--no-flush", "--quiet-tolerance", "0"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError("shardctl profile: " + r.stderr)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)
        h.cleanup_protos()

    def start(self, profiler_idle_ms):
        d = h.Daemon(SHARDD, data_dir=self.data,
                     profiler_idle_ms=profiler_idle_ms,
                     args=("--retrain-every-samples", "0",
                           "--profiler-max-samples", "100000",
                           "--plan-cache-entries", "0"))
        return d.start()

    def check_after_kill(self, d, committed, active_before, job_id):
        """What the restarted daemon must show; returns its state."""
        ch = d.channel("unix")
        st = h.call(ch, h.STATUS, h.admin_pb2.GetStatusRequest())
        self.assertGreaterEqual(st.compute_samples, committed,
                                "no committed sample lost")
        models = h.call(ch, h.LIST_MODELS, h.admin_pb2.ListModelsRequest()).models
        active = [m.version for m in models if m.active and m.profile == st.profile]
        # "": this machine's profile has no model yet (the embedded one was
        # made on another cpu model and answers by default).
        self.assertEqual(active, [st.active_model_version]
                         if st.active_model_version else [],
                         "the store's active model is the one served")
        if active_before is None:
            pass  # the first start: nothing to compare with
        elif job_id is None:
            self.assertEqual(st.active_model_version, active_before,
                             "only a retrain changes the active model")
        else:
            job = h.call(ch, "/shardd.v1.Admin/GetJob",
                         h.admin_pb2.GetJobRequest(id=job_id))
            self.assertIn(job.state, (h.admin_pb2.JOB_STATE_SUCCEEDED,
                                      h.admin_pb2.JOB_STATE_CANCELLED),
                          "a job cut off by the kill is not left running")
            if st.active_model_version != active_before:
                self.assertEqual(job.state, h.admin_pb2.JOB_STATE_SUCCEEDED)
                self.assertEqual(st.active_model_version,
                                 job.result_model_version)
        req = h.plan_request(h.make_tables(12, 5), num_devices=2,
                             budget_ms=500)
        resp = h.call(ch, h.PLAN, req)
        h.check_plan(self, req, resp)
        self.assertEqual(resp.basis.model_version,
                         st.active_model_version or "embedded",
                         "the active model loads and answers")
        return st

    def test_sigkill_rounds(self):
        committed, active, job_id = 0, None, None
        for n, kind in enumerate(ROUNDS):
            d = self.start(0 if kind == "profile" else 3600000)
            try:
                st = self.check_after_kill(d, committed, active, job_id)
                active, job_id = st.active_model_version, None
                committed = st.compute_samples
                ch = d.channel("unix")
                if kind == "profile":
                    # Wait for the profiler to commit, then kill mid-sample.
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < 60:
                        s = h.call(ch, h.STATUS, h.admin_pb2.GetStatusRequest())
                        if s.compute_samples > committed:
                            break
                        time.sleep(0.2)
                    self.assertGreater(s.compute_samples, committed,
                                       "the profiler measured")
                    committed = s.compute_samples
                    time.sleep(self.rng.uniform(0, 1.0))
                elif kind == "retrain":
                    job = h.call(ch, h.RETRAIN,
                                 h.admin_pb2.RetrainRequest(force=True))
                    job_id = job.id
                    time.sleep(self.rng.uniform(0, 0.3))
                else:
                    errors = []

                    def planner(seed):
                        try:
                            req = h.plan_request(h.make_tables(60, seed),
                                                 num_devices=4, budget_ms=3000)
                            h.call(d.channel("unix"), h.PLAN, req, timeout=30)
                        except grpc.RpcError as e:
                            errors.append(e.code())

                    threads = [threading.Thread(target=planner, args=(s,))
                               for s in range(4)]
                    for t in threads:
                        t.start()
                    time.sleep(self.rng.uniform(0.05, 0.5))
                d.proc.send_signal(signal.SIGKILL)
                d.proc.wait(timeout=10)
                if kind == "plan":
                    for t in threads:
                        t.join(timeout=30)
                ok, fk = integrity(self.db)
                self.assertEqual(ok, [("ok",)], "integrity_check after kill")
                self.assertEqual(fk, [], "foreign_key_check after kill")
                print("round %d (%s): killed; %d samples committed, model %s, "
                      "store ok" % (n, kind, committed, active))
            finally:
                d.cleanup()  # its socket and log; the data directory stays
        # The last kill is checked by one more start.
        d = self.start(3600000)
        try:
            self.check_after_kill(d, committed, active, job_id)
        finally:
            d.cleanup()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    SHARDD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
