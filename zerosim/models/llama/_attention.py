"""Llama's attention sub-block: y = x + o_proj(attention(rope(q), rope(k), v)), q, k, v from RMSNorm(x).

Letters: B batch, L sequence length, d model width, H query heads, G key/value heads (H = n_rep·G: grouped-
query attention, Ainslie et al. 2023; G = H is multi-head, G = 1 multi-query), d_h head width (d_h·H need not
be d: the configs' head_dim). Hugging Face transformers, models/llama/modeling_llama.py, `LlamaAttention`:
q_proj (H·d_h, d), k_proj and v_proj (G·d_h, d), o_proj (d, H·d_h); `repeat_kv` hands each K/V head to its
n_rep query heads. Steps:

    ln  = RMSNorm(x)                         (B, L, d)          not saved: rebuilt in backward from x, rstd
    qkv = ln [W_q; W_k; W_v]ᵀ (+ biases)     (B, L, (H+2G)·d_h) one GEMM, as a fused QKV projection
    Q = rope(q) (B, H, L, d_h);  K = rope(k), V = v (B, G, L, d_h)
    O   = attention(Q, repeat_kv(K), repeat_kv(V))          _attention.py or _flash_attention.py, causal
    y   = cast(x + merge(O) W_oᵀ (+ b_o), fmt)

Backward: attention's dK and dV come per query head (rounded to fmt, as a kernel writes them); repeat_kv's
backward sums each group's n_rep heads in acc and rounds once (torch's sum over the expanded dimension).
The three projections' input gradients are summed in one fp32 GEMM (a fused QKV's dX), where HF's three
Linears would add three 16-bit gradients.

Saved for backward (bytes for fmt = 16-bit):

    name               shape            dtype   bytes
    block input        (B, L, d)        fmt     2·BLd           the RMSNorm's input
    norm1 rstd         (B, L)           fp32    4·BL            its statistic
    Q                  (B, H, L, d_h)   fmt     2·BL·H·d_h      after rotation
    K, V               (B, G, L, d_h)   fmt     2·BL·G·d_h each GQA: G heads kept, not H (repeat_kv is rebuilt)
    P                  (B, H, L, L)     fmt     2·BHL²          "standard" only
    attention output   (B, L, H·d_h)    fmt     2·BL·H·d_h      o_proj's input
    LSE                (B, H, L)        fp32    4·BHL           "flash" only, in place of P

Keeping G heads is what a GQA-aware kernel does (flash-attn takes K, V with fewer heads); HF's eager path
calls repeat_kv before its matmuls, so autograd there keeps the repeated (B, H, L, d_h) K and V.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    BLOCK,
    MODES,
    RMS_EPS,
    ROPE_THETA,
    Layer,
    acc_dtype,
    attention_backward,
    attention_flops,
    attention_forward,
    flash_attention_backward,
    flash_attention_flops,
    flash_attention_forward,
    linear_flops,
    merge_heads,
    residual_add,
    weight_rows,
    written_into,
    rmsnorm_backward,
    rmsnorm_flops,
    rmsnorm_forward,
    rmsnorm_output,
    rope_backward,
    rope_flops,
    rope_forward,
    rope_tables,
    split_heads,
    tokens_linear_backward,
    tokens_linear_forward,
)
from zerosim.precision import cast, get_format
from zerosim.precision.cast import MetaArray


def check_gqa(heads: int, kv_heads: int, head_dim: int) -> None:
    """H query heads in groups over G key/value heads, an even head width (rotary pairs its halves)."""
    for name, v in (("n_heads", heads), ("n_kv_heads", kv_heads), ("head_dim", head_dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if heads % kv_heads:
        raise ValueError(
            f"n_heads = {heads} query heads must split evenly over n_kv_heads = {kv_heads} "
            "key/value heads (grouped-query attention)"
        )
    if head_dim % 2:
        raise ValueError(f"rotary embeddings pair the two halves of a head: head_dim must be even, got {head_dim}")


def repeat_kv(x: np.ndarray, n_rep: int) -> np.ndarray:
    """(B, G, L, d_h) -> (B, G·n_rep, L, d_h), head g·n_rep + r = head g (HF's repeat_kv; a copy, no rounding). A
    data-less (meta) x gives a data-less array of that shape: the one place for both."""
    if n_rep == 1:
        return x
    if getattr(x, "is_meta", False):
        return MetaArray(x.shape[:1] + (x.shape[1] * n_rep,) + x.shape[2:], x.dtype)
    return np.repeat(x, n_rep, axis=1)


def repeat_kv_backward(dx: np.ndarray, n_rep: int, fmt) -> np.ndarray:
    """(B, G·n_rep, L, d_h) -> (B, G, L, d_h): each group's n_rep gradients summed in acc, rounded once (a data-less
    dx: a data-less array of that shape in fmt, as `repeat_kv`)."""
    if n_rep == 1:
        return dx
    B, H, L, dh = dx.shape
    if getattr(dx, "is_meta", False):
        return MetaArray((B, H // n_rep, L, dh), get_format(fmt).dtype)
    acc = acc_dtype(get_format(fmt))
    return cast(dx.reshape(B, H // n_rep, n_rep, L, dh).sum(axis=2, dtype=acc), fmt)


def gqa_param_shapes(
    d: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool = False, o_bias: bool = False
) -> dict:
    """The sub-block's parameters in flat order (HF's names; Qwen2 has q/k/v biases, Llama none)."""
    shapes = {
        "norm1.w": (d,),
        "q_proj": (heads * head_dim, d),
        "k_proj": (kv_heads * head_dim, d),
        "v_proj": (kv_heads * head_dim, d),
    }
    if qkv_bias:
        shapes |= {"q_bias": (heads * head_dim,), "k_bias": (kv_heads * head_dim,), "v_bias": (kv_heads * head_dim,)}
    shapes["o_proj"] = (d, heads * head_dim)
    if o_bias:
        shapes["o_bias"] = (d,)
    return shapes


def norm_qkv_forward(p, x, heads: int, kv_heads: int, qkv_bias: bool, eps: float, cos, sin, fmt) -> tuple:
    """The sub-block's first half: RMSNorm, the fused Q/K/V GEMM, rotary by the tables `cos`, `sin` (L, d_h) of the
    tokens' positions -> (Q (B, H, L, d_h), K, V (B, G, L, d_h), the norm's rstd (B, L)). A context-parallel rank runs
    it on its tokens, with the tables at their positions (parallel/context/_ends.py)."""
    f = get_format(fmt)
    d_h = cos.shape[-1]
    wq, wkv = heads * d_h, kv_heads * d_h
    ln, (_, rstd) = rmsnorm_forward(x, p["norm1.w"], f, eps)  # (B, L, d) fmt, dropped after the GEMM
    w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])  # ((H+2G)·d_h, d) fmt: one fused GEMM
    b = np.concatenate([p["q_bias"], p["k_bias"], p["v_bias"]]) if qkv_bias else None
    qkv = tokens_linear_forward(ln, w, b, f)  # (B, L, (H+2G)·d_h) fmt
    q = rope_forward(split_heads(qkv[..., :wq], heads), cos, sin, f)  # (B, H, L, d_h) fmt
    k = rope_forward(split_heads(qkv[..., wq : wq + wkv], kv_heads), cos, sin, f)  # (B, G, L, d_h) fmt
    v = split_heads(qkv[..., wq + wkv :], kv_heads)  # (B, G, L, d_h) fmt
    return q, k, v, rstd


def norm_qkv_backward(p, dq, dk, dv, x, rstd, qkv_bias: bool, cos, sin, fmt, n: int | None = None) -> tuple:
    """The first half's backward from dQ (B, H, L, d_h) and dK, dV (B, G, L, d_h, K/V heads summed already): (dx
    through the norm alone, {norm1.w, q/k/v_proj (and biases): grads}). `n`: n ranks' micro-batches stacked along
    axis 0 (models/_stacked.py), each gradient n ranks' own."""
    f = get_format(fmt)
    dq, dk = rope_backward(dq, cos, sin, f), rope_backward(dk, cos, sin, f)
    dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, L, (H+2G)·d_h)
    norm_cache = (x, rstd)
    ln = rmsnorm_output(norm_cache, p["norm1.w"], f)  # the GEMM's input, bitwise the forward's
    w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])
    dln, dw, db = tokens_linear_backward(dqkv, ln, w, f, n)
    dx_norm, dw_norm = rmsnorm_backward(dln, norm_cache, p["norm1.w"], f, n)
    wq, wkv = dq.shape[1] * dq.shape[3], dk.shape[1] * dk.shape[3]
    end = wq + 2 * wkv
    grads = {"norm1.w": dw_norm, "q_proj": weight_rows(dw, 0, wq), "k_proj": weight_rows(dw, wq, wq + wkv),
             "v_proj": weight_rows(dw, wq + wkv, end)}
    if qkv_bias:
        grads |= {"q_bias": db[..., :wq], "k_bias": db[..., wq : wq + wkv], "v_bias": db[..., wq + wkv :]}
    return dx_norm, grads


