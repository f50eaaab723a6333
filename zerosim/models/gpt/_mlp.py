"""The feed-forward sub-block: y = x + W2 · act(LN2(x) W1ᵀ), d_ff = 4d, as a forward/backward pair and a unit.

Letters: B batch, L sequence length, d model width, F = d_ff = 4d. Steps (seed 001 §5d):

    ln  = LN2(x)                 (B, L, d)    not saved: rebuilt in backward from x, mean, rstd
    x1  = ln W1ᵀ + b1            (B, L, F)    the pre-activation
    x2  = act(x1)                (B, L, F)    GELU (tanh form, layers.gelu_forward) or ReLU
    out = x2 W2ᵀ + b2            (B, L, d)
    y   = cast(x + out, fmt)     the residual add, in acc, rounded once

Saved for backward (seed 001 §5e's names; bytes for fmt = fp16):

    name                 shape           dtype   bytes           note
    pre-FFN input        (B, L, d)       fmt     2·BLd           LN2's input
    LN2 mean, LN2 rstd   (B, L) each     fp32    4·BL each       LN statistics
    x1                   (B, L, F)       fmt     2·BLF = 8·BLd   GELU only: GELU'(x1) needs x1
    ReLU mask            (⌈BLF/8⌉,)      uint8   BLF/8 = BLd/2   ReLU only: one bit per element
    x2                   (B, L, F)       fmt     8·BLd           W2's input (dW2 = dyᵀ x2)

The ReLU mask is np.packbits of (x1 > 0): one bit per element, counted as such by the ledger (seed
001 §4: "for ReLU only a single bit per element is needed"). NOTE: the bit is also readable from
x2 (x2 > 0 exactly where x1 > 0), which is what PyTorch's relu backward uses
(tools/autograd/derivatives.yaml: `threshold_backward(grad, result, 0)`), so a PyTorch ReLU FFN
costs nothing beyond x2; the mask stands for the seed's count of what a ReLU itself needs.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    GELU,
    Layer,
    acc_dtype,
    gelu_backward,
    gelu_forward,
    linear_flops,
    prenorm_linear_forward,
    prenorm_residual_backward,
    prenorm_residual_flops,
    relu_forward,
    residual_add,
    tokens_linear_backward,
    tokens_linear_forward,
    written_into,
)
from zerosim.precision import cast, get_format

ACTIVATIONS = ("gelu", "relu")
FF_MULT = 4  # d_ff = 4d (seed 001 §5d)


def ffn_param_shapes(d: int) -> dict:
    """The sub-block's parameters in flat order."""
    F = FF_MULT * d
    return {"ln2.g": (d,), "ln2.b": (d,), "w1": (F, d), "b1": (F,), "w2": (d, F), "b2": (d,)}


def pack_mask(x1: np.ndarray, fmt) -> np.ndarray:
    """One bit per element, 1 where ReLU passes (x1 > 0; NaN passes too, as layers.relu_forward lets it)."""
    return np.packbits(~(x1.astype(acc_dtype(fmt)) <= 0).reshape(-1))  # (ceil(n/8),) uint8


def unpack_mask(bits: np.ndarray, shape: tuple) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return np.unpackbits(bits, count=n).reshape(shape).astype(bool)


def ffn_block_forward(p: dict, x: np.ndarray, fmt, activation: str = "gelu") -> tuple[np.ndarray, dict]:
    """y (B, L, d) in fmt and the cache {name: array} of the module docstring's table."""
    f = get_format(fmt)
    x1, (_, mean, rstd) = prenorm_linear_forward(x, p["ln2.g"], p["ln2.b"], p["w1"], p["b1"], f)  # (B, L, F) fmt
    cache = {"pre-FFN input": x, "LN2 mean": mean, "LN2 rstd": rstd}
    if activation == "gelu":
        x2, _ = gelu_forward(x1, f)
        cache["x1"] = x1
    else:
        x2, _ = relu_forward(x1, f)
        cache["ReLU mask"] = pack_mask(x1, f)
    cache["x2"] = x2
    out = tokens_linear_forward(x2, p["w2"], p["b2"], f)  # (B, L, d) fmt
    return residual_add(x, out, f), cache


