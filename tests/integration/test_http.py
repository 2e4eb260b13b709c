#!/usr/bin/python3
"""The HTTP listener (http_listen; docs/daemon.md, "Metrics and the status
page") against the real shardd:

 - /metrics passes `promtool check metrics` and counts what happened:
   Plans by status code, their latency histogram, cache hits, jobs, samples
   per profile, the serving model;
 - /api/plans and /api/plans/ID carry the plan the client got, and the
   picture's bars add up to its per-device costs (the wait split off the
   forward comm), the critical device the plan's;
 - /healthz and /readyz: SERVING, then NOT_SERVING (503) while a SIGTERM
   drains a search still running;
 - errors: 404, 400, 405, and a port in use is one line and exit 1.

usage: /usr/bin/python3 tests/integration/test_http.py PATH/TO/shardd
Exits 77 (ctest: skipped) when python3 lacks grpc, or promtool (Debian
package prometheus, scripts/install-deps.sh) is not installed.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

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
PROMTOOL = shutil.which("promtool")


def get(port, path, method="GET"):
    """(status, content type, body text) of one request."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} of an exposition text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "bad sample line: %r" % line
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"',
                                      m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(s, name, **labels):
    return s.get((name, frozenset(labels.items())))


class Http(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = H.free_port()
        cls.d = H.Daemon(SHARDD, args=["--http-listen", "127.0.0.1:%d" % cls.port,
                                       "--profiler", "off"]).start()
        cls.chan = cls.d.channel()

    @classmethod
    def tearDownClass(cls):
        cls.d.cleanup()

    def test_metrics_count_and_lint(self):
        tables = H.make_tables(12, seed=3)
        req = H.plan_request(tables, num_devices=4, budget_ms=300)
        for _ in range(2):  # the second is a cache hit
            H.call(self.chan, H.PLAN, req)
        bad = H.plan_request(tables, num_devices=0)
        with self.assertRaises(grpc.RpcError) as e:
            H.call(self.chan, H.PLAN, bad)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        H.call(self.chan, H.STATUS, H.admin_pb2.GetStatusRequest())

        st, ctype, text = get(self.port, "/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        s = samples(text)
        plan = dict(grpc_service="shardd.v1.Planner", grpc_method="Plan")
        self.assertEqual(value(s, "shardd_grpc_server_handled_total",
                               grpc_code="OK", **plan), 2)
        self.assertEqual(value(s, "shardd_grpc_server_handled_total",
                               grpc_code="INVALID_ARGUMENT", **plan), 1)
        self.assertEqual(value(s, "shardd_grpc_server_handled_total",
                               grpc_service="shardd.v1.Admin",
                               grpc_method="GetStatus", grpc_code="OK"), 1)
        # Three Plans in the small lane: every one in the +Inf bucket, the
        # buckets cumulative, the sum positive.
        self.assertEqual(value(s, "shardd_grpc_server_handling_seconds_count",
                               size_class="small", **plan), 3)
        buckets = sorted(
            (float(dict(k[1])["le"]), v) for k, v in s.items()
            if k[0] == "shardd_grpc_server_handling_seconds_bucket"
            and dict(k[1]).get("grpc_method") == "Plan"
            and dict(k[1]).get("size_class") == "small")
        self.assertEqual(buckets[-1], (float("inf"), 3))
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))
        self.assertGreater(value(s, "shardd_grpc_server_handling_seconds_sum",
                                 size_class="small", **plan), 0)
        self.assertEqual(value(s, "shardd_plan_cache_hits_total"), 1)
        self.assertEqual(value(s, "shardd_plan_cache_misses_total"), 1)
        profile, version = self._serving()
        self.assertEqual(value(s, "shardd_model_info", profile=profile,
                               version=version), 1)
        self.assertEqual(value(s, "shardd_profiler_state", state="disabled"), 1)
        self.assertEqual(value(s, "shardd_jobs", state="running"), 0)
        self.assertGreater(value(s, "shardd_process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(value(s, "shardd_store_size_bytes"), 0)
        self.assertEqual(value(s, "shardd_serving"), 1)
        self.assertTrue(any(k[0] == "shardd_store_samples" for k in s))

        if PROMTOOL is None:
            print("SKIP part: promtool not installed (apt-get install "
                  "prometheus)", file=sys.stderr)
            raise unittest.SkipTest("promtool")
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, "promtool: " + r.stdout + r.stderr)
        self.assertEqual(r.stdout + r.stderr, "", "promtool lint findings")

    def _serving(self):
        st = H.call(self.chan, H.STATUS, H.admin_pb2.GetStatusRequest())
        return st.serving_profile, st.serving_model_version

    def test_plans_and_their_picture(self):
        req = H.plan_request(H.make_tables(16, seed=5), num_devices=3,
                             budget_ms=300, seed=7)
        resp = H.call(self.chan, H.PLAN, req)
        st, ctype, body = get(self.port, "/api/plans?limit=1")
        self.assertEqual(st, 200)
        self.assertEqual(ctype, "application/json")
        rec = json.loads(body)["plans"][0]
        self.assertEqual(rec["request_hash"], resp.request_hash)
        self.assertEqual(rec["devices"], 3)
        self.assertEqual(rec["tables"], 16)
        self.assertTrue(H.rel_close(rec["plan_cost_ms"], resp.plan_cost_ms, 1e-6))

        st, _, body = get(self.port, "/api/plans/%d" % rec["id"])
        self.assertEqual(st, 200)
        p = json.loads(body)
        self.assertEqual(p["critical_device"], resp.explanation.bottleneck_device)
        self.assertEqual(len(p["bars"]), 3)
        ready = [dc.compute_ms + dc.bwd_comm_ms for dc in resp.devices]
        for b, dc in zip(p["bars"], resp.devices):
            tol = 1e-6
            self.assertTrue(H.rel_close(b["compute_ms"], dc.compute_ms, tol))
            self.assertTrue(H.rel_close(b["bwd_comm_ms"], dc.bwd_comm_ms, tol))
            self.assertTrue(H.rel_close(b["wait_ms"] + b["fwd_comm_ms"],
                                        dc.fwd_comm_ms, tol))
            self.assertTrue(H.rel_close(b["wait_ms"],
                                        max(ready) - ready[b["device"]], 1e-5)
                            or abs(b["wait_ms"] - (max(ready) - ready[b["device"]])) < 1e-9)
            self.assertEqual(b["memory_bytes"], dc.memory_bytes)
        crit = p["bars"][p["critical_device"]]
        self.assertEqual(crit["wait_ms"], 0.0, "the critical device waits for nobody")

    def test_errors(self):
        self.assertEqual(get(self.port, "/api/plans/999999")[0], 404)
        self.assertEqual(get(self.port, "/api/plans/x")[0], 404)
        self.assertEqual(get(self.port, "/api/plans?limit=0")[0], 400)
        self.assertEqual(get(self.port, "/nope")[0], 404)
        self.assertEqual(get(self.port, "/metrics", method="POST")[0], 405)
        st, ctype, body = get(self.port, "/")
        self.assertEqual((st, ctype), (200, "text/html; charset=utf-8"))
        self.assertIn("/app.js", body)
        self.assertEqual(get(self.port, "/app.js")[0], 200)

    def test_port_in_use(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        d = H.Daemon(SHARDD, args=["--http-listen", "127.0.0.1:%d" % port])
        try:
            d._log = open(d.log_path, "wb")
            r = subprocess.run(d.argv, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("http_listen 127.0.0.1:%d: cannot bind" % port, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        finally:
            s.close()
            d.cleanup()


class Draining(unittest.TestCase):
    def test_readyz_follows_health(self):
        port = H.free_port()
        d = H.Daemon(SHARDD, args=["--http-listen", "127.0.0.1:%d" % port,
                                   "--profiler", "off", "--grace-s", "30"]).start()
        try:
            self.assertEqual(get(port, "/healthz")[:3:2], (200, "ok\n"))
            self.assertEqual(get(port, "/readyz")[:3:2], (200, "SERVING\n"))
            # A search that runs for seconds keeps the daemon draining.
            req = H.plan_request(H.make_tables(300, seed=9), num_devices=8,
                                 budget_ms=6000)
            ch = d.channel()
            done = []
            t = threading.Thread(target=lambda: done.append(
                H.call(ch, H.PLAN, req, timeout=60)))
            t.start()
            time.sleep(1.0)
            d.signal()
            seen = None
            t0 = time.monotonic()
            while time.monotonic() - t0 < 4:
                try:
                    seen = get(port, "/readyz")
                except OSError:
                    break
                if seen[0] == 503:
                    break
                time.sleep(0.05)
            self.assertEqual(seen[0::2], (503, "NOT_SERVING\n"))
            self.assertEqual(get(port, "/healthz")[0], 200, "alive while draining")
            t.join(60)
            self.assertEqual(len(done), 1, "the search in flight got its plan")
            self.assertEqual(d.wait(30), 0)
        finally:
            d.cleanup()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_http.py PATH/TO/shardd", file=sys.stderr)
        sys.exit(2)
    SHARDD = os.path.abspath(sys.argv.pop(1))
    H.load_protos()
    try:
        r = unittest.main(exit=False, verbosity=2).result
    finally:
        H.cleanup_protos()
    if not r.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if r.skipped else 0)
