"""Runs side by side: the same model, data and initial weights under several precision policies, step by step.

What seeds 000, 001 and 002 argue and this measures: Adam's m and v kept in fp16 instead of fp32
(`MixedPrecision(optim_state="fp16")`, optim/_stored_state.py) lose the small second moments — the stored
v = (1 - b2)·g² rounds to 0 below fp16's smallest subnormal, Adam's bias correction then divides a one-step
v by a many-step (1 - b2**t), and the update grows by up to 1/sqrt(1 - b2) ≈ 32 times (seed 001: "these tiny
differences round to zero, corrupting the adaptive step sizes"); bf16's 8-bit significand leaves the EMA
unchanged whenever (1 - b2)·(g² - v) is under half its spacing (seed 000: "quantize the update loop"). And
fp16 against bf16 for the whole of training, with and without loss scaling.

The runs go through the single-device oracle (reference/_oracle.py), which every ZeRO stage equals bit for bit
(tests/test_engine_oracle.py, tests/test_optim_state_format.py), so a run here is what each stage would give.
Letters: P parameters, N ranks (micro-batches per step), T steps.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models import MLP
from zerosim.models.data import make_regression
from zerosim.optim import get_optimizer
from zerosim.precision import get_precision
from zerosim.reference import Reference


@dataclass(frozen=True)
class RunRecord:
    """One policy's run: per step (T entries) the mean loss over the N micro-batches, and — for an optimizer
    with a second moment "v" — the share of the P entries of v that are exactly 0, and the share the step left
    unchanged (a stalled EMA; 0 where the optimizer keeps no v)."""

    label: str
    losses: tuple  # (T,) float: mean loss of the step's micro-batches
    v_zero: tuple  # (T,) float in [0, 1]: v == 0 after the step
    v_unchanged: tuple  # (T,) float in [0, 1]: v after the step == v before it, bit for bit


def run_side_by_side(policies: dict, widths=(16, 64, 64, 4), ranks: int = 2, steps: int = 30,
                     optimizer: str = "adam", lr: float = 1e-3, batch: int = 16, seed: int = 0) -> dict:
    """{label: RunRecord} for each {label: precision preset or MixedPrecision} in `policies`: an MLP of `widths`
    on `zerosim train`'s regression task (a teacher MLP's outputs), N = `ranks` micro-batches of `batch` samples
    per step, the same weights (seed + 1) and data (seed) for every policy."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    resolved = {label: get_precision(p) for label, p in policies.items()}  # every policy checked before any run
    model = MLP(list(widths))
    params = model.init_params(np.random.default_rng(seed + 1))
    data = make_regression(np.random.default_rng(seed), 64, batch, list(widths))
    out = {}
    for label, policy in resolved.items():
        ref = Reference(model, get_optimizer(optimizer, lr=lr), policy, world_size=ranks, params=params)
        losses, zero, unchanged = [], [], []
        for s in range(steps):
            before = ref.state.get("v", np.zeros(0))[: model.num_params].copy()
            losses.append(float(np.mean(ref.step([data[(s * ranks + r) % len(data)] for r in range(ranks)]))))
            v = ref.state.get("v", np.zeros(0))[: model.num_params]
            zero.append(float(np.mean(v == 0)) if v.size else 0.0)
            unchanged.append(float(np.mean(_bits(v) == _bits(before))) if v.size else 0.0)
        out[label] = RunRecord(label, tuple(losses), tuple(zero), tuple(unchanged))
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"uint{a.dtype.itemsize * 8}")
