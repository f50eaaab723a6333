"""Small synthetic tasks a student MLP can learn: targets come from a random teacher MLP.

Letters: M micro-batches, B batch, D_in = widths[0], D_out = widths[-1] (C classes for classification).
Each task returns a list of M (x, target) pairs, one per micro-batch (in data parallel: one per rank,
or several per rank under gradient accumulation).
"""

from __future__ import annotations

import numbers

import numpy as np

from zerosim.cluster import available_bytes, check_fits
from zerosim.models._run import predict
from zerosim.models.mlp import MLP


def check_pool(n_micro, batch, sample_bytes: int, what: str) -> None:
    """Refuse counts that are not positive integers, and a pool of `n_micro` micro-batches of `batch` samples
    (`sample_bytes` each) that this machine cannot hold, before the first one is drawn (a count of 10^30 looped on
    for ever)."""
    for name, v in (("n_micro", n_micro), ("batch", batch)):  # 0: an empty pool, or empty micro-batches
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    check_fits(int(n_micro) * int(batch) * sample_bytes, f"{what} ({n_micro:,} micro-batches of {batch:,} samples)",
               "draw fewer or smaller micro-batches", available_bytes())


def _teacher_outputs(rng, n_micro, batch, widths, activation):
    check_pool(n_micro, batch, 4 * int(widths[0]) + 8 * int(widths[-1]), "the task's data")
    teacher = MLP(widths, activation=activation)
    theta = teacher.init_params(rng)  # (P,) fp32 teacher weights
    for _ in range(n_micro):
        x = rng.standard_normal((batch, widths[0])).astype(np.float32)  # (B, D_in)
        yield x, predict(teacher, theta, x, "fp64")  # (B, D_out) float64: the teacher is exact


def make_regression(rng: np.random.Generator, n_micro: int, batch: int, widths, activation: str = "relu",
                    noise: float = 0.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """M pairs (x (B, D_in) fp32, t (B, D_out) fp32) with t = teacher(x) + noise * N(0, 1)."""
    out = []
    for x, y in _teacher_outputs(rng, n_micro, batch, widths, activation):
        t = (y + noise * rng.standard_normal(y.shape)).astype(np.float32)  # (B, D_out)
        out.append((x, t))
    return out


def make_classification(rng: np.random.Generator, n_micro: int, batch: int, widths,
                        activation: str = "relu") -> list[tuple[np.ndarray, np.ndarray]]:
    """M pairs (x (B, D_in) fp32, labels (B,) int64) with labels = argmax of the teacher's C = D_out logits."""
    if widths[-1] < 2:
        raise ValueError(f"classification needs at least 2 classes (widths[-1]), got {widths[-1]}")
    return [
        (x, np.argmax(y, axis=1).astype(np.int64)) for x, y in _teacher_outputs(rng, n_micro, batch, widths, activation)
    ]
