"""Multi-head causal self-attention, step by step (seed 001 §5c), with its softmax backward as the seed writes it.

Letters: B batch, H heads, L sequence length, d_h = d / H head width; one (L, L) score matrix per
(batch, head). Q, K, V, O are (B, H, L, d_h); S and P are (B, H, L, L).

    forward                                              backward (dO given)
    S = cast(QKᵀ/√d_h, fmt), causal: S_ij = -inf, j > i    dV = cast(Pᵀ dO)          dP = cast(dO Vᵀ)
    P = cast(softmax_rows(S), fmt)     (computed in acc)   D_i = Σ_j P_ij dP_ij      (in acc)
    O = cast(P V, fmt)                                     dS = cast(P ⊙ (dP − D), fmt)
                                                           dQ = cast(dS K /√d_h)     dK = cast(dSᵀ Q /√d_h)

Every product accumulates in acc (fp32; float64 under fp64) and every tensor above is rounded once
to the compute format fmt, as the GEMMs and the fused softmax kernels write 16-bit outputs.

Where P lives: in fmt (16 bits). Megatron's fused causal softmax (megatron/core/fusions/
fused_softmax.py, ScaledUpperTriangMaskedSoftmax) computes in fp32 and saves its 16-bit output
`softmax_results` for backward; that B·H·L² buffer is seed 001's "L² problem". PyTorch autocast
would instead run softmax in fp32 (softmax is on its "CUDA ops that can autocast to float32" list,
docs/source/amp.rst) and so keep P in fp32: twice the bytes.

Saved for backward (the cache tuple): Q, K, V and P ("standard"), or Q, K, V only ("selective",
seed 001's selective retention: backward rebuilds P from Q and K with the very same code, so the
gradients are bitwise those of "standard"). The full L² matrix is stored although its upper
triangle is zero, as the kernels above store it.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._spaces import space_of
from zerosim.models.layers._basic import acc_dtype
from zerosim.precision import cast, get_format
from zerosim.precision.arithmetic import arithmetic_of

MODES = ("standard", "selective", "flash")

# Per element of the (B, H, L, L) scores: the 1/√d_h scale (1) and the softmax's max, subtract,
# exp, row sum and divide (5); backward's softmax: P ⊙ dP, its row sum, dP − D and the product
# with P (4). The causal mask costs no arithmetic.
SOFTMAX_FLOPS = {"forward": 6, "backward": 4}


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, L, d) -> (B, H, L, d_h), contiguous (a copy, no rounding)."""
    B, L, d = x.shape
    return x.reshape(B, L, heads, d // heads).transpose(0, 2, 1, 3).copy()  # C order (numpy's or a device's)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, H, L, d_h) -> (B, L, d), contiguous (a copy, no rounding)."""
    B, H, L, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, H * dh).copy()  # C order (numpy's or a device's)


def causal_mask(n_queries: int, key_start: int, key_stop: int, xp=np) -> np.ndarray:
    """(L_q, L_k) bool, True where key j > query i (a future token: masked); made by module `xp` (a device's)."""
    return xp.arange(key_start, key_stop)[None, :] > xp.arange(n_queries)[:, None]


def softmax_forward(S: np.ndarray, fmt) -> np.ndarray:
    """P = cast(softmax over the last axis of S, fmt), causal: masked entries are exactly 0.

    S (..., L, L) in fmt; the max, exponentials, sum and division run in acc.
    """
    f = get_format(fmt)
    s = S.astype(acc_dtype(f))
    s[..., causal_mask(S.shape[-2], 0, S.shape[-1], space_of(S))] = -np.inf
    e = arithmetic_of(f).exp(s - s.max(axis=-1, keepdims=True))  # the row max subtracted: exp cannot overflow
    return cast(e / e.sum(axis=-1, keepdims=True, dtype=e.dtype), f)


def softmax_backward(dP: np.ndarray, P: np.ndarray, fmt) -> np.ndarray:
    """Seed 001 §5c B2: dS = P ⊙ (dP − D) with D = rowsum(P ⊙ dP); in acc, rounded once to fmt."""
    acc = acc_dtype(get_format(fmt))
    p, dp = P.astype(acc), dP.astype(acc)
    D = (p * dp).sum(axis=-1, keepdims=True, dtype=acc)  # (..., L, 1): one scalar per query row
    return cast(p * (dp - D), fmt)


def scores(q: np.ndarray, k: np.ndarray, fmt) -> np.ndarray:
    """S = cast(Q Kᵀ / √d_h, fmt): the scale applied in acc before the one rounding (a GEMM's alpha)."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    s = arithmetic_of(f).matmul(q, np.swapaxes(k, -1, -2))  # (B, H, L, L) acc
    return cast(s * acc(1 / math.sqrt(q.shape[-1])), fmt)


def attention_forward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, fmt, keep_p: bool = True
) -> tuple[np.ndarray, tuple]:
    """O (B, H, L, d_h) in fmt; cache (Q, K, V, P), with P None when not kept ("selective")."""
    f = get_format(fmt)
    P = softmax_forward(scores(q, k, f), f)  # (B, H, L, L) fmt: the B·H·L² buffer
    o = cast(arithmetic_of(f).matmul(P, v), f)  # (B, H, L, d_h)
    return o, (q, k, v, P if keep_p else None)


def attention_backward(do: np.ndarray, cache: tuple, fmt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV), each (B, H, L, d_h) in fmt. P is rebuilt from Q and K if the cache lacks it."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    q, k, v, P = cache
    if P is None:
        P = softmax_forward(scores(q, k, f), f)  # selective: the forward's own code, so the same bits
    dv = cast(ops.matmul(np.swapaxes(P, -1, -2), do), f)  # B1: dV = Pᵀ dO
    dP = cast(ops.matmul(do, np.swapaxes(v, -1, -2)), f)  # B1: dP = dO Vᵀ, (B, H, L, L)
    dS = softmax_backward(dP, P, f)  # B2, (B, H, L, L) fmt
    scale = acc(1 / math.sqrt(q.shape[-1]))
    dq = cast(ops.matmul(dS, k) * scale, f)  # B3: dQ = dS K / √d_h
    dk = cast(ops.matmul(np.swapaxes(dS, -1, -2), q) * scale, f)  # B3: dK = dSᵀ Q / √d_h
    return dq, dk, dv


def attention_flops(B: int, H: int, L: int, dh: int, kind: str, mode: str = "standard") -> int:
    """FLOPs of the attention core (Q, K, V -> O) for "standard" or "selective" (flash: flash_attention_flops).

    A (L, d_h) x (d_h, L) product is 2·L²·d_h per (batch, head). Forward: S and PV (two such) plus
    SOFTMAX_FLOPS per score. Backward: dV, dP, dQ, dK (four) plus the softmax backward per score and
    the 1/√d_h scale of dQ and dK (one per element each); "selective" first rebuilds S and P (the
    forward's S product and softmax).
    """
    gemm = 2 * B * H * L * L * dh  # one (L x d_h x L) product per (batch, head)
    n_scores = B * H * L * L
    forward = 2 * gemm + SOFTMAX_FLOPS["forward"] * n_scores
    if kind == "forward":
        return forward
    backward = 4 * gemm + SOFTMAX_FLOPS["backward"] * n_scores + 2 * B * H * L * dh
    if mode == "selective":
        backward += gemm + SOFTMAX_FLOPS["forward"] * n_scores
    return backward


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"attention must be one of {MODES}, got {mode!r}")
    return mode


def check_heads(d: int, heads: int) -> None:
    if heads < 1 or d % heads:
        raise ValueError(f"d_model = {d} must split evenly into n_heads = {heads} heads")
