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

Beside tensor parallelism (`tp` = T > 1: parallel/tensor/), data parallelism runs over what the world leaves, as
torchtitan's FSDP runs over the "dp_shard" sub-mesh after TP (parallelize_llama.py, apply_fsdp on
world_mesh["dp_shard_cp"]): every group above is cut from `ParallelDims(N, ..., tp=T)` (parallel/_dims.py), whose TP
dim is innermost, so "world" becomes each TP rank's data-parallel group (the N / T ranks with its TP coordinate,
torchtitan's "dp"), and ZeRO shards each TP rank's slice over it. `tp = 1` builds the groups exactly as before.
Beside context parallelism (`cp` = C > 1: parallel/context/) the flat stages run over torchtitan's "fsdp" groups,
dp_shard × cp (apply_fsdp on world_mesh["fsdp"]): each CP rank computed its gradient on its own tokens, so the C
ranks of one sequence are summed like data-parallel ranks, and FSDP2 shards the parameters over them too.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
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


def mesh_groups(plan, cluster, size: int | None = None, tp: int = 1) -> MeshGroups:
    """The `MeshGroups` of `plan` on `cluster` with group size S = `size` (checked by `DataMesh.of`; default GPUs per
    node), beside tensor parallelism of degree `tp` (the data-parallel groups are then the mesh's data dims: module
    docstring)."""
    return DataMesh.of(plan, cluster.world_size, cluster.gpus_per_node, size, tp=tp).groups(cluster.world)


def groups_of(mesh: DataMesh, world: Groups) -> MeshGroups:
    """The groups of a checked `DataMesh` (see the module docstring), cut from its `ParallelDims`."""
    if mesh.dims.cp != 1:  # the flat stages over torchtitan's "fsdp" mesh, dp_shard × cp (DataMesh.of refuses more)
        data = mesh.dims.groups("fsdp")
        return MeshGroups(data, data, dims=mesh.dims)
    if mesh.dims.tp != 1 or mesh.dims.pp != 1:
        return _beside_tp(mesh)
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


def _beside_tp(mesh: DataMesh) -> MeshGroups:
    """`groups_of` with T = tp > 1 or P = pp > 1: the same groups, each cut from the data dims of ParallelDims(N, ...,
    tp=T, pp=P) (with pipeline parallelism: within each stage)."""
    plan, dims, n, tp = mesh.plan, mesh.dims, mesh.dims.world_size, mesh.dims.tp
    dp = dims.dp
    if mesh.secondary is not None or plan.sharded_over == "world":  # flat stages, hpZ, FSDP2's resharding: all of dp
        data, s = dims.groups("dp"), mesh.secondary
        secondary = None if s is None else ParallelDims(n, dp_replicate=dp // s, dp_shard=s, tp=tp,
                                                        pp=dims.pp).groups("dp_shard")
        return MeshGroups(data, data, secondary=None if secondary is None else secondary.renamed("secondary"),
                          dims=dims)
    shard, replicate = dims.groups("dp_shard").renamed("shard"), dims.groups("dp_replicate").renamed("replicate")
    if not plan.hierarchical_gather:  # HSDP / MiCS: a 3-D mesh
        return MeshGroups(dims.groups("dp"), shard, replicate, dims=dims)
    s, per_node = mesh.shards, mesh.gpus_per_node // tp  # a shard group's ranks on one node (TP fills the rest)
    intra = [group[k:k + per_node] for group in shard.members for k in range(0, s, per_node)]
    inter = [group[slot::per_node] for group in shard.members for slot in range(per_node)]
    return MeshGroups(dims.groups("dp"), shard, replicate, inter=Groups("inter", inter), intra=Groups("intra", intra),
                      dims=dims)


FRAMEWORK_RECIPES = {"fsdp2": "fsdp2", "deepspeed": "deepspeed-zero3"}  # a framework's own gradient recipe


def default_recipe(plan, policy, recipe=None):
    """The recipe an engine runs `plan` with: `recipe` when given (or one the precision policy names), else — for a
    strategy that cuts units evenly over shard groups (HSDP, MiCS) — its framework's ("fsdp2", "deepspeed-zero3"),
    whose per-parameter partitions it needs; else None (the policy's, "seeds" by default)."""
    if recipe is not None or getattr(policy, "reduction", "seeds") != "seeds" or plan.sharded_over == "world":
        return recipe
    return FRAMEWORK_RECIPES[plan.framework]


def check_sub_mesh(dims, recipe, optimizer, clip_grad, wire) -> None:
    """Beside another parallelism (`dims` has a degree > 1 outside the data dims), refuse what would still run over
    the whole world or read one data-parallel group as the whole model: NCCL's and gloo's all-reduce chunk maps (one
    ring of every rank), a matrix optimizer (Muon would orthogonalise a TP slice), and clipping and ZeRO++'s quantized
    gathers (`refuse_beside`)."""
    beside = _beside(dims)
    if not beside:
        return
    if recipe.allreduce != "ring":
        raise ValueError(f"allreduce={recipe.allreduce!r} maps one all-reduce over every rank; beside {beside} the "
                         "data-parallel ranks reduce in groups over the ring's map: use allreduce='ring'")
    check_matrix_optimizer(dims, optimizer)
    refuse_beside(dims, clip_grad, wire)


def refuse_beside(dims, clip_grad=None, wire=None, clip_words: str = "clip_grad",
                  wire_words: str = "ZeRO++'s quantized gathers and reductions") -> None:
    """Clipping (`clip_grad`) and ZeRO++'s or torchao's quantized collectives (`wire`, a zeropp Wire) beside another
    parallelism (`dims` has a degree above 1 outside the data dims): neither is modelled there yet, refused with a
    ValueError that names them as the caller asked for them (`clip_words`, `wire_words`: the engine's arguments by
    default, a command's flags or a DeepSpeed config's key). The one rule: ZeroEngine applies it (`check_sub_mesh`),
    and the commands before any work (cli/parallel_args.py `refuse_beside`, TrainConfig)."""
    beside = _beside(dims)
    if not beside:
        return
    if clip_grad is not None:
        raise ValueError(f"{clip_words} beside {beside}: the global norm sums every rank's slice of the model, the "
                         "parameters those ranks replicate once (as Megatron's get_grad_norm_fp32 filters duplicates); "
                         "not modelled yet")
    if wire is not None:
        raise ValueError(f"{wire_words} run over every rank; beside {beside} they are not modelled")


def _beside(dims) -> str:
    """The degrees beside data parallelism, in words ("tp 8"), or "" where there are none."""
    return " × ".join(f"{d} {getattr(dims, d)}" for d in ("tp", "cp", "pp") if getattr(dims, d) > 1)


def check_matrix_optimizer(dims, optimizer) -> None:
    """A matrix optimizer (Muon: `optimizer.elementwise` False) orthogonalises whole weight matrices; beside tensor
    parallelism a rank holds a slice of each, and beside context or pipeline parallelism (whose ranks hold whole
    matrices) its sharded update over the data-parallel groups is not modelled yet: refused (what the planner asks
    before it measures anything, and the engine before it builds)."""
    beside = _beside(dims)
    if beside and not optimizer.elementwise:
        why = ("a rank holds a slice of each" if dims.tp > 1 else
               "the ranks hold whole matrices, but its sharded update over the data-parallel groups is not modelled "
               "yet")
        raise ValueError(f"{optimizer.name} updates whole matrices; beside {beside} {why}: use an elementwise "
                         "optimizer (adam, adamw, sgd, lion, adan)")


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
