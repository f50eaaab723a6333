"""Llama's feed-forward sub-block: y = x + down_proj(silu(gate_proj(ln)) ⊙ up_proj(ln)), ln = RMSNorm(x).

Letters: B batch, L sequence length, d model width, F = intermediate_size. SwiGLU (Shazeer 2020); Hugging Face
transformers, models/llama/modeling_llama.py, `LlamaMLP.forward`: down_proj(act_fn(gate_proj(x)) * up_proj(x))
with act_fn = SiLU (hidden_act "silu"), no biases. Steps:

    ln   = RMSNorm(x)                     (B, L, d)   not saved: rebuilt in backward from x, rstd
    gate, up = ln [W_gate; W_up]ᵀ         (B, L, F) each, one GEMM (a fused gate/up projection)
    h    = cast(silu(gate) ⊙ up, fmt)     (B, L, F)   silu(g) = g·σ(g), in acc, rounded once
    y    = cast(x + h W_downᵀ, fmt)

    backward (dh from down_proj's backward, in acc):  dgate = cast(dh ⊙ up ⊙ σ(g)(1 + g(1 − σ(g))), fmt)
                                                      dup   = cast(dh ⊙ silu(g), fmt)

What is saved — the three projections' outputs (bytes for fmt = 16-bit):

    name             shape        dtype   bytes
    pre-FFN input    (B, L, d)    fmt     2·BLd     the RMSNorm's input
    norm2 rstd       (B, L)       fp32    4·BL      its statistic
    gate             (B, L, F)    fmt     2·BLF     silu's input
    up               (B, L, F)    fmt     2·BLF     the product's other factor
    h                (B, L, F)    fmt     2·BLF     down_proj's input (dW_down = dyᵀ h)

The roundings and the saved tensors are those of Megatron-LM's fused SwiGLU (megatron/core/fusions/
fused_bias_swiglu.py, `SwiGLUFunction`: it saves its input [gate, up] and computes silu(gate)·up and both
gradients in fp32, one rounding each; the down projection keeps h). HF's eager module rounds silu(gate)
before the product and autograd keeps silu(gate) too: 4·F per token instead of 3·F.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    RMS_EPS,
    Layer,
    acc_dtype,
    linear_flops,
    residual_add,
    rmsnorm_backward,
    rmsnorm_flops,
    rmsnorm_forward,
    rmsnorm_output,
    tokens_linear_backward,
    tokens_linear_forward,
    weight_rows,
    written_into,
)
from zerosim.precision import cast, get_format
from zerosim.precision.arithmetic import arithmetic_of

# Per element of (B, L, F): forward σ(g) (exp, add, divide: 3), g·σ (1), times up (1) = 5. Backward σ again (3),
# silu (1), dup = dh·silu (1), the slope σ(1 + g(1 − σ)) (4) and dgate = dh·up·slope (2) = 11.
SWIGLU_FLOPS = {"forward": 5, "backward": 11}


def swiglu_param_shapes(d: int, ffn: int) -> dict:
    """The sub-block's parameters in flat order (HF's names, no biases)."""
    return {"norm2.w": (d,), "gate_proj": (ffn, d), "up_proj": (ffn, d), "down_proj": (d, ffn)}


def _sigmoid(g: np.ndarray, f) -> np.ndarray:
    return 1 / (1 + arithmetic_of(f).exp(-g))


def swiglu_forward(gate: np.ndarray, up: np.ndarray, fmt) -> np.ndarray:
    """h = cast(silu(gate) ⊙ up, fmt), computed in acc."""
    f = get_format(fmt)
    g = gate.astype(acc_dtype(f))
    return cast(g * _sigmoid(g, f) * up.astype(g.dtype), fmt)


def swiglu_backward(dh: np.ndarray, gate: np.ndarray, up: np.ndarray, fmt) -> tuple[np.ndarray, np.ndarray]:
    """(dgate, dup) in fmt from dh, each computed in acc and rounded once."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    g, dh_acc = gate.astype(acc), dh.astype(acc)
    s = _sigmoid(g, f)
    return cast(dh_acc * up.astype(acc) * (s * (1 + g * (1 - s))), fmt), cast(dh_acc * (g * s), fmt)


