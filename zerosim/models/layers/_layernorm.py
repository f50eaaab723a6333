"""LayerNorm as a forward/backward pair that keeps its input and per-row statistics, not its output.

Letters: R rows (tokens, B·L), d the normalized width. Seed 001 §5a:

    mu = mean(x),  var = mean((x - mu)^2),  rstd = 1/sqrt(var + eps),  x̂ = (x - mu)·rstd,  y = g ⊙ x̂ + b
    dg = Σ_rows dy ⊙ x̂,   db = Σ_rows dy,   dx = rstd · (dx̂ - mean(dx̂) - x̂ · mean(dx̂ ⊙ x̂)),  dx̂ = dy ⊙ g

What is saved: the input x (fmt) and mu, rstd per row in fp32 (float64 under fp64), as PyTorch's
native_layer_norm does (tools/autograd/derivatives.yaml: its backward reads input, result1 = mean,
result2 = rstd). x̂ is recomputed in backward. The output y is NOT saved: the units that follow a
LayerNorm with a Linear rebuild y = g ⊙ x̂ + b in backward (`layernorm_output`, bitwise the forward's
y) for that Linear's weight gradient, as a fused LayerNorm+Linear can. That is what makes seed
001 §5e's "attention input X: shared with LN output" true here. (Plain nn.LayerNorm followed by
nn.Linear in PyTorch keeps both: LayerNorm its input, Linear its input = the LN output — one more
B·L·d per LayerNorm than the seed's table.)

Rounding (acc = fp32, or float64 under fp64): the statistics, x̂ and y are computed in acc from x
widened exactly; y is rounded once to fmt. Backward works in acc and rounds dx, dg, db once each.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.precision import cast, get_format

LN_EPS = 1e-5  # torch.nn.LayerNorm's default eps

# Per element: forward mean (1 add), x - mu (1), square (1), sum (1), times rstd (1), times g (1),
# plus b (1) = 7. Backward: x̂ again (2), dg (2), db (1), dx̂ = dy g (1), mean(dx̂) (1),
# mean(dx̂ x̂) (2), rstd (dx̂ - m1 - x̂ m2) (4) = 13. Rebuilding y for the next Linear: g x̂ + b (2).
# The per-row sqrt and division are not counted (one per d elements).
LN_FLOPS = {"forward": 7, "backward": 13, "rebuild output": 2}


def _normalized(x: np.ndarray, mean: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    """x̂ = (x - mu)·rstd in acc; the one formula forward and backward share, so both see the same bits."""
    return (x.astype(mean.dtype) - mean[..., None]) * rstd[..., None]


def layernorm_forward(
    x: np.ndarray, g: np.ndarray, b: np.ndarray, fmt, eps: float = LN_EPS
) -> tuple[np.ndarray, tuple]:
    """y (..., d) in fmt; cache (x, mean (...,), rstd (...,)) with the statistics in acc."""
    acc = acc_dtype(get_format(fmt))
    x_acc = x.astype(acc)
    mean = x_acc.mean(axis=-1, dtype=acc)  # (...,) acc
    var = np.square(x_acc - mean[..., None]).mean(axis=-1, dtype=acc)
    rstd = (1 / np.sqrt(var + acc(eps))).astype(acc)  # (...,) acc
    cache = (x, mean, rstd)
    return layernorm_output(cache, g, b, fmt), cache


def layernorm_output(cache: tuple, g: np.ndarray, b: np.ndarray, fmt) -> np.ndarray:
    """y = cast(g ⊙ x̂ + b, fmt) from the saved (x, mean, rstd): bitwise the forward's output."""
    x, mean, rstd = cache
    acc = mean.dtype
    return cast(_normalized(x, mean, rstd) * g.astype(acc) + b.astype(acc), get_format(fmt))


def layernorm_backward(dy: np.ndarray, cache: tuple, g: np.ndarray, fmt,
                       n: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx (..., d), dg (d,), db (d,)) in fmt; the sums over rows run in acc. `n`: dy and x hold n ranks' micro-
    batches stacked along axis 0 (models/_stacked.py), and dg, db are (n, d), each rank's sum over its own rows."""
    x, mean, rstd = cache
    f, acc = get_format(fmt), mean.dtype
    xhat = _normalized(x, mean, rstd)  # (..., d) acc
    dy_acc = dy.astype(acc)
    dg = row_sums(dy_acc * xhat, n)
    db = row_sums(dy_acc, n)
    dxhat = dy_acc * g.astype(acc)
    m1 = dxhat.mean(axis=-1, keepdims=True, dtype=acc)
    m2 = (dxhat * xhat).mean(axis=-1, keepdims=True, dtype=acc)
    dx = rstd[..., None] * (dxhat - m1 - xhat * m2)
    return cast(dx, f), cast(dg, f), cast(db, f)


def row_sums(a: np.ndarray, n: int | None = None) -> np.ndarray:
    """The sum of `a` (..., d) over every axis but the last, in a's dtype: (d,); with `n`, where `a` holds n ranks'
    rows stacked along axis 0, each rank's own sum over its own rows: (n, d). NumPy adds a contiguous array's rows
    one after another, in order, for each element (its leading axes taken as one), so rank r's sum over its block is
    the one its own call makes (tests/test_stacked_gpt.py: rank by rank, bit for bit)."""
    if n is None:
        return a.sum(axis=tuple(range(a.ndim - 1)), dtype=a.dtype)
    return a.reshape(n, -1, a.shape[-1]).sum(axis=1, dtype=a.dtype)


def layernorm_flops(rows: int, d: int, kind: str) -> int:
    """LN_FLOPS[kind] per element of a (rows, d) input."""
    return LN_FLOPS[kind] * rows * d

