"""The attention sub-block: y = x + W_o · attention(LN1(x) W_qkvᵀ), as a forward/backward pair and a unit.

Letters: B batch, L sequence length, d model width, H heads, d_h = d / H. Steps (seed 001 §5c):

    ln  = LN1(x)                         (B, L, d)      not saved: rebuilt in backward from x, mean, rstd
    qkv = ln W_qkvᵀ + b_qkv              (B, L, 3d)     one GEMM (GPT-2's c_attn); split into Q, K, V
    Q, K, V -> heads                     (B, H, L, d_h)
    O   = attention(Q, K, V)             (B, H, L, d_h) _attention.py ("standard", "selective") or
                                                        _flash_attention.py ("flash")
    out = merge(O) W_oᵀ + b_o            (B, L, d)
    y   = cast(x + out, fmt)             the residual add, in acc, rounded once

Saved for backward (the cache, seed 001 §5e's names; bytes for fmt = fp16):

    name               shape            dtype   bytes           note
    block input        (B, L, d)        fmt     2·BLd           LN1's input; the residual needs nothing
    LN1 mean, LN1 rstd (B, L) each      fp32    4·BL each       LN statistics (seed: "always recompute")
    Q, K, V            (B, H, L, d_h)   fmt     2·BLd each      the QKV projection's output, per head
    P                  (B, H, L, L)     fmt     2·BHL²          "standard" only
    attention output   (B, L, d)        fmt     2·BLd           O merged: the out-projection's input
    LSE                (B, H, L)        fp32    4·BHL           "flash" only, in place of P

W_qkv's input X is LN1's output, rebuilt, not stored ("shared with LN output" in the seed's table).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    BLOCK,
    Layer,
    acc_dtype,
    attention_backward,
    attention_flops,
    attention_forward,
    check_heads,
    check_mode,
    flash_attention_backward,
    flash_attention_flops,
    flash_attention_forward,
    linear_flops,
    merge_heads,
    prenorm_linear_forward,
    prenorm_residual_backward,
    prenorm_residual_flops,
    residual_add,
    split_heads,
    tokens_linear_backward,
    tokens_linear_forward,
    written_into,
)
from zerosim.precision import get_format


def attention_param_shapes(d: int) -> dict:
    """The sub-block's parameters in flat order."""
    return {"ln1.g": (d,), "ln1.b": (d,), "w_qkv": (3 * d, d), "b_qkv": (3 * d,), "w_o": (d, d), "b_o": (d,)}


def attention_block_forward(p: dict, x: np.ndarray, heads: int, fmt, mode: str = "standard",
                            block: int = BLOCK) -> tuple[np.ndarray, dict]:
    """y (B, L, d) in fmt and the cache {name: array} of the module docstring's table."""
    f = get_format(fmt)
    d = x.shape[-1]
    # (B, L, 3d) fmt
    qkv, (_, mean, rstd) = prenorm_linear_forward(x, p["ln1.g"], p["ln1.b"], p["w_qkv"], p["b_qkv"], f)
    q, k, v = (split_heads(qkv[..., i * d:(i + 1) * d], heads) for i in range(3))  # (B, H, L, d_h) fmt
    cache = {"block input": x, "LN1 mean": mean, "LN1 rstd": rstd, "Q": q, "K": k, "V": v}
    if mode == "flash":
        o_heads, (*_, lse) = flash_attention_forward(q, k, v, f, block)
    else:
        o_heads, (*_, P) = attention_forward(q, k, v, f, keep_p=mode == "standard")
        if P is not None:
            cache["P"] = P
    o = merge_heads(o_heads)  # (B, L, d) fmt
    cache["attention output"] = o
    if mode == "flash":
        cache["LSE"] = lse
    out = tokens_linear_forward(o, p["w_o"], p["b_o"], f)  # (B, L, d) fmt
    return residual_add(x, out, f), cache