class LlamaAttention(Layer):
    """RMSNorm + Q/K/V + rotary + grouped-query causal attention + o_proj + residual: one ZeRO unit.

    attention: "standard" (P saved), "selective" (P rebuilt in backward), "flash" (tiled, LSE saved).
    """

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own (standard, selective and flash attention alike)

    def __init__(
        self,
        d: int,
        heads: int,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        attention: str = "standard",
        n_layers: int = 1,
        rope_theta: float = ROPE_THETA,
        rms_eps: float = RMS_EPS,
        qkv_bias: bool = False,
        o_bias: bool = False,
        block: int = BLOCK,
        name: str = "attn",
    ):
        super().__init__(name)
        kv_heads = heads if kv_heads is None else kv_heads
        head_dim = (d // heads if heads and d % heads == 0 else 0) if head_dim is None else head_dim
        if head_dim == 0:
            raise ValueError(f"d_model = {d} does not split into n_heads = {heads} heads: give head_dim")
        check_gqa(heads, kv_heads, head_dim)
        if attention not in MODES:
            raise ValueError(f"attention must be one of {MODES}, got {attention!r}")
        self.d, self.heads, self.kv_heads, self.head_dim = d, heads, kv_heads, head_dim
        self.attention, self.n_layers, self.block = attention, n_layers, block
        self.rope_theta, self.rms_eps, self.qkv_bias, self.o_bias = float(rope_theta), rms_eps, qkv_bias, o_bias
        self.param_shapes = gqa_param_shapes(d, heads, kv_heads, head_dim, qkv_bias, o_bias)

    @property
    def n_rep(self) -> int:
        return self.heads // self.kv_heads

    def _widths(self) -> tuple:
        return self.heads * self.head_dim, self.kv_heads * self.head_dim

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        cos, sin = rope_tables(x.shape[1], self.head_dim, self.rope_theta, f)  # (L, d_h) fmt each
        q, k, v, rstd = norm_qkv_forward(p, x, self.heads, self.kv_heads, self.qkv_bias, self.rms_eps, cos, sin, f)
        cache = {"block input": x, "norm1 rstd": rstd, "Q": q, "K": k, "V": v}
        k_rep, v_rep = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, L, d_h): rebuilt, not kept
        if self.attention == "flash":
            o_heads, (*_, lse) = flash_attention_forward(q, k_rep, v_rep, f, self.block)
        else:
            o_heads, (*_, P) = attention_forward(q, k_rep, v_rep, f, keep_p=self.attention == "standard")
            if P is not None:
                cache["P"] = P
        o = merge_heads(o_heads)  # (B, L, H·d_h) fmt
        cache["attention output"] = o
        if self.attention == "flash":
            cache["LSE"] = lse
        out = tokens_linear_forward(o, p["o_proj"], p.get("o_bias"), f)  # (B, L, d) fmt
        return residual_add(x, out, f), cache

    def backward(self, p, dy, cache, fmt):
        return self._backward(p, dy, cache, fmt)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = self._backward(p, dy, cache, fmt, n)
        return dx, written_into(out, grads)

    def _backward(self, p, dy, cache, fmt, n=None):
        """`backward`; with `n`, n ranks' micro-batches stacked along axis 0 and each gradient n ranks' own."""
        f = get_format(fmt)
        x, o, q, k, v = cache["block input"], cache["attention output"], cache["Q"], cache["K"], cache["V"]
        do, dw_o, db_o = tokens_linear_backward(dy, o, p["o_proj"], f, n)  # the residual passes dy on unchanged
        do_heads = split_heads(do, self.heads)
        k_rep, v_rep = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)
        if self.attention == "flash":
            dq, dk_rep, dv_rep = flash_attention_backward(
                do_heads, (q, k_rep, v_rep, split_heads(o, self.heads), cache["LSE"]), f, self.block
            )
        else:
            dq, dk_rep, dv_rep = attention_backward(do_heads, (q, k_rep, v_rep, cache.get("P")), f)
        cos, sin = rope_tables(x.shape[1], self.head_dim, self.rope_theta, f)  # the forward's tables, rebuilt
        dk, dv = repeat_kv_backward(dk_rep, self.n_rep, f), repeat_kv_backward(dv_rep, self.n_rep, f)
        dx_norm, grads = norm_qkv_backward(p, dq, dk, dv, x, cache["norm1 rstd"], self.qkv_bias, cos, sin, f, n)
        grads["o_proj"] = dw_o
        if self.o_bias:
            grads["o_bias"] = db_o
        return residual_add(dy, dx_norm, f), grads  # the residual's two gradient paths, summed once

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of exactly what forward saves for an input of x_shape = (B, L, d)."""
        f = get_format(fmt)
        B, L, _ = x_shape
        acc, act = np.dtype(acc_dtype(f)), f.dtype
        kv = (B, self.kv_heads, L, self.head_dim)
        spec = {
            "block input": (tuple(x_shape), act),
            "norm1 rstd": ((B, L), acc),
            "Q": ((B, self.heads, L, self.head_dim), act),
            "K": (kv, act),
            "V": (kv, act),
        }
        if self.attention == "standard":
            spec["P"] = ((B, self.heads, L, L), act)
        spec["attention output"] = ((B, L, self.heads * self.head_dim), act)
        if self.attention == "flash":
            spec["LSE"] = ((B, self.heads, L), acc)
        return spec

    def flops(self, x_shape, kind):
        """The RMSNorm, the QKV GEMM, rotary on Q and K, the attention core at H heads, repeat_kv's group sums
        (backward), o_proj and the residual (backward also rebuilds the norm's output for the QKV GEMM)."""
        B, L, d = x_shape
        rows, (wq, wkv) = B * L, self._widths()
        H, dh = self.heads, self.head_dim
        core = (
            flash_attention_flops(B, H, L, dh, kind, self.block)
            if self.attention == "flash"
            else attention_flops(B, H, L, dh, kind, self.attention)
        )
        total = (
            rmsnorm_flops(rows, d, kind)
            + linear_flops(rows, d, wq + 2 * wkv, kind, self.qkv_bias)
            + core
            + rope_flops(rows * (wq + wkv), kind)
            + linear_flops(rows, wq, d, kind, self.o_bias)
            + rows * d
        )
        if kind == "backward":
            total += rmsnorm_flops(rows, d, "rebuild output") + 2 * (self.n_rep - 1) * rows * wkv  # dK, dV sums
        return total

    def init(self, rng):
        """HF's init (`initializer_range` 0.02, norm weights 1, biases 0); o_proj scaled by 1/√(2·n_layers) as
        GPT-2's residual projections, so the residual stream's variance does not grow with depth."""
        out = {}
        for name, shape in self.param_shapes.items():
            if name == "norm1.w":
                out[name] = np.ones(shape, np.float32)
            elif name.endswith("bias"):
                out[name] = np.zeros(shape, np.float32)
            else:
                std = INIT_STD / math.sqrt(2 * self.n_layers) if name == "o_proj" else INIT_STD
                out[name] = (std * rng.standard_normal(shape)).astype(np.float32)
        return out
