"""How a sharded buffer is cut: one flat buffer in N equal shards (a parameter may straddle two), or per-parameter
chunks as DeepSpeed ZeRO-3 and FSDP2 cut them. The shard arithmetic itself is `zerosim.collectives.ShardLayout`'s.

    _flat.py        FlatLayout: P parameters in layer order, padded to N*s
    _partition.py   ParamLayout: per-parameter partitions (DeepSpeed's flat-per-tensor, FSDP2's dim-0 rows)
    _choose.py      layout_for: which layout a recipe shards by; a saved layout read back
"""

from zerosim.parallel.data.layouts._choose import from_description, layout_for
from zerosim.parallel.data.layouts._flat import FlatLayout
from zerosim.parallel.data.layouts._partition import ParamLayout

__all__ = ["FlatLayout", "ParamLayout", "from_description", "layout_for"]
