"""The data-less twin of a CP rank's model, for the meta backend: 128k to 1M-token sequences without a byte.

As models/meta/_decoder.py twins a decoder's units, each twin here answers from shapes alone by asking the real CP
unit: forward saves a MetaArray for each entry of `unit.saved_spec` (the names, shapes and dtypes the real forward
saves) and hands on what the real unit hands on — a `Ring` (_records.py) through the attention core, with MetaArrays
where the arrays would be; backward hands back the gradients' shapes; `flops` is the unit's own (a hop's from its
block, which the parallelism names as for real). The parallelism's hooks (_parallelism.py) run unchanged on the
MetaArrays: its sends, gathers and reduce-scatters are the meta backend's. So every activation a rank keeps is in
its ledger by name, at L / C tokens (tests/test_context_memory.py).

Beside tensor parallelism the CP rank's model is cut from a TP rank's (parallel/context/_model.py): its attention's
column and row halves (TensorQKV, TensorOut) are twinned here, handing on what the real halves hand on (a Ring from
the column half's Bundle(x, h), a Bundle(x, partial) from the row half); every other unit is a TP unit, twinned as
parallel/tensor/_meta.py twins it (`MetaTensorParallelUnit`), and the loss is the TP twin's vocabulary-parallel one.
TP's hooks then run unchanged on both (they read each unit's real one: parallel/tensor/_parallelism.py `_unit`).
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import Layer, acc_dtype
from zerosim.models.meta import MetaDecoder, MetaUnit, like
from zerosim.parallel.context._core import Gathered, Hop
from zerosim.parallel.context._ends import AttentionOut, GptQKV, LlamaQKV, TensorOut, TensorQKV
from zerosim.parallel.context._records import Located, Ring, RingGrad
from zerosim.parallel.context._torch_core import TorchHop
from zerosim.parallel.tensor import Bundle, MetaTensorParallelUnit
from zerosim.precision import get_format


def _qkv_out(u, x, f):
    v = getattr(x, "value", x)  # Located(x) for the Llama's end
    B, L, _ = v.shape
    heads, kv_heads, dh = u.heads, getattr(u, "kv_heads", u.heads), getattr(u, "head_dim", u.d // u.heads)
    kv = tuple(like(v, (B, kv_heads, L, dh), f.dtype) for _ in range(2))
    return Ring(v, like(v, (B, heads, L, dh), f.dtype), kv), v


def _tensor_qkv_out(u, x, f):
    """TensorQKV's output from Bundle(x, h) (Located beside the Llama's positions): the rank's H/T heads of Q and
    G/T of K and V, at the rank's L / C tokens."""
    bundle = x.value if isinstance(x, Located) else x
    h = bundle.value
    B, L, _ = h.shape
    kv = tuple(like(h, (B, u.kv_heads, L, u.head_dim), f.dtype) for _ in range(2))
    return Ring(bundle.residual, like(h, (B, u.heads, L, u.head_dim), f.dtype), kv), h


def _torch_out(u, x, f):
    """torch's step: the fp32 output merged so far (B, H, L_r, d_h) and lse; after the last, O, the lse and the
    rank's own K/V repeated to every query head (what the output end keeps)."""
    B, H, L, dh = x.q.shape
    acc = np.dtype(acc_dtype(f))
    lse = like(x.q, (B, H, L), acc)
    if u.hop < u.hops - 1:
        return x.but(running=like(x.q, x.q.shape, acc), lse=lse)
    own = tuple(like(x.q, (B, H, L, dh), f.dtype) for _ in x.kv)
    return x.but(o=like(x.q, x.q.shape, f.dtype), lse=lse, running=None, held=own, gathered=None, incoming=None,
                 work=(B, L, H * dh))


def _core_out(u, x, f):
    if isinstance(u, TorchHop):
        return _torch_out(u, x, f)
    if isinstance(u, Hop) and u.hop < u.hops - 1:
        return x
    B, H, L, dh = x.q.shape
    o, lse = like(x.q, x.q.shape, f.dtype), like(x.q, (B, H, L), np.dtype(acc_dtype(f)))
    held = x.held if isinstance(u, Hop) else x.kv
    return x.but(o=o, lse=lse, held=held, steps=(), incoming=None, gathered=None, work=(B, L, H * dh))


def _core_back(u, dy, f):
    if isinstance(u, TorchHop):  # fp32 dQ so far and the dK, dV sum for the K/V held (the parallelism sends it on)
        acc = np.dtype(acc_dtype(f))
        return dy.but(dq=like(dy.q, dy.q.shape, acc), dkv=tuple(like(a, a.shape, acc) for a in dy.held))
    if isinstance(u, Gathered):
        return dy.but(dq=like(dy.q, dy.q.shape, f.dtype), dkv=tuple(like(a, a.shape, f.dtype) for a in dy.gathered),
                      gathered=None)
    if u.hop:
        return dy
    return dy.but(dq=like(dy.q, dy.q.shape, f.dtype), dk=dy.dkv[0], dv=dy.dkv[1], dkv=None, incoming=None)


