"""Tables as a TorchRec user has them -> shardd.v1 messages, and plans ->
TorchRec's ShardingPlan.

Tables come in either of two forms, all of a request in one:

* TorchRec's: EmbeddingBagConfig objects, or dicts with its fields
  (name, num_embeddings, embedding_dim, feature_names, data_type, pooling),
  with ParameterConstraints (objects or dicts) by table name;
* shardd's: dicts with name, rows, dim, pooling_factor and optionally bins
  (17 values; without them the daemon derives them) or zipf_exponent, and
  dtype ("fp32", "fp16").

Objects are read by attribute, so TorchRec itself need not be installed.
Enums are read as TorchRec's names (ShardingType.TABLE_WISE -> "table_wise",
DataType.FP16 -> "FP16").  The daemon converts and checks every field; what
it cannot apply yet comes back as notes.
"""
from .v1 import types_pb2

_TORCHREC_KEYS = ("num_embeddings", "embedding_dim")


def _get(obj, key, default=None):
    """obj[key] of a dict, obj.key of an object; None counts as absent."""
    v = obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)
    return default if v is None else v


def _name(v):
    """An enum's name as TorchRec spells its values ("table_wise", "FP16",
    "LRU"), a string as it is."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    value = getattr(v, "value", None)
    if isinstance(value, str):
        return value
    name = getattr(v, "name", None)
    return name if isinstance(name, str) else str(v)


def is_torchrec(table):
    """Whether a table is in TorchRec's form."""
    if isinstance(table, dict):
        return any(k in table for k in _TORCHREC_KEYS)
    return hasattr(table, "num_embeddings")


def _native(t):
    m = types_pb2.Table(name=t["name"], rows=int(t["rows"]), dim=int(t["dim"]),
                        pooling_factor=float(t["pooling_factor"]))
    if t.get("bins") is not None:
        m.bins.extend(float(b) for b in t["bins"])
    if t.get("zipf_exponent") is not None:
        m.zipf_exponent = float(t["zipf_exponent"])
    dtype = (t.get("dtype") or "fp32").lower()
    if dtype not in ("fp32", "fp16"):
        raise ValueError('table %r: dtype %r is not "fp32" or "fp16"' % (t["name"], dtype))
    m.dtype = types_pb2.DTYPE_FP16 if dtype == "fp16" else types_pb2.DTYPE_FP32
    return m


def _cache_params(cp):
    m = types_pb2.TorchRecCacheParams(
        algorithm=_name(_get(cp, "algorithm")),
        load_factor=float(_get(cp, "load_factor", 0.0)),
        reserved_memory=int(_get(cp, "reserved_memory", 0)),
        precision=_name(_get(cp, "precision")),
        prefetch_pipeline=bool(_get(cp, "prefetch_pipeline", False)))
    return m


def _constraints(c):
    """ParameterConstraints (an object or a dict) as TorchRecConstraints."""
    m = types_pb2.TorchRecConstraints()
    m.sharding_types.extend(_name(s) for s in _get(c, "sharding_types", ()))
    m.compute_kernels.extend(_name(k) for k in _get(c, "compute_kernels", ()))
    m.min_partition = int(_get(c, "min_partition", 0))
    m.pooling_factors.extend(float(x) for x in _get(c, "pooling_factors", ()))
    m.num_poolings.extend(float(x) for x in _get(c, "num_poolings", ()))
    m.batch_sizes.extend(int(x) for x in _get(c, "batch_sizes", ()))
    m.is_weighted = bool(_get(c, "is_weighted", False))
    cp = _get(c, "cache_params")
    if cp is not None:
        m.cache_params.CopyFrom(_cache_params(cp))
    m.enforce_hbm = bool(_get(c, "enforce_hbm", False))
    m.stochastic_rounding = bool(_get(c, "stochastic_rounding", False))
    m.bounds_check_mode = _name(_get(c, "bounds_check_mode"))
    m.output_dtype = _name(_get(c, "output_dtype"))
    m.device_group = _name(_get(c, "device_group"))
    m.has_key_value_params = _get(c, "key_value_params") is not None
    m.use_virtual_table = bool(_get(c, "use_virtual_table", False))
    m.feature_names.extend(str(f) for f in _get(c, "feature_names", ()))
    return m


