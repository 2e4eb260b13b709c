"""A thin client of a running shardd: its Plan and Features methods.

    import shardd
    with shardd.Client("unix:/var/lib/shardd/shardd.sock") as c:
        plan = c.plan(tables, shardd.Topology(num_devices=8, mem_gb=16),
                      constraints=constraints)
    print(plan.cost_ms, plan.notes)
    sharding_plan = shardd.to_torchrec(plan)

Methods raise ShardError (with the gRPC status code name and the daemon's
one-line message, naming the table and the field) when the daemon refuses
a request or cannot be reached, and ValueError for tables that cannot be
sent at all (both forms mixed, a constraint on no table).
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import grpc

from . import _convert
from .v1 import planner_pb2, types_pb2

DEFAULT_TARGET = "127.0.0.1:7411"
GIB = 1 << 30

_PLAN = "/shardd.v1.Planner/Plan"
_FEATURES = "/shardd.v1.Planner/Features"

_OPTIMIZERS = {
    "": types_pb2.OPTIMIZER_UNSPECIFIED,
    "sgd": types_pb2.OPTIMIZER_SGD,
    "adagrad": types_pb2.OPTIMIZER_ADAGRAD,
    "rowwise_adagrad": types_pb2.OPTIMIZER_ROWWISE_ADAGRAD,
    "adam": types_pb2.OPTIMIZER_ADAM,
}

_NOTE_KINDS = {
    types_pb2.NOTE_KIND_ASSUMED: "assumed",
    types_pb2.NOTE_KIND_APPLIED: "applied",
    types_pb2.NOTE_KIND_NOT_APPLIED: "not_applied",
    types_pb2.NOTE_KIND_UNKNOWN: "unknown",
}


class ShardError(Exception):
    """The daemon refused the call, or could not be reached.  `code` is the
    gRPC status code's name ("INVALID_ARGUMENT", "UNAVAILABLE", ...)."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


_KERNELS = {0: "fused", 1: "fused", 2: "fused_uvm", 3: "fused_uvm_caching"}
_COMM_PRECISIONS = {"": 0, "fp32": 1, "fp16": 2, "bf16": 3}  # DType values


@dataclass(frozen=True)
class Topology:
    """The devices of a job.  Capacity in GiB (mem_gb) or bytes (mem_bytes),
    or one per device (mem_gb_by_device); 0 leaves a figure to the daemon's
    default (devices_per_host: one host; batch_size: its model's batch)."""
    num_devices: int
    mem_gb: float = 0.0
    mem_bytes: int = 0
    mem_gb_by_device: Optional[List[float]] = None
    devices_per_host: int = 0
    batch_size: int = 0
    # The host tier: host DRAM per host for tables in UVM (0: none, every
    # table in device memory) and the host link in GiB/s (0: 32); the
    # exchanges' precision: "fp32" (""), "fp16" or "bf16".
    host_dram_gb: float = 0.0
    host_link_gbps: float = 0.0
    comm_precision: str = ""

    def to_proto(self):
        m = types_pb2.Topology(num_devices=self.num_devices,
                               devices_per_host=self.devices_per_host,
                               batch_size=self.batch_size,
                               mem_bytes_per_device=self.mem_bytes or int(self.mem_gb * GIB))
        if self.mem_gb_by_device:
            m.mem_bytes_by_device.extend(int(g * GIB) for g in self.mem_gb_by_device)
        m.host_dram_bytes = int(self.host_dram_gb * GIB)
        m.host_link_bw_bytes_per_ms = self.host_link_gbps * GIB / 1000.0
        if self.comm_precision not in _COMM_PRECISIONS:
            raise ValueError("comm_precision %r is not one of %s"
                             % (self.comm_precision, sorted(_COMM_PRECISIONS)))
        m.comm_dtype = _COMM_PRECISIONS[self.comm_precision]
        return m


@dataclass(frozen=True)
class Shard:
    """Columns [col_offset, col_offset + col_width) of a table on a device."""
    device: int
    col_offset: int
    col_width: int
    # Where its weights live (TorchRec's kernel) and a UVM cache's load
    # factor.
    compute_kernel: str = "fused"
    cache_load_factor: float = 0.0


@dataclass(frozen=True)
class DeviceCost:
    device: int
    memory_bytes: int
    memory_capacity_bytes: int
    compute_ms: float
    fwd_comm_ms: float
    bwd_comm_ms: float
    total_ms: float
    ddr_bytes: int = 0  # in its host's DRAM (UVM tiers)
    tier_ms: float = 0.0  # of compute_ms: the modelled host-link time


@dataclass(frozen=True)
class Note:
    """What the daemon assumed ("assumed"), applied ("applied"), read but
    could not apply yet ("not_applied"), or did not know ("unknown")."""
    kind: str
    table: str
    field: str
    message: str


