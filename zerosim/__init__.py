"""zerosim: see how ZeRO trains a model across many GPUs, with no GPU.

The public surface, bottom layer first:

    precision    FORMATS, get_format, cast, ulp, lost_update, MixedPrecision
    cluster      Cluster, Rank, MemoryLedger, Trace, Mesh and Groups (ranks on nodes, the groups collectives run over)
    collectives  reduce_scatter, all_gather, all_reduce, broadcast: functions over a Cluster; results carry .handle
    optim        Adam, AdamW, SGD, Lion, Adan, Muon
    models       TinyNet (seed 004), MLP
    zero         ZeroEngine (stages 0-3), GradientRecipe, Hooks
    reference    Reference (the single-device oracle), replay
    checkpoint   zerosim.checkpoint.save(engine, DIR), zerosim.checkpoint.load(DIR, cluster, model)
    train        zerosim.train.train(TrainConfig(...)): what `zerosim train` runs

docs/architecture.md draws the layers and walks one ZeRO-3 step file by file.
"""

from zerosim.cluster import Buffer, Cluster, Groups, LedgerError, MemoryLedger, Mesh, Rank, Trace
from zerosim.collectives import ShardLayout, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.models import MLP, TinyNet
from zerosim.optim import SGD, Adam, AdamW, Adan, Lion, Muon, get_optimizer
from zerosim.precision import FORMATS, Format, MixedPrecision, cast, get_format, get_precision, lost_update, ulp
from zerosim.reference import Reference
from zerosim.zero import GradientRecipe, Hooks, ZeroEngine

__version__ = "0.1.0"

__all__ = [
    "Adam", "AdamW", "Adan", "Buffer", "Cluster", "FORMATS", "Format", "GradientRecipe", "Groups", "Hooks",
    "LedgerError", "Lion", "MLP", "MemoryLedger", "Mesh", "MixedPrecision", "Muon", "Rank", "Reference", "SGD",
    "ShardLayout", "TinyNet", "Trace", "ZeroEngine",
    "all_gather", "all_reduce", "broadcast", "cast", "get_format", "get_optimizer", "get_precision", "lost_update",
    "reduce_scatter", "ulp",
]
