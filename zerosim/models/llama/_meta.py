"""MetaLlama: the Llama's own units as data-less twins, so the meta backend measures a Llama's activations at scale.

    config = read_hf_config(shipped_config("llama-3-8b"))                   # 8,030,261,248 parameters
    model = MetaLlama.from_config(config, checkpoint="block")              # nothing allocated
    engine = ZeroEngine(model, Cluster(8, backend="meta"), 3, Adam(), "bf16-mixed", checkpoint=True)
    engine.step(model.batches(engine.cluster, batch=1, seq_len=8192))      # ledgers: "block0.Q", "block0.gate", ...

Letters: B batch, L sequence length, V vocabulary, d model width, P parameters.

The twin is the decoders' machinery (models/meta/_decoder.py) over a `Llama`'s units: each `MetaUnit` saves what the
real unit's `saved_spec` declares, hands on `output_shape`, and reports the real unit's FLOPs, so the ledger and the
compute events equal the real Llama's (tests/test_llama.py holds them equal, buffer by buffer, on small shapes).
The engines call the same few methods on any decoder over token ids (check_batch, batches, pack, layer_specs),
so MetaLlama inherits them from MetaDecoder.

A tied head (the config's `tie_word_embeddings`: Llama 3.2 1B/3B, small Qwen2.5 models) owns only the final
RMSNorm, so the head's weight is counted once, in the embedding — as `sum(p.numel() for p in model.parameters())`
counts it; its product still reads the (V, d) weight, so FLOPs and saved tensors are the untied head's. ZeRO-3
would gather that weight a second time for the head; the second gather is not modelled (as in MetaGPT).
"""

from __future__ import annotations

from zerosim.models.llama._model import Llama
from zerosim.models.meta import MetaDecoder, twin_loss, twin_units


class MetaLlama(MetaDecoder):
    """`llama`'s units as twins (same flat layout, checkpoint blocks and names), for the meta backend.

    Args:
        llama: a `Llama`; its shape, units, attention and checkpoint strategy are this model's.
        tied_head: the head owns only its RMSNorm (the LM head reuses the token embedding; see the module docstring).
        name: what reports call it.
    """

    def __init__(self, llama: Llama, tied_head: bool = False, name: str | None = None, kernels: str = "fused",
                 loss: str | None = None):
        if not isinstance(llama, Llama):
            raise TypeError(f"MetaLlama twins a zerosim.models.Llama, got {type(llama).__name__}")
        units = twin_units(llama.layers, kernels, "lm_head" if tied_head else None)
        super().__init__(units, twin_loss(kernels, loss, llama.d_model), checkpoint_blocks=llama.checkpoint_blocks,
                         saved_blocks=llama.saved_blocks)
        self.kernels = kernels
        self.gpt = self.llama = llama  # `gpt`: the name MetaGPT gives its model, kept for callers that read it
        self.tied_head = tied_head
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = (
            llama.vocab,
            llama.d_model,
            llama.n_heads,
            llama.n_layers,
            llama.seq_len,
        )
        self.n_kv_heads, self.head_dim, self.d_ff = llama.n_kv_heads, llama.head_dim, llama.d_ff
        self.unit, self.attention, self.checkpoint = llama.unit, llama.attention, llama.checkpoint
        self.activation = "silu"
        self.name = name or (
            f"Llama d={llama.d_model} H={llama.n_heads} KV={llama.n_kv_heads} layers={llama.n_layers} F={llama.d_ff}"
        )
        self._index_specs()

    @classmethod
    def from_config(cls, config, seq_len: int | None = None, kernels: str = "fused", loss: str | None = None,
                    **llama_options) -> "MetaLlama":
        """The twin of the Llama a `DecoderConfig` (_config.py) describes, its head tied if the config ties it.

        `seq_len` defaults to the config's max_position_embeddings; `kernels`: "fused" (zerosim's units) or "eager"
        (PyTorch eager's autograd, models/meta/_eager.py); `loss`: models/meta/_loss_peak.py LOSSES (default: the
        kernels'); `llama_options`: unit, attention, checkpoint."""
        if config.layout != "llama":
            raise ValueError(f"{config.name!r} has GPT-2's blocks: use MetaGPT.from_config")
        untied = config.with_(tied=False)  # the real Llama is untied; the twin drops the head's weight below
        llama = Llama.from_config(untied, seq_len, **llama_options)
        model = cls(llama, tied_head=config.tied, name=config.name, kernels=kernels, loss=loss)
        if model.num_params != config.num_params:  # the config's own count and the twin's flat layout agree
            raise ValueError(
                f"{config.name!r}: the config counts {config.num_params:,} parameters, its Llama {model.num_params:,}"
            )
        return model

    def __repr__(self) -> str:
        return f"MetaLlama({self.name!r}, {self.llama!r}{', tied head' if self.tied_head else ''})"
