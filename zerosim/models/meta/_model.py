"""MetaModel: a model known only by its layers' parameter counts, for the meta backend.

    model = MetaModel.from_preset(get_preset("gpt3-175b"))            # 579 modules, Ψ ≈ 174.6e9
    engine = ZeroEngine(model, Cluster(1024, backend="meta", trace="call"), 3, Adam())
    engine.step(model.batches(engine.cluster))                        # fills ledgers and trace

Each layer owns one flat weight of its parameter count and does no arithmetic: forward hands its
input on, backward hands dy back and makes a gradient of the weight's shape in the compute dtype.
The engines see the same hooks as for a real model (get_params / release_params / on_grads, layer
by layer), so they gather, reduce and free exactly as they would.

Activation memory is LEFT OUT here: the micro-batch is a (B, 0) array, so every saved activation
holds 0 bytes. Layer sizes are not shapes (B, L, d); for a transformer's activations, measured by
name, use `MetaGPT` (_meta.py: the GPT's own units as data-less twins; `MetaGPT.from_preset` for
a GPT-2-layout preset). `zerosim.analysis.costs._activations` gives seed 001's estimate beside it.

Units: "module" makes one layer per preset entry (a module's own parameters, as DeepSpeed ZeRO-3
fetches them); "block" merges the entries of each numbered block (h.7.*, layers.7.*) into one
layer, as FSDP wraps one transformer block per unit. Resting memory and bytes on the wire are the
same either way; the peak of gathered parameters and gradients is one unit, and the number of
collectives (and so the time to account them) follows the number of units.
"""

from __future__ import annotations

import math
import re

import numpy as np

from zerosim.models._model import Model
from zerosim.models.layers import Layer, Loss
from zerosim.models.meta._arrays import like, source_arrays, weights_without_data
from zerosim.precision import get_format

UNITS = ("module", "block")
_BLOCK = re.compile(r"^(.*?\.\d+)\.")  # "h.7.attn.c_attn" -> "h.7"; "layers.3.mlp.up_proj" -> "layers.3"


class MetaLayer(Layer):
    """A layer with `count` parameters in one flat weight "w" (count,) and no arithmetic."""

    def __init__(self, name: str, count: int):
        super().__init__(name)
        self.count = int(count)
        self.param_shapes = {"w": (self.count,)} if self.count else {}

    def forward(self, p, x, fmt):
        return x, {}  # nothing saved: activations are left out (see the module docstring)

    def backward(self, p, dy, cache, fmt):
        grads = {"w": like(dy, (self.count,), get_format(fmt).dtype)} if self.count else {}  # (count,) compute fmt
        return dy, grads

    def flops(self, x_shape, kind):
        # A weight of `count` parameters applied to each of the x_shape[0] rows (tokens): 2 per
        # parameter and row forward, twice that backward (input and weight gradients): the 6·Ψ·tokens rule.
        return (2 if kind == "forward" else 4) * self.count * int(x_shape[0])


class MetaLoss(Loss):
    """No values, so no loss: forward gives NaN; backward gives dy of y's shape in the compute dtype."""

    name = "meta"

    def forward(self, y, target, fmt=None):
        return math.nan, {"y": y}  # y is (B, 0): the cache holds 0 bytes

    def backward(self, cache, fmt, scale=1.0):
        y = cache["y"]
        return like(y, y.shape, get_format(fmt).dtype)


class MetaModel(Model):
    """Layers of given parameter counts, in forward order: `units` is ((name, count), ...)."""

    def __init__(self, units, name: str = "meta"):
        units = tuple((str(n), int(c)) for n, c in units)
        if not units or min(c for _, c in units) < 0:
            raise ValueError("a meta model needs at least one layer and non-negative parameter counts, got "
                             f"{units[:3]}...")
        super().__init__([MetaLayer(n, c) for n, c in units], MetaLoss())
        self.name = name
        self._specs_of = {}  # layer -> [ParamSpec]: O(1) lookups (Model scans every spec, O(layers))
        for spec in self.specs:
            self._specs_of.setdefault(spec.layer, []).append(spec)

    @classmethod
    def from_preset(cls, preset, unit: str = "module") -> "MetaModel":
        """A `zerosim.analysis.costs.ModelPreset` as a meta model, one layer per module or per numbered block."""
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        if unit == "module":
            return cls(preset.layers, name=preset.name)
        merged = []  # consecutive entries of one block add up into one unit
        for name, count in preset.layers:
            m = _BLOCK.match(name)
            key = m.group(1) if m else name
            if merged and merged[-1][0] == key:
                merged[-1][1] += count
            else:
                merged.append([key, count])
        return cls([tuple(u) for u in merged], name=preset.name)

    @classmethod
    def from_params(cls, params, layers: int = 1) -> "MetaModel":
        """Ψ parameters in `layers` layers as equal as can be (the first ones one larger)."""
        params, layers = int(params), int(layers)
        if layers < 1 or params < 0:
            raise ValueError(f"need params >= 0 and layers >= 1, got {params}, {layers}")
        q, r = divmod(params, layers)
        return cls([(f"layer.{i}", q + (i < r)) for i in range(layers)], name=f"{layers} equal layers")

    # -- what the engines call, without data --------------------------------------------------------
    def check_batch(self, x, target) -> None:
        """A meta micro-batch is an (x, target) with x of shape (B, 0), B >= 1: there are no values to check."""
        if len(getattr(x, "shape", ())) != 2 or x.shape[0] < 1:
            raise ValueError("a meta micro-batch is x of shape (batch, 0) with batch >= 1 (see MetaModel.batches), "
                             f"got {getattr(x, 'shape', x)!r}")
    def layer_specs(self, i: int) -> list:
        return self._specs_of.get(i, [])

    def unflatten(self, flat, i: int) -> dict:
        """{"w": layer i's window of `flat`} (the whole (P,) vector, or just the window, as `Model.unflatten`)."""
        start, stop = self.layer_window(i)
        if stop == start:
            return {}
        if len(flat) == stop - start:
            return {"w": flat}
        if len(flat) != self.num_params:
            raise ValueError(f"layer {i}: expected a flat vector of {self.num_params} or {stop - start} elements, got "
                             f"shape {flat.shape}")
        return {"w": flat[start:stop]}

    def pack(self, i: int, tensors: dict):
        start, stop = self.layer_window(i)
        w = tensors["w"]
        return like(w, (stop - start,), w.dtype)  # (count,) in the gradient's dtype

    def init_params(self, rng=None):
        """(P,) fp32 weights with no data (a MetaArray): there are no initial values to draw."""
        return weights_without_data(self.num_params)

    def batches(self, ranks, batch: int = 1, empty=None) -> list:
        """One (x, target) micro-batch per rank: x is (B, 0) fp32 (no features: activations left out).

        `ranks`: a Cluster — one per rank it hosts (1 on the meta backend's representative rank), made by its
        backend — or how many, made by `empty` (the meta backend's constructor)."""
        count, empty = source_arrays(ranks, empty)
        x = empty((batch, 0), np.float32)
        return [(x, None)] * count

    @property
    def largest_layer(self) -> int:
        return max(layer.count for layer in self.layers)

    def __repr__(self) -> str:
        return f"MetaModel({self.name!r}, {len(self.layers)} layers, P={self.num_params:,})"
