"""Rotary position embeddings (Su et al. 2021, RoPE) as a forward/backward pair, in Hugging Face's layout.

Letters: B batch, H heads (query or key/value heads), L sequence length, d_h head width (even).
Hugging Face transformers, models/llama/modeling_llama.py: `LlamaRotaryEmbedding.forward` computes, in fp32
with autocast off ("bfloat16 loses precision on long contexts"),

    inv_freq[i] = 1 / θ^(2i / d_h),  i < d_h/2        freqs[t, i] = t · inv_freq[i]
    emb = cat(freqs, freqs)   (L, d_h)                cos, sin = emb.cos(), emb.sin()  -> .to(x.dtype)

and `apply_rotary_pos_emb` gives q·cos + rotate_half(q)·sin with rotate_half(x) = cat(−x₂, x₁) (the two halves
of the head, not interleaved pairs). As a matrix, rotate_half is R = [[0, −I], [I, 0]], so backward applies the
transpose: dx = dy·cos + Rᵀ(dy·sin) with Rᵀz = cat(z₂, −z₁) — the rotation by −θ.

Rounding: cos and sin are rounded to the compute format (HF's `.to(x.dtype)`); the rotation sums in acc and
rounds once, as a fused RoPE kernel does (HF's eager code rounds after each multiply and the add).

What is saved: nothing. The tables depend on positions only, so backward rebuilds them, bitwise. (HF computes
them once per forward and every layer's multiply keeps a reference to the same pair: one (B, L, d_h) cos and
sin for the whole model, 2·2·B·L·d_h bytes in 16 bits — 4 MiB at L = 8192, d_h = 128, B = 1 — which zerosim
does not hold.)
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.precision.arithmetic import arithmetic_of
from zerosim.precision import cast, get_format

ROPE_THETA = 10000.0  # LlamaConfig's default rope_theta (Llama 3: 500000; Qwen2.5: 1000000)

# Per element of the rotated tensor: x·cos, rotate_half(x)·sin and their sum (3), either way.
ROPE_FLOPS = {"forward": 3, "backward": 3}


def rope_tables(length: int, head_dim: int, theta: float, fmt) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (L, d_h) in fmt: HF's fp32 tables (float64 under fp64) rounded to the compute format."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings pair the two halves of a head: head_dim must be even, got {head_dim}")
    f = get_format(fmt)
    acc = acc_dtype(f)
    ops = arithmetic_of(f)
    inv_freq = 1.0 / ops.power(theta, np.arange(0, head_dim, 2, dtype=np.int64).astype(acc) / acc(head_dim))
    freqs = np.arange(length, dtype=np.int64).astype(acc)[:, None] * inv_freq.astype(acc)[None, :]  # (L, d_h/2)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (L, d_h) acc
    return cast(ops.cos(emb), f), cast(ops.sin(emb), f)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    """R x = cat(−x₂, x₁) over the last axis."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _rotate_half_t(x: np.ndarray) -> np.ndarray:
    """Rᵀ x = cat(x₂, −x₁): the transpose of rotate_half."""
    h = x.shape[-1] // 2
    return np.concatenate([x[..., h:], -x[..., :h]], axis=-1)


def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, fmt) -> np.ndarray:
    """x (B, H, L, d_h) rotated: cast(x·cos + rotate_half(x)·sin, fmt), summed in acc."""
    acc = acc_dtype(get_format(fmt))
    L = x.shape[-2]
    c, s, x_acc = cos[:L].astype(acc), sin[:L].astype(acc), x.astype(acc)
    return cast(x_acc * c + _rotate_half(x_acc) * s, fmt)


def rope_backward(dy: np.ndarray, cos: np.ndarray, sin: np.ndarray, fmt) -> np.ndarray:
    """dx = cast(dy·cos + Rᵀ(dy·sin), fmt) for dy (B, H, L, d_h)."""
    acc = acc_dtype(get_format(fmt))
    L = dy.shape[-2]
    c, s, dy_acc = cos[:L].astype(acc), sin[:L].astype(acc), dy.astype(acc)
    return cast(dy_acc * c + _rotate_half_t(dy_acc * s), fmt)


def rope_flops(elements: int, kind: str) -> int:
    """ROPE_FLOPS[kind] per element rotated."""
    return ROPE_FLOPS[kind] * elements
