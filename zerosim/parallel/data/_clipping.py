"""Gradient clipping by global norm when every rank holds only part of the gradient.

torch's `clip_grad_norm_` (torch/nn/utils/clip_grad.py: _get_total_norm, _clip_grads_with_norm_) on a
whole gradient, computed the way ZeRO computes it on shards (DeepSpeed's get_grad_norm_direct sums
its partition's squares and all-reduces the sum; FSDP2's DTensor norm all-reduces the shards' p-th
powers). Letters: N ranks, s = ceil(P/N), Ψ = N*s; rank r owns flat elements [r*s, (r+1)*s).

    partial_r = fl32(sum of g_i^2 over rank r's shard)   the squares exact in float64 (24 + 24 <= 53
                                                          bits), summed exactly (math.fsum: correctly
                                                          rounded to float64), then rounded to fp32
    total     = SUM all-reduce of the N partials          fp32 on the ring: ((p[1] + p[2]) + ...) + p[0]
    norm      = fl32(sqrt(total))
    clip_coef = max_norm / (norm + 1e-6), clamped to 1     as torch evaluates it (below)
    g        *= clip_coef                                   every rank, its whole region, before the optimizer

At stage 0 every rank holds the whole gradient but sums only its own shard, so each element counts
once; at every stage the partials, and so the norm, are the same bits. The oracle sums the same
shards of its unsharded gradient in the same order (`shard_partials`), so it gets the same norm; the
distance to the norm of the whole gradient in float64 is bounded by `norm_error_bound(N)`.

torch evaluates `max_norm / (total_norm + 1e-6)` on fp32 tensors: `total_norm + 1e-6` rounds the
scalar to fp32 and the sum to fp32; `float / tensor` is `tensor.reciprocal() * float`
(torch/_tensor.py: Tensor.__rdiv__), two more roundings; `torch.clamp(clip_coef, max=1.0)`; then
`torch._foreach_mul_(grads, clip_coef_clamped)`, one rounding per element (a multiply by 1 changes
nothing). DeepSpeed ZeRO folds clipping into its unscale instead (stage_1_and_2.py:
unscale_and_clip_grads, `clip = ((total_norm / S) + 1e-6) / clip_grad`, then `mul_(1. / (clip * S))`,
on the norm of the *scaled* gradient): other roundings, not modelled here.

`norm="torch"` (NORMS) computes the norm as torch 2.13's clip_grad_norm_ does instead (torch/nn/utils/clip_grad.py:
clip_grad_norm_ -> _get_total_norm), on a rank that holds the whole gradient (stage 0, DDP: every rank computes it
alone from its whole reduced gradient, no collective):

    norms     = torch._foreach_norm(grads, 2)         one fp32 norm per parameter, in `parameters()` order (one
                                                       device and dtype: _group_tensors_by_device_and_dtype keeps
                                                       the order); CPU: the slow path, linalg_vector_norm per tensor
    total     = linalg.vector_norm(torch.stack(norms)) the norm of the stacked norms

Each norm here is `tensor_norm`: the exact squares summed by math.fsum, rounded to fp32, then the fp32 sqrt. What is
reproduced: the structure and order above (per-tensor norms, then the norm of the norms) and the coefficient. What is
not: the summation order inside torch's CPU norm kernel, a vectorised reduction (lanes of Vectorized<float>, several
accumulators, their widths set by the ISA ATen dispatches to: AVX2 or AVX-512) that accumulates in fp32 — for a
tensor of more than a few elements it may round differently from the correctly rounded sum (measured with torch
2.13.0+cpu on an AVX2 machine: the same fp32 norm for 96 % of random 1–4-element tensors, 67 % of 1–64, 42 % of
1–256 element ones; not a claim the tests check, since it depends on the CPU). On CUDA the kernel differs again.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives import ShardLayout

EPS = 1e-6  # torch's clip_grad_norm_: max_norm / (total_norm + 1e-6)
NORMS = ("shards", "torch")  # the N shards' sums of squares all-reduced (ZeRO's way), or torch's norm of norms
U32, U64 = 2.0**-24, 2.0**-53  # unit roundoffs of fp32 and float64


def sum_of_squares(g: np.ndarray) -> np.ndarray:
    """(1,) the sum of g's squares in g's dtype (fp32, or fp64): the exact squares summed by math.fsum (the
    float64 nearest the exact sum, whatever the order or memory alignment: a BLAS dot product is neither),
    then rounded to g's dtype."""
    wide = g.astype(np.float64)
    return np.array([math.fsum((wide * wide).tolist())], dtype=np.float64).astype(g.dtype)


