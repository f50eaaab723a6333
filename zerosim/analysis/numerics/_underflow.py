"""Gradient underflow, measured: which gradients a 16-bit format flushes to zero, and what loss scaling saves.

Micikevicius et al. ("Mixed Precision Training", 2018, Figure 3) histogram the magnitudes of a network's
gradients against fp16's range: much of the mass lies below fp16's smallest subnormal, 2**-24, and
becomes exactly 0 unless the loss (and so every gradient) is first multiplied by a scale S. These
functions take the numbers from real runs: the gradient one step of the oracle feeds its optimizer
(averaged, unscaled: what every ZeRO stage feeds its optimizer, bit for bit), and the values a run's
backward recorded in its trace.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Compute
from zerosim.models import MLP
from zerosim.optim import SGD
from zerosim.precision import get_format
from zerosim.reference import Reference


def one_step_gradient(model, batches: list, precision, params=None) -> np.ndarray:
    """(P,) the fp32 gradient the optimizer reads after one step on N = len(batches) ranks (one micro-batch each):
    each rank's gradient in the compute format (times S), reduced by the policy's recipe, averaged and unscaled.
    `model` is a Model or MLP widths; `params` default the model's seeded init."""
    model = MLP(list(model)) if isinstance(model, (list, tuple)) else model
    params = model.init_params(np.random.default_rng(0)) if params is None else params
    ref = Reference(model, SGD(lr=0.0), precision, world_size=len(batches), params=params)
    grads = [ref.gradient(x, t)[1] for x, t in batches]
    return ref.reduce(grads)[: model.num_params]


def flushed_fraction(got: np.ndarray, reference: np.ndarray) -> float:
    """Of the elements where `reference` is nonzero, the fraction that `got` holds as exactly zero."""
    ref = np.asarray(reference, dtype=np.float64)
    alive = ref != 0
    if not alive.any():
        return 0.0
    return float(np.count_nonzero(np.asarray(got, dtype=np.float64)[alive] == 0) / np.count_nonzero(alive))


def flushed_share(values, fmt, scale: float = 1.0) -> float:
    """Of the nonzero `values` (exact, e.g. fp32), the share that rounds to 0 in `fmt` once multiplied by `scale`:
    |S·v| at or below half the smallest subnormal (the half itself is a tie, to the even 0)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[v != 0]
    if not v.size:
        return 0.0
    return float(np.mean(np.abs(v * scale) <= get_format(fmt).smallest_subnormal / 2))


def backward_values(trace, what: str = "grads", since: int = 0) -> np.ndarray:
    """Every value the run's backward produced, as float64 (the cluster must keep values): "grads" the weight
    gradients, "dx" the activation gradients each layer passed back."""
    if what not in ("grads", "dx"):
        raise ValueError(f"what must be 'grads' or 'dx', got {what!r}")
    out = []
    for e in trace.of_type(Compute, since):
        if e.kind != "backward":
            continue
        if e.values is None:
            raise ValueError("the trace holds no values: make the cluster with keep_values=True")
        if what == "grads":
            out.extend(np.asarray(g, dtype=np.float64).ravel() for g in e.values["grads"].values())
        elif e.values.get("dx") is not None:
            out.append(np.asarray(e.values["dx"], dtype=np.float64).ravel())
    return np.concatenate(out) if out else np.zeros(0)


def log2_histogram(values, lo: int = -40, hi: int = 16) -> tuple:
    """(edges, counts, zeros): counts of floor(log2 |v|) in [lo, hi) for the nonzero values (clipped into the end
    bins), and how many are exactly zero."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    nonzero = v[v > 0]
    exps = np.clip(np.floor(np.log2(nonzero)), lo, hi - 1).astype(int)
    counts = np.bincount(exps - lo, minlength=hi - lo)
    return np.arange(lo, hi + 1), counts, int(v.size - nonzero.size)
