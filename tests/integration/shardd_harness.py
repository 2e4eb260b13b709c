"""Helpers for the shardd integration tests (tests/integration/test_rpc.py).

Generates the Python protobuf modules of proto/ into a temporary directory,
starts and stops the real shardd binary on a free TCP port and a private
unix socket, and wraps gRPC calls by method path (so that unknown methods
can be called too).

Only the standard library, python3-grpcio, python3-grpc-tools and
python3-protobuf (Debian packages) are used.
"""
import functools
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Filled by load_protos(): the generated modules.
types_pb2 = planner_pb2 = admin_pb2 = health_pb2 = reflection_pb2 = None

# Server reflection's messages (Debian's grpc-proto).
REFLECTION_PROTO = "/usr/share/grpc-proto/grpc/reflection/v1alpha/reflection.proto"

_PROTO_DIR = None


def load_protos():
    """Compiles proto/ into a temp dir and imports the modules.

    proto/grpc/health/v1/health.proto is copied to healthcheck/health.proto
    first (and reflection.proto to reflection/): compiled in place it would
    make a Python package `grpc` that shadows the real one.  Its proto
    package stays grpc.health.v1, so the wire names are unchanged.
    """
    global types_pb2, planner_pb2, admin_pb2, health_pb2, reflection_pb2, _PROTO_DIR
    if planner_pb2 is not None:
        return
    tmp = tempfile.mkdtemp(prefix="sdi-proto-")
    _PROTO_DIR = tmp
    src = os.path.join(tmp, "src")
    out = os.path.join(tmp, "gen")
    os.makedirs(out)
    shutil.copytree(os.path.join(ROOT, "proto", "shardd"), os.path.join(src, "shardd"))
    os.makedirs(os.path.join(src, "healthcheck"))
    shutil.copy(os.path.join(ROOT, "proto", "grpc", "health", "v1", "health.proto"),
                os.path.join(src, "healthcheck", "health.proto"))
    os.makedirs(os.path.join(src, "reflection"))
    shutil.copy(REFLECTION_PROTO, os.path.join(src, "reflection", "reflection.proto"))
    files = ["shardd/v1/types.proto", "shardd/v1/planner.proto",
             "shardd/v1/admin.proto", "healthcheck/health.proto",
             "reflection/reflection.proto"]
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + src,
                        "--python_out=" + out] + files,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("protoc failed: " + r.stderr)
    sys.path.insert(0, out)
    from shardd.v1 import types_pb2 as t, planner_pb2 as p, admin_pb2 as a
    from healthcheck import health_pb2 as h
    from reflection import reflection_pb2 as r
    types_pb2, planner_pb2, admin_pb2, health_pb2, reflection_pb2 = t, p, a, h, r


def cleanup_protos():
    if _PROTO_DIR is not None:
        shutil.rmtree(_PROTO_DIR, ignore_errors=True)


# ---------------------------------------------------------------------------
# Calls by path

PLAN = "/shardd.v1.Planner/Plan"
ESTIMATE = "/shardd.v1.Planner/Estimate"
HEALTH = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
STATUS = "/shardd.v1.Admin/GetStatus"
LIST_MODELS = "/shardd.v1.Admin/ListModels"
ACTIVATE = "/shardd.v1.Admin/ActivateModel"
RETRAIN = "/shardd.v1.Admin/Retrain"
GET_JOB = "/shardd.v1.Admin/GetJob"
WATCH_JOB = "/shardd.v1.Admin/WatchJob"
SET_PROFILER = "/shardd.v1.Admin/SetProfiler"
REFLECT_V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
REFLECT_V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


