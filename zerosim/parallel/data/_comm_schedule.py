"""When and in what pieces a ZeRO step communicates: bucketing and prefetch, under the names real systems use.

The knobs change *which* collectives run, *when* they are issued and *how much* is live at once, never
a bit of the result: every bucket moves window ∩ shard_r for each rank r (`counts`), so each element
keeps its owner and is summed in the same ring order as without buckets (_flat.py). NOTE: a real NCCL
call cuts a bucket into N equal chunks, so on a GPU bucketing can change which rank sums an element
and therefore its rounding; zerosim keeps the owners so that a bucket size changes time and memory only —
except for the two recipes that all-reduce each bucket whole as their frameworks do (`ddp` with DDP's caps,
`bucket_cap_mb`; `deepspeed-zero12` with `reduce_bucket_size`): there the bucket's own chunk map decides, and a
bucket size can change bits (_param_buckets.py, _ddp_reduce.py, _bucket_allreduce.py).

    knob                         DeepSpeed name (deepspeed/runtime/zero/config.py)  FSDP name
    reduce_bucket_size           reduce_bucket_size              5e8 elements      -
    allgather_bucket_size        allgather_bucket_size           5e8 (see below)   -
    prefetch_bucket_size         stage3_prefetch_bucket_size     5e7               -
    max_live_parameters          stage3_max_live_parameters      1e9               -
    max_reuse_distance           stage3_max_reuse_distance       1e9               -
    prefetch_forward (units)     -                                                 forward_prefetch (1)
    prefetch_backward (units)    -                                                 backward_prefetch (1)
    prefetch_after_compute       -                                                 BACKWARD_POST (True) / BACKWARD_PRE
    max_gathered_units           -                                                 limit_all_gathers (2)
    overlap_comm                 overlap_comm                    True at stage 3   (always on)
                                                                 only

DeepSpeed reads allgather_bucket_size only where torch has no all_gather_into_tensor (deepspeed/runtime/
utils.py, `all_gather_dp_groups`); with current torch it gathers each rank's whole partition in one call,
so `CommSchedule.deepspeed()` leaves the refresh whole unless you pass the size.

The default `CommSchedule()` is seed 004's schedule: one collective per unit, gather right before a
use and free right after, no prefetch, no buckets.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.parallel.data.recipes import DDPBuckets

# DeepSpeed's defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig's fields)
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_MAX_LIVE = 1_000_000_000
DS_MAX_REUSE = 1_000_000_000
# FSDP1 (torch/distributed/fsdp/fully_sharded_data_parallel.py, FullyShardedDataParallel.__init__):
# backward_prefetch_limit = forward_prefetch_limit = 1; _limiter_utils._FreeEventQueue lets 2 all-gathers
# be in flight when limit_all_gathers=True
FSDP_PREFETCH_LIMIT = 1
FSDP_INFLIGHT_ALL_GATHERS = 2

BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", None)


@dataclass(frozen=True)
class CommSchedule:
    """Bucketing, prefetch and overlap for a `ZeroEngine` (sizes in elements; None = off).

    Attributes:
        reduce_bucket_size: gradients of consecutive units reduced in one call once they add up to this
            many elements (stages 2/3 during backward; stages 0/1 split the end-of-backward reduction).
            A unit never waits alone: a unit larger than the bucket goes in a call of its own.
        allgather_bucket_size: stages 1/2 refresh the parameters in pieces: max(1, s·N // size) calls, each
            gathering the same piece of every rank's shard (see `allgather_pieces`).
        prefetch_bucket_size: ZeRO-3 gathers upcoming units, in use order, until this many elements are
            being prefetched (DeepSpeed's rule: it stops after the unit that crosses the limit).
        max_live_parameters: ZeRO-3 prefetches only while fewer elements than this are gathered.
        max_reuse_distance: ZeRO-3 keeps a unit gathered after a use if it is used again within this many
            elements of upcoming uses (DeepSpeed; None: free after every use, as FSDP does).
        prefetch_forward / prefetch_backward: ZeRO-3 gathers this many upcoming units ahead (FSDP's style;
            used when prefetch_bucket_size is None).
        prefetch_after_compute: in backward, issue the prefetch after the unit's gradient computation
            (FSDP's BACKWARD_POST, before its reduce-scatter) instead of before it (BACKWARD_PRE).
        max_gathered_units: ZeRO-3 never holds more gathered units than this (FSDP's limit_all_gathers).
        overlap_comm: communication on its own stream (the timeline reads this); None: the framework's default at
            the engine's stage, which the engine reads in (`under`): DeepSpeed's is on at stage 3 only.
        bucket_cap_mb, first_bucket_mb: DDP's bucket caps for the `ddp` recipe (_param_buckets.py `DDPBuckets`: None
            is torch's 25 MiB with a 1 MiB first bucket). DDP's buckets change bits (each is its own all-reduce
            with its own chunk map), unlike the knobs above.
    """

    reduce_bucket_size: int | None = None
    allgather_bucket_size: int | None = None
    prefetch_bucket_size: int | None = None
    max_live_parameters: int | None = None
    max_reuse_distance: int | None = None
    prefetch_forward: int = 0
    prefetch_backward: int = 0
    prefetch_after_compute: bool = False
    max_gathered_units: int | None = None
    overlap_comm: bool | None = True
    bucket_cap_mb: float | None = None
    first_bucket_mb: float | None = None
    framework: str | None = None  # whose defaults these are ("deepspeed", "fsdp", "megatron"; None: the seed's or the
    #                               user's): a pipeline reads it for its framework's plan there (pipeline/_beside.py),
    #                               a memory report for DeepSpeed's bucket buffers (costs/_overheads.py)

    def __post_init__(self):
        DDPBuckets(self.bucket_cap_mb, self.first_bucket_mb)  # checks them
        for name in ("reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size", "max_live_parameters",
                     "max_reuse_distance", "max_gathered_units"):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int) or v < (1 if name != "max_reuse_distance" else 0)
            ):
                raise ValueError(f"CommSchedule.{name} must be a positive integer (elements) or None, got {v!r}")
        for name in ("prefetch_forward", "prefetch_backward"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"CommSchedule.{name} must be a number of units >= 0, got {v!r}")
        if not isinstance(self.prefetch_after_compute, bool):
            raise ValueError(f"CommSchedule.prefetch_after_compute must be True or False, got "
                             f"{self.prefetch_after_compute!r}")
        if self.overlap_comm is not None and not isinstance(self.overlap_comm, bool):
            raise ValueError(f"CommSchedule.overlap_comm must be True, False or None (the framework's default at the "
                             f"stage), got {self.overlap_comm!r}")

    @property
    def ddp(self) -> DDPBuckets:
        """DDP's bucket caps (`bucket_cap_mb`, `first_bucket_mb`)."""
        return DDPBuckets(self.bucket_cap_mb, self.first_bucket_mb)

    @classmethod
    def deepspeed(cls, reduce_bucket_size: int = DS_REDUCE_BUCKET, allgather_bucket_size: int | None = None,
                  stage3_prefetch_bucket_size: int = DS_PREFETCH_BUCKET, stage3_max_live_parameters: int = DS_MAX_LIVE,
                  stage3_max_reuse_distance: int = DS_MAX_REUSE, overlap_comm: bool | None = None) -> "CommSchedule":
        """DeepSpeed's knobs and defaults (deepspeed/runtime/zero/config.py). The ZeRO-3 rules follow
        deepspeed/runtime/zero/partitioned_param_coordinator.py, `PartitionedParameterCoordinator`:
        `fetch_sub_module` gathers the unit needed now, then prefetches from the trace of upcoming uses
        while fewer than min(max_live - live, prefetch_bucket) elements are on the way; `__params_to_release`
        keeps a unit used again within max_reuse_distance elements. NOTE: with the default 1e9, a model under
        a billion parameters keeps every unit it will use again, so ZeRO-3's parameter memory saving waits
        for larger models, on GPUs as here. `overlap_comm` None is DeepSpeed's default, on at stage 3 only
        (DeepSpeed 0.19.8, deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig.overlap_comm_valid): at stages 1/2
        stage_1_and_2.py reduces each bucket on the compute stream (`average_tensor`, which `reduce_ipg_grads` calls:
        the reduction stream only with overlap_comm), so backward waits for it."""
        def whole(name, v):
            if isinstance(v, float) and v.is_integer():
                v = int(v)  # the configs write 5e8
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{name} must be a whole number of elements, got {v!r}")
            return v

        return cls(
            framework="deepspeed",
            reduce_bucket_size=whole("reduce_bucket_size", reduce_bucket_size),
            allgather_bucket_size=None
            if allgather_bucket_size is None
            else whole("allgather_bucket_size", allgather_bucket_size),
            prefetch_bucket_size=whole("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size) or None,
            max_live_parameters=whole("stage3_max_live_parameters", stage3_max_live_parameters),
            max_reuse_distance=whole("stage3_max_reuse_distance", stage3_max_reuse_distance),
            overlap_comm=overlap_comm,
        )

    @classmethod
    def fsdp(cls, backward_prefetch: str | None = "BACKWARD_PRE", forward_prefetch: bool = False,
             limit_all_gathers: bool = True) -> "CommSchedule":
        """FSDP's knobs (torch/distributed/fsdp/api.py, BackwardPrefetch; fully_sharded_data_parallel.py):
        one unit prefetched ahead in backward, before (BACKWARD_PRE) or after (BACKWARD_POST) the current
        unit's gradient computation, one ahead in forward if `forward_prefetch`; units freed after each
        use (reshard_after_forward). `limit_all_gathers` caps gathered units at 2 (_limiter_utils.
        _FreeEventQueue). NOTE: without the limit FSDP's CPU thread can run ahead and issue gathers
        further ahead still; zerosim issues in program order, so that run-ahead is not modelled."""
        if backward_prefetch not in BACKWARD_PREFETCH:
            raise ValueError(f"backward_prefetch must be one of {BACKWARD_PREFETCH}, got {backward_prefetch!r}")
        if not isinstance(forward_prefetch, bool) or not isinstance(limit_all_gathers, bool):
            raise ValueError("forward_prefetch and limit_all_gathers must be True or False")
        return cls(framework="fsdp", prefetch_forward=FSDP_PREFETCH_LIMIT if forward_prefetch else 0,
                   prefetch_backward=FSDP_PREFETCH_LIMIT if backward_prefetch else 0,
                   prefetch_after_compute=backward_prefetch == "BACKWARD_POST",
                   max_gathered_units=FSDP_INFLIGHT_ALL_GATHERS if limit_all_gathers else None)

    @classmethod
    def megatron(cls, dp: int = 1) -> "CommSchedule":
        """Megatron-Core's DDP with `overlap_grad_reduce=True` over `dp` data-parallel ranks: the gradients in buckets
        of `bucket_size` parameters, max(40000000, 1000000 · dp) by default (NVIDIA/Megatron-LM 0011998,
        megatron/core/distributed/distributed_data_parallel_config.py, DistributedDataParallelConfig.bucket_size),
        each reduce-scattered (the distributed optimizer, ZeRO-1) as backward fills it, in the last micro-batch only:
        the pipeline schedules turn grad sync off for the others ("Enable grad sync for the last microbatch in the
        batch", NVIDIA/Megatron-LM 00611e6, megatron/core/pipeline_parallel/schedules.py,
        forward_backward_pipelining_without_interleaving; with interleaving, each model chunk's last micro-batch:
        forward_backward_pipelining_with_interleaving, `is_last_microbatch_for_model_chunk`). At stages 0/1
        zerosim's `reduce_bucket_size` does that (ZeroEngine._bucketed)."""
        if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
            raise ValueError(f"dp must be a positive integer (the data-parallel ranks), got {dp!r}")
        return cls(framework="megatron", reduce_bucket_size=max(40_000_000, 1_000_000 * dp))

    def under(self, plan) -> "CommSchedule":
        """This schedule as an engine with `plan` (a parallel.data Plan) runs it: overlap_comm None (the framework's
        default) read in as DeepSpeed's rule, on where the parameters are sharded (`stage == ZeroStageEnum.weights`,
        stage 3); a schedule that says True or False is returned as it is."""
        return self if self.overlap_comm is not None else replace(self, overlap_comm=plan.shards("params"))

    def with_(self, **changes) -> "CommSchedule":
        """A copy with some knobs changed (validated again)."""
        return replace(self, **changes)


def get_comm_schedule(schedule) -> CommSchedule:
    """A `CommSchedule`, or a name: "seed" (the default: no buckets, no prefetch), "deepspeed", "fsdp", "megatron"
    (overlap_grad_reduce's buckets at the default size for up to 40 data-parallel ranks: CommSchedule.megatron)."""
    if schedule is None or schedule == "seed":
        return CommSchedule()
    if isinstance(schedule, CommSchedule):
        return schedule
    if schedule == "deepspeed":
        return CommSchedule.deepspeed()
    if schedule == "fsdp":
        return CommSchedule.fsdp()
    if schedule == "megatron":
        return CommSchedule.megatron()
    raise ValueError(f"comm schedule must be a CommSchedule or one of 'seed', 'deepspeed', 'fsdp', 'megatron', got "
                     f"{schedule!r}")


def allgather_pieces(shard_size: int, world_size: int, limit: int | None) -> list:
    """[start, stop) pieces of a rank's (s,) shard that the stage 1/2 refresh gathers one call each: every rank
    sends the same piece of its shard. DeepSpeed's fallback `all_gather_dp_groups` (deepspeed/runtime/utils.py):
    max(1, s·N // limit) pieces of s // pieces elements, the last one taking the rest (its NCCL start
    alignment left out). None: the whole shard in one call."""
    if limit is None:
        return [(0, shard_size)]
    count = max(1, shard_size * world_size // limit)
    size = shard_size // count
    return [(i * size, (i + 1) * size if i < count - 1 else shard_size) for i in range(count)]