def _torchrec(t, constraints):
    name = _get(t, "name")
    m = types_pb2.TorchRecTable(
        name=name,
        num_embeddings=int(_get(t, "num_embeddings", 0)),
        embedding_dim=int(_get(t, "embedding_dim", 0)),
        data_type=_name(_get(t, "data_type")),
        pooling=_name(_get(t, "pooling")),
        num_embeddings_post_pruning=int(_get(t, "num_embeddings_post_pruning", 0)),
        total_num_buckets=int(_get(t, "total_num_buckets", 0)),
        use_virtual_table=bool(_get(t, "use_virtual_table", False)))
    m.feature_names.extend(str(f) for f in _get(t, "feature_names", ()))
    if _get(t, "bins") is not None:
        m.bins.extend(float(b) for b in _get(t, "bins"))
    if _get(t, "zipf_exponent") is not None:
        m.zipf_exponent = float(_get(t, "zipf_exponent"))
    c = (constraints or {}).get(name)
    if c is not None:
        m.constraints.CopyFrom(_constraints(c))
    return m


def tables_out(tables, constraints=None):
    """(native Table list, TorchRecTable list): one of them empty."""
    tables = list(tables)
    if not tables:
        raise ValueError("tables: at least one is needed")
    forms = {is_torchrec(t) for t in tables}
    if len(forms) > 1:
        raise ValueError("tables: all in TorchRec's form or all in shardd's, not both")
    names = {_get(t, "name") for t in tables}
    for key in (constraints or {}):
        if key not in names:
            raise ValueError("constraints[%r]: no table has that name" % key)
    if forms == {True}:
        return [], [_torchrec(t, constraints) for t in tables]
    if constraints:
        raise ValueError("constraints: ParameterConstraints go with tables in "
                         "TorchRec's form (num_embeddings, embedding_dim)")
    return [_native(t) for t in tables], []


def table_shape(t):
    """(name, rows, dim) of a table in either form."""
    if is_torchrec(t):
        return _get(t, "name"), int(_get(t, "num_embeddings")), int(_get(t, "embedding_dim"))
    return t["name"], int(t["rows"]), int(t["dim"])


def trace_out(tr):
    """A trace dict {name, dim, rows?, offsets | lengths, indices} (lists,
    or anything with tolist(): NumPy arrays, torch tensors) as TableTrace."""
    def ints(v):
        v = v.tolist() if hasattr(v, "tolist") else v
        return [int(x) for x in v]

    m = types_pb2.TableTrace(name=tr["name"], rows=int(tr.get("rows") or 0),
                             dim=int(tr["dim"]))
    if tr.get("offsets") is not None:
        m.offsets.extend(ints(tr["offsets"]))
    if tr.get("lengths") is not None:
        m.lengths.extend(ints(tr["lengths"]))
    m.indices.extend(ints(tr["indices"]))
    return m


def to_torchrec(plan, module="embedding_bags"):
    """TorchRec's serialized ShardingPlan of a Plan: {"plan": {module:
    {table: {"sharding_type", "compute_kernel", "ranks", "shards":
    [{"shard_offsets", "shard_sizes", "placement"}]}}}}, as `shardctl plan
    --torchrec` writes it.  A table in one shard is table_wise, in several
    column_wise; every kernel is "fused" (device memory)."""
    per_host = plan.devices_per_host or len(plan.devices)
    mod = {}
    for name, shards in plan.tables.items():
        rows = plan.rows[name]
        mod[name] = {
            "sharding_type": "table_wise" if len(shards) == 1 else "column_wise",
            "compute_kernel": "fused",
            "ranks": [s.device for s in shards],
            "shards": [{"shard_offsets": [0, s.col_offset],
                        "shard_sizes": [rows, s.col_width],
                        "placement": "rank:%d/cuda:%d" % (s.device, s.device % per_host)}
                       for s in shards],
        }
    return {"plan": {module: mod}}
