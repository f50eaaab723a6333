"""The oracle's own clipping by global norm: torch's clip_grad_norm_ on the whole gradient, the norm summed as ZeRO
sums it over shards — written again here, apart from the engine's (parallel/data/_clipping.py).

    partial_r = fl(Σ g_i² over the elements rank r owns)   the squares exact in float64, summed by math.fsum
    total     = the N partials summed in the ring's order   (naive_reduce), in g's dtype
    norm      = fl(sqrt(total))
    coef      = min(max_norm / (norm + 1e-6), 1)            as torch evaluates it: `total_norm + 1e-6` in fp32,
                                                            `max_norm / t` as `t.reciprocal() * max_norm`, clamp
    g        *= coef                                        torch._foreach_mul_, one rounding per element

"torch": torch 2.13's own norm on a rank holding the whole gradient (torch/nn/utils/clip_grad.py: _get_total_norm):
each parameter's norm (`_foreach_norm`), then the norm of those norms.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives import naive_reduce

EPS = 1e-6  # torch/nn/utils/clip_grad.py: _clip_grads_with_norm_, `max_norm / (total_norm + 1e-6)`


def check(max_norm, norm: str):
    """(max_norm as a float or None, norm), or a clear error naming the argument."""
    if norm not in ("shards", "torch"):
        raise ValueError(f"clip_norm must be 'shards' or 'torch' (the shards' sums of squares, or torch's "
                         f"clip_grad_norm_: per-tensor norms, then the norm of the norms), got {norm!r}")
    if max_norm is None:
        return None, norm
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.integer, np.floating)) \
            or not np.isfinite(max_norm) or max_norm <= 0:
        raise ValueError(f"clip_grad (the max_norm of clip_grad_norm_) must be a finite number > 0 or None, got "
                         f"{max_norm!r}")
    return float(max_norm), norm


def squares(g) -> np.ndarray:
    """(1,) Σ g² in g's dtype: the exact squares summed by math.fsum, rounded once."""
    wide = g.astype(np.float64)
    return np.array([math.fsum((wide * wide).tolist())]).astype(g.dtype)


def shard_norm(g, owners: list, n: int) -> float:
    """The norm ZeRO computes: each rank's partial over the (rank, a, b) chunks it owns, summed in the ring's order."""
    partials = []
    for r in range(n):
        mine = [g[a:b] for c, a, b in owners if c == r]
        partials.append(squares(np.concatenate(mine) if mine else g[:0]))
    return float(np.sqrt(naive_reduce(partials, op="sum", order="ring")[:1])[0])


def torch_norm(g, params: list) -> float:
    """torch's: each (unit, a, b) parameter's norm in g's dtype, then the norm of the stacked norms."""
    norms = np.array([np.sqrt(squares(g[a:b]))[0] for _, a, b in params], dtype=g.dtype)
    return float(np.sqrt(squares(norms))[0])


def clip(g, norm: float, max_norm: float) -> None:
    """g *= clamp(max_norm / (norm + 1e-6), max=1), in g's dtype, in place."""
    f = g.dtype.type
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        coef = (f(1) / (f(norm) + f(EPS))) * f(max_norm)
    g *= f(float(min(coef, f(1))) if not np.isnan(coef) else float(coef))