def _response_type(path):
    return {
        PLAN: lambda: planner_pb2.PlanResponse,
        ESTIMATE: lambda: planner_pb2.EstimateResponse,
        HEALTH: lambda: health_pb2.HealthCheckResponse,
        HEALTH_WATCH: lambda: health_pb2.HealthCheckResponse,
        STATUS: lambda: admin_pb2.GetStatusResponse,
        LIST_MODELS: lambda: admin_pb2.ListModelsResponse,
        ACTIVATE: lambda: admin_pb2.ActivateModelResponse,
        RETRAIN: lambda: admin_pb2.Job,
        GET_JOB: lambda: admin_pb2.Job,
        WATCH_JOB: lambda: admin_pb2.Job,
        SET_PROFILER: lambda: admin_pb2.SetProfilerResponse,
    }.get(path, lambda: health_pb2.HealthCheckResponse)()


def call(chan, path, req, metadata=None, timeout=60.0):
    fn = chan.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=_response_type(path).FromString)
    return fn(req, metadata=metadata, timeout=timeout)


def stream(chan, path, req, metadata=None, timeout=120.0):
    fn = chan.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                           response_deserializer=_response_type(path).FromString)
    return fn(req, metadata=metadata, timeout=timeout)


def bearer(token):
    return (("authorization", "Bearer " + token),)


# ---------------------------------------------------------------------------
# Requests

GIB = 1 << 30


