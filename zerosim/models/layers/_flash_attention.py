"""Memory-efficient ("flash") causal attention: tiles over keys, a running max and sum, no L × L buffer.

Letters: B batch, H heads, L sequence length, d_h head width, T keys per tile (`block`); Q, K, V, O
are (B, H, L, d_h). The algorithm of FlashAttention-2 (Dao 2023), tiled over keys only (all queries
of a (batch, head) at once):

    forward, per key tile j (S_j, P̃_j are (B, H, L, T), never stored):
        S_j = Q K_jᵀ /√d_h  (acc)              m_new = max(m, rowmax S_j)
        P̃_j = exp(S_j − m_new)  (acc)          ℓ = e^(m − m_new) ℓ + rowsum P̃_j
        O_acc = e^(m − m_new) O_acc + cast(P̃_j, fmt) V_j
    O = cast(O_acc / ℓ, fmt),   LSE = m + log ℓ   (acc: fp32, one scalar per query row)

    backward: D = rowsum(dO ⊙ O) (acc); per key tile j, P_j = exp(S_j − LSE) rebuilt from Q and K_j,
        dV_j = cast(cast(P_j)ᵀ dO),  dP_j = dO V_jᵀ (acc),  dS_j = P_j ⊙ (dP_j − D) (acc),
        dK_j = cast(cast(dS_j)ᵀ Q /√d_h),   dQ += cast(dS_j) K_j /√d_h  (acc; rounded once at the end)

The roundings follow FlashAttention-2's kernels (Dao-AILab/flash-attention, csrc/flash_attn/src):
scores stay in fp32 registers; P̃ is converted to the 16-bit type before the PV product
(flash_fwd_kernel.h, `rP = flash::convert_type<Element>(acc_s)`); the log-sum-exp is kept in fp32
(`softmax_lse`); backward takes D = rowsum(dO ⊙ O) (flash_bwd_preprocess_kernel.h, dot_do_o) and
converts P and dS to 16 bits for its products while dQ accumulates in fp32.

`causal=False` drops the mask: a block of ring attention whose keys all precede its queries (parallel/context/), or
attention that sees both ways. Its keys may then number other than its queries.

Saved for backward: Q, K, V, O and LSE (B, H, L) — no B·H·L² term (seed 001 §5e, "strategy 3 ...
memory-efficient attention"). Not bitwise equal to standard attention (_attention.py): the sums run
in another order and P is never rounded as a whole; both are within a derived bound of float64
(tests/test_transformer_layers.py).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models.layers._attention import causal_mask
from zerosim.models.layers._basic import acc_dtype
from zerosim.precision import cast, get_format
from zerosim.precision.arithmetic import arithmetic_of

BLOCK = 64  # keys per tile (FlashAttention-2 uses 64 or 128 on its GPUs)


def _tiles(L: int, block: int):
    if block < 1:
        raise ValueError(f"the flash attention tile must hold at least one key, got block={block}")
    return [(j, min(j + block, L)) for j in range(0, L, block)]


def _tile_scores(q_acc, k_acc, j0, j1, scale, f, causal: bool = True):
    """S_j (B, H, L, T) in acc, -inf where the key is in a query's future (when `causal`): with more keys than
    queries the mask is aligned to the bottom right corner, as flash-attn's is (flash_attn/flash_attn_interface.py,
    `flash_attn_func`: "If causal=True, the causal mask is aligned to the bottom right corner of the attention
    matrix"), so query i sees keys up to i + (keys − queries)."""
    s = arithmetic_of(f).matmul(q_acc, np.swapaxes(k_acc[..., j0:j1, :], -1, -2)) * scale
    if causal:
        offset = k_acc.shape[-2] - q_acc.shape[-2]
        s[..., causal_mask(q_acc.shape[-2], j0 - offset, j1 - offset)] = -np.inf
    return s


