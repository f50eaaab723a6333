"""The tensor-parallel region of a transformer sub-block: a column-parallel GEMM, what runs on its heads or columns,
and a row-parallel GEMM whose output is a partial sum — Megatron's ColumnParallelLinear then RowParallelLinear, as
one unit of the step for the GPT's and the Llama's attention and MLP.

Letters: B batch, L sequence length, d model width, T the TP degree, H heads (H_r = H/T per rank), G key/value heads
(G_r = G/T), d_h head width, F FFN width (F_r = F/T). One rank's unit, its input `Bundle(x, h)` (_bundle.py):

    attention (GPT)    qkv = h W_qkv,rᵀ + b_qkv,r    (B, L, 3d/T)    the rank's H_r heads of Q, K and V
                       O = attention(Q, K, V)         (B, H_r, L, d_h) causal, _attention / _flash_attention
                       p = merge(O) W_o,rᵀ            (B, L, d)       a partial sum: no bias (added after the reduce)
    attention (Llama)  q, k, v = h [W_q; W_k; W_v]ᵣᵀ (B, L, (H_r + 2G_r)·d_h), rotary on q and k, repeat_kv
                       p = merge(O) W_o,rᵀ
    MLP (GPT)          x1 = h W1,rᵀ + b1,r, x2 = act(x1)   (B, L, F_r)    p = x2 W2,rᵀ
    MLP (Llama)        gate, up = h [W_gate; W_up]ᵣᵀ, s = silu(gate)·up   p = s W_down,rᵀ
    output             Bundle(x, p): the residual stream goes on untouched beside the partial sum

Megatron-LM core_v0.19.0, megatron/core/tensor_parallel/layers.py: `ColumnParallelLinear` keeps output_size/T rows
of W (`divide(output_size, world_size)`) and, with gather_output=False, hands its output on split; `RowParallelLinear`
keeps input_size/T columns and returns `reduce_from_tensor_model_parallel_region(output_parallel)` (or, sequence
parallel, `reduce_scatter_to_sequence_parallel_region`), its bias added after (`output_ + self.bias`; the transformer
layer passes skip_bias_add and adds it in bias_dropout_add: _replicated.py). The collectives on either side are the
parallelism's (_communication.py), between units. torch's `ColwiseParallel` / `RowwiseParallel`
(torch/distributed/tensor/parallel/style.py) place the same shards as DTensors; torchtitan's `parallelize_llama`
(torchtitan/models/llama3/infra/parallelize.py, apply_tp) puts ColwiseParallel on wq, wk, wv, w1, w3 and
RowwiseParallel on wo, w2.

Every rounding is the unsplit unit's (models/gpt/_attention.py, _mlp.py, models/llama/...): GEMMs sum in fp32 and
round once, on the rank's own rows or columns; only the sum over the T partial products moves, into the ring.

Saved for backward (one rank; fmt 16-bit): the unsplit unit's tensors at H_r heads or F_r columns, and the GEMM's
input h (B, L, d) — which the unsplit unit rebuilds from its norm's input, but which here crossed a collective:
Megatron saves it too ("QKV input" and "MLP input" in Korthikanti et al. 2022, "Reducing Activation Recomputation",
Table 2). With sequence parallelism it is not in this cache: the parallelism keeps the rank's sequence shard and
all-gathers it again for the weight gradient (_parallelism.py), and backward finds it in `dy.input`.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models.layers import (
    BLOCK,
    GELU,
    Layer,
    acc_dtype,
    attention_backward,
    attention_flops,
    attention_forward,
    flash_attention_backward,
    flash_attention_flops,
    flash_attention_forward,
    gelu_backward,
    gelu_forward,
    linear_flops,
    merge_heads,
    relu_forward,
    rope_backward,
    rope_flops,
    rope_forward,
    rope_tables,
    split_heads,
    tokens_linear_backward,
    tokens_linear_forward,
)
from zerosim.models.llama import repeat_kv, repeat_kv_backward, swiglu_backward, swiglu_forward
from zerosim.parallel.tensor._bundle import Bundle
from zerosim.precision import cast, get_format

SWIGLU_FLOPS = {"forward": 5, "backward": 11}  # models/llama/_mlp.py's count per element of (B, L, F)


def token_rows(shape: tuple) -> tuple:
    """(B, L) of a unit's shape as the step hands it to `flops`: an activation (B, L, ·) or a head tensor (B, ·, L,
    d_h) (a backward's first saved tensor)."""
    return (shape[0], shape[2]) if len(shape) == 4 else (shape[0], shape[1])


def _attend(q, k, v, mode: str, f, block: int) -> tuple:
    """O (B, H_r, L, d_h) and what the mode saves of the core: {"P"} (standard), {} (selective), {"LSE"} (flash)."""
    if mode == "flash":
        o, (*_, lse) = flash_attention_forward(q, k, v, f, block)
        return o, {"LSE": lse}
    o, (*_, P) = attention_forward(q, k, v, f, keep_p=mode == "standard")
    return o, ({} if P is None else {"P": P})


def _attend_back(do, q, k, v, o_heads, cache: dict, mode: str, f, block: int) -> tuple:
    if mode == "flash":
        return flash_attention_backward(do, (q, k, v, o_heads, cache["LSE"]), f, block)
    return attention_backward(do, (q, k, v, cache.get("P")), f)


def _core_cache(q, k, v, core: dict, o) -> dict:
    """What the attention region saves, in the unsplit units' order: Q, K, V, P (standard), O merged, LSE (flash)."""
    return {"Q": q, "K": k, "V": v, **({"P": core["P"]} if "P" in core else {}), "attention output": o,
            **({"LSE": core["LSE"]} if "LSE" in core else {})}


def _core_spec(B: int, L: int, heads: int, kv_heads: int, head_dim: int, mode: str, f) -> dict:
    """{name: (shape, dtype)} of `_core_cache` on the rank's `heads` query and `kv_heads` key/value heads."""
    acc, act, kv = np.dtype(acc_dtype(f)), f.dtype, (B, kv_heads, L, head_dim)
    spec = {"Q": ((B, heads, L, head_dim), act), "K": (kv, act), "V": (kv, act)}
    if mode == "standard":
        spec["P"] = ((B, heads, L, L), act)
    spec["attention output"] = ((B, L, heads * head_dim), act)
    if mode == "flash":
        spec["LSE"] = ((B, heads, L), acc)
    return spec


def _core_flops(B, H, L, dh, kind, mode, block) -> int:
    return flash_attention_flops(B, H, L, dh, kind, block) if mode == "flash" else attention_flops(B, H, L, dh, kind,
                                                                                                   mode)


class ColumnRow(Layer):
    """A column-then-row-parallel unit: `Bundle(x, h)` in, `Bundle(x, partial)` out (module docstring). Subclasses
    say what runs between the two GEMMs; `saves_input` is False with sequence parallelism (the parallelism keeps the
    input's shard instead)."""

    saves_input_only = False
    role = "column-row"  # _plan.py: f before it, g after it
    input_name = "input"

    def __init__(self, name: str, tp: int, saves_input: bool = True):
        super().__init__(name)
        self.tp, self.saves_input = tp, saves_input

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        partial, cache = self.region_forward(p, x.value, f)
        if self.saves_input:
            cache = {self.input_name: x.value, **cache}
        return Bundle(x.residual, partial), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        h = cache[self.input_name] if self.saves_input else dy.input  # the column GEMM's input, gathered again (SP)
        dh, grads = self.region_backward(p, dy.value, h, cache, f)
        return Bundle(dy.residual, dh), grads  # dh: this rank's partial of the input gradient (f reduces it)

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for a GEMM input of x_shape = (B, L, d)."""
        f = get_format(fmt)
        own = self.region_spec(tuple(x_shape), f)
        return {self.input_name: (tuple(x_shape), f.dtype), **own} if self.saves_input else own

    def output_shape(self, x_shape):
        return tuple(x_shape)  # the partial sum has the input's (B, L, d)


class Attention(ColumnRow):
    """The GPT's attention region on H/T heads: W_qkv's rows and W_o's columns of this rank (module docstring)."""

    input_name = "attention input"

    def __init__(self, d: int, heads: int, tp: int, mode: str = "standard", block: int = BLOCK,
                 name: str = "attn", saves_input: bool = True):
        super().__init__(name, tp, saves_input)
        self.d, self.heads, self.mode, self.block = d, heads // tp, mode, block  # heads: this rank's H_r
        dr = d // tp
        self.kv_heads, self.head_dim = self.heads, d // heads  # multi-head: every query head its own K and V
        self.param_shapes = {"w_qkv": (3 * dr, d), "b_qkv": (3 * dr,), "w_o": (d, dr)}

    @property
    def attention(self) -> str:
        """The attention kernel, as the unsplit unit names it (the time model reads it: analysis/costs/_kernel_work.py
        `attention_of`, attention's L × L work on the rank's H_r heads)."""
        return self.mode

    def region_forward(self, p, h, f):
        dr = self.d // self.tp
        qkv = tokens_linear_forward(h, p["w_qkv"], p["b_qkv"], f)  # (B, L, 3d/T) fmt
        q, k, v = (split_heads(qkv[..., i * dr:(i + 1) * dr], self.heads) for i in range(3))  # (B, H_r, L, d_h)
        o_heads, core = _attend(q, k, v, self.mode, f, self.block)
        o = merge_heads(o_heads)  # (B, L, d/T) fmt
        return tokens_linear_forward(o, p["w_o"], None, f), _core_cache(q, k, v, core, o)  # (B, L, d): a partial

    def region_backward(self, p, dp, h, cache, f):
        q, k, v, o = cache["Q"], cache["K"], cache["V"], cache["attention output"]
        do, dw_o, _ = tokens_linear_backward(dp, o, p["w_o"], f)
        dq, dk, dv = _attend_back(split_heads(do, self.heads), q, k, v, split_heads(o, self.heads), cache, self.mode,
                                  f, self.block)
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, L, 3d/T) fmt
        dh, dw_qkv, db_qkv = tokens_linear_backward(dqkv, h, p["w_qkv"], f)
        return dh, {"w_qkv": dw_qkv, "b_qkv": db_qkv, "w_o": dw_o}

    def region_spec(self, x_shape, f) -> dict:
        B, L, _ = x_shape
        return _core_spec(B, L, self.heads, self.heads, self.d // self.tp // self.heads, self.mode, f)

    def flops(self, x_shape, kind):
        """W_qkv's rows, the core on H_r heads, W_o's columns (no bias: the reduce's unit adds it)."""
        B, L = token_rows(x_shape)
        rows, dr = B * L, self.d // self.tp
        return (linear_flops(rows, self.d, 3 * dr, kind)
                + _core_flops(B, self.heads, L, dr // self.heads, kind, self.mode, self.block)
                + linear_flops(rows, dr, self.d, kind, bias=False))


class GQAttention(ColumnRow):
    """The Llama's attention region on H/T query heads and G/T key/value heads (Megatron divides
    num_query_groups by T too: core/transformer/attention.py, `num_query_groups_per_partition`)."""

    input_name = "attention input"

    def __init__(self, d: int, heads: int, kv_heads: int, head_dim: int, tp: int, mode: str = "standard",
                 rope_theta: float = 10000.0, qkv_bias: bool = False, block: int = BLOCK, name: str = "attn",
                 saves_input: bool = True):
        super().__init__(name, tp, saves_input)
        self.d, self.heads, self.kv_heads, self.head_dim = d, heads // tp, kv_heads // tp, head_dim
        self.mode, self.rope_theta, self.qkv_bias, self.block = mode, float(rope_theta), qkv_bias, block
        wq, wkv = self.heads * head_dim, self.kv_heads * head_dim
        self.param_shapes = {"q_proj": (wq, d), "k_proj": (wkv, d), "v_proj": (wkv, d)}
        if qkv_bias:
            self.param_shapes |= {"q_bias": (wq,), "k_bias": (wkv,), "v_bias": (wkv,)}
        self.param_shapes["o_proj"] = (d, wq)

    @property
    def attention(self) -> str:
        """The attention kernel, as the unsplit unit names it (the time model reads it: analysis/costs/_kernel_work.py
        `attention_of`, attention's L × L work on the rank's H_r heads)."""
        return self.mode

    @property
    def n_rep(self) -> int:
        return self.heads // self.kv_heads

    def region_forward(self, p, h, f):
        wq, wkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])  # one fused GEMM, as the unsplit unit's
        b = np.concatenate([p["q_bias"], p["k_bias"], p["v_bias"]]) if self.qkv_bias else None
        qkv = tokens_linear_forward(h, w, b, f)  # (B, L, (H_r + 2G_r)·d_h) fmt
        cos, sin = rope_tables(h.shape[1], self.head_dim, self.rope_theta, f)
        q = rope_forward(split_heads(qkv[..., :wq], self.heads), cos, sin, f)
        k = rope_forward(split_heads(qkv[..., wq:wq + wkv], self.kv_heads), cos, sin, f)
        v = split_heads(qkv[..., wq + wkv:], self.kv_heads)
        o_heads, core = _attend(q, repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep), self.mode, f, self.block)
        o = merge_heads(o_heads)  # (B, L, H_r·d_h) fmt
        return tokens_linear_forward(o, p["o_proj"], None, f), _core_cache(q, k, v, core, o)

    def region_backward(self, p, dp, h, cache, f):
        q, k, v, o = cache["Q"], cache["K"], cache["V"], cache["attention output"]
        do, dw_o, _ = tokens_linear_backward(dp, o, p["o_proj"], f)
        k_rep, v_rep = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)
        dq, dk_rep, dv_rep = _attend_back(split_heads(do, self.heads), q, k_rep, v_rep, split_heads(o, self.heads),
                                          cache, self.mode, f, self.block)
        cos, sin = rope_tables(h.shape[1], self.head_dim, self.rope_theta, f)
        dq = rope_backward(dq, cos, sin, f)
        dk = rope_backward(repeat_kv_backward(dk_rep, self.n_rep, f), cos, sin, f)
        dv = repeat_kv_backward(dv_rep, self.n_rep, f)
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)
        w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])
        dh, dw, db = tokens_linear_backward(dqkv, h, w, f)
        wq, wkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        grads = {"q_proj": dw[:wq], "k_proj": dw[wq:wq + wkv], "v_proj": dw[wq + wkv:]}
        if self.qkv_bias:
            grads |= {"q_bias": db[:wq], "k_bias": db[wq:wq + wkv], "v_bias": db[wq + wkv:]}
        grads["o_proj"] = dw_o
        return dh, grads

    def region_spec(self, x_shape, f) -> dict:
        B, L, _ = x_shape
        return _core_spec(B, L, self.heads, self.kv_heads, self.head_dim, self.mode, f)

    def flops(self, x_shape, kind):
        """The fused QKV GEMM's rows, rotary on Q and K, the core on H_r heads, repeat_kv's sums (backward),
        o_proj's columns."""
        B, L = token_rows(x_shape)
        rows, wq, wkv = B * L, self.heads * self.head_dim, self.kv_heads * self.head_dim
        total = (linear_flops(rows, self.d, wq + 2 * wkv, kind, self.qkv_bias)
                 + _core_flops(B, self.heads, L, self.head_dim, kind, self.mode, self.block)
                 + rope_flops(rows * (wq + wkv), kind) + linear_flops(rows, wq, self.d, kind, bias=False))
        return total + (2 * (self.n_rep - 1) * rows * wkv if kind == "backward" else 0)


