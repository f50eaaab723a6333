"""A data-parallel strategy on a job's ranks, decided and checked in one place: `DataMesh`.

Letters: N ranks, G GPUs per node, S a strategy's group (HSDP's and MiCS's shard group; hpZ's and FSDP2's
reshard_after_forward=S secondary group), R = N / S replicas.

    DataMesh.of(stage, N, G, S)   the plan (a ZeRO stage or a strategy by name), its degrees as one `ParallelDims`
                                  (dp_shard = S, dp_replicate = R for HSDP and MiCS; dp_shard = N for the others),
                                  hpZ's secondary group S', and G: every check of these choices is here
    DataMesh.of(stage, N, G, S, tp=T)   beside tensor parallelism: ParallelDims(N, ..., tp=T), the groups cut from
                                  the data dims N / T (torchtitan's "dp"), the default group G / T
    DataMesh.of(stage, N, G, tp=T, cp=C)   beside context parallelism: the flat stages over dp × cp (torchtitan's
                                  "fsdp" mesh: the CP ranks hold different tokens, so their gradients are summed too)
    mesh.groups(world)            the `MeshGroups` its collectives run over (_groups.py)

The engine (`ZeroEngine(..., shard_group=S)` on `Cluster(N, gpus_per_node=G)`), the meta backend's accounting
(`analysis.costs.measure_stage`, `analysis.planner.meta_step`), the planner and the CLI build the same record
from the same choices, so a choice is refused once, by one rule, in the words of whoever made it: a `Spelling`
names each choice as its caller spells it (`world_size`, `shard_group=3` in Python; `--ranks`, `--shard-group 3`
on the command line). Another parallelism's degree (tensor parallelism's tp) is one more degree of the record.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Groups
from zerosim.parallel._dims import ParallelDims
from zerosim.parallel.data._plan import Plan, get_plan


@dataclass(frozen=True)
class Spelling:
    """How a caller names the choices a `DataMesh` checks, so its errors say what the caller typed."""

    ranks: str = "world_size"  # N
    nodes: str = "gpus_per_node"  # G
    shard_group: str = "shard_group"  # S of a strategy that shards over groups (HSDP, MiCS)
    secondary_group: str = "shard_group"  # S' of a strategy that keeps a secondary piece (hpZ, reshard_to_group)
    strategy: str = "{}"  # how a strategy is named: "{}" -> "hsdp"; "--strategy {}" -> "--strategy hsdp"
    give_nodes: str = "Cluster(N, gpus_per_node=G)"  # how the ranks are put on nodes of G
    flags: bool = False  # values as "--flag 3" (True) or "name=3" (False)

    def value(self, name: str, v) -> str:
        return f"{name} {v}" if self.flags else f"{name}={v!r}"

    def group(self, plan: Plan) -> str:
        """The name of `plan`'s group size."""
        return self.shard_group if plan.sharded_over != "world" else self.secondary_group


API = Spelling()  # ZeroEngine's and the library's own arguments


def check_nodes(world_size: int, gpus_per_node, spelling: Spelling = API) -> int | None:
    """G for a job of `world_size` ranks: None when not given; the ranks themselves when they fit one node (a node
    partly filled: every ring inside it); else `gpus_per_node`, which must fill whole nodes."""
    if gpus_per_node is None:
        return None
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, (int, np.integer)) or gpus_per_node < 1:
        raise ValueError(f"{spelling.nodes} must be at least 1, got {gpus_per_node!r}")
    if world_size <= gpus_per_node:
        return int(world_size)
    if world_size % gpus_per_node:
        fit = world_size - world_size % gpus_per_node
        raise ValueError(f"{spelling.value(spelling.ranks, world_size)} does not fill nodes of "
                         f"{spelling.value(spelling.nodes, gpus_per_node)}: give a multiple of {gpus_per_node} (e.g. "
                         f"{fit} or {fit + gpus_per_node})")
    return int(gpus_per_node)


