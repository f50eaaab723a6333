"""Which format each tensor of training lives in: the mixed-precision policy, as data.

    compute    params, activations and gradients in forward/backward (fp16/bf16/fp32)
    master     the optimizer's copy of the weights (fp32), or None: updates land on the compute copy
    reduce     the format gradients travel in during reduction (None: the compute format)
    loss_scale multiply the loss by S before backward, unscale the fp32 gradient after (fp16's underflow
               fix, seed 002). A number is a static S (1.0 turns it off; an overflow raises
               FloatingPointError); "torch" (= "dynamic") is PyTorch's GradScaler and "deepspeed" DeepSpeed's
               DynamicLossScaler: S changes from step to step and an overflow skips the step
               (precision/_loss_scaling.py; `loss_scale_options` go to the scaler, e.g. growth_interval).
               NOTE: use a power of two, as AMP's scalers do: then scaling is exact; any other S adds a rounding
    unscale    how the fp32 gradient is unscaled: "reciprocal" multiplies by fl32(1/S), as torch's
               GradScaler and DeepSpeed do; "divide" divides by S (the two differ when S is no power of two)
    rounding   how the updated weights are rounded into the compute format: "nearest", or "stochastic"
               (unbiased: a too-small update still moves a weight with the right probability, the
               standard remedy for pure 16-bit training); draws come from `counter_uniforms(seed, ...)`
    optim_state the format the optimizer's state (Adam's m and v, a momentum) is *stored* in between steps: None
               (default) keeps it in the update format (fp32: seeds 000, 001 and 002 all say it must be); "fp16" or
               "bf16" stores it rounded to nearest into that format after every step, while the step's arithmetic
               stays in the update format: each element widened, stepped, and rounded back on store, as torch's
               fused Adam does for 16-bit state (aten/src/ATen/native/cuda/fused_adam_utils.cuh, `adam_math`:
               `static_cast<opmath_t>` on load, fp32 math, the 16-bit store). 2 bytes per state element, not 4
    grad_accum the format gradients accumulate in across the K micro-steps of gradient accumulation:
               None (default) keeps them in the compute format (a rank's own gradients, stages 0/1)
               or the wire format (the reduced shard, stages 2/3); "fp32" accumulates in fp32, as
               DeepSpeed's `data_types.grad_accum_dtype` and Megatron-LM's fp32 `main_grad` do
    reduction  a shorthand for the gradient recipe, which has a config of its own beside this policy
               (zerosim.parallel.data.GradientRecipe: `ZeroEngine(..., recipe=...)`; an engine given both checks they
               agree): the recipe by which the N ranks' gradients become the one the optimizer reads, by the name of
               the code it follows (parallel/data/recipes/_recipes.py, docs/recipes.md): "seeds" sums on the wire and
               divides by N in fp32 after the cast (the seeds' protocol, the default); "ddp" (stage 0),
               "deepspeed-zero12" (stages 1/2: each bucket all-reduced, DeepSpeed's default
               use_multi_rank_bucket_allreduce=True), "deepspeed-zero12-reduce" (the same with that flag off: a reduce
               to each slice's owner), "deepspeed-zero3" and "fsdp2" (stage 3, on per-parameter partitions): what
               DistributedDataParallel, DeepSpeed ZeRO-1/2, DeepSpeed ZeRO-3 and FSDP2 do
    arithmetic the kernels the models' products and functions run on (precision/arithmetic/): "portable" (the
               default) rounds each exact dot product, exp, log, tanh, sin and cos once to fp32, so every machine
               gives the same bits; "native": the machine's sgemm and NumPy's SIMD functions, faster, their last
               bits the machine's
    allreduce  (the recipe's too) the chunk map of an all-reduce (stage 0, and deepspeed-zero12's buckets):
               "ring" (reduce-scatter then all-gather over the N shards), "nccl" (NCCL's ring all-reduce with
               its own per-loop chunk map, one channel: collectives/chunk_maps/_nccl.py), which is what DDP's
               ncclAllReduce does, or "gloo" (torch's ProcessGroupGloo on CPU: collectives/chunk_maps/_gloo.py)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import replace

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision._formats import Format, get_format
from zerosim.precision._loss_scaling import LOSS_SCALERS, UNSCALE_HOWS, get_loss_scaler
from zerosim.precision.arithmetic import check_arithmetic
from zerosim.precision.cast import cast

# what each name means is written in zerosim/parallel/data/recipes/_recipes.py (RECIPES), the one place; listed here to
# check input
REDUCTIONS = ("seeds", "ddp", "deepspeed-zero12", "deepspeed-zero12-reduce", "deepspeed-bf16-optimizer",
              "deepspeed-zero3", "fsdp2")
ALLREDUCES = ("ring", "nccl", "gloo")
OPTIM_STATES = ("fp32", "fp16", "bf16")  # storage formats of the optimizer's state (8-bit state is not modelled)


@dataclass(frozen=True)
class MixedPrecision:
    """A mixed-precision policy: which format each tensor of training lives in (see the module docstring).

    Example: ``MixedPrecision(compute="bf16", master="fp32", reduce="fp32")`` reduces bf16 gradients in
    fp32, as FSDP's ``reduce_dtype`` does.
    """

    compute: str = "fp16"  # forward/backward format
    master: str | None = "fp32"  # None = "pure": no master copy, the lost-update lesson
    reduce: str | None = None  # wire format for gradients; None = compute
    loss_scale: float | str = 1.0  # a static S (1.0: off), or "torch" / "dynamic" / "deepspeed"
    loss_scale_options: tuple = ()  # ((name, value), ...) for the scaler, e.g. (("growth_interval", 100),)
    unscale: str = "reciprocal"  # or "divide"
    reduction: str = "seeds"  # the gradient recipe, see module docstring
    allreduce: str = "ring"  # or "nccl": the all-reduce's chunk map
    rounding: str = "nearest"  # of the updated weights into the compute format; or "stochastic"
    seed: int = 0  # for stochastic rounding's counter-based draws
    grad_accum: str | None = None  # accumulation format across micro-steps (None: compute / wire; or "fp32")
    optim_state: str | None = None  # storage format of the optimizer's state (None: the update format; or "fp16"...)
    arithmetic: str = "portable"  # the models' kernels: the same bits on any machine, or "native" (the machine's)

    def __post_init__(self):
        get_format(self.compute)
        if self.master is not None and get_format(self.master).bits < 32:
            raise ValueError(f"a master copy in {self.master} would lose the updates it exists to keep; "
                             "use fp32 or None")
        if self.reduce is not None:
            get_format(self.reduce)
        self._check_loss_scale()
        if self.unscale not in UNSCALE_HOWS:
            raise ValueError(f"unknown unscale {self.unscale!r}; choose one of {UNSCALE_HOWS}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction recipe {self.reduction!r}; choose one of {REDUCTIONS}")
        if self.allreduce not in ALLREDUCES:
            raise ValueError(f"unknown allreduce {self.allreduce!r}; choose one of {ALLREDUCES}")
        if self.grad_accum is not None and not _holds(get_format(self.grad_accum), get_format(self.compute)):
            # bits alone are not enough: fp16 has bf16's width but not its range (bf16-held gradients overflowed)
            raise ValueError(f"grad_accum {self.grad_accum} cannot hold every {self.compute} gradient (its range or "
                             f"precision is smaller); use None (accumulate in {self.compute}) or fp32")
        if self.optim_state is not None and self.optim_state not in OPTIM_STATES:
            raise ValueError(f"unknown optim_state {self.optim_state!r}: the optimizer's state is stored in one of "
                             f"{', '.join(OPTIM_STATES)} (or None: the update format)")
        check_arithmetic(self.arithmetic)
        if self.rounding not in ("nearest", "stochastic"):
            raise ValueError(f"unknown rounding {self.rounding!r}; choose 'nearest' or 'stochastic'")

    def _check_loss_scale(self) -> None:
        """A number > 0 or a scaler's name, with options the scaler accepts; options kept as sorted pairs
        (a dict, or the lists a JSON manifest gives back, become a tuple: policies compare equal)."""
        s, opts = self.loss_scale, self.loss_scale_options
        if isinstance(s, str):
            if s.lower() not in LOSS_SCALERS:
                raise ValueError(f"unknown loss_scale {s!r}; give a number > 0 or one of {', '.join(LOSS_SCALERS)}")
            object.__setattr__(self, "loss_scale", s.lower())
        elif isinstance(s, bool) or not isinstance(s, numbers.Real) or not (s > 0 and math.isfinite(s)):
            raise ValueError(f"loss_scale must be a positive finite number or a scaler's name, got {s!r}")
        else:
            object.__setattr__(self, "loss_scale", float(s))
        pairs = opts.items() if isinstance(opts, dict) else opts
        try:
            pairs = tuple(sorted((str(k), v) for k, v in pairs))
        except (TypeError, ValueError):
            raise ValueError(f"loss_scale_options must be name/value pairs or a dict, got {opts!r}") from None
        object.__setattr__(self, "loss_scale_options", pairs)
        try:
            self.make_scaler()  # the scaler checks its own options
        except TypeError as e:
            raise ValueError(f"loss_scale_options {dict(pairs)} do not fit loss scale {self.loss_scale!r}: "
                             f"{e}") from None

    @property
    def dynamic(self) -> bool:
        """True when the loss scale changes from step to step (a named scaler), so an overflow skips the step."""
        return isinstance(self.loss_scale, str)

    def make_scaler(self):
        """A fresh loss scaler for this policy (precision/_loss_scaling.py): static, torch's or DeepSpeed's."""
        return get_loss_scaler(self.loss_scale, **dict(self.loss_scale_options))

    @property
    def compute_format(self) -> Format:
        """The compute format, carrying this policy's arithmetic to the models (Format.arithmetic)."""
        return get_format(self.compute).with_arithmetic(self.arithmetic)

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

    @property
    def state_format(self) -> Format:
        """Format the optimizer's state is stored in between steps: `optim_state`, or the update format."""
        return self.update_format if self.optim_state is None else get_format(self.optim_state)

    def with_(self, **changes) -> "MixedPrecision":
        return replace(self, **changes)

    def round_weights(self, w, step: int, start):
        """Updated weights `w` into the compute format. `start`: where w sits in the model's flat vector, for
        stochastic rounding's draws — an index (elements start..), or ((offset in w, model index, count), ...)
        runs (per-parameter partitions: parallel/data/layouts/_partition.py); elements no run covers are padding."""
        if self.rounding == "nearest":
            return cast(w, self.compute_format)
        from zerosim.precision.cast import counter_uniforms  # stochastic rounding's draws: not the engine's import

        if isinstance(start, numbers.Integral):
            uniforms = counter_uniforms(self.seed, step, int(start), w.shape[0])
        else:
            uniforms = np.zeros(w.shape[0])  # (len,) float64; padding keeps 0 (a zero weight rounds to itself)
            for offset, first, count in start:
                uniforms[offset : offset + count] = counter_uniforms(self.seed, step, first, count)
        return cast(w, self.compute_format, "stochastic", uniforms=uniforms)


def _holds(wide: Format, narrow: Format) -> bool:
    """True when every finite value of `narrow` is a finite value of `wide`: at least its exponent and fraction bits."""
    return wide.exponent_bits >= narrow.exponent_bits and wide.mantissa_bits >= narrow.mantissa_bits


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
        if not isinstance(p, str):  # a list or dict would not hash: the same answer as any unknown name
            raise KeyError(p)
        return PRESETS[p]
    except KeyError:
        raise ValueError(f"unknown precision preset {p!r}; choose one of {', '.join(PRESETS)}") from None
