"""shardd: the Python client of the embedding-table sharding planner.

    import shardd
    plan = shardd.plan(tables, shardd.Topology(num_devices=8, mem_gb=16),
                       target="unix:/var/lib/shardd/shardd.sock",
                       constraints=constraints)
    sharding_plan = shardd.to_torchrec(plan)

client/python/README.md has the rest.  Needs grpcio and protobuf (>= 3.20)
only; the message modules under shardd.v1 are generated from the daemon's
protos (gen_stubs.py).
"""
from .client import (DEFAULT_TARGET, Client, DeviceCost, Note, Plan, Shard,
                     ShardError, Topology, plan, to_torchrec)

__all__ = ["Client", "DEFAULT_TARGET", "DeviceCost", "Note", "Plan", "Shard",
           "ShardError", "Topology", "plan", "to_torchrec"]
__version__ = "0.1.0"
