"""Model presets: the configs shipped with zerosim, read by the same reader as a user's config.json.

A preset is a model's layer list — one module's own parameters (weight and bias together) per entry, as
DeepSpeed's estimator counts them (`model_to_params`: parameters(recurse=False) per module), so
`largest_layer` is its L — with the `DecoderConfig` it came from (zerosim/models/hf/_config.py). Tied weights
are counted once: GPT-2 and GPT-3 reuse the token embedding as the output projection, so there is no lm_head
entry (as `sum(p.numel() for p in model.parameters())` counts them). The shapes are not typed here: each comes
from its `NAME.json` in `zerosim/models/hf/configs/`, whose source and published parameter count that folder's README
cites, and `tests/test_hf_config.py` checks.

`shape` keeps the fields activation memory needs (models/gpt/_meta.py and models/llama/_meta.py measure it on zerosim's
GPT and Llama); the ZeRO paper's 7.5B model is known by its parameter count only.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.models.hf import DecoderConfig, read_hf_config, shipped_config, shipped_configs


@dataclass(frozen=True)
class TransformerShape:
    """The shape behind a preset's layer list: what activation memory needs (seed 001 §5)."""

    layout: str  # "gpt2" (zerosim's GPT: pre-LN, GELU FFN of 4d, learned positions) or "llama" (zerosim's Llama)
    d_model: int  # d
    n_heads: int  # H
    n_layers: int  # transformer blocks
    vocab: int  # V
    n_ctx: int  # the longest sequence (GPT-2's position table; a Llama's trained context)
    tied: bool  # the LM head reuses the token embedding (counted once)


@dataclass(frozen=True)
class ModelPreset:
    name: str
    layers: tuple  # ((layer name, parameter count), ...) in forward order
    note: str  # where the shape comes from
    shape: TransformerShape | None = None  # None: known by its parameter count only
    config: DecoderConfig | None = None  # the config.json it was read from

    @property
    def total(self) -> int:
        """Ψ: parameters, tied weights once."""
        return sum(n for _, n in self.layers)

    @property
    def largest_layer(self) -> int:
        """L: the largest single layer (DeepSpeed's largest_layer_params)."""
        return max(n for _, n in self.layers)


def preset_from_config(config: DecoderConfig, note: str = "") -> ModelPreset:
    """A preset from a `DecoderConfig` (a shipped config, or a user's `--config`)."""
    c = config
    shape = TransformerShape(c.layout, c.d_model, c.n_heads, c.n_layers, c.vocab, c.max_positions, c.tied)
    return ModelPreset(c.name, c.layers, note or f"{c.model_type} config {c.name!r}", shape, c)


def given_total(name: str, total: int, n_blocks: int, note: str) -> ModelPreset:
    """A model known only by Ψ: n_blocks equal blocks (the split is ours, documented in `note`)."""
    if total % n_blocks:
        raise ValueError(f"{total} parameters do not split into {n_blocks} equal blocks")
    return ModelPreset(name, tuple((f"block.{i}", total // n_blocks) for i in range(n_blocks)), note)


def _shipped() -> dict:
    presets = {}
    for name in shipped_configs():
        config = read_hf_config(shipped_config(name), name=name)
        presets[name] = preset_from_config(
            config,
            f"zerosim/models/hf/configs/{name}.json (sources: that folder's README): {config.num_params:,} params",
        )
    return presets


PRESETS = {
    **_shipped(),
    "zero-paper-7.5b": given_total(
        "zero-paper-7.5b",
        7_500_000_000,
        64,
        note="ZeRO paper Fig. 1 gives only Ψ = 7.5e9; 64 equal blocks of 117,187,500 are our split",
    ),
}


def get_preset(name: str) -> ModelPreset:
    """A model preset by name (a key of PRESETS), with a clear error listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; presets: {', '.join(PRESETS)}") from None
