"""The data-less twin of a decoder (the GPT's, the Llama's): each real unit answered from shapes alone.

A twin (`MetaUnit`) answers every call a real unit answers, from shapes alone, by asking the real
unit: forward saves a MetaArray for each entry of `unit.saved_spec(x_shape, fmt)` — the same names,
shapes and dtypes the real forward saves — and hands on a MetaArray of `unit.output_shape(x_shape)`;
backward makes a gradient of each parameter's shape in the compute format; `flops` is the unit's own.
So the driver (models/_run.py) adopts the same named buffers into the ledger, in the same order, and
the trace gets the same compute events (FLOPs and bytes), as for a real run — tests/test_meta_gpt.py and
tests/test_llama.py hold the two equal, buffer by buffer, on small shapes. `MetaDecoder` is what the engines call
on any decoder over token ids (check_batch, batches, pack, layer_specs); MetaGPT and MetaLlama (gpt/_meta.py,
llama/_meta.py) build it from their family's model.

NOTE: a twin's backward reads its input's shape from the first entry of the cache: every unit saves
its input first ("input", "block input", "pre-FFN input", "final LN input"), the same convention
`Pass.run` uses for the backward FLOPs; integer ids (the embedding) have no gradient, as for real.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._model import Model
from zerosim.models.layers import Layer, LMCrossEntropy, acc_dtype
from zerosim.models.meta._arrays import like, source_arrays, template, weights_without_data
from zerosim.models.meta._eager import eager_spec
from zerosim.models.meta._loss_peak import LOSSES, loss_spec
from zerosim.models.meta._sac import is_block, sac_spec
from zerosim.precision import get_format
from zerosim.precision.cast import MetaArray

_fresh = MetaArray._of  # a new data-less array of a shape and dtype checked already


class MetaUnit(Layer):
    """A data-less twin of a real unit: the same name, parameters, saved tensors, output shape and FLOPs.

    `saved(x_shape, fmt)`, when given, replaces the unit's own `saved_spec`: what another implementation of the same
    unit keeps (_eager.py: PyTorch eager mode's autograd)."""

    def __init__(self, unit: Layer, param_shapes: dict | None = None, saved=None):
        super().__init__(unit.name)
        self.unit = unit
        self.param_shapes = dict(unit.param_shapes if param_shapes is None else param_shapes)
        self.saved = saved
        self.saves_input_only = unit.saves_input_only and saved is None
        # what a data-less forward saves, backward makes and an op costs, by the input's shape and the format: each
        # a function of those alone (the unit's spec, parameters' shapes and FLOPs), asked again at every op of every
        # micro-step (the planner runs tens of steps of one twin); shapes and dtypes checked once, as MetaArray does
        self._saved_of, self._grads_of, self._flops_of = {}, {}, {}

    def spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} this twin's forward saves for an input of x_shape."""
        return (self.saved or self.unit.saved_spec)(tuple(x_shape), get_format(fmt))

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        if type(x) is MetaArray:  # fresh arrays of the output's and the spec's shapes and dtypes, checked once
            made = self._saved_of.get((x.shape, f.name))
            if made is None:
                saved = None if self.saves_input_only else tuple(
                    (name, template(shape, dtype)) for name, (shape, dtype) in self.spec(x.shape, f).items())
                made = self._saved_of[(x.shape, f.name)] = (template(self.unit.output_shape(x.shape), f.dtype), saved)
            out, saved = made
            cache = {"input": x} if saved is None else {name: _fresh(a.shape, a.dtype) for name, a in saved}
            return _fresh(out.shape, out.dtype), cache
        if self.saves_input_only:  # the cache is the input itself (Layer.saves_input_only)
            cache = {"input": x}
        else:
            cache = {name: like(x, shape, dtype) for name, (shape, dtype) in self.spec(x.shape, f).items()}
        return like(x, self.unit.output_shape(x.shape), f.dtype), cache

    def checkpoint_keep(self, x, fmt) -> dict:
        """What op-level selective checkpointing keeps at this unit's checkpoint besides its input (_sac.py): a
        block's saved products and SDPA outputs; the embedding's and head's whole cache (torchtitan does not
        checkpoint them), their input left out (the checkpoint holds it)."""
        f = get_format(fmt)
        if is_block(self.unit):
            spec = sac_spec(self.unit, x.shape, f)
        else:
            spec = dict(list(self.spec(x.shape, f).items())[1:]) if not self.saves_input_only else {}
        return {name: like(x, shape, dtype) for name, (shape, dtype) in spec.items()}

    def backward(self, p, dy, cache, fmt):
        dtype = get_format(fmt).dtype
        x = next(iter(cache.values()))  # the unit's input, saved first (see the module docstring)
        dx = None if np.dtype(x.dtype).kind in "iu" else like(dy, x.shape, dtype)
        if type(dy) is not MetaArray:
            return dx, {name: like(dy, shape, dtype) for name, shape in self.param_shapes.items()}
        made = self._grads_of.get(dtype)
        if made is None:
            made = self._grads_of[dtype] = tuple((name, template(shape, dtype))
                                                 for name, shape in self.param_shapes.items())
        return dx, {name: _fresh(a.shape, a.dtype) for name, a in made}

    def flops(self, x_shape, kind):
        key = (tuple(x_shape), kind)
        n = self._flops_of.get(key)
        if n is None:
            n = self._flops_of[key] = self.unit.flops(x_shape, kind)
        return n

    def output_shape(self, x_shape):
        return self.unit.output_shape(x_shape)

    def __repr__(self) -> str:
        return f"MetaUnit({self.unit!r})"