@dataclass(frozen=True)
class DataMesh:
    """A data-parallel plan on N ranks: its degrees, its secondary group and the nodes (see the module docstring).
    Build it with `DataMesh.of`, which checks every choice."""

    plan: Plan  # a ZeRO stage's, or a strategy's (parallel/data/_plan.py)
    dims: ParallelDims  # dp_shard = S, dp_replicate = R (HSDP, MiCS); dp_shard = N otherwise
    gpus_per_node: int | None = None  # G (None: one flat node)
    secondary: int | None = None  # S': the secondary group of hpZ and FSDP2's reshard_after_forward=S'

    @classmethod
    def of(cls, stage, world_size: int, gpus_per_node: int | None = None, group: int | None = None,
           spelling: Spelling = API, tp: int = 1, cp: int = 1, pp: int = 1) -> "DataMesh":
        """The mesh of `stage` (0-3, a strategy's name, or a Plan) on `world_size` ranks placed `gpus_per_node` to
        a node, with the strategy's group S = `group` (default G), beside tensor parallelism of degree `tp` (the
        data-parallel ranks are then the N / T of each TP coordinate, and a node holds G / T of them: the default
        group is still a node's), context parallelism of degree `cp` (the flat stages then shard and reduce over
        the N / T ranks of dp × cp, torchtitan's "fsdp" mesh: parallel/_dims.py) and pipeline parallelism of degree
        `pp` (each stage's N / (P·T): a pipeline stage's engine, parallel/pipeline); a ValueError naming the choice
        otherwise."""
        plan = stage if isinstance(stage, Plan) else get_plan(stage)
        g = check_nodes(world_size, gpus_per_node, spelling)
        if cp != 1:
            return cls._beside_cp(plan, world_size, g, group, tp, cp, spelling, pp)
        dp = _data_parallel(world_size, tp, pp)
        per_node = g if tp == 1 else (None if g is None or g % tp else g // tp)  # data-parallel ranks on a node
        s = _group_size(plan, dp, per_node, group, spelling)
        if s is None or plan.sharded_over == "world":  # flat stages; hpZ and FSDP2's resharding shard over all N
            return cls(plan, ParallelDims(world_size, tp=tp, pp=pp), g, s)
        dims = ParallelDims(world_size, dp_shard=s, dp_replicate=dp // s, tp=tp, pp=pp)  # S-way shards, R replicas
        if plan.hierarchical_gather and (per_node is None or s <= per_node or s % per_node):
            where = (f"of {s} must span whole nodes of GPUs (gpus_per_node={g})" if tp == 1 else
                     f"of {s} ranks, {tp} GPUs apart (tp={tp}), must span whole nodes of gpus_per_node={g}")
            raise ValueError(f"{plan.label} gathers across nodes, then within each: its shard group {where}; "
                             "DeepSpeed asserts the same (mics_utils.py: 'sharding spans on single node, no need for "
                             "hierarchy allgather')")
        return cls(plan, dims, g, None)

    @classmethod
    def _beside_cp(cls, plan: Plan, world_size: int, g: int | None, group, tp: int, cp: int,
                   spelling: Spelling = API, pp: int = 1) -> "DataMesh":
        """`of` with context parallelism: ParallelDims(N, tp=T, cp=C, pp=P) (checked there: C must be a positive
        integer and T·C·P divide N), the flat stages over its "fsdp" groups (beside a pipeline, a stage's: pp is
        outermost, so dp_shard × cp lies inside a stage's block, as torchtitan's "fsdp" mesh lies inside a "pp"
        coordinate). The strategies' groups (HSDP, MiCS, hpZ) beside CP are not modelled yet: refused in the caller's
        words."""
        if plan.uses_groups or group is not None:
            what = spelling.strategy.format(plan.name) if plan.name else spelling.value(spelling.shard_group, group)
            degree = spelling.value("--cp" if spelling.flags else "cp", cp)
            raise ValueError(f"{what} beside context parallelism ({degree}) "
                             "is not modelled: torchtitan shards over dp_shard × cp and replicates over dp_replicate "
                             "(HSDP with CP), MiCS and hpZ have no CP; zerosim runs CP beside the flat stages 0-3 "
                             "(FSDP's FULL_SHARD among them)")
        _data_parallel(world_size, tp, pp)
        if isinstance(cp, bool) or not isinstance(cp, (int, np.integer)) or cp < 1 or world_size % (tp * cp * pp):
            beside = f"tp = {tp}" + ("" if pp == 1 else f" and pp = {pp}")
            product = "cp · tp" + ("" if pp == 1 else " · pp")
            raise ValueError(f"context parallelism of degree {cp!r} beside {beside} does not divide the {world_size} "
                             f"ranks: {product} must divide the world size (the data-parallel degree is the quotient, "
                             "as torchtitan's degrees multiply to it)")
        return cls(plan, ParallelDims(world_size, tp=tp, cp=cp, pp=pp), g, None)

    @property
    def group(self) -> int | None:
        """S: the shard group (HSDP, MiCS) or the secondary group (hpZ, reshard_to_group); None when it has none."""
        return self.dims.dp_shard if self.plan.sharded_over != "world" else self.secondary

    @property
    def shards(self) -> int:
        """How many shards a sharded buffer is cut in: S (HSDP, MiCS) or N (N / T beside tensor parallelism)."""
        return self.dims.dp_shard

    @property
    def replicas(self) -> int:
        """R: how many ranks hold each shard."""
        return self.dims.dp_replicate

    @property
    def data_parallel(self) -> int:
        """N / T: the ranks a sharded buffer's replicas and shards spread over (N without tensor parallelism)."""
        return self.dims.dp

    def groups(self, world: Groups | None = None):
        """The `MeshGroups` its collectives run over (`world`: the cluster's one ring, Groups.world(N) by default;
        beside tensor parallelism, each TP coordinate's data-parallel ranks)."""
        from zerosim.parallel.data.multinode._groups import groups_of

        return groups_of(self, world if world is not None else Groups.world(self.dims.world_size))


def _data_parallel(world_size: int, tp, pp=1) -> int:
    """N / (T·P): the data-parallel ranks beside tensor parallelism of degree `tp` and pipeline parallelism of degree
    `pp`, which must divide the world (ParallelDims checks their product; this says which degree to fix first)."""
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1 or world_size % tp:
        raise ValueError(f"tensor parallelism of degree {tp!r} does not divide the {world_size} ranks: tp must divide "
                         "the world size (the data-parallel degree is the quotient, as torchtitan's degrees multiply "
                         "to it)")
    return ParallelDims(world_size, tp=int(tp), pp=pp).dp


def _group_size(plan: Plan, world_size: int, gpus_per_node: int | None, size, spelling: Spelling) -> int | None:
    """S: `size`, or G when the plan needs a group and none was given; None for a plan that has none."""
    name = spelling.group(plan)
    if not plan.uses_groups:
        if size is not None:
            raise ValueError(f"{spelling.value(name, size)} has no meaning for {plan.label}: it shards over every rank "
                             "and keeps no secondary piece")
        return None
    if size is None:
        if gpus_per_node is None:
            who = spelling.strategy.format(plan.name) if plan.name else plan.label
            raise ValueError(f"{who} needs a group: give {spelling.give_nodes} (the group defaults to a node) or "
                             f"{name}")
        return gpus_per_node
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"{name} must be a positive integer, got {size!r}")
    if world_size % size:
        raise ValueError(f"{spelling.value(name, size)} does not divide the {world_size} ranks into equal groups")
    return int(size)