def flash_attention_forward(q, k, v, fmt, block: int = BLOCK, causal: bool = True) -> tuple[np.ndarray, tuple]:
    """O (B, H, L, d_h) in fmt; cache (Q, K, V, O, LSE (B, H, L) in acc). K and V may hold another number of keys
    than Q holds queries where `causal` is False (a block of ring attention: parallel/context/); causal masks key j
    of query i where j > i, both counted from the block's start."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    B, H, L, dh = q.shape
    scale = acc(1 / math.sqrt(dh))
    q_acc, k_acc, v_acc = q.astype(acc), k.astype(acc), v.astype(acc)
    m = np.full((B, H, L), -np.inf, acc)  # running row max
    ell = np.zeros((B, H, L), acc)  # running row sum of exp(S - m)
    o_acc = np.zeros((B, H, L, dh), acc)  # running unnormalized output
    for j0, j1 in _tiles(k.shape[-2], block):
        s = _tile_scores(q_acc, k_acc, j0, j1, scale, f, causal)
        m_new = np.maximum(m, s.max(axis=-1))  # finite: key 0 is in every query's first tile
        alpha = ops.exp(m - m_new)  # rescales what was summed under the old max (0 on the first tile)
        p = ops.exp(s - m_new[..., None])  # (B, H, L, T) acc
        ell = alpha * ell + p.sum(axis=-1, dtype=acc)
        o_acc = alpha[..., None] * o_acc + ops.matmul(cast(p, f).astype(acc), v_acc[..., j0:j1, :])
        m = m_new
    o = cast(o_acc / ell[..., None], f)
    lse = (m + ops.log(ell)).astype(acc)  # (B, H, L)
    return o, (q, k, v, o, lse)


def flash_attention_backward(do, cache, fmt, block: int = BLOCK,
                             causal: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV) in fmt, dQ shaped as Q and dK, dV as K and V, rebuilding P tile by tile from Q, K and LSE (O and
    LSE those of the whole attention where this is one block of it: ring attention's backward)."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    q, k, v, o, lse = cache
    B, H, L, dh = q.shape
    scale = acc(1 / math.sqrt(dh))
    q_acc, k_acc, v_acc, do_acc = q.astype(acc), k.astype(acc), v.astype(acc), do.astype(acc)
    D = (do_acc * o.astype(acc)).sum(axis=-1, dtype=acc)  # (B, H, L) = rowsum(P ⊙ dP), from O
    dq_acc = np.zeros((B, H, L, dh), acc)
    dk, dv = np.empty_like(k), np.empty_like(v)  # (B, H, L, d_h) fmt, filled tile by tile
    for j0, j1 in _tiles(k.shape[-2], block):
        p = ops.exp(_tile_scores(q_acc, k_acc, j0, j1, scale, f, causal) - lse[..., None])  # (B, H, L, T) acc
        dv[..., j0:j1, :] = cast(ops.matmul(np.swapaxes(cast(p, f).astype(acc), -1, -2), do_acc), f)
        dp = ops.matmul(do_acc, np.swapaxes(v_acc[..., j0:j1, :], -1, -2))  # (B, H, L, T) acc
        ds = cast(p * (dp - D[..., None]), f).astype(acc)  # seed 001's dS = P ⊙ (dP − D), per tile
        dk[..., j0:j1, :] = cast(ops.matmul(np.swapaxes(ds, -1, -2), q_acc) * scale, f)
        dq_acc += ops.matmul(ds, k_acc[..., j0:j1, :]) * scale
    return cast(dq_acc, f), dk, dv


def flash_attention_flops(B: int, H: int, L: int, dh: int, kind: str, block: int = BLOCK,
                          keys: int | None = None) -> int:
    """FLOPs of the tiled core, counting every tile in full (the masked entries too, as attention_flops does).

    Forward: the S and P̃V products (2·L²·d_h each per (batch, head)); per score the scale, max,
    subtract, exp and row sum (5); per tile and row the new max, e^(m − m_new) and ℓ's update (5);
    per tile and element of O_acc its rescale and add (2); then O_acc/ℓ (1 per element) and the LSE
    (log and add, 2 per row). Backward: D (multiply and add, 2 per element of O); per score the
    rebuilt P (scale, subtract, exp) and dS (subtract, multiply): 5; the S, dV, dP, dK, dQ products
    (five); dK's 1/√d_h (1 per element); per tile dQ's 1/√d_h and accumulation (2 per element). `keys`: a block of L
    queries over another number of keys (ring attention's hops); default L.
    """
    keys = L if keys is None else keys
    gemm = 2 * B * H * L * keys * dh
    n_scores, rows, elems = B * H * L * keys, B * H * L, B * H * L * dh
    n_tiles = -(-keys // block) if block >= 1 else len(_tiles(keys, block))  # ⌈keys / T⌉ (_tiles refuses T < 1)
    if kind == "forward":
        return 2 * gemm + 5 * n_scores + n_tiles * (5 * rows + 2 * elems) + elems + 2 * rows
    return 5 * gemm + 5 * n_scores + 3 * elems + n_tiles * 2 * elems
