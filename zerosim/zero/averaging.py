"""How N ranks' K micro-batch gradients become the one fp32 gradient the optimizer reads — in one place.

Letters: N ranks, K micro-steps (gradient accumulation), S the loss scale. Every engine stage and
the oracle call these functions, so the arithmetic below is the single definition of averaging:

    accumulate   acc = g (first micro-step) or acc + g, rounded to the accumulation format
                 ("grad_accum": the compute format by default, or fp32), as `param.grad += g` does
    reduce       the collective's op: "sum" for "avg" (divide later, in fp32 — the seeds' protocol);
                 "avg_predivide" divides by N in the gradient's dtype first (DeepSpeed ZeRO-1/2);
                 "avg_premul" multiplies by 1/N rounded to the wire dtype (NCCL's ncclAvg, FSDP)
    finish       g32 = cast_fp32(reduced), then / (N·K) for "avg" (one division; / K for the others,
                 which already divided by N), then / S to unscale — all in fp32

Where in the step each happens differs by stage (stages 0/1 accumulate locally and reduce once at
the boundary; stages 2/3 reduce every micro-step and accumulate the reduced shard, as DeepSpeed
does); what happens is written only here.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import get_op
from zerosim.precision import Format, cast, get_format


def accum_format(policy, reduced: bool) -> Format:
    """The format gradients accumulate in across micro-steps.

    `reduced=False`: a rank's own (local) gradients, stages 0/1 — the compute format, or fp32.
    `reduced=True`: the reduced shard, stages 2/3 — the wire format, or fp32 (never narrower than
    what the reduction produced: an fp32 reduction is not thrown away into bf16).
    """
    if policy.grad_accum is not None:
        return get_format(policy.grad_accum)
    return policy.reduce_format if reduced else policy.compute_format


def wire_op(policy) -> str:
    """The collective's op for this policy's averaging: plain sum for "avg" (divided by N after the cast)."""
    return "sum" if policy.average == "avg" else policy.average


def accumulate(acc: np.ndarray, g: np.ndarray, first: bool) -> None:
    """acc = g on the first micro-step, else acc + g, each element rounded once to acc's dtype.

    NOTE: the first micro-step assigns (as a fresh `param.grad` does) rather than adding to zero,
    which would turn a -0.0 gradient into +0.0.
    """
    if first:
        acc[...] = g if g.dtype == acc.dtype else cast(g, get_format(acc.dtype))
    elif g.dtype == acc.dtype:
        acc += g  # one rounding per element, in acc's dtype
    else:
        acc[...] = cast(acc.astype(np.float64) + g.astype(np.float64), get_format(acc.dtype))  # exact sum, one rounding


def finish(reduced: np.ndarray, policy, world_size: int, micro_steps: int = 1) -> np.ndarray:
    """The optimizer's gradient: `reduced` (the reduced, accumulated gradient) in the update format,
    averaged over N ranks and K micro-steps and unscaled by S. Returns a new array."""
    upd = policy.update_format
    divisor = world_size * micro_steps if policy.average == "avg" else micro_steps
    if policy.average == "avg" or divisor != 1:
        g = get_op("avg").post(reduced, divisor)  # widen to fp32 (exact), then one division
    else:
        g = reduced
    g = cast(g, upd) if g.dtype != upd.dtype else g.copy()
    if policy.loss_scale != 1:
        g = (g / upd.dtype.type(policy.loss_scale)).astype(upd.dtype)  # unscale in fp32
    return g
