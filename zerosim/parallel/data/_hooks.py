"""The named extension points of a ZeRO step: pieces a learner (or an experiment) may replace.

    engine = ZeroEngine(model, cluster, 2, Adam(), hooks=Hooks(refresh=my_refresh))

Each hook is a function with the inputs the engine's own takes — a step's `Context`, arrays, numbers,
never the engine — and the engine calls it where its own would run. Nothing is patched: another engine,
and the oracle, keep the package's pieces. The exercises (zerosim/teaching/exercises) grade learners this way.

    reduce_unit  (ctx, layer, first) -> Handle     stages 2/3: reduce-scatter one unit's gradients into the
                                                   shards and free them (reduce.reduce_unit); not called by the
                                                   `deepspeed-zero12` recipe, whose buckets are parameters
                                                   (_buckets.py: ParamBucket)
    refresh      (ctx, allgather_bucket_size) -> Handle   stages 1/2: all-gather the updated 16-bit shards
                                                   (gather.refresh)
    finish       (reduced, policy, N, K, scale, recipe=) -> fp32 gradient   average over N·K and unscale
                                                   (averaging.finish)
"""

from __future__ import annotations

from collections.abc import Callable

from zerosim._dataclass import dataclass
from zerosim.parallel.data._gather import refresh
from zerosim.parallel.data._reduce import reduce_unit
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face


@dataclass(frozen=True)
class Hooks:
    """The replaceable pieces of a step (see the module docstring); the defaults are the package's own."""

    reduce_unit: Callable = reduce_unit
    refresh: Callable = refresh
    finish: Callable = averaging.finish