class MetaLMLoss(LMCrossEntropy):
    """The LM loss without values: NaN, and what the loss holds at its peak as MetaArrays: the real loss's cache
    (`LMCrossEntropy.saved_spec`, variant "probabilities"), or another implementation's (_loss_peak.py)."""

    name = "meta-lm-xent"

    def __init__(self, variant: str = "probabilities", d_model: int = 1):
        if variant not in LOSSES:
            raise ValueError(f"unknown loss {variant!r}; choose one of {LOSSES}")
        self.variant, self.d_model = variant, d_model

    def spec(self, y_shape, y_dtype) -> dict:
        B, L, V = y_shape
        if self.variant == "probabilities":
            return self.saved_spec(y_shape, y_dtype)
        return loss_spec(self.variant, B, L, V, self.d_model, acc_dtype(get_format(np.dtype(y_dtype))))

    def forward(self, y, target, fmt=None):
        return math.nan, {name: like(y, shape, dtype) for name, (shape, dtype) in self.spec(y.shape, y.dtype).items()}

    def backward(self, cache, fmt, scale=1.0):
        V = next(iter(cache.values())).shape[1]
        return like(cache["labels"], (*cache["labels"].shape, V), get_format(fmt).dtype)  # (B, L, V) compute fmt


KERNELS = ("fused", "eager")  # what a unit keeps: zerosim's own (fused) kernels, or PyTorch eager's (_eager.py)
LOSS_OF = {"fused": "probabilities", "eager": "eager"}  # the loss each kernel choice runs unless told otherwise


