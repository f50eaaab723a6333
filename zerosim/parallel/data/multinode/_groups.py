"""The groups a strategy's collectives run over, from its plan, the cluster and one size S.

Letters: N ranks, G GPUs per node (`Cluster(gpus_per_node=G)`), S the strategy's group size (`shard_group=`,
default G: a node), R = N / S replicas.

    world      all N ranks, one ring                        FULL_SHARD's gathers and reduce-scatters
    shard      blocks of S consecutive ranks                HSDP's / MiCS's gathers and reduce-scatters:
                                                            torch's (R, S) DeviceMesh dim "shard";
                                                            mics_utils.py `_generate_mics_config`
    replicate  the R ranks holding the same position        HSDP's all-reduce (dim "replicate"); MiCS's
               in their block (stride S)                    replicate groups, `allreduce_mics_shard_grads`
    secondary  blocks of S consecutive ranks                hpZ's secondary partition (deepspeed/utils/
                                                            groups.py `_create_zero_param_parallel_group`);
                                                            FSDP2's post-forward mesh (`_get_post_forward_
                                                            mesh_info`: mesh.view(-1, S))
    inter      within each shard group, the ranks with      MiCS's hierarchical all-gather: first across
               the same GPU slot on the nodes it spans      nodes (`param_inter_node_shard_group`) ...
    intra      within each shard group, one node            ... then within each node (`param_intra_node_group`)

A flat cluster with the flat stages uses the world for everything, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.cluster import Groups
from zerosim.parallel._dims import ParallelDims
from zerosim.parallel.data.multinode._data_mesh import DataMesh


@dataclass(frozen=True)
class MeshGroups:
    """The groups one engine's collectives run over (see the module docstring); None where the plan needs none."""

    world: Groups
    shard: Groups  # what sharded buffers are cut over: the world, or blocks of S
    replicate: Groups | None = None  # the replicas of each shard
    secondary: Groups | None = None  # hpZ's / FSDP2's post-forward groups: blocks of S
    inter: Groups | None = None  # MiCS's hierarchical gather, across nodes
    intra: Groups | None = None  # ... and within a node
    dims: ParallelDims | None = None  # the degrees the groups come from (None: the world for everything)

    @property
    def replicas(self) -> int:
        """R: how many ranks hold each shard."""
        return 1 if self.replicate is None else self.replicate.size


def default_size(plan, cluster, size) -> int | None:
    """S: `size`, or the cluster's GPUs per node when the plan needs one and none was given (DataMesh checks it)."""
    return DataMesh.of(plan, cluster.world_size, cluster.gpus_per_node, size).group


def mesh_groups(plan, cluster, size: int | None = None) -> MeshGroups:
    """The `MeshGroups` of `plan` on `cluster` with group size S = `size` (checked by `DataMesh.of`; default GPUs per
    node)."""
    return DataMesh.of(plan, cluster.world_size, cluster.gpus_per_node, size).groups(cluster.world)


def groups_of(mesh: DataMesh, world: Groups) -> MeshGroups:
    """The groups of a checked `DataMesh` (see the module docstring), cut from its `ParallelDims`."""
    n, plan, dims = mesh.dims.world_size, mesh.plan, mesh.dims
    if mesh.secondary is None and plan.sharded_over == "world":  # the flat stages: the world for everything
        return MeshGroups(world, world, dims=dims)
    if plan.sharded_over == "world":  # hpZ, FSDP2's reshard to a group: shards over N, a secondary piece over S'
        return MeshGroups(world, world, secondary=Groups.blocks(n, mesh.secondary, "secondary"), dims=dims)
    shard, replicate = dims.groups("dp_shard").renamed("shard"), dims.groups("dp_replicate").renamed("replicate")
    if not plan.hierarchical_gather:  # HSDP / MiCS: S-way shards, R = N / S replicas
        return MeshGroups(world, shard, replicate, dims=dims)
    g, s = mesh.gpus_per_node, mesh.shards  # DataMesh.of checked that the shard group spans whole nodes
    spans = s // g
    inter = tuple(tuple(b + m * g + slot for m in range(spans)) for b in range(0, n, s) for slot in range(g))
    return MeshGroups(world, shard, replicate, inter=Groups("inter", inter), intra=Groups.blocks(n, g, "intra"),
                      dims=dims)


FRAMEWORK_RECIPES = {"fsdp2": "fsdp2", "deepspeed": "deepspeed-zero3"}  # a framework's own gradient recipe


def default_recipe(plan, policy, recipe=None):
    """The recipe an engine runs `plan` with: `recipe` when given (or one the precision policy names), else — for a
    strategy that cuts units evenly over shard groups (HSDP, MiCS) — its framework's ("fsdp2", "deepspeed-zero3"),
    whose per-parameter partitions it needs; else None (the policy's, "seeds" by default)."""
    if recipe is not None or getattr(policy, "reduction", "seeds") != "seeds" or plan.sharded_over == "world":
        return recipe
    return FRAMEWORK_RECIPES[plan.framework]


def check_recipe(plan, recipe) -> None:
    """A strategy of one framework runs with that framework's recipe: FSDP2's HSDP with "fsdp2", DeepSpeed's MiCS
    and hpZ with "deepspeed-zero3" (hpZ and FSDP2's resharding, which shard over the world, also with the seeds'
    protocol on the flat layout). Raise ValueError otherwise."""
    owner = {r: f for f, r in FRAMEWORK_RECIPES.items()}.get(recipe.reduction)
    if plan.framework is not None and owner is not None and owner != plan.framework:
        fits = FRAMEWORK_RECIPES[plan.framework]
        raise ValueError(f"{plan.label} is {plan.framework}'s; its gradients follow reduction {fits!r} or 'seeds', "
                         f"not {recipe.reduction!r}")
    if plan.sharded_over != "world" and recipe.partition == "flat":
        fits = repr(FRAMEWORK_RECIPES[plan.framework])
        raise ValueError(f"{plan.label} cuts every unit into equal pieces, one per rank of a shard group, so that "
                         "the replicas all-reduce the same piece of their shards (its framework's per-parameter "
                         f"partitions; zerosim's flat shards cut units unevenly): use reduction {fits}")
    if plan.uses_groups and recipe.allreduce == "nccl":
        raise ValueError("allreduce='nccl' maps the world's one all-reduce; the mesh strategies reduce over groups "
                         "with the ring's map")