def ffn_block_backward(p: dict, dy: np.ndarray, cache: dict, fmt, activation: str = "gelu",
                       n: int | None = None) -> tuple[np.ndarray, dict]:
    """(dx (B, L, d), grads by parameter name), all in fmt; reads only this sub-block's cache keys. `n`: n ranks'
    micro-batches stacked along axis 0 (models/_stacked.py), each gradient n ranks' own, rank r's at [r]."""
    f = get_format(fmt)
    x, x2 = cache["pre-FFN input"], cache["x2"]
    dx2, dw2, db2 = tokens_linear_backward(dy, x2, p["w2"], f, n)
    if activation == "gelu":
        dx1 = gelu_backward(dx2, (cache["x1"],), f)
    else:
        dx1 = cast(dx2, f)  # ReLU's backward selects, never rounds
        dx1[~unpack_mask(cache["ReLU mask"], dx2.shape)] = 0
    ln_cache = (x, cache["LN2 mean"], cache["LN2 rstd"])
    dx, dg, db, dw1, db1 = prenorm_residual_backward(dx1, dy, ln_cache, p["ln2.g"], p["ln2.b"], p["w1"], f, n)
    return dx, {"ln2.g": dg, "ln2.b": db, "w1": dw1, "b1": db1, "w2": dw2, "b2": db2}


def ffn_block_spec(x_shape: tuple, fmt, activation: str = "gelu") -> dict:
    """{name: (shape, dtype)} of exactly what ffn_block_forward saves, from shapes alone."""
    f = get_format(fmt)
    B, L, d = x_shape
    acc, act, wide = np.dtype(acc_dtype(f)), f.dtype, (B, L, FF_MULT * d)
    spec = {"pre-FFN input": ((B, L, d), act), "LN2 mean": ((B, L), acc), "LN2 rstd": ((B, L), acc)}
    if activation == "gelu":
        spec["x1"] = (wide, act)
    else:
        spec["ReLU mask"] = ((-(-B * L * FF_MULT * d // 8),), np.dtype(np.uint8))
    spec["x2"] = (wide, act)
    return spec


def ffn_block_flops(x_shape: tuple, kind: str, activation: str = "gelu") -> int:
    """LN2, W1, the activation (GELU.GELU_FLOPS per element; ReLU 1: a compare forward, a select
    backward), W2 and the residual add; backward also rebuilds LN2's output for W1's gradient."""
    B, L, d = x_shape
    rows, F = B * L, FF_MULT * d
    act = GELU.GELU_FLOPS[kind] if activation == "gelu" else 1
    return (
        prenorm_residual_flops(rows, d, kind)
        + linear_flops(rows, d, F, kind)
        + act * rows * F
        + linear_flops(rows, F, d, kind)
    )


def stacks_sequences(layer) -> bool:
    """`Layer.stacks_rows` of a unit holding the FFN: with GELU only. ReLU's saved mask packs the bits of the whole
    micro-batch in one (⌈BLF/8⌉,) array, not one row per sequence: n ranks' stack is no n blocks of it."""
    return layer.activation == "gelu" and Layer.stacks_rows(layer)


def check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    return activation


def init_ffn(d: int, n_layers: int, rng: np.random.Generator) -> dict:
    """GPT-2 / nanoGPT init, as attention_block.init_attention: W2 is the residual projection."""
    F = FF_MULT * d
    return {"ln2.g": np.ones(d, np.float32), "ln2.b": np.zeros(d, np.float32),
            "w1": (INIT_STD * rng.standard_normal((F, d))).astype(np.float32), "b1": np.zeros(F, np.float32),
            "w2": (INIT_STD / math.sqrt(2 * n_layers) * rng.standard_normal((d, F))).astype(np.float32),
            "b2": np.zeros(d, np.float32)}


class FFNBlock(Layer):
    """LN2 + W1 + GELU/ReLU + W2 + residual: one ZeRO unit."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own (`stacks_sequences`: GELU's only)

    def __init__(self, d: int, activation: str = "gelu", n_layers: int = 1, name: str = "ffn"):
        super().__init__(name)
        self.d, self.activation, self.n_layers = d, check_activation(activation), n_layers
        self.param_shapes = ffn_param_shapes(d)

    def forward(self, p, x, fmt):
        return ffn_block_forward(p, x, fmt, self.activation)

    def backward(self, p, dy, cache, fmt):
        return ffn_block_backward(p, dy, cache, fmt, self.activation)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = ffn_block_backward(p, dy, cache, fmt, self.activation, n)
        return dx, written_into(out, grads)

    def stacks_rows(self):
        return stacks_sequences(self)

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        return ffn_block_spec(tuple(x_shape), fmt, self.activation)

    def flops(self, x_shape, kind):
        return ffn_block_flops(tuple(x_shape), kind, self.activation)

    def init(self, rng):
        return init_ffn(self.d, self.n_layers, rng)
