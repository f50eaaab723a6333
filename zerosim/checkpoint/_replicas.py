"""A mesh run's checkpoint: each shard written once, by replica 0 of its shard, after checking the replicas agree.

Letters: N ranks, S the shard group (HSDP's and MiCS's), R = N / S replicas, s the shard.

With HSDP or MiCS the R ranks of a replicate group (stride S: rank p, p + S, ...) hold the same shard p of the
16-bit params, the fp32 master and the optimizer state. Writing all N ranks' files would store every shard R times;
instead the first rank of each replicate group (rank p, of the first shard group) writes `rank{p:05d}.safetensors`
and the others write nothing: S files, one copy per shard, named by the shard they hold — the files of a flat
stage-3 run on S ranks with the same layout, which is how `load` reads them back (manifest "world_size" is S).

torch DCP deduplicates the same items: `DefaultSavePlanner._create_global_plan` (torch/distributed/checkpoint/
default_planner.py) calls `dedup_save_plans` (_dedup_save_plans.py), which gives each item that several ranks'
save plans share (the same `MetadataIndex`: name and offset) to one plan only — by default the plan with the
least storage planned so far (balancing the bytes), with `dedup_save_to_lowest_rank=True` the lowest rank.
zerosim writes from replica 0 of each shard, the lowest rank: DCP's `dedup_save_to_lowest_rank=True` choice. DCP
does not compare the replicas' values (it trusts them); zerosim checks first: every tensor of every rank is hashed
(XXH3-64, the checksum the files carry) and a replica whose hash differs from replica 0's is named — rank, tensor
and shard — before anything is written. (A hash: equal bits up to a 2^-64 collision; it lets MPI processes
compare without sending their arrays.)

hpZ's secondary piece and FSDP2's `reshard_after_forward=S` piece are transient (freed by the step's end): they are
never saved, and those strategies, sharded over all N ranks, save N files as ZeRO-3 does.
"""

from __future__ import annotations

from zerosim.checkpoint._files import checksum


def writers(engine) -> frozenset:
    """The world ranks that write a file: every rank, or (replicas) the first rank of each replicate group."""
    replicate = engine.groups.replicate
    if replicate is None:
        return frozenset(range(engine.cluster.world_size))
    return frozenset(group[0] for group in replicate.members)


def file_index(engine, rank: int) -> int:
    """The shard a writing rank's file is named by: its position in its shard group (its rank, for replica 0)."""
    return engine.groups.shard.position(rank) if engine.groups.replicate is not None else rank


def check_replicas(engine, tensors_of) -> None:
    """Raise ValueError naming the first rank whose tensors' bits differ from replica 0's; `tensors_of(rank)` gives
    a local rank's {name: array}. Collective under MPI (one message of hashes per process); no-op without replicas."""
    replicate = engine.groups.replicate
    if replicate is None:
        return
    local = [(r.index, {name: checksum(a.tobytes()) for name, a in tensors_of(r).items()})
             for r in engine.cluster.ranks]
    hashes = dict(engine.cluster.backend.all_meta(local))  # {world rank: {tensor: hash}}
    for group in replicate.members:
        first = hashes[group[0]]
        for rank in group[1:]:
            for name, value in hashes[rank].items():
                if value != first.get(name):
                    raise ValueError(
                        f"rank {rank}'s {name!r} differs from rank {group[0]}'s, its replica (shard "
                        f"{engine.groups.shard.position(rank)} of {engine.plan.label}, shard_group="
                        f"{engine.groups.shard.size}): replicas must hold equal bits to be saved once; "
                        "nothing was written")


def mesh_spec(engine) -> dict | None:
    """What the manifest records of a strategy's mesh (None for the numbered stages): the strategy, S, R, N, the
    GPUs per node, and which ranks wrote the files."""
    plan, groups = engine.plan, engine.groups
    if not plan.name:
        return None
    size = groups.secondary or (groups.shard if groups.replicate is not None else None)
    return {
        "strategy": plan.name,
        "shard_group": None if size is None else size.size,
        "replicas": groups.replicas,
        "world_size": engine.cluster.world_size,
        "gpus_per_node": engine.cluster.gpus_per_node,
        "writers": sorted(writers(engine)),
    }
