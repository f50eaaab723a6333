"""fp8 scaling recipes as state machines, the way the loss scalers are: explicit state, one update per step.

    recipe = get_fp8_recipe("delayed")                # Transformer Engine's DelayedScaling defaults
    S = recipe.scale("forward")                       # the scale this step's cast uses
    recipe.record("forward", amax)                    # the cast kernel's amax (max over the step's casts)
    decision = recipe.update("forward", reduced_amax) # after the group's MAX all-reduce: the next scale

Each `update` returns a `ScaleDecision` (the engine writes it into the trace as an `Fp8ScaleUpdate`). The recipes,
by Transformer Engine's names (TE 2.18, common/recipe/__init__.py; d0067d0 reads the same) and torchao's:

- `DelayedScaling` (margin 0, HYBRID, amax_history_len 1024, amax_compute_algo "max"): the scale of step t comes
  from the amaxes of the steps before it. The fused update (common/recipe/delayed_scaling.cu:
  amax_and_scale_update_after_reduction, kernel_bulk) takes the reduced amax a (or history[0] when the reduction
  gave 0); if a == 0 nothing moves. Otherwise it reads a_i = history[i + 1] (i < L - 1) and a_(L-1) = a, takes
  amax = max_i a_i ("max", as fmaxf from 0: a NaN a_i is skipped, TE 2.18) or a ("most_recent"), and writes
  history[i] = a_i (a NaN too), history[0] = 0 (the next step's slot; so history[1] counts once more, then drops),
  and
  S = fl32(fl32(max_fp8 · 2^-margin) / amax) when amax is finite and > 0 (else S stays), FLT_MAX if that is inf.
  HYBRID: e4m3 (max 448) in forward, e5m2 (max 57344) in backward (`Format.HYBRID`).
- `Float8CurrentScaling`: S from this very tensor's amax (recipe_common.cuh: compute_scale_from_amax, fp32
  __fdiv_rn; amax 0 -> S = 1). No state beyond the last decision.
- `MXFP8BlockScaling` (E4M3): no per-tensor scale at all; 32-element blocks with E8M0 scales (_fp8_blocks.py).
- `TorchaoDynamic`: torchao's tensorwise dynamic scaling for FSDP2's fp8 all-gather on the precompute path
  (`precompute_float8_dynamic_scale_for_fsdp` after each optimizer step: fp8_scaling.torchao_scale, float64
  division, EPS clamp in the amax's dtype, e4m3 everywhere); `TorchaoAmaxToScale` ("torchao-amax_to_scale"): the
  path torchao 0.18 takes when that call is not made, `amax_to_scale` at every gather (_fp8_scaling.py's docstring
  says where the two differ).
"""

from __future__ import annotations


import ml_dtypes
import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision.quantize._fp8_scaling import te_scale, torchao_amax_to_scale, torchao_scale

ROLES = ("forward", "backward")
_AMAX_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32))  # kept as torchao keeps them
FORMATS = {"E4M3": ("fp8_e4m3", "fp8_e4m3"), "HYBRID": ("fp8_e4m3", "fp8_e5m2")}  # TE's Format: (fwd, bwd)
_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


@dataclass(frozen=True)
class ScaleDecision:
    """What one `update` decided for one role."""

    recipe: str
    role: str  # "forward" (weights, activations) or "backward" (gradients)
    fmt: str  # the fp8 format of that role
    amax: float  # the amax the scale was computed from (0.0: none seen)
    scale_before: float
    scale_after: float


def _role(role: str) -> int:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return ROLES.index(role)


def _format_pair(fp8_format: str) -> tuple:
    if fp8_format not in FORMATS:
        raise ValueError(f"fp8_format must be one of {tuple(FORMATS)} (Transformer Engine refuses pure E5M2), "
                         f"got {fp8_format!r}")
    return FORMATS[fp8_format]