class SwiGLUFFN(Layer):
    """RMSNorm + gate/up + SiLU·up + down_proj + residual: one ZeRO unit."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own

    def __init__(self, d: int, ffn: int, n_layers: int = 1, rms_eps: float = RMS_EPS, name: str = "ffn"):
        super().__init__(name)
        for what, v in (("d_model", d), ("intermediate_size", ffn)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{what} must be a positive integer, got {v!r}")
        self.d, self.ffn, self.n_layers, self.rms_eps = d, ffn, n_layers, rms_eps
        self.param_shapes = swiglu_param_shapes(d, ffn)

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        ln, (_, rstd) = rmsnorm_forward(x, p["norm2.w"], f, self.rms_eps)  # (B, L, d) fmt, dropped after the GEMM
        gu = tokens_linear_forward(ln, np.concatenate([p["gate_proj"], p["up_proj"]]), None, f)  # (B, L, 2F) fmt
        gate, up = (
            np.ascontiguousarray(gu[..., : self.ffn]),
            np.ascontiguousarray(gu[..., self.ffn :]),
        )  # (B, L, F) each
        h = swiglu_forward(gate, up, f)  # (B, L, F) fmt
        cache = {"pre-FFN input": x, "norm2 rstd": rstd, "gate": gate, "up": up, "h": h}
        return residual_add(x, tokens_linear_forward(h, p["down_proj"], None, f), f), cache

    def backward(self, p, dy, cache, fmt):
        return self._backward(p, dy, cache, fmt)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = self._backward(p, dy, cache, fmt, n)
        return dx, written_into(out, grads)

    def _backward(self, p, dy, cache, fmt, n=None):
        """`backward`; with `n`, n ranks' micro-batches stacked along axis 0 and each gradient n ranks' own."""
        f = get_format(fmt)
        x, gate, up = cache["pre-FFN input"], cache["gate"], cache["up"]
        dh, dw_down, _ = tokens_linear_backward(dy, cache["h"], p["down_proj"], f, n)
        dgate, dup = swiglu_backward(dh, gate, up, f)
        norm_cache = (x, cache["norm2 rstd"])
        ln = rmsnorm_output(norm_cache, p["norm2.w"], f)  # the GEMM's input, bitwise the forward's
        dln, dw_gu, _ = tokens_linear_backward(
            np.concatenate([dgate, dup], axis=-1), ln, np.concatenate([p["gate_proj"], p["up_proj"]]), f, n
        )
        dx_norm, dw_norm = rmsnorm_backward(dln, norm_cache, p["norm2.w"], f, n)
        grads = {"norm2.w": dw_norm, "gate_proj": weight_rows(dw_gu, 0, self.ffn),
                 "up_proj": weight_rows(dw_gu, self.ffn, 2 * self.ffn), "down_proj": dw_down}
        return residual_add(dy, dx_norm, f), grads

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of exactly what forward saves for an input of x_shape = (B, L, d)."""
        f = get_format(fmt)
        B, L, d = x_shape
        wide = (B, L, self.ffn)
        return {
            "pre-FFN input": ((B, L, d), f.dtype),
            "norm2 rstd": ((B, L), np.dtype(acc_dtype(f))),
            "gate": (wide, f.dtype),
            "up": (wide, f.dtype),
            "h": (wide, f.dtype),
        }

    def flops(self, x_shape, kind):
        """The RMSNorm, the gate/up GEMM, SwiGLU (SWIGLU_FLOPS per element), down_proj and the residual add;
        backward also rebuilds the norm's output for the gate/up GEMM."""
        B, L, d = x_shape
        rows, F = B * L, self.ffn
        total = (
            rmsnorm_flops(rows, d, kind)
            + linear_flops(rows, d, 2 * F, kind, bias=False)
            + SWIGLU_FLOPS[kind] * rows * F
            + linear_flops(rows, F, d, kind, bias=False)
            + rows * d
        )
        return total + (rmsnorm_flops(rows, d, "rebuild output") if kind == "backward" else 0)

    def init(self, rng):
        """Norm weight 1; weights N(0, 0.02²), down_proj N(0, (0.02/√(2·n_layers))²) (a residual projection)."""
        F, d = self.ffn, self.d
        return {
            "norm2.w": np.ones(d, np.float32),
            "gate_proj": (INIT_STD * rng.standard_normal((F, d))).astype(np.float32),
            "up_proj": (INIT_STD * rng.standard_normal((F, d))).astype(np.float32),
            "down_proj": (INIT_STD / math.sqrt(2 * self.n_layers) * rng.standard_normal((d, F))).astype(np.float32),
        }
