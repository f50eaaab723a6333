"""The data-less twin of a TP rank's model, for the meta backend: 70B-405B on thousands of ranks without a byte.

As models/meta/_decoder.py twins a decoder's units, each twin here answers from shapes alone by asking the real TP
unit: forward saves a MetaArray for each entry of `unit.saved_spec` (the names, shapes and dtypes the real forward
saves) and hands on what the real unit hands on — a `Bundle` (_bundle.py) where it hands on one; backward hands back
the gradients' shapes; `flops` is the unit's own. The parallelism's hooks (_parallelism.py) run unchanged on the
MetaArrays: its collectives are the meta backend's, in closed form (tests/test_tensor_meta.py holds a twin's ledger
equal to the real model's, buffer by buffer, on small shapes).
"""

from __future__ import annotations

from zerosim.models.layers import Layer
from zerosim.models.meta import MetaDecoder, like
from zerosim.parallel.tensor._bundle import Bundle
from zerosim.parallel.tensor._cross_entropy import VocabParallelCrossEntropy
from zerosim.parallel.tensor._eager import eager_tp_spec
from zerosim.parallel.tensor._layers import ColumnRow
from zerosim.parallel.tensor._replicated import Add, Norm
from zerosim.parallel.tensor._vocab import Embedding, Head
from zerosim.precision import get_format


def _value(x):
    return x.value if isinstance(x, Bundle) else x


def _embedding_out(u, x, f):
    out = like(x, (*x.shape, u.d), f.dtype)
    return Bundle(like(out, out.shape, f.dtype), out) if u.positions else out


def _norm_out(u, x, f):
    v = _value(x)
    h = like(v, v.shape, f.dtype)
    return Bundle(like(v, v.shape, f.dtype), h) if u.hands_on_residual else h


def _norm_back(u, dy, cache, f):
    x = cache[u.input_name] if u.input_name in cache else next(iter(cache.values()))  # eager's: the fp32 copy
    dx = like(x, x.shape, f.dtype)
    return Bundle(dx, dx) if u.bias is not None else dx


def _head_back(u, dy, cache, f):
    h = cache[u.input_name] if u.saves_input else dy.input
    return like(h, h.shape, f.dtype)


FORWARD = {  # unit class -> what its forward hands on, from shapes
    Embedding: _embedding_out,
    Add: lambda u, x, f: like(x.value, x.value.shape, f.dtype),
    Norm: _norm_out,
    ColumnRow: lambda u, x, f: Bundle(x.residual, like(x.value, x.value.shape, f.dtype)),
    Head: lambda u, x, f: like(x, u.output_shape(x.shape), f.dtype),
}
BACKWARD = {  # unit class -> the gradient it hands back
    Embedding: lambda u, dy, cache, f: None,
    Add: lambda u, dy, cache, f: Bundle(dy, dy),
    Norm: _norm_back,
    ColumnRow: lambda u, dy, cache, f: Bundle(dy.residual, like(dy.value, dy.value.shape, f.dtype)),
    Head: _head_back,
}


def _kind(unit) -> type:
    return next(k for k in FORWARD if isinstance(unit, k))


class MetaTensorParallelUnit(Layer):
    """A TP unit's twin: the same name, parameters, saved tensors, output and FLOPs, no values."""

    def __init__(self, unit, param_shapes: dict | None = None, saved=None):
        super().__init__(unit.name)
        self.unit, self.kind = unit, _kind(unit)
        self.param_shapes = dict(unit.param_shapes if param_shapes is None else param_shapes)
        self.saves_input_only = unit.saves_input_only
        self.saved = unit.saved_spec if saved is None else saved  # (x_shape, fmt) -> {name: (shape, dtype)}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        if self.saves_input_only:
            cache = {"input": x}
        else:
            v = _value(x)
            cache = {n: like(v, shape, dtype) for n, (shape, dtype) in self.saved(v.shape, f).items()}
        return FORWARD[self.kind](self.unit, x, f), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        v = _value(dy)
        return BACKWARD[self.kind](self.unit, dy, cache, f), {n: like(v, s, f.dtype) for n, s in
                                                             self.param_shapes.items()}

    def flops(self, x_shape, kind):
        return self.unit.flops(x_shape, kind)

    def __repr__(self) -> str:
        return f"MetaTensorParallelUnit({self.unit.name!r})"


class MetaTensorParallelModel(MetaDecoder):
    """A `TensorParallelModel`'s units as twins (same flat layout, checkpoint blocks, names and loss). `tied_head`:
    the head reuses the embedding's V/T rows (Megatron's share_embeddings_and_output_weights), so its weight is
    counted once, in the embedding, as MetaGPT counts a tied head."""

    def __init__(self, model, tied_head: bool = False, kernels: str = "fused", loss: str | None = None):
        eager = kernels == "eager" and model.layout == "torchtitan"  # torch eager's tensors (_eager.py)
        units = [MetaTensorParallelUnit(u, saved=eager_tp_spec(u) if eager else None) for u in model.layers]
        if tied_head:
            units[-1] = MetaTensorParallelUnit(model.layers[-1], {})
        # the loss's peak: Megatron's fused vocabulary-parallel kernel keeps the fp32 softmax of the rank's V/T columns;
        # torch's loss_parallel (torchtitan) runs the loss the twin was given on them (models/meta/_loss_peak.py)
        variant = "probabilities" if model.layout == "megatron" or loss is None else loss
        super().__init__(units, VocabParallelCrossEntropy(variant), checkpoint_blocks=model.checkpoint_blocks,
                         saved_blocks=model.saved_blocks)
        self.local, self.kernels, self.loss_variant = model, kernels, variant
        for name in ("vocab", "d_model", "n_heads", "n_layers", "seq_len", "checkpoint", "attention", "unit", "tp",
                     "sequence_parallel", "family", "full", "wrap_units", "layout"):
            setattr(self, name, getattr(model, name))
        self.name = f"{model.full!r} at tp={model.tp}" + (" with SP" if model.sequence_parallel else "")
        self._index_specs()

    def check_batch(self, x, target) -> None:
        super().check_batch(x, target)
        if self.sequence_parallel and x.shape[1] % self.tp:
            raise ValueError(f"sequence parallelism cuts each sequence's {x.shape[1]} tokens over tp = {self.tp} "
                             "ranks: the length must be a multiple of tp (Megatron asserts the same)")


def meta_twin(model, tied_head: bool = False, kernels: str = "fused", loss: str | None = None):
    return MetaTensorParallelModel(model, tied_head, kernels, loss)
