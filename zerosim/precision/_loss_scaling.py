"""Loss scaling as the frameworks do it: two dynamic state machines, a static scale, and unscaling.

Multiply the loss by S so that small fp16 gradients do not flush to zero, divide the gradients by S
before the optimizer, and when a gradient overflowed (inf/NaN anywhere, on any rank) skip the step
and lower S (Micikevicius et al., "Mixed Precision Training", 2018). Each scaler here is a small
object with explicit state (`state_dict` / `from_state_dict`) and one method:

    decision = scaler.update(found_inf)   # -> StepDecision(skip, scale_before, scale_after, message)

called once per optimizer step with whether any rank found inf/NaN (DeepSpeed all-reduces that flag
with MAX across ranks, stage_1_and_2.py: has_overflow). The two dynamic machines differ:

- `TorchGradScaler` (torch/amp/grad_scaler.py: GradScaler.update -> torch._amp_update_scale_,
  ATen/native/cpu/AmpGradScalerKernels.cpp: _amp_update_scale_cpu_kernel; the CUDA kernel in
  cuda/AmpKernels.cu is the same logic). The scale is an fp32 tensor. On inf: scale *= backoff,
  tracker = 0. Otherwise tracker + 1; when it reaches growth_interval, scale *= growth (unless
  that overflows fp32) and tracker = 0. So the scale grows at the growth_interval-th clean step.
- `DeepSpeedLossScaler` (deepspeed/runtime/fp16/loss_scaler.py: DynamicLossScaler.update_scale).
  The scale is a Python float. On overflow it first spends `hysteresis` (DynamicLossScaler's
  `delayed_shift`): only when the hysteresis left is 1 does the scale drop, to
  max(scale / scale_factor, min_scale) — and at min_scale it raises. It grows when
  (cur_iter - last_overflow_iter - 1) is a positive multiple of scale_window: first at the
  (scale_window + 1)-th clean step after an overflow (or the start) - one step later than
  torch's rule - then every scale_window steps.

Unscaling (`unscale`): both frameworks multiply by the fp32 reciprocal of the scale, formed in
double — torch: GradScaler.unscale_ `self._scale.double().reciprocal().float()`, then
_amp_foreach_non_finite_check_and_unscale_ multiplies; DeepSpeed: unscale_and_clip_grads
`grad.data.mul_(1. / combined_scale)`. For a power-of-two scale that equals dividing; for other
scales it can differ in the last bit, so dividing is kept as a named option.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from zerosim._dataclass import dataclass

UNSCALE_HOWS = ("reciprocal", "divide")


@dataclass(frozen=True)
class StepDecision:
    """What one `update(found_inf)` decided."""

    skip: bool  # True: leave masters, optimizer state, step count and 16-bit params untouched
    scale_before: float  # the scale this step's gradients were multiplied by
    scale_after: float  # the scale for the next step
    message: str = ""  # DeepSpeed's log line (rank 0) when it skips; "" otherwise


class LossScaleAtMinimum(RuntimeError):
    """DeepSpeed's DynamicLossScaler gives up: an overflow at min_scale with no hysteresis left."""


