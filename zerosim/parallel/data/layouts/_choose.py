"""Which layout a run shards by, and a saved layout read back: the two layouts behind one interface.

    _flat.py        FlatLayout: the whole flat vector cut in N equal shards (zerosim's default, the seeds')
    _partition.py   ParamLayout: each parameter cut on its own (DeepSpeed ZeRO-3 by elements, FSDP2 by dim 0)

Both answer the same questions — `shard_size`, `padded`, `own(rank)`, a unit's `counts` and `owned_piece`,
`to_wire` / `from_wire` / `staged_for_wire` between the model's order and the shards', `arrange` /
`unarrange`, `owner_chunks`, `draw_index`, `describe` — so no caller asks which one it has. Their shard
arithmetic is `collectives.ShardLayout`'s, in one place.
"""

from __future__ import annotations

import math

from zerosim.parallel.data.layouts._flat import FlatLayout


def layout_for(model, world_size: int, recipe, backend=None, groups=None):
    """The layout `recipe` (a `GradientRecipe`) shards by: per-parameter element chunks (deepspeed-zero3), dim-0
    chunks (fsdp2), or zerosim's flat one. On the meta backend a per-parameter layout permutes nothing (its
    arrays hold no values): only the sizes it gives the buffers and the collectives count.
    `groups` (a `zerosim.cluster.Groups` of shard groups: HSDP, MiCS): cut in one shard per position of a group
    (S = groups.size), asked with world ranks (_group_layout.py); None or the world: N shards."""
    n = world_size if groups is None else groups.size
    partition = recipe.partition
    if partition == "flat":
        layout = FlatLayout.for_model(model, n)
    else:  # DeepSpeed's and FSDP2's per-parameter shards: imported here, not by the engine's import
        from zerosim.parallel.data.layouts._partition import ParamLayout

        layout = ParamLayout.for_model(model, n, dim0=partition == "per-parameter dim 0")
    if groups is None or groups.is_world:
        return layout
    from zerosim.parallel.data.multinode import GroupLayout  # shard groups' alone (HSDP, MiCS): not the engine's import

    return GroupLayout(layout, groups)


def owned_slices(layout, lo: int, hi: int, ranks: tuple) -> tuple:
    """(slice(*layout.owned_range(lo, hi, r)) for each rank r of `ranks`, in their order): [lo, hi) ∩ each rank's
    shard, in shard coordinates, as any layout answers it (these two, and multinode's GroupLayout, asked with world
    ranks). A ZeRO-3 step asked it rank by rank at every gather and reduction of every unit (10k parameters on 64
    ranks: ~600 times a step); the answer depends on the layout, the range and the ranks asked alone, so it is kept,
    by the layout object itself (`_SLICES`): hashing and comparing a frozen layout by its fields (an 80-layer model's
    tuples of sizes) cost the planner more than the slices. `ranks` are the process's own (the engine's `ctx.ranks`'
    indices), never the whole world: a meta cluster of 16,384 ranks steps a few of them, and every rank of the world
    made a planner's sweep ~13x slower."""
    key = (id(layout), lo, hi, ranks)
    kept = _SLICES.get(key)
    if kept is not None and kept[0] is layout:
        return kept[1]
    if len(_SLICES) >= _SLICES_KEPT:
        _SLICES.clear()
    slices = tuple(slice(*layout.owned_range(lo, hi, r)) for r in ranks)
    _SLICES[key] = (layout, slices)  # the layout held: its id names no other object while the entry stands
    return slices


_SLICES: dict = {}  # (id(layout), lo, hi, ranks) -> (layout, slices): `owned_slices`' memo
_SLICES_KEPT = 256  # entries at most; past this the memo starts afresh (a step asks a few per unit)


def from_description(described: dict, world_size: int, windows: tuple, shapes: list):
    """The layout a checkpoint recorded (`describe()`), for a model of these layer `windows` and parameter `shapes`
    (one without a "kind" predates per-parameter layouts: flat)."""
    if described.get("kind", "flat") == "per-parameter":
        from zerosim.parallel.data.layouts._partition import ParamLayout

        rows = tuple(shape[0] if shape else 1 for shape in shapes) if described.get("split") == "dim 0" else None
        return ParamLayout(tuple(math.prod(shape) for shape in shapes), windows, world_size, rows)
    return FlatLayout(described["num_params"], world_size, windows)