class MetaContextUnit(Layer):
    """A CP unit's twin: the same name, parameters, saved tensors, output and FLOPs, no values."""

    def __init__(self, unit):
        super().__init__(unit.name)
        self.unit = unit
        self.param_shapes = dict(unit.param_shapes)
        self.saves_input_only = unit.saves_input_only
        for name in ("core", "hop", "hops", "n_rep", "block", "pieces", "role"):
            if hasattr(unit, name):
                setattr(self, name, getattr(unit, name))

    def forward(self, p, x, fmt):
        f, u = get_format(fmt), self.unit
        if isinstance(u, (GptQKV, LlamaQKV)):
            out, v = _qkv_out(u, x, f)
            return out, {n: like(v, s, d) for n, (s, d) in u.saved_spec(v.shape, f).items()}
        if isinstance(u, TensorQKV):
            out, h = _tensor_qkv_out(u, x, f)
            return out, {n: like(h, s, d) for n, (s, d) in u.saved_spec(h.shape, f).items()}
        if isinstance(u, (Hop, Gathered, TorchHop)):
            return _core_out(u, x, f), {}
        if isinstance(u, (AttentionOut, TensorOut)):
            o_shape = x.work
            cache = {n: like(x.q, s, d) for n, (s, d) in u.saved_spec(o_shape, f).items()}
            B, L, _ = o_shape  # the output at the rank's L / C tokens (beside SP the residual is its shard of them)
            out = like(x.residual, (B, L, x.residual.shape[-1]), f.dtype)
            return (Bundle(x.residual, out) if isinstance(u, TensorOut) else out), cache  # TP: a partial sum
        raise TypeError(f"no twin for {type(u).__name__}")

    def backward(self, p, dy, cache, fmt):
        f, u = get_format(fmt), self.unit
        if isinstance(u, TensorQKV) and not u.saves_input:  # SP: Bundle(None, dy, h), h gathered again
            h, dy = dy.input, dy.value
        else:
            h = cache.get(getattr(u, "input_name", None))
        anchor = next(iter(cache.values())) if cache else h if h is not None else dy.q  # a MetaArray to make them like
        grads = {n: like(anchor, s, f.dtype) for n, s in self.param_shapes.items()}
        if isinstance(u, (Hop, Gathered, TorchHop)):
            return _core_back(u, dy, f), grads
        if isinstance(u, (AttentionOut, TensorOut)):
            o, q = cache["attention output"], getattr(u, "qkv", u)
            B, L, _ = o.shape
            heads = like(o, (B, q.heads, L, q.head_dim), f.dtype)
            residual = dy.residual if isinstance(u, TensorOut) else dy
            return RingGrad(residual, heads, like(o, heads.shape, f.dtype), cache["LSE"], cache["Q"],
                            held=(cache["K"], cache["V"])), grads
        if isinstance(u, TensorQKV):  # this rank's partial dh beside the residual's gradient (f's backward sums it)
            return Bundle(dy.residual, like(h, h.shape, f.dtype)), grads
        x = cache["block input"]
        return like(x, x.shape, f.dtype), grads

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        return self.unit.flops(x_shape, kind)

    def __repr__(self) -> str:
        return f"MetaContextUnit({self.unit.name!r})"


class _MetaEmbedding(MetaUnit):
    """The GPT's embedding twin, its input Located (ids beside their positions)."""

    def forward(self, p, x, fmt):
        ids = getattr(x, "value", x)
        return like(ids, self.unit.output_shape(ids.shape), get_format(fmt).dtype), {"input": x}

    def backward(self, p, dy, cache, fmt):
        dtype = get_format(fmt).dtype
        return None, {name: like(dy, shape, dtype) for name, shape in self.param_shapes.items()}


class _MetaTensorPositioned(MetaTensorParallelUnit):
    """A TP unit whose input CP hands on beside the tokens' positions (the GPT's vocabulary-parallel embedding): the
    TP twin of the ids alone (the meta backend holds no positions' values)."""

    def forward(self, p, x, fmt):
        return super().forward(p, x.value if isinstance(x, Located) else x, fmt)


class MetaContextParallelModel(MetaDecoder):
    """A `ContextParallelModel`'s units as twins (the same flat layout, checkpoint blocks, names, positioned units and
    loss); the units it keeps from the whole model (the FFN, the head, the Llama's embedding) twinned as MetaGPT and
    MetaLlama twin them, or beside TP (`tied_head`: the head's weight counted in the embedding, as the TP twin counts
    it) as the TP twin twins a TP rank's units; `loss` the twin's (beside TP, its vocabulary-parallel one)."""

    def __init__(self, model, loss, tied_head: bool = False):
        units, tensor = [], model.cut is not model.full
        for i, u in enumerate(model.layers):
            if isinstance(u, (GptQKV, LlamaQKV, Hop, Gathered, TorchHop, AttentionOut, TensorQKV, TensorOut)):
                units.append(MetaContextUnit(u))
            elif tensor:
                twin = _MetaTensorPositioned if i in model.positioned else MetaTensorParallelUnit
                units.append(twin(u, {}) if tied_head and i == len(model.layers) - 1 else twin(u))
            elif i in model.positioned:
                units.append(_MetaEmbedding(u))
            else:
                units.append(MetaUnit(u))
        super().__init__(units, loss, checkpoint_blocks=model.checkpoint_blocks,
                         saved_blocks=model.saved_blocks)
        self.local = model
        for name in ("vocab", "d_model", "n_heads", "n_layers", "seq_len", "checkpoint", "attention", "unit", "cp",
                     "style", "split", "causal", "positioned", "family", "full"):
            setattr(self, name, getattr(model, name))
        if tensor:  # what the time model and the reports read of a TP rank (analysis/timeline KernelTimes)
            self.tp, self.sequence_parallel, self.layout = model.cut.tp, model.cut.sequence_parallel, model.cut.layout
        self.name = f"{model.full!r} at cp={model.cp} ({model.style}, {model.split})" + (
            f" and tp={self.tp}" if tensor else "")
        self._index_specs()