def _positive(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return float(x)


def _scale(x, name: str) -> float:
    """A loss scale: > 0 and finite in fp32, as torch's GradScaler keeps it (an fp32 tensor, which refuses 1e40), so
    the loss times S and its fp32 reciprocal 1/S stay numbers (1e300 passed as a static scale before this check)."""
    value = _positive(x, name)
    if not math.isfinite(_f32(value)):
        raise ValueError(f"{name} {x!r} overflows fp32 (largest finite {float(np.finfo(np.float32).max):.7g}); "
                         "loss scales are powers of two such as 2**16")
    if not math.isfinite(_f32(1.0 / value)) or _f32(value) == 0:  # the unscale 1/S would be inf: every master NaN
        raise ValueError(f"{name} {x!r} is so small that its fp32 reciprocal, which unscales the gradient, overflows "
                         f"(the least scale is {1 / float(np.finfo(np.float32).max):.4g}); loss scales are powers of "
                         "two such as 2**16")
    return value


def _flag_option(x, name: str) -> bool:
    """A yes/no option: True or False only (bool("no") is True, so a string is refused rather than read)."""
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def _count(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def _flag(found_inf) -> bool:
    if not isinstance(found_inf, (bool, np.bool_)):
        raise TypeError(f"found_inf must be a bool (did any rank see inf/NaN?), got {found_inf!r}")
    return bool(found_inf)


def _f32(x: float) -> float:
    """A double stored into a C++ float (one rounding), read back as a Python float."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


class TorchGradScaler:
    """PyTorch's dynamic loss scale (torch.amp.GradScaler): fp32 scale, growth tracker."""

    kind = "torch"

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        _positive(init_scale, "init_scale")
        growth_factor = _positive(growth_factor, "growth_factor")
        backoff_factor = _positive(backoff_factor, "backoff_factor")
        if growth_factor <= 1.0:
            raise ValueError(f"growth_factor must be > 1 (GradScaler asserts it), got {growth_factor}")
        if backoff_factor >= 1.0:
            raise ValueError(f"backoff_factor must be < 1 (GradScaler asserts it), got {backoff_factor}")
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = _count(growth_interval, "growth_interval")
        self._scale = _f32(init_scale)  # torch.full((), init_scale, dtype=torch.float32)
        if not math.isfinite(self._scale):
            raise ValueError(f"init_scale {init_scale!r} overflows the fp32 scale tensor")
        self._growth_tracker = 0  # consecutive clean steps since the last growth or overflow (int32)

    @property
    def scale(self) -> float:
        """The current scale (an fp32 value)."""
        return self._scale

    def update(self, found_inf: bool) -> StepDecision:
        """_amp_update_scale_: back off on inf, grow after growth_interval clean steps in a row."""
        overflow = _flag(found_inf)
        before = self._scale
        if overflow:
            self._scale = _f32(before * self.backoff_factor)  # float * double, stored in the float
            self._growth_tracker = 0
        else:
            successful = self._growth_tracker + 1
            if successful == self.growth_interval:
                grown = _f32(before * self.growth_factor)
                if math.isfinite(grown):  # "Do not grow the scale past fp32 bounds to inf."
                    self._scale = grown
                self._growth_tracker = 0
            else:
                self._growth_tracker = successful
        return StepDecision(overflow, before, self._scale)

    def state_dict(self) -> dict:
        """GradScaler.state_dict's five entries, plus "kind"."""
        return {"kind": self.kind, "scale": self._scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self._growth_tracker}

    @classmethod
    def from_state_dict(cls, state: dict) -> TorchGradScaler:
        """Rebuild a scaler from `state_dict()` (GradScaler.load_state_dict's fields)."""
        s = cls(state["scale"], state["growth_factor"], state["backoff_factor"], state["growth_interval"])
        s._growth_tracker = _count(state["_growth_tracker"], "_growth_tracker", minimum=0)
        return s


class DeepSpeedLossScaler:
    """DeepSpeed's DynamicLossScaler with its fp16 config defaults (initial_scale_power 16,
    loss_scale_window 1000, hysteresis 2, consecutive_hysteresis false, min_loss_scale 1;
    deepspeed/runtime/precision_config.py). `hysteresis` is the class's `delayed_shift`;
    `scale_factor` is fixed at 2.0 in DeepSpeed (not a config key)."""

    kind = "deepspeed"

    def __init__(self, init_scale: float = 2.0**16, scale_factor: float = 2.0, scale_window: int = 1000,
                 hysteresis: int = 2, min_scale: float = 1.0, consecutive_hysteresis: bool = False,
                 raise_error_at_min_scale: bool = True):
        self.scale_factor = _positive(scale_factor, "scale_factor")
        if self.scale_factor <= 1.0:
            raise ValueError(f"scale_factor must be > 1, got {scale_factor}")
        self.scale_window = _count(scale_window, "scale_window")  # precision_config rejects <= 0
        self.hysteresis = _count(hysteresis, "hysteresis")
        self.min_scale = _scale(min_scale, "min_scale")
        self.consecutive_hysteresis = _flag_option(consecutive_hysteresis, "consecutive_hysteresis")
        self.raise_error_at_min_scale = _flag_option(raise_error_at_min_scale, "raise_error_at_min_scale")
        self.cur_scale = _scale(init_scale, "init_scale")
        if self.cur_scale < self.min_scale:  # DeepSpeed would raise the scale to min_scale at the first overflow
            raise ValueError(f"init_scale {init_scale!r} is below min_scale {min_scale!r}; "
                             "the scale never goes below its minimum")
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.cur_hysteresis = self.hysteresis

    @property
    def scale(self) -> float:
        """The current scale (`cur_scale`, a Python float)."""
        return self.cur_scale

    def update(self, found_inf: bool) -> StepDecision:
        """DynamicLossScaler.update_scale(overflow); every overflow skips the step (ZeRO's step())."""
        overflow = _flag(found_inf)
        before = self.cur_scale
        message = ""
        if overflow:
            if self.hysteresis == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale and self.raise_error_at_min_scale:
                    raise LossScaleAtMinimum(
                        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
                next_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
                message = (f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                           f"{int(self.cur_scale)}, reducing to {int(next_scale)}")
                self.cur_scale = next_scale
            else:
                message = (f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                           f"{int(self.cur_scale)}, but hysteresis is {self.cur_hysteresis}. "
                           f"Reducing hysteresis to {self.cur_hysteresis - 1}")
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.hysteresis
            stable_interval = (self.cur_iter - self.last_overflow_iter) - 1
            if stable_interval > 0 and stable_interval % self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.hysteresis
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1
        return StepDecision(overflow, before, self.cur_scale, message)

    def state_dict(self) -> dict:
        """Configuration and the four counters DeepSpeed checkpoints (it pickles the scaler)."""
        return {"kind": self.kind, "scale_factor": self.scale_factor, "scale_window": self.scale_window,
                "hysteresis": self.hysteresis, "min_scale": self.min_scale,
                "consecutive_hysteresis": self.consecutive_hysteresis,
                "raise_error_at_min_scale": self.raise_error_at_min_scale, "cur_scale": self.cur_scale,
                "cur_iter": self.cur_iter, "last_overflow_iter": self.last_overflow_iter,
                "cur_hysteresis": self.cur_hysteresis}

    @classmethod
    def from_state_dict(cls, state: dict) -> DeepSpeedLossScaler:
        """Rebuild a scaler from `state_dict()`."""
        s = cls(state["cur_scale"], state["scale_factor"], state["scale_window"], state["hysteresis"],
                state["min_scale"], state["consecutive_hysteresis"], state["raise_error_at_min_scale"])
        s.cur_iter = _count(state["cur_iter"], "cur_iter", minimum=0)
        s.last_overflow_iter = _count(state["last_overflow_iter"], "last_overflow_iter", minimum=-1)
        s.cur_hysteresis = _count(state["cur_hysteresis"], "cur_hysteresis")
        return s


class StaticLossScale:
    """A fixed scale S. On overflow: raise FloatingPointError (`on_overflow="raise"`, zerosim's
    behaviour so far) or skip the step and keep S (`"skip"`, DeepSpeed's static LossScaler: the
    ZeRO optimizer still checks for overflow and skips, and update_scale does nothing)."""

    kind = "static"

    def __init__(self, scale: float, on_overflow: str = "raise"):
        if on_overflow not in ("raise", "skip"):
            raise ValueError(f"on_overflow must be 'raise' or 'skip', got {on_overflow!r}")
        self._scale = _scale(scale, "scale")
        self.on_overflow = on_overflow

    @property
    def scale(self) -> float:
        """The fixed scale."""
        return self._scale

    def update(self, found_inf: bool) -> StepDecision:
        """Nothing changes; an overflow raises or skips, as `on_overflow` says."""
        overflow = _flag(found_inf)
        if overflow and self.on_overflow == "raise":
            raise FloatingPointError(f"gradients overflowed (inf/NaN) at the static loss scale {self._scale:g}")
        return StepDecision(overflow, self._scale, self._scale)

    def state_dict(self) -> dict:
        """The scale and the overflow policy."""
        return {"kind": self.kind, "scale": self._scale, "on_overflow": self.on_overflow}

    @classmethod
    def from_state_dict(cls, state: dict) -> StaticLossScale:
        """Rebuild from `state_dict()`."""
        return cls(state["scale"], state["on_overflow"])


LOSS_SCALERS = {"torch": TorchGradScaler, "dynamic": TorchGradScaler, "deepspeed": DeepSpeedLossScaler}


def get_loss_scaler(name, **kwargs):
    """A fresh scaler: "torch" / "dynamic" (torch's GradScaler), "deepspeed", or a number (a static
    scale; a numeric string such as "1024" too, as a command line passes it). `kwargs` go to the
    constructor, e.g. get_loss_scaler("torch", growth_interval=100)."""
    if isinstance(name, str) and name.lower() in LOSS_SCALERS:
        return LOSS_SCALERS[name.lower()](**kwargs)
    try:
        value = float(name) if isinstance(name, str) else name
    except ValueError:
        value = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return StaticLossScale(value, **kwargs)
    raise ValueError(f"unknown loss scale {name!r}; choose one of {', '.join(LOSS_SCALERS)} or a number > 0")


def loss_scaler_from_state_dict(state: dict):
    """Rebuild whichever scaler wrote `state` (its "kind" says which)."""
    classes = {cls.kind: cls for cls in (TorchGradScaler, DeepSpeedLossScaler, StaticLossScale)}
    kind = state.get("kind") if isinstance(state, dict) else None
    if kind not in classes:
        raise ValueError(f"not a loss-scaler state dict (kind {kind!r}); expected one of {sorted(classes)}")
    return classes[kind].from_state_dict(state)


def unscale(g32: np.ndarray, scale: float, how: str = "reciprocal") -> np.ndarray:
    """Gradients divided by the loss scale, as a new array of g32's dtype (fp32, or fp64 for the
    float64 yardstick).

    "reciprocal" (both frameworks): g * fl32(1/scale), the reciprocal formed in double and rounded
    once to fp32, one rounding per product (for fp64 input: g * (1/scale) in double). "divide":
    g / fl32(scale), one rounding. A scale of exactly 1 returns the values unchanged, as torch's
    kernel skips the multiply (`inv_scale_val == 1.f ? val : val * inv_scale_val`).
    """
    if how not in UNSCALE_HOWS:
        raise ValueError(f"unknown unscale method {how!r}; choose one of {UNSCALE_HOWS}")
    scale = _positive(scale, "scale")
    g = g32 if hasattr(g32, "dtype") else np.asarray(g32)  # as given: a data-less (meta) array stays one
    if g.dtype not in (np.float32, np.float64):
        raise ValueError(f"unscale works on fp32 gradients (torch refuses fp16: 'Attempting to unscale FP16 "
                         f"gradients'); got {g.dtype}")
    dt = g.dtype.type
    if how == "reciprocal":
        inv = dt(1.0 / scale)  # 1/scale in double, then (for fp32) one rounding
        return g.copy() if inv == 1 else g * inv
    return g / dt(scale)


def has_inf_or_nan(*arrays) -> bool:
    """True if any element of any array is inf or NaN: one rank's overflow flag, before DeepSpeed's
    MAX all-reduce of it (stage_1_and_2.py: _has_inf_or_nan, has_overflow)."""
    return any(not np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in arrays)
