"""ZeRO++ qgZ in the engine: stage 3's gradient reduction with every admitted gradient sent in int4.

    engine = ZeroEngine(model, Cluster(8, gpus_per_node=4), 3, Adam(), "fp16-mixed", recipe="deepspeed-zero3",
                        wire=Wire(zero_quantized_gradients=True, loco=LocoParams(err_beta=0.8, reset_T=1024)))

What DeepSpeed does (at edaa722): runtime/zero/stage3.py `__reduce_and_partition_ipg_grads` sorts a bucket's
parameters by ds_id and (contiguous_gradients with reduce_scatter=True, the defaults) calls `__avg_scatter_grads`,
which casts the gradients to the communication dtype and, with more than one node and `zero_quantized_gradients`,
hands them UNDIVIDED to runtime/comm/coalesced_collectives.py `all_to_all_quant_reduce` (or
`all_to_all_loco_quant_reduce` with `zeropp_loco_param`). That function walks the parameters one by one: a 1-D
tensor, or one whose numel is not a multiple of 2W, goes through `reduce_scatter_coalesced([tensor])` alone (which
pre-divides by W: `tensor_partition_flat_buffer.div_(world_sz)`); the others through qgZ, whose result is Σ/n
(collectives/quantized/_qgz.py's NOTE: n the nodes, not W). Nothing divides afterwards (`gradient_predivide_factor` 1.0
and the averaging world equal to the partition world, the defaults); each partition is cast to the gradient
accumulation dtype (`.to(self.gradient_accumulation_dtype)`: the recipe's `after`) and kept by `partition_grads`.

Here: the same walk over the bucket's parameters in model order (ds_id order), each admitted one through
`all_to_all_quant_reduce` (its M/W partition is exactly the per-parameter layout's chunk, c_p = M/W), the others
through the engine's own reduce-scatter of that parameter alone, with the deepspeed-zero3 recipe's pre-division.
LoCo's error buffers (`p.intra_ef_buf`, `p.inter_ef_buf`: int8 of the whole parameter's M and M/d elements, with
G and G/d fp32 scales, on every rank) are ledger rows of kind "comm" that outlive the step, like the model states.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Handle
from zerosim.collectives import reduce_scatter
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face

LOCO = "LoCo error"  # the ledger rows' name prefix: kept across steps (engine._free_transients)


def check_qgz_engine(wire, plan, recipe, policy, cluster, specs) -> None:
    """Raise before anything is built if qgZ cannot run here (DeepSpeed's conditions, named)."""
    if not wire.zero_quantized_gradients:
        return
    if not plan.gathers_params or plan.uses_groups:
        raise ValueError(f"qgZ replaces ZeRO-3's gradient reduce-scatter (stage3.py __avg_scatter_grads); zerosim runs "
                         f"it with the flat stage 3, not {plan.label} (hpZ with qgZ, which DeepSpeed's stage3.py does "
                         "not exclude, is not modelled here)")
    if recipe.reduction != "deepspeed-zero3":
        raise ValueError(f"qgZ is DeepSpeed's: it runs with recipe='deepspeed-zero3', not {recipe.reduction!r}")
    d, w = cluster.gpus_per_node, cluster.world_size
    if d is None or w // d < 2:
        g = max(w // 2, 1)
        raise ValueError(f"qgZ runs across nodes (DeepSpeed takes it only with num_nodes > 1): place the {w} ranks "
                         f"on two or more nodes (Cluster({w}, gpus_per_node={g}), --gpus-per-node {g})")
    for what, fmt in (("computes", policy.compute_format), ("reduces", policy.reduce_format)):
        if fmt.name != "fp16":
            raise ValueError(f"qgZ's kernels read fp16 gradients through a __half*; this precision {what} in "
                             f"{fmt.name}")
    if wire.loco is not None and not cluster.backend.holds_values:
        raise ValueError("LoCo's error feedback needs values: run it on a cluster that holds them, not the meta one")
    from zerosim.collectives.quantized import check_qgz, qgz_applies  # here: an engine without qgZ never loads them

    for s in specs:
        if qgz_applies(s.shape, w, w // d):
            check_qgz(s.shape, w, w // d)


def reduce_params_qgz(ctx, layers: list, held: list, first: bool) -> Handle:
    """Stage 3 with qgZ: the gradients of `layers` (`held[r][i]`: rank r's buffer of layers[i], (b-a,) fp16),
    parameter by parameter in model order, each into its chunk of every rank's gradient shard."""
    from zerosim.collectives.quantized import all_to_all_quant_reduce, qgz_applies

    state, layout, policy, recipe, ranks, cluster = ctx.wire, ctx.layout, ctx.policy, ctx.recipe, ctx.ranks, ctx.cluster
    w, d = cluster.world_size, cluster.gpus_per_node
    handle = Handle()
    with cluster.trace.about(purpose="reduce grads", layers=tuple(reversed(layers))):
        for i, layer in enumerate(layers):
            a = layout.windows[layer][0]
            for s in (s for s in state.specs if s.layer == layer):
                lo, hi = s.offset, s.offset + s.size
                grads = [h[i].array[lo - a : hi - a] for h in held]  # (M,) fp16 per rank, undivided
                places = [rank.grads.array[slice(*layout.owned_range(lo, hi, rank.index))] for rank in ranks]
                tag = f"{ctx.names[layer]} {s.name} grads"
                if qgz_applies(s.shape, w, w // d):
                    key = f"{s.layer}.{s.name}"
                    pieces = all_to_all_quant_reduce(cluster, grads, s.shape, d, loco=state.loco, key=key, tag=tag)
                    if state.loco is not None:
                        ledger_rows(ranks, state.loco, key)
                else:  # reduce_scatter_coalesced([tensor]): this parameter alone, pre-divided by W on the wire
                    pieces = _plain(ctx, lo, hi, grads, tag)
                handle += pieces.handle
                for place, piece in zip(places, pieces):
                    averaging.accumulate(place, averaging.after_reduce(piece, policy, w, recipe), first)
    return handle


def _plain(ctx, lo: int, hi: int, grads: list, tag: str):
    """One parameter's reduce-scatter as the deepspeed-zero3 recipe does it, from its interleaved copy."""
    layout, ranks = ctx.layout, ctx.ranks
    staged = [layout.staged_for_wire(lo, hi, x, lambda n, dtype, r=rank: r.ledger.alloc("grads (interleaved)", n,
                                                                                        dtype, "grads"))
              for rank, x in zip(ranks, grads)]
    op = averaging.reduce_op(ctx.policy, ctx.cluster.world_size, ctx.recipe)
    pieces = reduce_scatter(ctx.cluster, [x for x, _ in staged], op=op, wire=ctx.policy.reduce_format,
                            counts=layout.range_counts(lo, hi), tag=tag, group=ctx.mesh.shard)
    for _, buf in staged:
        if buf is not None:
            buf.free()
    return pieces


def ledger_rows(ranks, loco, key: str) -> None:
    """LoCo's buffers of parameter `key` on every rank, as DeepSpeed keeps them on the parameter: the intra error
    int8 (M,) with (G,) fp32 scales, the inter error int8 (M/d,) with (G/d,) scales; the last step's are let go."""
    for rank in ranks:
        intra, inter = loco.buffers[key][rank.index]
        for what, q in (("intra", intra), ("inter", inter)):
            for part, array in (("int8", q.payload), ("scales", q.scales)):
                name = f"{LOCO} {key} ({what}, {part})"
                if name in rank.ledger.live:
                    rank.ledger.free(name)
                rank.ledger.adopt(name, np.asarray(array), "comm")