def shard_partials(g: np.ndarray, world_size: int, chunks=None) -> list:
    """The N ranks' partials of an unsharded (Ψ,) gradient: rank r's over [r*s, (r+1)*s) (the oracle's side), or
    over the (r, start, stop) `chunks` it owns (per-parameter partitions; math.fsum makes the order immaterial)."""
    if chunks is None:
        layout = ShardLayout(g.shape[0], world_size)
        return [sum_of_squares(g[slice(*layout.bounds(r))]) for r in range(world_size)]
    mine = [[g[a:b] for c, a, b in chunks if c == r] for r in range(world_size)]
    return [sum_of_squares(np.concatenate(m) if m else g[:0]) for m in mine]


def norm_of(total) -> float:
    """The global norm from the all-reduced sum of squares, rounded in the gradient's dtype."""
    t = np.asarray(total).reshape(-1)[:1]
    return float(np.sqrt(t)[0])


def tensor_norm(g: np.ndarray):
    """One tensor's 2-norm in g's dtype, as zerosim models torch.linalg.vector_norm: fl(sqrt(fl(sum of squares)))
    with the squares summed exactly (`sum_of_squares`; torch's own kernel sums in another order: module docstring)."""
    return np.sqrt(sum_of_squares(g))[0]


def torch_total_norm(g: np.ndarray, params) -> float:
    """torch's clip_grad_norm_ norm of a whole flat gradient `g`: the per-tensor norms of the `params` ((unit, a, b)
    ranges in registration order: torch._foreach_norm), then the norm of the stacked norms (_get_total_norm)."""
    norms = np.array([tensor_norm(g[a:b]) for _, a, b in params], dtype=g.dtype)  # (P_tensors,) in g's dtype
    return float(tensor_norm(norms))


def check_norm(norm: str) -> str:
    """`clip_norm` as one of NORMS, or a clear error."""
    if norm not in NORMS:
        raise ValueError(f"clip_norm must be one of {NORMS} (the shards' sums of squares, or torch's clip_grad_norm_: "
                         f"per-tensor norms, then the norm of the norms), got {norm!r}")
    return norm


def clip_coefficient(norm: float, max_norm: float, dtype=np.float32) -> float:
    """torch's clamp(max_norm / (norm + 1e-6), max=1) in `dtype` (fp32; fp64 for the float64 yardstick)."""
    f = np.dtype(dtype).type
    denominator = f(norm) + f(EPS)  # `total_norm + 1e-6`: the scalar in fp32, the sum in fp32
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        coef = (f(1) / denominator) * f(max_norm)  # `max_norm / t` is `t.reciprocal() * max_norm`
    return float(min(coef, f(1))) if not np.isnan(coef) else float(coef)  # torch.clamp(.., max=1.0); NaN stays NaN


def apply(g: np.ndarray, coef: float) -> None:
    """g *= coef in g's dtype, in place (`torch._foreach_mul_`)."""
    g *= g.dtype.type(coef)


def norm_error_bound(n: int) -> float:
    """A bound on |norm - n64| / n64: the sharded fp32 norm over N ranks against n64 = sqrt of the float64 sum of
    the exact squares (math.fsum), for an fp32 gradient.

    Each rank: the exact squares summed by math.fsum, correctly rounded to float64 (u64), then to fp32 (u32):
    partial_r = T_r (1 + e1), |e1| <= u32 + u64 + u32 u64. The ring adds N non-negative fp32 partials with N - 1
    roundings: total = T (1 + e2), |e2| <= (1 + e1)(1 + gamma_{N-1}) - 1, gamma_k = k u32 / (1 - k u32) (Higham).
    sqrt(1 + e2) = 1 + e3, |e3| <= |e2| / (1 + sqrt(1 - |e2|)); the fp32 sqrt rounds once more:
    |norm - sqrt(T)| <= e4 sqrt(T), e4 = (1 + e3)(1 + u32) - 1. The yardstick n64 = sqrt(fl64(T)) rounded in
    float64 has |n64 - sqrt(T)| <= e5 sqrt(T), e5 = (1 + u64/2)(1 + u64) - 1 (fsum's rounding halves under the
    sqrt). So |norm - n64| <= (e4 + e5) sqrt(T) <= (e4 + e5) / (1 - e5) n64: about (N + 3) u32 / 2.
    """
    e1 = U32 + U64 + U32 * U64
    gamma = (n - 1) * U32 / (1 - (n - 1) * U32)
    e2 = (1 + e1) * (1 + gamma) - 1
    e3 = e2 / (1 + math.sqrt(1 - e2))
    e4 = (1 + e3) * (1 + U32) - 1
    e5 = (1 + U64 / 2) * (1 + U64) - 1
    return (e4 + e5) / (1 - e5)


def check_max_norm(max_norm) -> float | None:
    """`clip_grad` as a finite number > 0, or None (no clipping); a clear error otherwise."""
    if max_norm is None:
        return None
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.integer, np.floating)) \
            or not np.isfinite(max_norm) or max_norm <= 0:
        raise ValueError("clip_grad (the max_norm of clip_grad_norm_) must be a finite number > 0 or None, got "
                         f"{max_norm!r}")
    return float(max_norm)