class DelayedScaling:
    """Transformer Engine's DelayedScaling: an amax history per role, the scale one step behind (module docstring)."""

    kind = "delayed"
    needs_amax_reduction = True
    per_gather = False  # the scales are made once a step, before its first gather

    def __init__(self, margin: int = 0, fp8_format: str = "HYBRID", amax_history_len: int = 1024,
                 amax_compute_algo: str = "max"):
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise ValueError(f"margin must be an integer >= 0, got {margin!r}")
        if isinstance(amax_history_len, bool) or not isinstance(amax_history_len, int) or amax_history_len < 1:
            raise ValueError(f"amax_history_len must be an integer >= 1, got {amax_history_len!r}")
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo must be 'max' or 'most_recent', got {amax_compute_algo!r}")
        self.formats = _format_pair(fp8_format)
        self.margin, self.fp8_format = margin, fp8_format
        self.amax_history_len, self.amax_compute_algo = amax_history_len, amax_compute_algo
        self.history = np.zeros((2, amax_history_len), np.float32)  # [role, i]; i = 0: this step's slot
        self.scales = np.ones(2, np.float32)  # the scales this step's casts use

    def fmt(self, role: str) -> str:
        return self.formats[_role(role)]

    def scale(self, role: str) -> np.float32:
        return self.scales[_role(role)]

    def record(self, role: str, amax) -> None:
        """The cast kernel writes max(slot 0, amax(x)) (an atomic max over the step's casts)."""
        i = _role(role)
        self.history[i, 0] = max(self.history[i, 0], np.float32(amax))

    def update(self, role: str, reduced_amax=None) -> ScaleDecision:
        """The fused amax-and-scale update after the MAX all-reduce (`reduced_amax`: None = no reduction)."""
        i = _role(role)
        h, before = self.history[i], self.scales[i]
        last = np.float32(reduced_amax) if reduced_amax is not None and reduced_amax != 0 else h[0]
        if last == 0:  # kernel_bulk skips the roll, and the amax it computes stays 0: the scale is kept
            return ScaleDecision(self.kind, role, self.fmt(role), 0.0, float(before), float(before))
        # a_i = history[i + 1] for i < L-1, a_(L-1) = last; amax = max_i a_i; history[0] = 0, history[i] = a_i else
        a = np.concatenate([h[1:], [last]]).astype(np.float32)
        # kernel_bulk: `amax = fmaxf(amax, a)` from 0, and fmaxf returns the other operand when one is NaN: a NaN
        # amax is skipped (it stays in its slot until it rolls out), it does not freeze the scale for L steps
        amax = np.float32(np.fmax.reduce(a, initial=0)) if self.amax_compute_algo == "max" else last
        h[:] = a
        h[0] = 0
        scaled_max = np.float32(_MAX[self.fmt(role)] * 2.0**-self.margin)
        if np.isfinite(amax) and amax > 0:
            with np.errstate(over="ignore"):
                s = np.float32(scaled_max / amax)  # IEEE fp32 division (delayed_scaling.cu builds without fast math)
            self.scales[i] = np.float32(np.finfo(np.float32).max) if np.isinf(s) else s
        return ScaleDecision(self.kind, role, self.fmt(role), float(amax), float(before), float(self.scales[i]))

    def state_dict(self) -> dict:
        return {"kind": self.kind, "margin": self.margin, "fp8_format": self.fp8_format,
                "amax_history_len": self.amax_history_len, "amax_compute_algo": self.amax_compute_algo,
                "history": self.history.copy(), "scales": self.scales.copy()}


class Float8CurrentScaling:
    """Transformer Engine's per-tensor current scaling: S from the tensor being cast (module docstring)."""

    kind = "current"
    needs_amax_reduction = True
    per_gather = False

    def __init__(self, fp8_format: str = "HYBRID", power_2_scales: bool = False):
        self.formats = _format_pair(fp8_format)
        self.power_2_scales = bool(power_2_scales)
        self.scales = np.ones(2, np.float32)

    def fmt(self, role: str) -> str:
        return self.formats[_role(role)]

    def scale(self, role: str) -> np.float32:
        return self.scales[_role(role)]

    def record(self, role: str, amax) -> None:
        """Nothing to remember: the next `update` gets the amax itself."""

    def update(self, role: str, reduced_amax=None) -> ScaleDecision:
        i, before = _role(role), self.scales[_role(role)]
        amax = np.float32(0 if reduced_amax is None else reduced_amax)
        self.scales[i] = te_scale(amax, self.fmt(role), power_of_2=self.power_2_scales)
        return ScaleDecision(self.kind, role, self.fmt(role), float(amax), float(before), float(self.scales[i]))


class TorchaoDynamic(Float8CurrentScaling):
    """torchao's tensorwise dynamic scaling (precompute_float8_dynamic_scale_for_fsdp): e4m3, float64 division."""

    kind = "torchao"

    def __init__(self):
        super().__init__("E4M3")

    def update(self, role: str, reduced_amax=None) -> ScaleDecision:
        """`reduced_amax` in the weights' dtype (a Python number: fp32): torchao clamps it in that dtype."""
        i, before = _role(role), self.scales[_role(role)]
        amax = np.asarray(np.float32(0) if reduced_amax is None else reduced_amax)
        amax = amax if amax.dtype in _AMAX_DTYPES else amax.astype(np.float32)
        self.scales[i] = self.scale_of(amax, self.fmt(role))
        return ScaleDecision(self.kind, role, self.fmt(role), float(amax), float(before), float(self.scales[i]))

    scale_of = staticmethod(torchao_scale)


class TorchaoAmaxToScale(TorchaoDynamic):
    """torchao without `precompute_float8_dynamic_scale_for_fsdp`: fsdp_pre_all_gather's own amax all-reduce and
    float8_utils.amax_to_scale at every gather (fp8_scaling.torchao_amax_to_scale)."""

    kind = "torchao-amax_to_scale"
    per_gather = True  # one MAX all-reduce of the unit's amax before each of its gathers
    scale_of = staticmethod(torchao_amax_to_scale)


class MXFP8BlockScaling:
    """Transformer Engine's MXFP8: E4M3 blocks of 32 with E8M0 scales; no tensor scale, no amax all-reduce."""

    kind = "mxfp8"
    needs_amax_reduction = False
    per_gather = False

    def __init__(self, fp8_format: str = "E4M3"):
        self.formats = _format_pair(fp8_format)

    def fmt(self, role: str) -> str:
        return self.formats[_role(role)]


FP8_RECIPES = {"torchao": TorchaoDynamic, "torchao-amax_to_scale": TorchaoAmaxToScale, "delayed": DelayedScaling,
               "current": Float8CurrentScaling, "mxfp8": MXFP8BlockScaling}


def get_fp8_recipe(name, **options):
    """A fresh recipe by name (FP8_RECIPES' keys), or the recipe object itself."""
    if not isinstance(name, str):
        if hasattr(name, "kind") and name.kind in FP8_RECIPES:
            return name
        raise TypeError(f"an fp8 recipe is one of {tuple(FP8_RECIPES)} or such an object, got {name!r}")
    if name not in FP8_RECIPES:
        raise ValueError(f"unknown fp8 recipe {name!r}; choose one of {tuple(FP8_RECIPES)}")
    return FP8_RECIPES[name](**options)
