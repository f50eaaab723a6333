"""What the ranks agree on between backward and the update: did any gradient overflow, and how long is it.

Each is one tiny all-reduce over every local rank, in the trace with purpose "check", so every rank
reaches the same decision from the same numbers (under MPI too: nobody is left waiting):

    overflow  each rank counts inf/NaN in its reduced gradient (its shard; all of it at stage 0), puts
              0 or 1 in a one-element flag, and the flags are all-reduced with MAX — DeepSpeed's
              has_overflow (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py: a uint8 flag; fp32
              here, since zerosim's collectives carry float formats: 4 bytes instead of 1). The loss
              scaler then decides (precision/_loss_scaling.py): skip the step (dynamic scalers, or a
              static one told to skip) or go on. A static scale that raises keeps zerosim's first
              behaviour: every rank raises FloatingPointError, agreed through the backend's metadata
              exchange, before any state changes.
    norm      each rank sums the squares of its shard of the fp32 gradient, the sums are all-reduced
              with SUM, and every rank scales its gradient by torch's clip coefficient (_clipping.py).
              With replicas (HSDP, MiCS) the sum runs over the shard group, whose S shards hold every
              element once: DeepSpeed's MiCS sums over its `dp_process_group`, which MiCS_Optimizer sets to
              the shard group; FSDP2's DTensor norm reduces over the Shard dim of the (Replicate, Shard) mesh.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import GradClip, Handle, LossScaleUpdate
from zerosim.collectives import all_reduce
from zerosim.parallel.data import _clipping as clipping
from zerosim.parallel.data._carried import after_decision
from zerosim.precision import StepDecision


def skips_steps(scaler) -> bool:
    """True when an overflow skips the step (torch's and DeepSpeed's scalers; a static one with on_overflow='skip')."""
    return getattr(scaler, "on_overflow", "skip") == "skip"


def all_reduce_overflow(ctx, reduced: list, scaler, step: int, t: int) -> tuple:
    """Check every rank's `reduced` gradient for inf/NaN (a MAX all-reduce of one flag) and let the loss `scaler`
    decide, the same on every rank. Returns (its `StepDecision`, the all-reduce's handle); records a
    `LossScaleUpdate` for iteration `step` (t: optimizer steps taken before it).

    Raises FloatingPointError (a static scale) or `LossScaleAtMinimum` (DeepSpeed at its minimum scale)
    on every rank, before any state changes."""
    cluster, backend = ctx.cluster, ctx.cluster.backend
    bad = _nonfinite_each(backend, reduced)
    if not skips_steps(scaler):
        problems = [f"{b} reduced gradient element(s) are NaN or inf" if b else None for b in bad]
        scale = scaler.scale
        cluster.agree(problems, (f" (loss scale {scale:g} may be too large)" if scale != 1 else "")
                      + "; no parameter or optimizer state was changed", FloatingPointError)
        return StepDecision(False, scale, scale), Handle()
    flags = []
    for rank, b in zip(ctx.ranks, bad):
        flag = rank.ledger.alloc("overflow flag", 1, np.float32, "comm")  # (1,) fp32: 1 if this rank saw inf/NaN
        flag.array[...] = 1.0 if b else 0.0
        flags.append(flag)
    with cluster.trace.about(purpose="check", layers=()):
        agreed = all_reduce(cluster, [f.array for f in flags], op="max", tag="overflow flag")
    found = backend.read_scalar(agreed[0], 0.0) > 0
    for flag in flags:
        flag.free()
    decision = scaler.update(bool(found))  # may raise LossScaleAtMinimum: the same on every rank
    after_decision(ctx, decision)  # LoCo's errors: dropped by a skip, rescaled by a new scale (carried.py)
    cluster.trace.record(LossScaleUpdate(step, t + (0 if decision.skip else 1), scaler.kind, bool(found), decision.skip,
                                         decision.scale_before, decision.scale_after, decision.message, agreed.handle))
    return decision, agreed.handle


# elements of all local ranks' gradients at most that `_nonfinite_each` first counts in one call (a copy of them)
_COUNTED_TOGETHER = 1 << 16


def _nonfinite_each(backend, reduced: list) -> list:
    """The backend's count of NaN and inf in each rank's gradient. Many small host arrays of one dtype (10k parameters
    on 64 ranks) are counted in one call first, laid end to end: none anywhere is none on each rank (a call per rank
    was ~0.2 ms of benchmarks/yardstick.py's small step); else, or where some are, rank by rank."""
    if (len(reduced) > 1 and all(type(g) is np.ndarray and g.dtype == reduced[0].dtype for g in reduced)
            and sum(g.size for g in reduced) <= _COUNTED_TOGETHER
            and backend.count_nonfinite(np.concatenate([g.reshape(-1) for g in reduced])) == 0):
        return [0] * len(reduced)
    return [backend.count_nonfinite(g) for g in reduced]


def all_reduce_norm(ctx, grads32: list, max_norm: float, step: int, norm: str = "shards") -> Handle:
    """Scale every local rank's fp32 gradient (its region) by torch's clip coefficient for `max_norm`, from the
    global norm: each rank's sum of squares over its own shard, all-reduced with SUM (`norm` "shards"); or ("torch",
    stage 0: every rank holds the whole gradient) torch's clip_grad_norm_ on each rank alone, no collective
    (clipping.torch_total_norm). Records a `GradClip` for iteration `step`; returns the all-reduce's handle."""
    cluster, layout, backend = ctx.cluster, ctx.layout, ctx.cluster.backend
    if norm == "torch":
        return _torch_norm(ctx, grads32, max_norm, step)
    partials = []
    for rank, g in zip(ctx.ranks, grads32):
        mine = g[layout.own(rank.index)] if g.shape[0] == layout.padded else g  # stage 0 holds all: its shard only
        part = rank.ledger.alloc("norm partial", 1, g.dtype, "comm", fill=0)  # (1,) fp32: this rank's sum of squares
        part.array[...] = backend.evaluate(clipping.sum_of_squares, mine, 0.0)
        partials.append(part)
    with cluster.trace.about(purpose="check", layers=()):  # over the shard group: its S shards hold every element
        total = all_reduce(cluster, [p.array for p in partials], op="sum", tag="gradient norm²", group=ctx.mesh.shard)
    for part in partials:
        part.free()
    norm = clipping.norm_of(np.asarray([backend.read_scalar(total[0], 0.0)], dtype=grads32[0].dtype))
    coef = clipping.clip_coefficient(norm, max_norm, grads32[0].dtype)
    for g in grads32:
        clipping.apply(g, coef)
    cluster.trace.record(GradClip(step, norm, max_norm, coef, total.handle))
    return total.handle


def _torch_norm(ctx, grads32: list, max_norm: float, step: int) -> Handle:
    """clip_grad_norm_ as each DDP rank runs it on its whole gradient (_clipping.py): the ranks agree without talking,
    since every one holds the same all-reduced gradient."""
    backend = ctx.cluster.backend
    norms = [backend.evaluate(lambda x: clipping.torch_total_norm(x, ctx.params), g, 0.0) for g in grads32]
    for g, total in zip(grads32, norms):
        clipping.apply(g, clipping.clip_coefficient(total, max_norm, g.dtype))
    coef = clipping.clip_coefficient(norms[0], max_norm, grads32[0].dtype)
    ctx.cluster.trace.record(GradClip(step, norms[0], max_norm, coef, ()))
    return Handle()
