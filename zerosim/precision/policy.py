"""Which format each tensor of training lives in: the mixed-precision policy, as data.

    compute    params, activations and gradients in forward/backward (fp16/bf16/fp32)
    master     the optimizer's copy of the weights (fp32), or None: updates land on the compute copy
    reduce     the format gradients travel in during reduction (None: the compute format)
    loss_scale multiply the loss by S before backward, divide the fp32 gradient by S after (fp16's
               underflow fix, seed 002); 1.0 turns it off. NOTE: use a power of two, as AMP's scalers
               do: then scaling is exact; any other S adds a rounding (the product is formed in fp32)
    rounding   how the updated weights are rounded into the compute format: "nearest", or "stochastic"
               (unbiased: a too-small update still moves a weight with the right probability, the
               standard remedy for pure 16-bit training); draws come from `counter_uniforms(seed, ...)`
    grad_accum the format gradients accumulate in across the K micro-steps of gradient accumulation:
               None (default) keeps them in the compute format (a rank's own gradients, stages 0/1)
               or the wire format (the reduced shard, stages 2/3); "fp32" accumulates in fp32, as
               DeepSpeed's `data_types.grad_accum_dtype` and Megatron-LM's fp32 `main_grad` do
    average    how the N local gradients become one: "avg" sums on the wire and divides by N in fp32
               after the cast (the seeds' protocol), "avg_predivide" divides by N in the gradient dtype
               first (DeepSpeed ZeRO-1/2), "avg_premul" multiplies by 1/N in the wire dtype (NCCL avg, FSDP)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from zerosim.precision.cast import cast
from zerosim.precision.counter_random import counter_uniforms
from zerosim.precision.formats import Format, get_format

AVERAGES = ("avg", "avg_predivide", "avg_premul")


@dataclass(frozen=True)
class MixedPrecision:
    """A mixed-precision policy: which format each tensor of training lives in (see the module docstring).

    Example: ``MixedPrecision(compute="bf16", master="fp32", reduce="fp32")`` reduces bf16 gradients in
    fp32, as FSDP's ``reduce_dtype`` does.
    """

    compute: str = "fp16"  # forward/backward format
    master: str | None = "fp32"  # None = "pure": no master copy, the lost-update lesson
    reduce: str | None = None  # wire format for gradients; None = compute
    loss_scale: float = 1.0  # static loss scale S (1.0: off)
    average: str = "avg"  # see module docstring
    rounding: str = "nearest"  # of the updated weights into the compute format; or "stochastic"
    seed: int = 0  # for stochastic rounding's counter-based draws
    grad_accum: str | None = None  # accumulation format across micro-steps (None: compute / wire; or "fp32")

    def __post_init__(self):
        get_format(self.compute)
        if self.master is not None and get_format(self.master).bits < 32:
            raise ValueError(f"a master copy in {self.master} would lose the updates it exists to keep; use fp32 or None")
        if self.reduce is not None:
            get_format(self.reduce)
        if not (self.loss_scale > 0 and math.isfinite(self.loss_scale)):
            raise ValueError(f"loss_scale must be a positive finite number, got {self.loss_scale}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.average not in AVERAGES:
            raise ValueError(f"unknown averaging {self.average!r}; choose one of {AVERAGES}")
        if self.grad_accum is not None and get_format(self.grad_accum).bits < get_format(self.compute).bits:
            raise ValueError(f"grad_accum {self.grad_accum} is narrower than the compute format {self.compute}; use None or fp32")
        if self.rounding not in ("nearest", "stochastic"):
            raise ValueError(f"unknown rounding {self.rounding!r}; choose 'nearest' or 'stochastic'")

    @property
    def compute_format(self) -> Format:
        return get_format(self.compute)

    @property
    def master_format(self) -> Format | None:
        return None if self.master is None else get_format(self.master)

    @property
    def reduce_format(self) -> Format:
        return get_format(self.reduce or self.compute)

    @property
    def update_format(self) -> Format:
        """Format the optimizer does its arithmetic in: the master's, or fp32 when there is no master
        (a 16-bit weight is widened, updated in fp32, and rounded straight back)."""
        return self.master_format or (self.compute_format if self.compute_format.bits >= 32 else get_format("fp32"))

    def with_(self, **changes) -> "MixedPrecision":
        return replace(self, **changes)

    def round_weights(self, w, step: int, start: int):
        """Updated weights `w` (flat elements start.. of the model's flat vector) into the compute format."""
        if self.rounding == "nearest":
            return cast(w, self.compute_format)
        return cast(w, self.compute_format, "stochastic", uniforms=counter_uniforms(self.seed, step, start, w.shape[0]))


PRESETS = {
    "fp32": MixedPrecision(compute="fp32", master=None),
    "fp64": MixedPrecision(compute="fp64", master=None),  # the float64 yardstick
    "fp16-mixed": MixedPrecision(compute="fp16", master="fp32"),
    "bf16-mixed": MixedPrecision(compute="bf16", master="fp32"),
    "fp16-pure": MixedPrecision(compute="fp16", master=None),
    "bf16-pure": MixedPrecision(compute="bf16", master=None),
    "fp16-pure-sr": MixedPrecision(compute="fp16", master=None, rounding="stochastic"),  # the remedy, measured
    "bf16-pure-sr": MixedPrecision(compute="bf16", master=None, rounding="stochastic"),
}


def get_precision(p: "str | MixedPrecision") -> MixedPrecision:
    """A preset by name ("fp32", "fp16-mixed", "bf16-mixed", "fp16-pure", "bf16-pure") or a policy as is."""
    if isinstance(p, MixedPrecision):
        return p
    try:
        return PRESETS[p]
    except KeyError:
        raise ValueError(f"unknown precision preset {p!r}; choose one of {', '.join(PRESETS)}") from None
