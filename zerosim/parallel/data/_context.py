"""What the helpers of one ZeRO step read: a small frozen record, never the engine.

A helper (_gather.py, _reduce.py, _step_checks.py, _update.py, ...) takes this context, the arrays it works on
and the few numbers it needs, and returns what it made (arrays, a collective's `Handle`); it keeps no state
and hands nothing over through a rank's fields. The cluster is here because the collectives run over it
(as torch.distributed's run over a process group); each rank's buffers live in its ledger.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.parallel.data.multinode import MeshGroups


@dataclass(frozen=True)
class Context:
    """One engine's fixed facts: where it runs, what its stage shards, how its buffers are cut, in which formats."""

    cluster: object  # the ranks of this process, their ledgers and trace; the collectives' group
    plan: object  # zero.plan.Plan: which buffers are sharded, which collective runs when
    layout: object  # flat.FlatLayout or partition.ParamLayout: how every sharded buffer is cut
    policy: object  # precision.MixedPrecision: the formats
    recipe: object  # zero.recipes.GradientRecipe: how gradients are reduced and averaged
    names: tuple  # each unit's (model layer's) name, for the trace's tags
    groups: object = None  # mesh_groups.MeshGroups: the groups each collective runs over (None: the world for all)
    wire: object = None  # zeropp.WireState: weights gathered in fewer bits (qwZ, fp8), or None
    bucket_limit: int | None = None  # CommSchedule.reduce_bucket_size: DeepSpeed's numel_per_bucket (bucket_allreduce)
    params: tuple = ()  # (unit, a, b) per parameter in registration order (param_buckets.registration)
    ddp_caps: tuple = ()  # DDP's (first bucket, bucket) caps in bytes (param_buckets.DDPBuckets.caps)

    @property
    def ranks(self) -> list:
        return self.cluster.ranks

    @property
    def mesh(self):
        """The `MeshGroups` (the world for every collective when none was given)."""
        return self.groups if self.groups is not None else MeshGroups(self.cluster.world, self.cluster.world)
