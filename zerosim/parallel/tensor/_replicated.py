"""The units between a sub-block's collectives: the row-parallel bias and the residual add, and the norm — the same
work on every TP rank, or (sequence parallelism) each rank on its own sequence shard.

Letters: B batch, L sequence length (L/T per rank with SP), d model width, T the TP degree.

    Norm      x -> Bundle(x, norm(x))                  the sub-block's first norm (LN1 / norm1); the final norm
                                                       hands on norm(x) alone (its head needs no residual)
    AddNorm   Bundle(x, s) -> Bundle(x1, norm(x1))     x1 = x + (s + b): the attention's bias and residual, then
                                                       LN2 / norm2
    Add       Bundle(x, s) -> x + (s + b)              the MLP's bias and residual (the GPT's embedding: wte + wpe)

x + (s + b) is Megatron's `bias_dropout_add` after the reduce (core_v0.19.0, megatron/core/fusions/
fused_bias_dropout.py, `_bias_dropout_add_func`: `x = x + bias; out = dropout(x); out = residual + out`; dropout is
not modelled), fused as its jit-scripted kernel is: widened, added in fp32, rounded once. Backward passes the
residual's gradient on and sums the norm's path into it with one rounding, as the unsplit sub-block does
(models/layers/_prenorm.py); the add hands both its inputs the same gradient, and its bias the sum over tokens.

With sequence parallelism these parameters' gradients are partial (each rank saw L/T tokens): Megatron marks them
`sequence_parallel` and all-reduces them over the TP group after the data-parallel reduction
(core/distributed/finalize_model_grads.py, `_allreduce_non_tensor_model_parallel_grads`). Their units say so
(`sequence_parallel_params`); the parallelism does the reduction (_parallelism.py, end of backward).
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import (
    Layer,
    acc_dtype,
    layernorm_backward,
    layernorm_flops,
    layernorm_forward,
    residual_add,
    rmsnorm_backward,
    rmsnorm_flops,
    rmsnorm_forward,
)
from zerosim.parallel.tensor._bundle import Bundle
from zerosim.precision import cast, get_format


def _layernorm(p, x, names, f, eps):
    y, (_, mean, rstd) = layernorm_forward(x, p[names[0]], p[names[1]], f)
    return y, (mean, rstd)


def _layernorm_back(p, dy, x, stats, names, f):
    dx, dg, db = layernorm_backward(dy, (x, *stats), p[names[0]], f)
    return dx, {names[0]: dg, names[1]: db}


def _rmsnorm(p, x, names, f, eps):
    y, (_, rstd) = rmsnorm_forward(x, p[names[0]], f, eps)
    return y, (rstd,)


def _rmsnorm_back(p, dy, x, stats, names, f):
    dx, dw = rmsnorm_backward(dy, (x, *stats), p[names[0]], f)
    return dx, {names[0]: dw}


# The two norms as data: their parameters (suffixes of the unit's prefix), statistics (saved, in acc), the pair.
NORMS = {
    "layernorm": {"params": ("g", "b"), "stats": ("mean", "rstd"), "forward": _layernorm, "backward": _layernorm_back,
                  "flops": layernorm_flops},
    "rmsnorm": {"params": ("w",), "stats": ("rstd",), "forward": _rmsnorm, "backward": _rmsnorm_back,
                "flops": rmsnorm_flops},
}


def add_bias_residual(x, s, b, fmt):
    """cast(x + (s + b), fmt): widened exactly, added in acc, rounded once (b None: cast(x + s))."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    z = s.astype(acc)
    if b is not None:
        z = z + b.astype(acc)
    return cast(x.astype(acc) + z, f)


def _token_sum(dy, fmt):
    """(d,) the bias gradient: dy summed over every token in acc, rounded once (as linear_backward's db)."""
    acc = acc_dtype(get_format(fmt))
    return cast(dy.reshape(-1, dy.shape[-1]).astype(acc).sum(axis=0, dtype=acc), fmt)


class Norm(Layer):
    """A norm unit (module docstring). `bias`: the parameter of the add before it (AddNorm; "" adds without one,
    None: no add, a plain input); `hands_on_residual`: Bundle(x, h) out, or h alone (the final norm)."""

    saves_input_only = False
    role = "replicated"

    def __init__(self, name: str, d: int, kind: str, prefix: str, input_name: str, stats_name: str,
                 eps: float = 1e-5, bias: str | None = None, hands_on_residual: bool = True):
        super().__init__(name)
        self.d, self.kind, self.eps, self.bias = d, kind, eps, bias
        self.input_name, self.hands_on_residual = input_name, hands_on_residual
        self.norm_params = tuple(f"{prefix}.{s}" for s in NORMS[kind]["params"])
        self.stat_names = tuple(f"{stats_name} {s}" for s in NORMS[kind]["stats"])
        self.param_shapes = ({bias: (d,)} if bias else {}) | {n: (d,) for n in self.norm_params}
        self.sequence_parallel_params = tuple(self.param_shapes)

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        if self.bias is not None:  # the reduced sum and the residual it joins, plus the row-parallel bias
            x = add_bias_residual(x.residual, x.value, p.get(self.bias) if self.bias else None, f)
        h, stats = NORMS[self.kind]["forward"](p, x, self.norm_params, f, self.eps)
        cache = {self.input_name: x, **dict(zip(self.stat_names, stats))}
        return (Bundle(x, h) if self.hands_on_residual else h), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        x, stats = cache[self.input_name], tuple(cache[n] for n in self.stat_names)
        dh = dy.value if self.hands_on_residual else dy
        dx, grads = NORMS[self.kind]["backward"](p, dh, x, stats, self.norm_params, f)
        if self.hands_on_residual:
            dx = residual_add(dy.residual, dx, f)  # the residual's two gradient paths, summed once
        if self.bias is None:
            return dx, grads
        if self.bias:
            grads = {self.bias: _token_sum(dx, f), **grads}
        return Bundle(dx, dx), grads  # the residual and the reduced sum both receive dx1

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        B, L, d = x_shape
        acc = np.dtype(acc_dtype(f))
        return {self.input_name: ((B, L, d), f.dtype), **{n: ((B, L), acc) for n in self.stat_names}}

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        """The norm, and the add before it (2 per element: the bias and the residual; backward: the residual's
        paths summed, and the bias's token sum)."""
        B, L, d = x_shape
        rows = B * L
        total = NORMS[self.kind]["flops"](rows, d, kind) + (rows * d if self.hands_on_residual and kind == "backward"
                                                             else 0)
        return total + (2 * rows * d if self.bias is not None else 0)


class Add(Layer):
    """Bundle(x, s) -> cast(x + (s + b)): the MLP's bias and residual, or the GPT's position + token embedding."""

    saves_input_only = False
    role = "replicated"

    def __init__(self, name: str, d: int, bias: str | None = None):
        super().__init__(name)
        self.d, self.bias = d, bias
        self.param_shapes = {bias: (d,)} if bias else {}
        self.sequence_parallel_params = tuple(self.param_shapes)

    def forward(self, p, x, fmt):
        return add_bias_residual(x.residual, x.value, p[self.bias] if self.bias else None, fmt), {}

    def backward(self, p, dy, cache, fmt):
        return Bundle(dy, dy), ({self.bias: _token_sum(dy, fmt)} if self.bias else {})

    def saved_spec(self, x_shape, fmt) -> dict:
        return {}

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        return (2 if self.bias else 1) * B * L * d
