"""MetaGPT: the GPT's own units as data-less twins, so the meta backend measures activations at 7B-175B scale.

    gpt = GPT(50257, 4096, 32, 32, 2048)                       # seed 001's 7B shape (nothing allocated)
    model = MetaGPT(gpt)
    engine = ZeroEngine(model, Cluster(1, backend="meta"), 0, Adam(), "fp16-mixed")
    engine.step(model.batches(engine.cluster, batch=4))         # ledgers: "block0.P", "block0.x1", ...

Letters: B batch, L sequence length, d model width, V vocabulary, P parameters.

The twins are the decoders' (models/meta/_decoder.py: `MetaUnit` per real unit, `MetaDecoder` for what the
engines call); this file builds one from a `GPT` (tests/test_meta_gpt.py holds the two equal, buffer by buffer).

`MetaGPT.from_preset` takes a GPT-2-layout preset (analysis/costs/_presets.py): the same units, with the
preset's parameter count. GPT-2 and GPT-3 tie the head to the token embedding, so there the head
unit owns only the final LayerNorm (its product still reads W_head = wte: the FLOPs and the saved
tensors are the untied head's). ZeRO-3 would gather wte a second time for the tied head; that gather
is not modelled (the preset route never had a head entry to gather).
"""

from __future__ import annotations

from zerosim.models.gpt._model import GPT
from zerosim.models.meta import MetaDecoder, twin_loss, twin_units


class MetaGPT(MetaDecoder):
    """`gpt`'s units as twins (same flat layout, checkpoint blocks and names), for the meta backend.

    Args:
        gpt: a `GPT`; its shape, units, attention, activation and checkpoint strategy are this model's.
        tied_head: the head owns only its LayerNorm (GPT-2 / GPT-3 reuse wte as W_head; see the module docstring).
        name: what reports call it (default: the GPT's repr without P).
    """

    def __init__(self, gpt: GPT, tied_head: bool = False, name: str | None = None, kernels: str = "fused",
                 loss: str | None = None):
        if not isinstance(gpt, GPT):
            raise TypeError(f"MetaGPT twins a zerosim.models.GPT, got {type(gpt).__name__}")
        units = twin_units(gpt.layers, kernels, "w_head" if tied_head else None)
        super().__init__(units, twin_loss(kernels, loss, gpt.d_model), checkpoint_blocks=gpt.checkpoint_blocks,
                         saved_blocks=gpt.saved_blocks)
        self.kernels = kernels
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
        self._index_specs()

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
    def from_config(cls, config, seq_len: int | None = None, kernels: str = "fused", loss: str | None = None,
                    **gpt_options) -> "MetaGPT":
        """The twin of the GPT a GPT-2 `DecoderConfig` (_config.py) describes, its head tied if the config ties it.

        The position table is the config's n_positions long (it is parameters); `seq_len`, when given, is only
        checked against it. `kernels`: "fused" (what zerosim's units keep) or "eager" (PyTorch eager's autograd,
        models/meta/_eager.py); `loss`: models/meta/_loss_peak.py LOSSES (default: what the kernels imply).
        `gpt_options`: GPT's unit, attention, checkpoint."""
        if config.layout != "gpt2":
            raise ValueError(f"{config.name!r} has Llama's blocks: use MetaLlama.from_config")
        if seq_len is not None and seq_len > config.max_positions:
            raise ValueError(f"sequences of {seq_len} tokens are longer than {config.name}'s position table "
                             f"(n_positions = {config.max_positions})")
        relu = any(k.key == "activation_function" and k.value == "relu" for k in config.keys)
        activation = "relu" if relu else "gelu"
        gpt = GPT(config.vocab, config.d_model, config.n_heads, config.n_layers, config.max_positions,
                  activation=activation, **gpt_options)
        return cls(gpt, tied_head=config.tied, name=config.name, kernels=kernels, loss=loss)

    def __repr__(self) -> str:
        return f"MetaGPT({self.name!r}, {self.gpt!r}{', tied head' if self.tied_head else ''})"
