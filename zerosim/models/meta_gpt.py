"""MetaGPT: the GPT's own units as data-less twins, so the meta backend measures activations at 7B-175B scale.

    gpt = GPT(50257, 4096, 32, 32, 2048)                       # seed 001's 7B shape (nothing allocated)
    model = MetaGPT(gpt)
    engine = ZeroEngine(model, Cluster(1, backend="meta"), 0, Adam(), "fp16-mixed")
    engine.step(model.batches(engine.cluster, batch=4))         # ledgers: "block0.P", "block0.x1", ...

Letters: B batch, L sequence length, d model width, V vocabulary, P parameters.

A twin (`MetaUnit`) answers every call a real unit answers, from shapes alone, by asking the real
unit: forward saves a MetaArray for each entry of `unit.saved_spec(x_shape, fmt)` — the same names,
shapes and dtypes the real forward saves — and hands on a MetaArray of `unit.output_shape(x_shape)`;
backward makes a gradient of each parameter's shape in the compute format; `flops` is the unit's own.
So the driver (models/run.py) adopts the same named buffers into the ledger, in the same order, and
the trace gets the same compute events (FLOPs and bytes), as for a real run —
tests/test_meta_gpt.py holds the two equal, buffer by buffer, on small shapes.

NOTE: a twin's backward reads its input's shape from the first entry of the cache: every unit saves
its input first ("input", "block input", "pre-FFN input", "final LN input"), the same convention
`Pass.run` uses for the backward FLOPs; integer ids (the embedding) have no gradient, as for real.

`MetaGPT.from_preset` takes a GPT-2-layout preset (costs/presets.py): the same units, with the
preset's parameter count. GPT-2 and GPT-3 tie the head to the token embedding, so there the head
unit owns only the final LayerNorm (its product still reads W_head = wte: the FLOPs and the saved
tensors are the untied head's). ZeRO-3 would gather wte a second time for the tied head; that gather
is not modelled (the preset route never had a head entry to gather).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models.gpt import GPT
from zerosim.models.layers import Layer
from zerosim.models.lm_loss import LMCrossEntropy
from zerosim.models.meta import like, source_arrays, zeros_without_memory
from zerosim.models.model import Model
from zerosim.precision import get_format




class MetaUnit(Layer):
    """A data-less twin of a real unit: the same name, parameters, saved tensors, output shape and FLOPs."""

    def __init__(self, unit: Layer, param_shapes: dict | None = None):
        super().__init__(unit.name)
        self.unit = unit
        self.param_shapes = dict(unit.param_shapes if param_shapes is None else param_shapes)
        self.saves_input_only = unit.saves_input_only

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        if self.unit.saves_input_only:  # the cache is the input itself (Layer.saves_input_only)
            cache = {"input": x}
        else:
            cache = {name: like(x, shape, dtype) for name, (shape, dtype) in self.unit.saved_spec(x.shape, f).items()}
        return like(x, self.unit.output_shape(x.shape), f.dtype), cache

    def backward(self, p, dy, cache, fmt):
        dtype = get_format(fmt).dtype
        x = next(iter(cache.values()))  # the unit's input, saved first (see the module docstring)
        dx = None if np.dtype(x.dtype).kind in "iu" else like(dy, x.shape, dtype)
        return dx, {name: like(dy, shape, dtype) for name, shape in self.param_shapes.items()}

    def flops(self, x_shape, kind):
        return self.unit.flops(x_shape, kind)

    def output_shape(self, x_shape):
        return self.unit.output_shape(x_shape)

    def __repr__(self) -> str:
        return f"MetaUnit({self.unit!r})"


class MetaLMLoss(LMCrossEntropy):
    """The LM loss without values: NaN, and the real loss's cache (`LMCrossEntropy.saved_spec`) as MetaArrays."""

    name = "meta-lm-xent"

    def forward(self, y, target, fmt=None):
        return math.nan, {
            name: like(y, shape, dtype) for name, (shape, dtype) in self.saved_spec(y.shape, y.dtype).items()
        }

    def backward(self, cache, fmt, scale=1.0):
        BL, V = cache["probabilities"].shape
        return like(cache["probabilities"], (*cache["labels"].shape, V), get_format(fmt).dtype)  # (B, L, V) compute fmt


