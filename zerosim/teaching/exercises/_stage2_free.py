"""Exercise: the stage-2 gradient free — reduce-scatter a layer's gradients, keep your piece, free the rest.

Graded inside real ZeRO-2 and ZeRO-3 engines: the learner's function takes the place of the engine's
per-layer reduction (parallel/data/_reduce.py, `reduce_unit`, through the engine's `Hooks.reduce_unit`) for two training
steps; after every call no rank may
still hold the layer's gradients, and after every step each rank's params and the fp32 masters must equal
the single-device oracle's, bit for bit.
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.exercises._engine_cases import describe, run_case
from zerosim.teaching.exercises._grading import ENGINE, WITHHELD, Counterexample, Exercise

TASK = """\
ZeRO-2 keeps only a 1/N shard of the gradients. As backward finishes a layer, every rank holds that
layer's fresh gradients; the layer is reduce-scattered at once, each rank adds the piece it owns to its
gradient shard, and the layer's gradients are freed — so at most one layer's are ever live (seed 004,
stage 2, step 1c). Write reduce_layer_grads(held, reduce_scatter, add_to_shard) for one layer."""

STUB = '''\
def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    """One layer, after its backward on every rank (ZeRO-2/3).

    held: one ledger Buffer per rank holding the layer's fresh gradients (held[r].array; held[r].free()).
    reduce_scatter(arrays): one array per rank in, one piece per rank out (rank r's part of the sum).
    add_to_shard(r, piece): add rank r's piece into its gradient shard.
    """
    raise NotImplementedError
'''

# No reference solution ships: this function is one of assignment 2's, whose reference stays with the
# instructor (course/instructor/a2/solution.py, outside the package), so no student-facing command prints it.
SOLUTION = ""

# The planted bugs' sources are withheld with the reference (they are the reference less one line): the
# instructor kit has them (course/instructor/exercises/stage2_free/, `zerosim exercise check --planted`
# finds them there when the kit is installed). Their names stay: they say what the grader catches.
PLANTED = dict.fromkeys(['never frees', 'frees before sending', 'sends after freeing'], "")

CASES = [
    {"stage": 2, "n": 2, "widths": (3, 4, 2)},
    {"stage": 2, "n": 3, "widths": (3, 5, 2)},  # 32 params on 3 ranks: padded to 33, and a layer straddles two shards
    {"stage": 2, "n": 2, "k": 2, "widths": (3, 4, 2)},  # accumulation: the shard adds up over micro-steps
    {"stage": 3, "n": 4, "widths": (4, 6, 3)},
]


def cases():
    for case in CASES:
        yield {**case, "what": describe(case)}


def _in_engine(fn):
    """The engine's per-layer reduction (parallel/data/_reduce.py, reduce_unit: its `Hooks.reduce_unit`) with `fn`
    doing the work."""
    from zerosim.collectives import reduce_scatter as ring_reduce_scatter
    from zerosim.parallel.data import grads_name
    from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face

    def reduce_unit(ctx, layer: int, first: bool):
        cluster, layout, policy, recipe = ctx.cluster, ctx.layout, ctx.policy, ctx.recipe
        held = [rank.ledger.get(grads_name(layer)) for rank in ctx.ranks]
        storage = [h.array for h in held]  # each buffer's memory, to catch a read of it once freed
        handles = []

        def not_freed(arrays, into: str) -> None:
            """A freed buffer's memory read through an array taken before the free: the ledger cannot see it (a
            real allocator may already have given that memory to the next layer's gradients)."""
            for i, a in enumerate(arrays):
                for r, (h, mem) in enumerate(zip(held, storage)):
                    if h.freed and isinstance(a, np.ndarray) and np.shares_memory(a, mem):
                        raise Counterexample(f"{into}[{i}] reads rank {r}'s {h.name!r}, which you had already freed "
                                             "(a use after free: its memory may already hold another buffer); "
                                             "free a layer's gradients only after its pieces are in the shards")

        def reduce_scatter(arrays):
            not_freed(arrays, "reduce_scatter's input")
            with cluster.trace.about(purpose="reduce grads", layers=(layer,)):
                pieces = ring_reduce_scatter(
                    cluster,
                    arrays,
                    op=averaging.reduce_op(policy, cluster.world_size, recipe),
                    wire=policy.reduce_format,
                    counts=layout.counts(layer),
                    tag=f"{ctx.names[layer]} grads",
                )
            handles.append(pieces.handle)
            return pieces

        def add_to_shard(r: int, piece) -> None:
            not_freed([piece], f"add_to_shard({r}, ...)'s piece")
            lo, hi = layout.owned_piece(layer, r)
            averaging.accumulate(ctx.ranks[r].grads.array[lo:hi],
                                 averaging.after_reduce(piece, policy, cluster.world_size, recipe), first)

        fn(held, reduce_scatter, add_to_shard)
        for r, h in enumerate(held):
            if not h.freed:
                raise Counterexample(f"after layer {layer} ({ctx.names[layer]}) was reduce-scattered, rank {r} still "
                                     f"holds {h.name!r} ({h.nbytes} B); free each layer's gradients once its pieces "
                                     "are in "
                                     f"the shards, or every layer's pile up and ZeRO-2 saves nothing")
        if not handles:
            raise Counterexample(f"layer {layer}'s gradients were never reduce-scattered")
        return sum(handles[1:], handles[0])

    return reduce_unit


def check(fn, case) -> None:
    from zerosim.parallel.data import Hooks

    run_case(case, hooks=Hooks(reduce_unit=_in_engine(fn)))


EXERCISE = Exercise("stage2_free", "the stage-2 gradient free: reduce-scatter a layer's gradients, keep your piece, "
                                   "free them",
                    "reduce_layer_grads", TASK, STUB, SOLUTION, PLANTED, cases, check,
                    withheld=WITHHELD, grades=ENGINE)