def attention_block_backward(p: dict, dy: np.ndarray, cache: dict, heads: int, fmt, mode: str = "standard",
                             block: int = BLOCK, n: int | None = None) -> tuple[np.ndarray, dict]:
    """(dx (B, L, d), grads by parameter name), all in fmt; reads only this sub-block's cache keys. `n`: n ranks'
    micro-batches stacked along axis 0 (models/_stacked.py), each gradient n ranks' own, rank r's at [r]: every
    sequence's attention is its own, and only the weight gradients sum over a rank's sequences."""
    f = get_format(fmt)
    x, o = cache["block input"], cache["attention output"]
    q, k, v = cache["Q"], cache["K"], cache["V"]
    do, dw_o, db_o = tokens_linear_backward(dy, o, p["w_o"], f, n)  # the residual passes dy on unchanged
    do_heads = split_heads(do, heads)
    if mode == "flash":
        dq, dk, dv = flash_attention_backward(do_heads, (q, k, v, split_heads(o, heads), cache["LSE"]), f, block)
    else:
        dq, dk, dv = attention_backward(do_heads, (q, k, v, cache.get("P")), f)
    dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, L, 3d) fmt
    ln_cache = (x, cache["LN1 mean"], cache["LN1 rstd"])
    dx, dg, db, dw_qkv, db_qkv = prenorm_residual_backward(dqkv, dy, ln_cache, p["ln1.g"], p["ln1.b"], p["w_qkv"], f,
                                                           n)
    return dx, {"ln1.g": dg, "ln1.b": db, "w_qkv": dw_qkv, "b_qkv": db_qkv, "w_o": dw_o, "b_o": db_o}


def attention_block_spec(x_shape: tuple, heads: int, fmt, mode: str = "standard") -> dict:
    """{name: (shape, dtype)} of exactly what attention_block_forward saves, from shapes alone."""
    f = get_format(fmt)
    B, L, d = x_shape
    acc, act, per_head = np.dtype(acc_dtype(f)), f.dtype, (B, heads, L, d // heads)
    spec = {"block input": ((B, L, d), act), "LN1 mean": ((B, L), acc), "LN1 rstd": ((B, L), acc),
            "Q": (per_head, act), "K": (per_head, act), "V": (per_head, act)}
    if mode == "standard":
        spec["P"] = ((B, heads, L, L), act)
    spec["attention output"] = ((B, L, d), act)
    if mode == "flash":
        spec["LSE"] = ((B, heads, L), acc)
    return spec


def attention_block_flops(x_shape: tuple, heads: int, kind: str, mode: str = "standard", block: int = BLOCK) -> int:
    """LN1, the QKV and output projections, the attention core and the residual add (one add per element,
    forward; backward sums the residual's two gradient paths, and rebuilds LN1's output for W_qkv)."""
    B, L, d = x_shape
    rows, dh = B * L, d // heads
    core = (flash_attention_flops(B, heads, L, dh, kind, block) if mode == "flash"
            else attention_flops(B, heads, L, dh, kind, mode))
    return (
        prenorm_residual_flops(rows, d, kind)
        + linear_flops(rows, d, 3 * d, kind)
        + core
        + linear_flops(rows, d, d, kind)
    )


def init_attention(d: int, n_layers: int, rng: np.random.Generator) -> dict:
    """GPT-2 / nanoGPT init: LN gain 1, bias 0; weights N(0, 0.02²), the residual projection W_o
    N(0, (0.02/√(2·n_layers))²) so the residual stream's variance does not grow with depth; biases 0."""
    return {"ln1.g": np.ones(d, np.float32), "ln1.b": np.zeros(d, np.float32),
            "w_qkv": (INIT_STD * rng.standard_normal((3 * d, d))).astype(np.float32),
            "b_qkv": np.zeros(3 * d, np.float32),
            "w_o": (INIT_STD / math.sqrt(2 * n_layers) * rng.standard_normal((d, d))).astype(np.float32),
            "b_o": np.zeros(d, np.float32)}


class AttentionBlock(Layer):
    """LN1 + QKV + causal attention + output projection + residual: one ZeRO unit.

    attention: "standard" (P saved), "selective" (P rebuilt in backward), "flash" (tiled, LSE saved).
    """

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own (standard, selective and flash attention alike)

    def __init__(self, d: int, heads: int, attention: str = "standard", n_layers: int = 1,
                 block: int = BLOCK, name: str = "attn"):
        super().__init__(name)
        check_heads(d, heads)
        self.d, self.heads, self.attention, self.n_layers, self.block = d, heads, check_mode(attention), n_layers, block
        self.param_shapes = attention_param_shapes(d)

    def forward(self, p, x, fmt):
        return attention_block_forward(p, x, self.heads, fmt, self.attention, self.block)

    def backward(self, p, dy, cache, fmt):
        return attention_block_backward(p, dy, cache, self.heads, fmt, self.attention, self.block)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = attention_block_backward(p, dy, cache, self.heads, fmt, self.attention, self.block, n)
        return dx, written_into(out, grads)

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        return attention_block_spec(tuple(x_shape), self.heads, fmt, self.attention)

    def flops(self, x_shape, kind):
        return attention_block_flops(tuple(x_shape), self.heads, kind, self.attention, self.block)

    def init(self, rng):
        return init_attention(self.d, self.n_layers, rng)