@dataclass
class Plan:
    """A plan: per table (in request order) its shards, per device its
    costs, the step cost, and the notes about the input."""
    tables: Dict[str, List[Shard]]
    devices: List[DeviceCost]
    cost_ms: float
    algorithm: str
    cost_model: str
    comm_model: str
    notes: List[Note]
    request_hash: str
    rows: Dict[str, int] = field(repr=False)
    dims: Dict[str, int] = field(repr=False)
    devices_per_host: int = 0
    response: object = field(default=None, repr=False)  # the PlanResponse


def _notes(msgs):
    return [Note(_NOTE_KINDS.get(n.kind, "unknown"), n.table, n.field, n.message)
            for n in msgs]


class Client:
    """A channel to one shardd.  target: "unix:PATH" or "HOST:PORT"."""

    def __init__(self, target=DEFAULT_TARGET, timeout=60.0, channel=None):
        self._own = channel is None
        self._chan = channel or grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", 64 << 20)])
        self.timeout = timeout

    def close(self):
        if self._own:
            self._chan.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, path, req, resp_type, timeout):
        fn = self._chan.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=resp_type.FromString)
        try:
            return fn(req, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise ShardError(e.code().name, e.details() or "") from None

    def plan(self, tables, topology, *, constraints=None, algorithm="",
             whole_tables_only=False, time_budget_ms=0, seed=0, optimizer="",
             pins=None, profile="", quantile=None, timeout=None):
        """Plans tables on topology (a Topology).  tables: TorchRec's
        EmbeddingBagConfig objects or dicts, with constraints {name:
        ParameterConstraints}, or shardd's table dicts.  pins: {table:
        device}.  quantile: plan for that quantile in [0, 1] of the cost
        model's ensemble (a robust plan); None: the model's own prediction.
        Returns a Plan."""
        native, trec = _convert.tables_out(tables, constraints)
        req = planner_pb2.PlanRequest(topology=topology.to_proto())
        req.tables.extend(native)
        req.torchrec_tables.extend(trec)
        o = req.options
        o.algorithm = algorithm
        o.whole_tables_only = whole_tables_only
        o.time_budget_ms = int(time_budget_ms)
        o.seed = seed
        o.profile = profile
        if optimizer not in _OPTIMIZERS:
            raise ValueError("optimizer %r is not one of %s" % (optimizer, sorted(_OPTIMIZERS)))
        o.optimizer = _OPTIMIZERS[optimizer]
        for table, device in (pins or {}).items():
            o.constraints.pins.add(table=table, device=device)
        if quantile is not None:
            o.quantile.value = float(quantile)
        resp = self._call(_PLAN, req, planner_pb2.PlanResponse, timeout)
        shapes = [_convert.table_shape(t) for t in tables]
        return Plan(
            tables={tp.table: [Shard(s.device, s.col_offset, s.col_width,
                                     _KERNELS.get(s.compute_kernel, "fused"),
                                     s.cache_load_factor) for s in tp.shards]
                    for tp in resp.tables},
            devices=[DeviceCost(d.device, d.memory_bytes, d.memory_capacity_bytes,
                                d.compute_ms, d.fwd_comm_ms, d.bwd_comm_ms, d.total_ms,
                                d.ddr_bytes, d.tier_ms)
                     for d in resp.devices],
            cost_ms=resp.plan_cost_ms, algorithm=resp.algorithm,
            cost_model=resp.basis.cost_model, comm_model=resp.basis.comm_model,
            notes=_notes(resp.notes), request_hash=resp.request_hash,
            rows={n: r for n, r, _ in shapes}, dims={n: d for n, _, d in shapes},
            devices_per_host=topology.devices_per_host, response=resp)

    def features(self, traces=(), tables=(), *, constraints=None, batch_size=0,
                 timeout=None):
        """Tables with their access histogram and pooling factor, from
        traces (dicts {name, dim, rows?, offsets | lengths, indices}: one
        batch of real lookups each) and from tables given by statistics
        (either form; bins derived at batch_size, 0: the daemon's default).
        Returns (tables as shardd's dicts, notes)."""
        req = planner_pb2.FeaturesRequest(batch_size=batch_size)
        req.traces.extend(_convert.trace_out(t) for t in traces)
        if tables:
            native, trec = _convert.tables_out(tables, constraints)
            req.tables.extend(native)
            req.torchrec_tables.extend(trec)
        resp = self._call(_FEATURES, req, planner_pb2.FeaturesResponse, timeout)
        out = []
        for t in resp.tables:
            d = {"name": t.name, "rows": t.rows, "dim": t.dim,
                 "pooling_factor": t.pooling_factor, "bins": list(t.bins)}
            if t.dtype == types_pb2.DTYPE_FP16:
                d["dtype"] = "fp16"
            out.append(d)
        return out, _notes(resp.notes)


def plan(tables, topology, target=DEFAULT_TARGET, **kw):
    """Client(target).plan(tables, topology, **kw), the channel closed after."""
    with Client(target) as c:
        return c.plan(tables, topology, **kw)


to_torchrec = _convert.to_torchrec
