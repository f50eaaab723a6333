"""The two ends of a context-parallel attention region: the QKV projection before the ring, the output projection
after it — the unsplit sub-block's arithmetic, cut where the ring communicates.

Letters: B batch, L_r the rank's tokens (L / C), d model width, H query heads, G key/value heads (G = H for the GPT),
d_h head width; T the TP degree where the ends are tensor parallelism's halves. The unsplit sub-blocks
(models/gpt/_attention.py, models/llama/_attention.py; parallel/tensor/_layers.py's column-to-row region) become

    attn.qkv    GPT: LN1, qkv = ln W_qkvᵀ + b_qkv          Llama: RMSNorm, the fused Q/K/V GEMM, rotary at the
                                                           tokens' own positions (their input Located)
                TP: the column-parallel half on H/T heads (its input Bundle(x, h), f before it)
                -> Ring(x, Q, (K, V))
    attn.out    W_o (and its bias), the residual add; TP: the row-parallel half, a partial sum (g after it)

with every rounding the unsplit unit's (the same kernels). Saved for backward, with the unsplit unit's names:
"block input", the norm's statistics ("LN1 mean", "LN1 rstd" / "norm1 rstd") and, Llama, the tokens' "positions"
(L_r,) int64 in attn.qkv (TP: "attention input", the GEMM's input, as Megatron keeps it); "attention output" (B, L_r,
H·d_h), "Q" (B, H, L_r, d_h), "K" and "V" (B, G, L_r, d_h: the ring's last held pair, position p + 1's, which its
backward starts from, as Transformer Engine saves `p2p_comm_buffers[-1]`; the all-gather's own pair) and "LSE" (B,
H, L_r) acc in attn.out. All of it L_r = L / C tokens long: O(L / C) a rank.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import (
    Layer,
    acc_dtype,
    linear_flops,
    merge_heads,
    prenorm_linear_forward,
    prenorm_residual_backward,
    prenorm_residual_flops,
    residual_add,
    rmsnorm_flops,
    rope_backward,
    rope_flops,
    rope_forward,
    rope_tables,
    split_heads,
    tokens_linear_backward,
    tokens_linear_forward,
)
from zerosim.models.llama import norm_qkv_backward, norm_qkv_forward
from zerosim.parallel.context._records import Ring, RingGrad
from zerosim.parallel.tensor import Bundle
from zerosim.precision import get_format

class GptQKV(Layer):
    """LN1, then qkv = ln W_qkvᵀ + b_qkv, split into heads (models/gpt/_attention.py's first half)."""

    saves_input_only = False
    cp_part = "qkv"  # what the time model charges it as (analysis/costs/_context_work.py)

    def __init__(self, d: int, heads: int, name: str):
        super().__init__(name)
        self.d, self.heads = d, heads
        self.param_shapes = {"ln1.g": (d,), "ln1.b": (d,), "w_qkv": (3 * d, d), "b_qkv": (3 * d,)}

    def forward(self, p, x, fmt):
        f, d = get_format(fmt), self.d
        qkv, (_, mean, rstd) = prenorm_linear_forward(x, p["ln1.g"], p["ln1.b"], p["w_qkv"], p["b_qkv"], f)
        q, k, v = (split_heads(qkv[..., i * d:(i + 1) * d], self.heads) for i in range(3))  # (B, H, L_r, d_h) fmt
        return Ring(x, q, (k, v)), {"block input": x, "LN1 mean": mean, "LN1 rstd": rstd}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        dqkv = np.concatenate([merge_heads(dy.dq), merge_heads(dy.dk), merge_heads(dy.dv)], axis=-1)  # (B, L_r, 3d)
        ln_cache = (cache["block input"], cache["LN1 mean"], cache["LN1 rstd"])
        dx, dg, db, dw, dbias = prenorm_residual_backward(dqkv, dy.residual, ln_cache, p["ln1.g"], p["ln1.b"],
                                                          p["w_qkv"], f)
        return dx, {"ln1.g": dg, "ln1.b": db, "w_qkv": dw, "b_qkv": dbias}

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        B, L, _ = x_shape
        acc = np.dtype(acc_dtype(f))
        return {"block input": (tuple(x_shape), f.dtype), "LN1 mean": ((B, L), acc), "LN1 rstd": ((B, L), acc)}

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        return prenorm_residual_flops(B * L, d, kind) + linear_flops(B * L, d, 3 * d, kind)


class LlamaQKV(Layer):
    """RMSNorm, the fused Q/K/V GEMM, rotary at the tokens' positions (models/llama/_attention.py's first half)."""

    saves_input_only = False
    cp_part = "qkv"

    def __init__(self, attn, name: str):
        super().__init__(name)
        self.d, self.heads, self.kv_heads, self.head_dim = attn.d, attn.heads, attn.kv_heads, attn.head_dim
        self.rope_theta, self.rms_eps, self.qkv_bias = attn.rope_theta, attn.rms_eps, attn.qkv_bias
        self.param_shapes = {k: v for k, v in attn.param_shapes.items() if k not in ("o_proj", "o_bias")}

    def _widths(self) -> tuple:
        return self.heads * self.head_dim, self.kv_heads * self.head_dim

    def _tables(self, positions, f):
        return _tables(positions, self.head_dim, self.rope_theta, f)

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        x, positions = x.value, x.positions
        cos, sin = self._tables(positions, f)
        q, k, v, rstd = norm_qkv_forward(p, x, self.heads, self.kv_heads, self.qkv_bias, self.rms_eps, cos, sin, f)
        return Ring(x, q, (k, v)), {"block input": x, "norm1 rstd": rstd, "positions": positions}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        x = cache["block input"]
        cos, sin = self._tables(cache["positions"], f)
        dx_norm, grads = norm_qkv_backward(p, dy.dq, dy.dk, dy.dv, x, cache["norm1 rstd"], self.qkv_bias, cos, sin,
                                           f)
        return residual_add(dy.residual, dx_norm, f), grads  # the residual's two gradient paths, summed once

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        B, L, _ = x_shape
        return {"block input": (tuple(x_shape), f.dtype), "norm1 rstd": ((B, L), np.dtype(acc_dtype(f))),
                "positions": ((L,), np.dtype(np.int64))}

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        rows, (wq, wkv) = B * L, self._widths()
        total = rmsnorm_flops(rows, d, kind) + linear_flops(rows, d, wq + 2 * wkv, kind, self.qkv_bias)
        total += rope_flops(rows * (wq + wkv), kind)
        return total + (rmsnorm_flops(rows, d, "rebuild output") + rows * d if kind == "backward" else 0)


class AttentionOut(Layer):
    """O merged from its heads, W_o (and its bias), the residual add; saves the core's tensors for its backward."""

    saves_input_only = False
    cp_part = "out"

    def __init__(self, d: int, heads: int, kv_heads: int, head_dim: int, weight: str, bias: str | None, name: str):
        super().__init__(name)
        self.d, self.heads, self.kv_heads, self.head_dim = d, heads, kv_heads, head_dim
        self.weight, self.bias = weight, bias
        self.param_shapes = {weight: (d, heads * head_dim), **({bias: (d,)} if bias else {})}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        o = merge_heads(x.o)  # (B, L_r, H·d_h) fmt
        out = tokens_linear_forward(o, p[self.weight], p[self.bias] if self.bias else None, f)
        k, v = x.held
        cache = {"attention output": o, "Q": x.q, "K": k, "V": v, "LSE": x.lse}
        return residual_add(x.residual, out, f), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        o = cache["attention output"]
        do, dw, db = tokens_linear_backward(dy, o, p[self.weight], f)  # the residual passes dy on unchanged
        grads = {self.weight: dw, **({self.bias: db} if self.bias else {})}
        heads = self.heads
        return RingGrad(dy, split_heads(do, heads), split_heads(o, heads), cache["LSE"], cache["Q"],
                        held=(cache["K"], cache["V"])), grads

    def saved_spec(self, x_shape, fmt) -> dict:
        """x_shape = (B, L_r, H·d_h): the merged output's (the first saved, as `Pass.run` reads it)."""
        f = get_format(fmt)
        B, L, _ = x_shape
        act, kv = f.dtype, ((B, self.kv_heads, L, self.head_dim), f.dtype)
        return {"attention output": ((B, L, self.heads * self.head_dim), act),
                "Q": ((B, self.heads, L, self.head_dim), act), "K": kv, "V": kv,
                "LSE": ((B, self.heads, L), np.dtype(acc_dtype(f)))}

    def flops(self, x_shape, kind):
        B, L, width = x_shape
        return linear_flops(B * L, width, self.d, kind, bool(self.bias)) + B * L * self.d




class TensorQKV(Layer):
    """Tensor parallelism's column half of the attention region (parallel/tensor/_layers.py, Attention and
    GQAttention): the rank's H/T heads (G/T key/value heads) of Q, K and V from the GEMM's input h, which arrives in
    Bundle(x, h) after f (Llama: rotary at the tokens' positions, the Bundle Located)."""

    saves_input_only = False
    role = "column"  # parallel/tensor/_plan.py: f before it
    cp_part = "qkv"  # what the time model charges it as (analysis/costs/_context_work.py)
    input_name = "attention input"

    def __init__(self, unit, name: str):
        super().__init__(name)
        self.tp, self.d, self.heads = unit.tp, unit.d, unit.heads
        self.gqa = "q_proj" in unit.param_shapes  # a Llama's attention (separate projections, rotary), not a GPT's
        self.kv_heads = unit.kv_heads if self.gqa else unit.heads
        self.head_dim = unit.head_dim if self.gqa else unit.d // unit.tp // unit.heads
        self.rope_theta, self.qkv_bias = getattr(unit, "rope_theta", None), getattr(unit, "qkv_bias", True)
        self.saves_input = unit.saves_input  # False with sequence parallelism: TP keeps the shard, gathers it again
        self.param_shapes = {k: v for k, v in unit.param_shapes.items() if k not in ("w_o", "o_proj")}
        self._names = ("q_proj", "k_proj", "v_proj") if self.gqa else ("w_qkv",)

    def _weights(self, p):
        w = np.concatenate([p[n] for n in self._names]) if self.gqa else p["w_qkv"]
        bias = ("q_bias", "k_bias", "v_bias") if self.gqa else ("b_qkv",)
        return w, (np.concatenate([p[n] for n in bias]) if self.qkv_bias else None)

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        at = getattr(x, "positions", None)
        x = getattr(x, "value", x) if at is not None else x  # Bundle(residual, h)
        h = x.value
        w, b = self._weights(p)
        qkv = tokens_linear_forward(h, w, b, f)  # (B, L_r, (H_r + 2 G_r)·d_h) fmt
        wq, wkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = (split_heads(qkv[..., a:a + n], heads) for a, n, heads in
                   ((0, wq, self.heads), (wq, wkv, self.kv_heads), (wq + wkv, wkv, self.kv_heads)))
        cache = {self.input_name: h} if self.saves_input else {}
        if self.gqa:
            cos, sin = _tables(at, self.head_dim, self.rope_theta, f)
            q, k = rope_forward(q, cos, sin, f), rope_forward(k, cos, sin, f)
            cache["positions"] = at
        return Ring(x.residual, q, (k, v)), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        h, dy = (cache[self.input_name], dy) if self.saves_input else (dy.input, dy.value)  # SP: Bundle(None, dy, h)
        dq, dk = dy.dq, dy.dk
        if self.gqa:
            cos, sin = _tables(cache["positions"], self.head_dim, self.rope_theta, f)
            dq, dk = rope_backward(dq, cos, sin, f), rope_backward(dk, cos, sin, f)
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dy.dv)], axis=-1)
        w, _ = self._weights(p)
        dh, dw, db = tokens_linear_backward(dqkv, h, w, f)
        if not self.gqa:
            grads = {"w_qkv": dw, "b_qkv": db}
        else:
            wq, wkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
            grads = {"q_proj": dw[:wq], "k_proj": dw[wq:wq + wkv], "v_proj": dw[wq + wkv:]}
            if self.qkv_bias:
                grads |= {"q_bias": db[:wq], "k_bias": db[wq:wq + wkv], "v_bias": db[wq + wkv:]}
        return Bundle(dy.residual, dh), grads  # dh: this rank's partial (f's backward all-reduces it)

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        spec = {self.input_name: (tuple(x_shape), f.dtype)} if self.saves_input else {}
        return spec | ({"positions": ((x_shape[1],), np.dtype(np.int64))} if self.gqa else {})

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        wq, wkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        total = linear_flops(B * L, d, wq + 2 * wkv, kind, self.qkv_bias)
        return total + (rope_flops(B * L * (wq + wkv), kind) if self.gqa else 0)


