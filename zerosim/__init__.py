"""zerosim: see how ZeRO trains a model across many GPUs, with no GPU.

The public surface, bottom layer first:

    precision    FORMATS, get_format, cast, ulp, lost_update
    cluster      Cluster, Rank, MemoryLedger, Trace
    collectives  reduce_scatter, all_gather, all_reduce, broadcast (also methods on Cluster)
"""

from zerosim.cluster import Buffer, Cluster, LedgerError, MemoryLedger, Rank, Trace
from zerosim.collectives import ShardLayout, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.precision import FORMATS, Format, cast, get_format, lost_update, ulp

__version__ = "0.1.0"

__all__ = [
    "Buffer", "Cluster", "FORMATS", "Format", "LedgerError", "MemoryLedger", "Rank", "ShardLayout", "Trace",
    "all_gather", "all_reduce", "broadcast", "cast", "get_format", "lost_update", "reduce_scatter", "ulp",
]