def make_tables(n, seed, prefix="t"):
    """n plausible synthetic tables (deterministic for a seed)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = types_pb2.Table(name="%s%03d" % (prefix, i),
                            rows=rng.randint(1000, 2000000),
                            dim=rng.choice([16, 32, 64, 64, 128]),
                            pooling_factor=round(rng.uniform(1.0, 40.0), 3))
        w = [rng.random() ** 3 * (0.7 ** k) for k in range(17)]
        total = sum(w)
        frac = rng.uniform(0.5, 0.95)
        t.bins.extend([x / total * frac for x in w])
        out.append(t)
    return out


def topology(num_devices=4, mem=16 * GIB, **kw):
    return types_pb2.Topology(num_devices=num_devices, mem_bytes_per_device=mem, **kw)


def plan_request(tables, num_devices=4, mem=16 * GIB, budget_ms=2000, seed=0,
                 algorithm=""):
    req = planner_pb2.PlanRequest(topology=topology(num_devices, mem))
    req.tables.extend(tables)
    req.options.time_budget_ms = budget_ms
    req.options.seed = seed
    if algorithm:
        req.options.algorithm = algorithm
    return req


def placement_key(resp):
    return [(tp.table, tp.scheme,
             [(s.device, s.col_offset, s.col_width, s.row_offset, s.row_count)
              for s in tp.shards])
            for tp in resp.tables]


def rel_close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def check_plan(tc, req, resp):
    """Asserts the structural contract of a PlanResponse for `req`."""
    nd = req.topology.num_devices
    tc.assertEqual(len(resp.tables), len(req.tables))
    per_dev_shards = [0] * nd
    per_dev_dims = [0] * nd
    for t, tp in zip(req.tables, resp.tables):
        tc.assertEqual(tp.table, t.name, "tables are in request order")
        tc.assertGreater(len(tp.shards), 0, "table %s placed" % t.name)
        rows = t.rows
        dp = tp.scheme == types_pb2.SCHEME_DATA_PARALLEL
        if dp:
            tc.assertEqual(sorted(s.device for s in tp.shards), list(range(nd)),
                           "a replica of %s on every device" % t.name)
        # Column slices in order; within each, row blocks tile every row.
        col, i = 0, 0
        while i < len(tp.shards) and not dp:
            s0 = tp.shards[i]
            tc.assertEqual(s0.col_offset, col, "shards of %s contiguous, sorted" % t.name)
            tc.assertGreater(s0.col_width, 0)
            tc.assertEqual(s0.col_width % 4, 0)
            row = 0
            while i < len(tp.shards) and tp.shards[i].col_offset == s0.col_offset:
                s = tp.shards[i]
                tc.assertEqual(s.col_width, s0.col_width)
                tc.assertEqual(s.row_offset, row, "rows of %s tiled" % t.name)
                tc.assertGreater(s.row_count, 0)
                row += s.row_count
                i += 1
            tc.assertEqual(row, rows, "every row of %s at column %d" % (t.name, col))
            col += s0.col_width
        if not dp:
            tc.assertEqual(col, t.dim, "shards of %s cover its %d columns" % (t.name, t.dim))
        for s in tp.shards:
            tc.assertTrue(0 <= s.device < nd, "device of %s in range" % t.name)
            per_dev_shards[s.device] += 1
            if tp.scheme in (types_pb2.SCHEME_TABLE_WISE, types_pb2.SCHEME_COLUMN_WISE):
                per_dev_dims[s.device] += s.col_width
    tc.assertEqual(len(resp.devices), nd)
    for d, dc in enumerate(resp.devices):
        tc.assertEqual(dc.device, d)
        tc.assertTrue(rel_close(dc.total_ms, dc.compute_ms + dc.fwd_comm_ms + dc.bwd_comm_ms),
                      "device %d total_ms = compute + fwd + bwd" % d)
        for v in (dc.compute_ms, dc.fwd_comm_ms, dc.bwd_comm_ms, dc.total_ms):
            tc.assertTrue(math.isfinite(v) and v >= 0.0)
        tc.assertEqual(dc.num_shards, per_dev_shards[d], "device %d num_shards" % d)
        tc.assertEqual(dc.dim_sum, per_dev_dims[d], "device %d dim_sum" % d)
        tc.assertLessEqual(dc.memory_bytes, dc.memory_capacity_bytes)
        tc.assertEqual(dc.memory_capacity_bytes, capacity(req.topology, d))
    tc.assertGreater(resp.plan_cost_ms, 0.0)
    tc.assertTrue(rel_close(resp.plan_cost_ms, max(dc.total_ms for dc in resp.devices)),
                  "plan_cost_ms %r == max total_ms %r"
                  % (resp.plan_cost_ms, max(dc.total_ms for dc in resp.devices)))
    tc.assertRegex(resp.request_hash, r"^[0-9a-f]+$")
    tc.assertTrue(0 <= resp.explanation.bottleneck_device < nd)
    # A pinned table is one whole shard on its device.
    placed = {tp.table: tp for tp in resp.tables}
    for pin in req.options.constraints.pins:
        shards = [(s.device, s.col_offset, s.col_width) for s in placed[pin.table].shards]
        dim = next(t.dim for t in req.tables if t.name == pin.table)
        tc.assertEqual(shards, [(pin.device, 0, dim)], "pinned table %s" % pin.table)


def capacity(topo, d):
    """Device d's capacity under a Topology (mem_bytes_by_device entry 0:
    mem_bytes_per_device)."""
    if topo.mem_bytes_by_device and topo.mem_bytes_by_device[d]:
        return topo.mem_bytes_by_device[d]
    return topo.mem_bytes_per_device


# ---------------------------------------------------------------------------
# The daemon

@functools.lru_cache(maxsize=None)
def sanitized(binary):
    """Whether binary runs under a sanitizer (ASan or TSan): several times
    slower, and its RSS is not its own."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libasan" in out or "libtsan" in out


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_FLAGS = {}


def _flags(binary):
    """The --help text of a shardd binary (cached)."""
    if binary not in _FLAGS:
        _FLAGS[binary] = subprocess.run([binary, "--help"], capture_output=True,
                                        text=True).stdout
    return _FLAGS[binary]


