"""Every parallel degree of one job in one validated record, and the named mesh it lays the ranks out on.

After torchtitan's `ParallelDims` (torchtitan/distributed/parallel_dims.py at commit b5bcd76 of 2026-08-21: its
`_validate` infers `dp_shard = -1` from the others and asserts the product; `build_mesh` unflattens the world mesh
into the storage mesh ("pp", "dp_replicate", "dp_shard", "cp", "tp") — TP innermost, so a TP group is consecutive
ranks on one node, the data dims outermost, across nodes — and flattens "batch" (dp_replicate × dp_shard), "fsdp"
(dp_shard × cp) and the loss mesh (batch × cp)). Expert parallelism (`ep`) is not modelled.
Letters: N = world size, R = dp_replicate, S = dp_shard, T = tp, C = cp, P = pp.

    N = P · R · S · C · T            checked; exactly one degree may be -1 ("what the world leaves": dp_shard's
                                     default, torchtitan's too)
    rank r at coordinates            np.unravel_index(r, (P, R, S, C, T)): row-major, as torch's init_device_mesh
    groups(dim)                      the ranks that differ only along dim: torch's mesh[dim].get_group()
    groups("batch") / ("fsdp") /     flattened sub-meshes, as torchtitan flattens them: the ranks that differ only
    ("loss")                         along those dims ("dp" is "batch": every rank that sees its own data)

Data parallelism reads its groups from here (parallel/data/multinode/_groups.py): FULL_SHARD shards over dp_shard =
N; HSDP and MiCS over dp_shard = S with dp_replicate = N / S replicas. Tensor parallelism reads its TP groups the
same way. Context parallelism (parallel/context/) reads its CP groups here — the C consecutive ranks of one dp
coordinate, each holding 1/C of every sequence — and the flat ZeRO stages then shard and reduce over "fsdp" (dp_shard
× cp), as torchtitan's fully_shard does. Pipeline parallelism (parallel/pipeline/) reads `pp`: pp outermost, so
pipeline rank p holds the block of N / P consecutive ranks [p·N/P, (p+1)·N/P) — whole nodes, the stages talking
across them, as torchtitan lays them out — and `groups("pp")` pairs each rank with its neighbours in the other stages
(its data, context and TP coordinates the same). `tp = 1`, `cp = 1`, `pp = 1` (every degree 1) leave the
data-parallel groups exactly as they were.
"""

from __future__ import annotations

import functools
import math
from dataclasses import fields

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Groups, Mesh

ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # torchtitan's mesh order, outermost first
FLATTENED = {  # torchtitan's flattened sub-meshes (build_mesh): name -> the dims they join
    "batch": ("dp_replicate", "dp_shard"),  # the data-loading mesh's batch: every rank that sees its own data
    "dp": ("dp_replicate", "dp_shard"),  # MeshAxisName.DP, the same ranks
    "fsdp": ("dp_shard", "cp"),  # what fully_shard shards parameters over (cp joins it when context parallelism is on)
    "loss": ("dp_replicate", "dp_shard", "cp"),  # what the loss is averaged over (batch × cp)
}


@dataclass(frozen=True)
class ParallelDims:
    """The degrees of one job; their product is the world size (see the module docstring)."""

    world_size: int  # N: every GPU of the job
    dp_shard: int = -1  # S: ranks a sharded buffer is cut over (ZeRO's N, HSDP's and MiCS's shard group); -1: inferred
    dp_replicate: int = 1  # R: replicas of each shard (HSDP, MiCS); 1 for flat ZeRO
    tp: int = 1  # T: tensor parallelism (Megatron's column/row split), innermost
    cp: int = 1  # C: context parallelism, each rank 1/C of every sequence (parallel/context/), inside TP's dim
    pp: int = 1  # P: pipeline parallelism (parallel/pipeline/), outermost

    def __post_init__(self):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, v in values.items():
            inferred = v == -1 and name != "world_size"
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (v < 1 and not inferred):
                raise ValueError(f"ParallelDims: {name} must be a positive integer (or -1: what the world leaves), "
                                 f"got {v!r}")
        unknown = [d for d in ORDER if values[d] == -1]
        if len(unknown) > 1:
            raise ValueError(f"ParallelDims: only one degree may be -1 (inferred), got {', '.join(unknown)}")
        known = math.prod(values[d] for d in ORDER if values[d] != -1)
        if unknown:
            if self.world_size % known:
                raise ValueError(f"ParallelDims: the other degrees multiply to {known}, which does not divide the "
                                 f"world size {self.world_size}, so {unknown[0]} cannot be inferred")
            object.__setattr__(self, unknown[0], self.world_size // known)
        product = math.prod(getattr(self, d) for d in ORDER)
        if product != self.world_size:
            shown = " × ".join(f"{d} {getattr(self, d)}" for d in ORDER)
            raise ValueError(f"ParallelDims: {shown} = {product} GPUs, but the world has {self.world_size}; the "
                             "degrees must multiply to the world size")
        for d in ORDER:
            object.__setattr__(self, d, int(getattr(self, d)))
        object.__setattr__(self, "world_size", int(self.world_size))

    # -- what the degrees say ------------------------------------------------------------------------
    @property
    def dp(self) -> int:
        """R · S: how many ranks see different data (the batch is split over them)."""
        return self.dp_replicate * self.dp_shard

    @property
    def degrees(self) -> dict:
        """{dim: degree} in mesh order."""
        return {d: getattr(self, d) for d in ORDER}

    @property
    def enabled(self) -> tuple:
        """The dims of degree > 1, in mesh order."""
        return tuple(d for d in ORDER if getattr(self, d) > 1)

    @property
    def mesh(self) -> Mesh:
        """Every dim in mesh order, degree-1 dims included (so `groups` answers for any dim)."""
        return Mesh(tuple(getattr(self, d) for d in ORDER), ORDER)

    def groups(self, dim: str) -> Groups:
        """The groups along `dim` (a dim of ORDER, a flattened sub-mesh of FLATTENED, or "world")."""
        return _groups(self, dim)

    def __repr__(self) -> str:
        shown = ", ".join(f"{d}={getattr(self, d)}" for d in ORDER if getattr(self, d) > 1) or "one rank"
        return f"ParallelDims(world_size={self.world_size}: {shown})"


@functools.lru_cache(maxsize=256)
def _groups(dims: ParallelDims, dim: str) -> Groups:
    if dim == "world":
        return Groups.world(dims.world_size)
    if dim in ORDER:
        return dims.mesh.groups(dim)
    if dim not in FLATTENED:
        raise ValueError(f"no dim {dim!r}: the dims are {ORDER}, the flattened ones {tuple(FLATTENED)} and 'world'")
    joined = FLATTENED[dim]
    axes = [ORDER.index(d) for d in joined]  # consecutive in ORDER: the joined dims become one
    shape = tuple(getattr(dims, d) for d in ORDER)
    grid = np.arange(dims.world_size).reshape(shape)
    rest = [a for a in range(len(ORDER)) if a not in axes]
    rows = np.transpose(grid, rest + axes).reshape(-1, math.prod(shape[a] for a in axes))
    return Groups(dim, tuple(tuple(row) for row in rows.tolist()))