class MLP(ColumnRow):
    """The GPT's MLP region on F/T columns: W1's rows (and b1's), GELU or ReLU, W2's columns."""

    input_name = "FFN input"

    def __init__(self, d: int, ffn: int, tp: int, activation: str = "gelu", name: str = "mlp",
                 saves_input: bool = True):
        super().__init__(name, tp, saves_input)
        self.d, self.ffn, self.activation = d, ffn // tp, activation  # ffn: this rank's F_r
        self.param_shapes = {"w1": (self.ffn, d), "b1": (self.ffn,), "w2": (d, self.ffn)}

    def region_forward(self, p, h, f):
        x1 = tokens_linear_forward(h, p["w1"], p["b1"], f)  # (B, L, F_r) fmt
        if self.activation == "gelu":
            x2, _ = gelu_forward(x1, f)
            cache = {"x1": x1, "x2": x2}
        else:
            x2, _ = relu_forward(x1, f)  # x2 first: a backward reads (B, L) from its first saved tensor
            cache = {"x2": x2, "ReLU mask": np.packbits(~(x1.astype(acc_dtype(f)) <= 0).reshape(-1))}
        return tokens_linear_forward(x2, p["w2"], None, f), cache

    def region_backward(self, p, dp, h, cache, f):
        x2 = cache["x2"]
        dx2, dw2, _ = tokens_linear_backward(dp, x2, p["w2"], f)
        if self.activation == "gelu":
            dx1 = gelu_backward(dx2, (cache["x1"],), f)
        else:
            dx1 = cast(dx2, f)  # ReLU selects, never rounds
            n = math.prod(dx2.shape)
            dx1[~np.unpackbits(cache["ReLU mask"], count=n).reshape(dx2.shape).astype(bool)] = 0
        dh, dw1, db1 = tokens_linear_backward(dx1, h, p["w1"], f)
        return dh, {"w1": dw1, "b1": db1, "w2": dw2}

    def region_spec(self, x_shape, f) -> dict:
        B, L, _ = x_shape
        wide = (B, L, self.ffn)
        if self.activation == "gelu":
            return {"x1": (wide, f.dtype), "x2": (wide, f.dtype)}
        return {"x2": (wide, f.dtype), "ReLU mask": ((-(-B * L * self.ffn // 8),), np.dtype(np.uint8))}

    def flops(self, x_shape, kind):
        B, L = token_rows(x_shape)
        rows = B * L
        act = GELU.GELU_FLOPS[kind] if self.activation == "gelu" else 1
        return (linear_flops(rows, self.d, self.ffn, kind) + act * rows * self.ffn
                + linear_flops(rows, self.ffn, self.d, kind, bias=False))


class SwiGLU(ColumnRow):
    """The Llama's MLP region on F/T columns: gate_proj's and up_proj's rows, SiLU·up, down_proj's columns."""

    input_name = "FFN input"

    def __init__(self, d: int, ffn: int, tp: int, name: str = "mlp", saves_input: bool = True):
        super().__init__(name, tp, saves_input)
        self.d, self.ffn = d, ffn // tp
        self.param_shapes = {"gate_proj": (self.ffn, d), "up_proj": (self.ffn, d), "down_proj": (d, self.ffn)}

    def region_forward(self, p, h, f):
        gu = tokens_linear_forward(h, np.concatenate([p["gate_proj"], p["up_proj"]]), None, f)  # (B, L, 2F_r)
        gate, up = np.ascontiguousarray(gu[..., :self.ffn]), np.ascontiguousarray(gu[..., self.ffn:])
        s = swiglu_forward(gate, up, f)
        return tokens_linear_forward(s, p["down_proj"], None, f), {"gate": gate, "up": up, "h": s}

    def region_backward(self, p, dp, h, cache, f):
        ds, dw_down, _ = tokens_linear_backward(dp, cache["h"], p["down_proj"], f)
        dgate, dup = swiglu_backward(ds, cache["gate"], cache["up"], f)
        dh, dw_gu, _ = tokens_linear_backward(np.concatenate([dgate, dup], axis=-1), h,
                                              np.concatenate([p["gate_proj"], p["up_proj"]]), f)
        return dh, {"gate_proj": dw_gu[:self.ffn], "up_proj": dw_gu[self.ffn:], "down_proj": dw_down}

    def region_spec(self, x_shape, f) -> dict:
        B, L, _ = x_shape
        wide = ((B, L, self.ffn), f.dtype)
        return {"gate": wide, "up": wide, "h": wide}

    def flops(self, x_shape, kind):
        B, L = token_rows(x_shape)
        rows = B * L
        return (linear_flops(rows, self.d, 2 * self.ffn, kind, bias=False) + SWIGLU_FLOPS[kind] * rows * self.ffn
                + linear_flops(rows, self.ffn, self.d, kind, bias=False))