class TensorOut(Layer):
    """Tensor parallelism's row half: W_o's columns of this rank on its heads' output, a partial sum handed on beside
    the residual stream (Bundle(x, partial); g after it, the bias added after the reduce: parallel/tensor/
    _replicated.py)."""

    saves_input_only = False
    role = "row"  # parallel/tensor/_plan.py: g after it
    cp_part = "out"  # what the time model charges it as (analysis/costs/_context_work.py)

    def __init__(self, unit, name: str, saved_kv_heads: int | None = None):
        super().__init__(name)
        self.qkv = TensorQKV(unit, name)
        self.saved_kv_heads = self.qkv.kv_heads if saved_kv_heads is None else saved_kv_heads  # (torch's: H/T)
        self.weight = "o_proj" if self.qkv.gqa else "w_o"
        self.param_shapes = {self.weight: unit.param_shapes[self.weight]}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        o = merge_heads(x.o)
        k, v = x.held
        cache = {"attention output": o, "Q": x.q, "K": k, "V": v, "LSE": x.lse}
        return Bundle(x.residual, tokens_linear_forward(o, p[self.weight], None, f)), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        o, heads = cache["attention output"], self.qkv.heads
        do, dw, _ = tokens_linear_backward(dy.value, o, p[self.weight], f)
        return RingGrad(dy.residual, split_heads(do, heads), split_heads(o, heads), cache["LSE"], cache["Q"],
                        held=(cache["K"], cache["V"])), {self.weight: dw}

    def saved_spec(self, x_shape, fmt) -> dict:
        q = self.qkv
        return AttentionOut(q.d, q.heads, self.saved_kv_heads, q.head_dim, self.weight, None,
                            self.name).saved_spec(x_shape, fmt)

    def flops(self, x_shape, kind):
        B, L, width = x_shape
        return linear_flops(B * L, width, self.qkv.d, kind, bias=False)


def _tables(positions, head_dim: int, theta: float, f):
    """cos, sin (L_r, d_h) at the tokens' positions: rows of the whole sequence's tables (each row a function of its
    position alone: the same bits as the unsplit unit's)."""
    cos, sin = rope_tables(int(positions.max()) + 1, head_dim, theta, f)
    return cos[positions], sin[positions]