class Daemon:
    """One shardd process on 127.0.0.1:<free port> and unix:<tmp>/s.sock."""

    def __init__(self, binary, data_dir=None, admin_token=None, args=(),
                 profiler_idle_ms=3600000, unix=True, from_config=()):
        self.binary = binary
        self.tmp = tempfile.mkdtemp(prefix="sdi-")
        self.data_dir = data_dir or os.path.join(self.tmp, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.port = free_port()
        self.tcp = "127.0.0.1:%d" % self.port
        self.sock = os.path.join(self.tmp, "s.sock") if unix else None
        self.unix = "unix:" + self.sock if unix else "unix:" + os.path.join(self.data_dir, "shardd.sock")
        self.admin_token = admin_token
        self.argv = [binary, "--listen", self.tcp]
        if unix:
            self.argv += ["--listen", self.unix]
        # No scheduled retrains or backups; retrains back to back (the
        # rate limit and the backups are test_service's and test_limits').
        # Flags a binary does not know are left out of these defaults, so
        # that a test can be run against an older shardd to see it fail.
        # Keys in from_config come from the test's config file instead (a
        # flag would override the file, and a reload would change nothing).
        self.argv += ["--data-dir", self.data_dir]
        for flag in ("--retrain-every-hours", "--retrain-min-interval-s",
                     "--backup-every-hours"):
            key = flag[2:].replace("-", "_")
            if key not in from_config and flag in _flags(binary):
                self.argv += [flag, "0"]
        # No policy retrain after each activation (test_dreamshard.py's):
        # it would hold the job thread for seconds after every retrain.
        if ("--policy-after-activation" in _flags(binary) and
                "--policy-after-activation" not in args):
            self.argv += ["--policy-after-activation", "off"]
        # No quiet check: tests run daemons and builds side by side on a
        # 2-CPU machine, where every profiler's probe sees the others and
        # would retime each sample for up to half an hour (test_profiler
        # checks it).
        if ("--profiler-quiet-pct" in _flags(binary) and
                "profiler_quiet_pct" not in from_config and
                "--profiler-quiet-pct" not in args):
            self.argv += ["--profiler-quiet-pct", "0"]
        # Background threads at nice 0: beside ctest's other tests a nice-19
        # profiler or retrain gets a sliver of a CPU, and a test waiting
        # for samples or a model ran out of time (test_fleet_py with two
        # busy processes beside it failed 2 runs of 3).
        if ("--background-nice" in _flags(binary) and
                "background_nice" not in from_config and
                "--background-nice" not in args):
            self.argv += ["--background-nice", "0"]
        if profiler_idle_ms is not None:
            self.argv += ["--profiler-idle-ms", str(profiler_idle_ms)]
        if admin_token is not None:
            self.argv += ["--admin-token", admin_token]
        self.argv += list(args)
        self.log_path = os.path.join(self.tmp, "shardd.log")
        self.proc = None
        self._chans = []

    def start(self, timeout=30.0):
        try:
            return self._start(timeout)
        except BaseException:
            self.cleanup()  # setUpClass failed: no tearDownClass will
            raise

    def _start(self, timeout):
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("shardd exited %d at start:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                with grpc.insecure_channel(self.unix) as ch:
                    r = call(ch, HEALTH, health_pb2.HealthCheckRequest(), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    self.startup_s = time.monotonic() - t0
                    return self
            except grpc.RpcError as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError("shardd not SERVING after %.0f s (%r):\n%s" % (timeout, last, self.log()))

    def channel(self, which="unix"):
        ch = grpc.insecure_channel(self.unix if which == "unix" else self.tcp)
        self._chans.append(ch)
        return ch

    def log(self, whole=False):
        """The daemon's stdout and stderr so far (the last 4000 characters
        unless whole)."""
        try:
            with open(self.log_path, "r", errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        return text if whole else text[-4000:]

    def wait_log(self, text, count=1, timeout=30.0):
        """Waits until the log holds `text` at least `count` times; the
        whole log then, or None after timeout seconds."""
        t0 = time.monotonic()
        while True:
            log = self.log(whole=True)
            if log.count(text) >= count:
                return log
            if time.monotonic() - t0 > timeout or (self.proc is not None
                                                   and self.proc.poll() is not None):
                return None
            time.sleep(0.05)

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=20.0):
        """SIGTERM and wait; returns the exit status (None if it had to be killed)."""
        for ch in self._chans:
            ch.close()
        self._chans = []
        rc = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        elif self.proc is not None:
            rc = self.proc.returncode
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        return rc

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
