"""What the ranks agree on between backward and the update: did any gradient overflow, and how long is it.

Each is one tiny collective over every local rank, in the trace with purpose "check", so every rank
reaches the same decision from the same numbers (under MPI too: nobody is left waiting):

    overflow  each rank counts inf/NaN in its reduced gradient (its shard; all of it at stage 0), puts
              0 or 1 in a one-element flag, and the flags are all-reduced with MAX — DeepSpeed's
              has_overflow (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py: a uint8 flag; fp32
              here, since zerosim's collectives carry float formats: 4 bytes instead of 1). The loss
              scaler then decides (precision/loss_scaling.py): skip the step (dynamic scalers, or a
              static one told to skip) or go on. A static scale that raises keeps zerosim's first
              behaviour: every rank raises FloatingPointError, agreed through the backend's metadata
              exchange, before any state changes.
    norm      each rank sums the squares of its shard of the fp32 gradient, the sums are all-reduced
              with SUM, and every rank scales its gradient by torch's clip coefficient (clipping.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import GradClip, LossScaleUpdate
from zerosim.precision import StepDecision
from zerosim.zero import clipping


def skips_steps(scaler) -> bool:
    """True when an overflow skips the step (torch's and DeepSpeed's scalers; a static one with on_overflow='skip')."""
    return getattr(scaler, "on_overflow", "skip") == "skip"


def overflow_decision(engine) -> StepDecision:
    """Check every rank's reduced gradient for inf/NaN and let the loss scaler decide, the same on every rank.

    Raises FloatingPointError (a static scale) or `LossScaleAtMinimum` (DeepSpeed at its minimum scale)
    on every rank, before any state changes; otherwise returns the scaler's `StepDecision`."""
    cluster, backend, scaler = engine.cluster, engine.cluster.backend, engine.scaler
    bad = [backend.count_nonfinite(rank.reduced) for rank in cluster.ranks]
    if not skips_steps(scaler):
        problems = [f"{b} reduced gradient element(s) are NaN or inf" if b else None for b in bad]
        scale = scaler.scale
        engine._agree(problems, (f" (loss scale {scale:g} may be too large)" if scale != 1 else "")
                      + "; no parameter or optimizer state was changed", FloatingPointError)
        return StepDecision(False, scale, scale)
    flags = []
    for rank, b in zip(cluster.ranks, bad):
        flag = rank.ledger.alloc("overflow flag", 1, np.float32, "comm")  # (1,) fp32: 1 if this rank saw inf/NaN
        flag.array[...] = 1.0 if b else 0.0
        flags.append(flag)
    calls = len(cluster.trace.calls)
    with cluster.trace.about(purpose="check", layers=()):
        agreed = cluster.all_reduce([f.array for f in flags], op="max", tag="overflow flag")
    found = backend.read_scalar(agreed[0], 0.0) > 0
    for flag in flags:
        flag.free()
    decision = scaler.update(bool(found))  # may raise LossScaleAtMinimum: the same on every rank
    t = engine.t + (0 if decision.skip else 1)
    cluster.trace.record(LossScaleUpdate(engine.iteration + 1, t, scaler.kind, bool(found), decision.skip,
                                         decision.scale_before, decision.scale_after, decision.message,
                                         tuple(range(calls, len(cluster.trace.calls)))))
    return decision


def clip_gradients(engine, grads32: list) -> float:
    """Scale every local rank's fp32 gradient (its region) by torch's clip coefficient for `engine.clip_grad`,
    from the global norm: each rank's sum of squares over its own shard, all-reduced with SUM. Returns the norm."""
    cluster, layout, backend = engine.cluster, engine.layout, engine.cluster.backend
    partials = []
    for rank, g in zip(cluster.ranks, grads32):
        mine = g[layout.own(rank.index)] if g.shape[0] == layout.padded else g  # stage 0 holds all: count its shard only
        part = rank.ledger.alloc("norm partial", 1, g.dtype, "comm", fill=0)  # (1,) fp32: this rank's sum of squares
        if backend.holds_values:
            part.array[...] = clipping.sum_of_squares(mine)
        partials.append(part)
    calls = len(cluster.trace.calls)
    with cluster.trace.about(purpose="check", layers=()):
        total = cluster.all_reduce([p.array for p in partials], op="sum", tag="gradient norm²")
    for part in partials:
        part.free()
    norm = clipping.norm_of(np.asarray([backend.read_scalar(total[0], 0.0)], dtype=grads32[0].dtype))
    coef = clipping.clip_coefficient(norm, engine.clip_grad, grads32[0].dtype)
    for g in grads32:
        clipping.apply(g, coef)
    cluster.trace.record(GradClip(engine.iteration + 1, norm, engine.clip_grad, coef, tuple(range(calls, len(cluster.trace.calls)))))
    return norm