class MetaGPT(Model):
    """`gpt`'s units as twins (same flat layout, checkpoint blocks and names), for the meta backend.

    Args:
        gpt: a `GPT`; its shape, units, attention, activation and checkpoint strategy are this model's.
        tied_head: the head owns only its LayerNorm (GPT-2 / GPT-3 reuse wte as W_head; see the module docstring).
        name: what reports call it (default: the GPT's repr without P).
    """

    def __init__(self, gpt: GPT, tied_head: bool = False, name: str | None = None):
        if not isinstance(gpt, GPT):
            raise TypeError(f"MetaGPT twins a zerosim.models.GPT, got {type(gpt).__name__}")
        units = [MetaUnit(u) for u in gpt.layers]
        if tied_head:
            head = gpt.layers[-1]
            units[-1] = MetaUnit(head, {k: v for k, v in head.param_shapes.items() if k != "w_head"})
        super().__init__(units, MetaLMLoss(), checkpoint_blocks=gpt.checkpoint_blocks)
        self.gpt, self.tied_head = gpt, tied_head
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = (
            gpt.vocab,
            gpt.d_model,
            gpt.n_heads,
            gpt.n_layers,
            gpt.seq_len,
        )
        self.unit, self.activation, self.attention, self.checkpoint = (
            gpt.unit,
            gpt.activation,
            gpt.attention,
            gpt.checkpoint,
        )
        self.name = name or f"GPT d={gpt.d_model} H={gpt.n_heads} layers={gpt.n_layers}"
        self._specs_of = {}  # layer -> [ParamSpec]: O(1) lookups
        for spec in self.specs:
            self._specs_of.setdefault(spec.layer, []).append(spec)

    @classmethod
    def from_preset(cls, preset, **gpt_options) -> "MetaGPT":
        """The GPT of a GPT-2-layout preset's shape (`preset.shape`), with the preset's parameter count.

        `gpt_options`: GPT's unit, activation, attention, checkpoint (the shape comes from the preset)."""
        shape = getattr(preset, "shape", None)
        if shape is None or shape.layout != "gpt2":
            why = "it gives parameter counts only" if shape is None else f"its blocks are {shape.layout}'s, not GPT-2's"
            raise ValueError(f"activations are measured on zerosim's GPT (GPT-2 layout); preset {preset.name!r} "
                             f"has no such shape ({why})")
        gpt = GPT(shape.vocab, shape.d_model, shape.n_heads, shape.n_layers, shape.n_ctx, **gpt_options)
        model = cls(gpt, tied_head=shape.tied, name=preset.name)
        if model.num_params != preset.total:  # the preset's layer list and the GPT's units count the same tensors
            raise ValueError(f"preset {preset.name!r} has {preset.total:,} parameters but its GPT has "
                             f"{model.num_params:,}")
        return model

    @classmethod
    def from_config(cls, config, seq_len: int | None = None, **gpt_options) -> "MetaGPT":
        """The twin of the GPT a GPT-2 `DecoderConfig` (hf_config.py) describes, its head tied if the config ties it.

        The position table is the config's n_positions long (it is parameters); `seq_len`, when given, is only
        checked against it. `gpt_options`: GPT's unit, attention, checkpoint."""
        if config.layout != "gpt2":
            raise ValueError(f"{config.name!r} has Llama's blocks: use MetaLlama.from_config")
        if seq_len is not None and seq_len > config.max_positions:
            raise ValueError(f"sequences of {seq_len} tokens are longer than {config.name}'s position table "
                             f"(n_positions = {config.max_positions})")
        relu = any(k.key == "activation_function" and k.value == "relu" for k in config.keys)
        activation = "relu" if relu else "gelu"
        gpt = GPT(config.vocab, config.d_model, config.n_heads, config.n_layers, config.max_positions,
                  activation=activation, **gpt_options)
        return cls(gpt, tied_head=config.tied, name=config.name)

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
        start, stop = self.layer_window(i)
        if flat.ndim != 1 or len(flat) not in (self.num_params, stop - start):
            raise ValueError(f"layer {i}: expected a flat vector of {self.num_params} or {stop - start} elements, "
                             f"got shape {flat.shape}")
        return {s.name: like(flat, s.shape, flat.dtype) for s in self.layer_specs(i)}

    def pack(self, i: int, tensors: dict):
        start, stop = self.layer_window(i)
        g = next(iter(tensors.values()))
        return like(g, (stop - start,), g.dtype)  # (window,) in the gradient's dtype

    def init_params(self, rng=None):
        """(P,) fp32 zeros that take no memory: there are no initial values to draw."""
        return zeros_without_memory(self.num_params)

    def batches(self, ranks, batch: int = 1, seq_len: int | None = None, empty=None) -> list:
        """One (ids, targets) micro-batch per rank, both (B, L) int64 data-less arrays (L defaults to seq_len).

        `ranks`: a Cluster — one per rank it hosts (1 on the meta backend's representative rank), made by its
        backend — or how many, made by `empty` (the meta backend's constructor)."""
        count, empty = source_arrays(ranks, empty)
        L = self.seq_len if seq_len is None else seq_len
        ids = empty((batch, L), np.int64)
        return [(ids, ids)] * count

    def __repr__(self) -> str:
        return f"MetaGPT({self.name!r}, {self.gpt!r}{', tied head' if self.tied_head else ''})"