def twin_units(layers, kernels: str, tied: str | None) -> list:
    """MetaUnits for a decoder's units, keeping what `kernels` keeps; the head without its `tied` weight."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    units = [MetaUnit(u, saved=eager_spec(u) if kernels == "eager" else None) for u in layers]
    if tied is not None:
        head = layers[-1]
        units[-1] = MetaUnit(head, {k: v for k, v in head.param_shapes.items() if k != tied}, units[-1].saved)
    return units


def twin_loss(kernels: str, loss: str | None, d_model: int) -> "MetaLMLoss":
    """The loss a twin runs: `loss` (_loss_peak.LOSSES), or the one its kernels imply (LOSS_OF)."""
    return MetaLMLoss(LOSS_OF[kernels] if loss is None else loss, d_model)


class MetaDecoder(Model):
    """A decoder's units as twins, for the meta backend: what the engines call, without data (the families'
    twins, MetaGPT and MetaLlama, set the shape attributes and `_specs_of` in their constructors)."""

    def _index_specs(self) -> None:
        self._specs_of = {}  # layer -> [ParamSpec]: O(1) lookups
        for spec in self.specs:
            self._specs_of.setdefault(spec.layer, []).append(spec)
        self._views_of = {}  # (layer, the flat vector's shape and dtype) -> (name, MetaArray) of each: unflatten

    @property
    def checkpointing(self) -> bool:
        """Whether the engine should run with checkpoint=True (any strategy but "none")."""
        return self.checkpoint != "none"

    @property
    def largest_layer(self) -> int:
        return max(b - a for a, b in map(self.layer_window, range(len(self.layers))))

    # -- what the engines call, without data --------------------------------------------------------
    def check_batch(self, x, target) -> None:
        """Shapes and dtypes only (there are no values): integer ids (B, L), L <= seq_len, targets alike."""
        shape, kind = tuple(getattr(x, "shape", ())), np.dtype(getattr(x, "dtype", np.float64)).kind
        if len(shape) != 2 or kind not in "iu" or min(shape) < 1:
            raise ValueError(f"a GPT micro-batch is integer token ids of shape (batch, length) >= 1 "
                             f"(see MetaGPT.batches), got {getattr(x, 'dtype', '?')} {shape}")
        if shape[1] > self.seq_len:
            raise ValueError(f"sequences of {shape[1]} tokens are longer than the model's seq_len = {self.seq_len}")
        if (
            tuple(getattr(target, "shape", ())) != shape
            or np.dtype(getattr(target, "dtype", np.float64)).kind not in "iu"
        ):
            raise ValueError(f"targets must be integer token ids of the input's shape {shape}, got {target!r}")

    def layer_specs(self, i: int) -> list:
        return self._specs_of.get(i, [])

    def unflatten(self, flat, i: int) -> dict:
        """Layer i's parameters by name: on a MetaArray, arrays of their shapes in flat's dtype — what Model.unflatten
        gives (a slice, then a reshape), built directly, since the engines ask for them before every op."""
        if not getattr(flat, "is_meta", False):
            return super().unflatten(flat, i)
        made = self._views_of.get((i, flat.shape, flat.dtype))  # asked before every op of every micro-step
        if made is None:
            start, stop = self.layer_window(i)
            if flat.ndim != 1 or len(flat) not in (self.num_params, stop - start):
                raise ValueError(f"layer {i}: expected a flat vector of {self.num_params} or {stop - start} elements, "
                                 f"got shape {flat.shape}")
            made = self._views_of[(i, flat.shape, flat.dtype)] = tuple(
                (s.name, like(flat, s.shape, flat.dtype)) for s in self.layer_specs(i))
        return {name: _fresh(a.shape, a.dtype) for name, a in made}

    def pack(self, i: int, tensors: dict):
        start, stop = self.layer_window(i)
        g = next(iter(tensors.values()))
        return like(g, (stop - start,), g.dtype)  # (window,) in the gradient's dtype

    def init_params(self, rng=None):
        """(P,) fp32 weights with no data (a MetaArray): there are no initial values to draw."""
        return weights_without_data(self.num_params)

    def batches(self, ranks, batch: int = 1, seq_len: int | None = None, empty=None) -> list:
        """One (ids, targets) micro-batch per rank, both (B, L) int64 data-less arrays (L defaults to seq_len).

        `ranks`: a Cluster — one per rank it hosts (1 on the meta backend's representative rank), made by its
        backend — or how many, made by `empty` (the meta backend's constructor)."""
        count, empty = source_arrays(ranks, empty)
        L = self.seq_len if seq_len is None else seq_len
        ids = empty((batch, L), np.int64)
        return [(ids, ids)] * count
