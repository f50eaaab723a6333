"""Model presets by layer sizes: what an engine (or the meta backend) needs to lay out a flat buffer.

A "layer" is one module's own parameters (weight and bias together), as DeepSpeed's estimator counts
them (`model_to_params`: parameters(recurse=False) per module), so `largest_layer` is its L.
Tied weights are counted once: GPT-2 and GPT-3 reuse the token embedding as the output projection,
so there is no lm_head entry (as `sum(p.numel() for p in model.parameters())` counts them).

Each preset also keeps its `shape` (width, heads, blocks, vocabulary, context): activation memory
needs it (models/meta_gpt.py measures it on zerosim's GPT for the GPT-2-layout presets).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerShape:
    """The shape behind a preset's layer list: what activation memory needs (seed 001 §5)."""

    layout: str  # "gpt2" (zerosim's GPT: pre-LN, GELU FFN of 4d, learned positions) or "llama"
    d_model: int  # d
    n_heads: int  # H
    n_layers: int  # transformer blocks
    vocab: int  # V
    n_ctx: int  # the longest sequence (GPT-2's position table; LLaMA's trained context)
    tied: bool  # the LM head reuses the token embedding (counted once)


@dataclass(frozen=True)
class ModelPreset:
    name: str
    layers: tuple  # ((layer name, parameter count), ...) in forward order
    note: str  # where the shape comes from
    shape: TransformerShape | None = None  # None: known by its parameter count only

    @property
    def total(self) -> int:
        """Ψ: parameters, tied weights once."""
        return sum(n for _, n in self.layers)

    @property
    def largest_layer(self) -> int:
        """L: the largest single layer (DeepSpeed's largest_layer_params)."""
        return max(n for _, n in self.layers)


def gpt2_like(name: str, d: int, n_layers: int, n_heads: int, vocab: int = 50257, n_ctx: int = 1024, note: str = "") -> ModelPreset:
    """GPT-2 architecture: per block 12d² + 13d (LayerNorms 2·2d, qkv d·3d + 3d, proj d² + d,
    fc d·4d + 4d, proj 4d·d + d); plus token (V·d) and position (n_ctx·d) embeddings and a final LayerNorm."""
    layers = [("wte", vocab * d), ("wpe", n_ctx * d)]
    for i in range(n_layers):
        layers += [
            (f"h.{i}.ln_1", 2 * d),  # scale and shift
            (f"h.{i}.attn.c_attn", d * 3 * d + 3 * d),  # fused q, k, v
            (f"h.{i}.attn.c_proj", d * d + d),
            (f"h.{i}.ln_2", 2 * d),
            (f"h.{i}.mlp.c_fc", d * 4 * d + 4 * d),
            (f"h.{i}.mlp.c_proj", 4 * d * d + d),
        ]
    layers.append(("ln_f", 2 * d))
    return ModelPreset(name, tuple(layers), note, TransformerShape("gpt2", d, n_heads, n_layers, vocab, n_ctx, tied=True))


def llama_like(name: str, d: int, n_layers: int, n_heads: int, ffn: int, vocab: int, n_ctx: int, note: str = "") -> ModelPreset:
    """LLaMA architecture: no biases, RMSNorm (weight only), SwiGLU FFN (gate, up, down), untied lm_head."""
    layers = [("embed_tokens", vocab * d)]
    for i in range(n_layers):
        layers += [
            (f"layers.{i}.input_layernorm", d),
            (f"layers.{i}.self_attn.q_proj", d * d),
            (f"layers.{i}.self_attn.k_proj", d * d),
            (f"layers.{i}.self_attn.v_proj", d * d),
            (f"layers.{i}.self_attn.o_proj", d * d),
            (f"layers.{i}.post_attention_layernorm", d),
            (f"layers.{i}.mlp.gate_proj", d * ffn),
            (f"layers.{i}.mlp.up_proj", d * ffn),
            (f"layers.{i}.mlp.down_proj", ffn * d),
        ]
    layers += [("norm", d), ("lm_head", vocab * d)]
    return ModelPreset(name, tuple(layers), note, TransformerShape("llama", d, n_heads, n_layers, vocab, n_ctx, tied=False))


def given_total(name: str, total: int, n_blocks: int, note: str) -> ModelPreset:
    """A model known only by Ψ: n_blocks equal blocks (the split is ours, documented in `note`)."""
    if total % n_blocks:
        raise ValueError(f"{total} parameters do not split into {n_blocks} equal blocks")
    return ModelPreset(name, tuple((f"block.{i}", total // n_blocks) for i in range(n_blocks)), note)


PRESETS = {
    p.name: p
    for p in (
        gpt2_like("gpt2-small", 768, 12, 12, note="Radford et al. 2019 / HF gpt2: 124,439,808 params"),
        gpt2_like("gpt2-medium", 1024, 24, 16, note="HF gpt2-medium: 354,823,168 params (the '355M')"),
        gpt2_like("gpt2-large", 1280, 36, 20, note="HF gpt2-large: 774,030,080 params"),
        gpt2_like("gpt2-xl", 1600, 48, 25, note="HF gpt2-xl: 1,557,611,200 params (the '1.5B')"),
        llama_like("llama-7b", 4096, 32, 32, ffn=11008, vocab=32000, n_ctx=2048, note="LLaMA-7B shape: 6,738,415,616 params"),
        gpt2_like("gpt3-6.7b", 4096, 32, 32, n_ctx=2048,
                  note="Brown et al. 2020 Table 2.1, GPT-3 6.7B (d 4096, 32 heads, 32 layers): seed 001's '7B-class' shape; "
                       "6,658,404,352 params in GPT-2 layout"),
        gpt2_like("gpt3-175b", 12288, 96, 96, n_ctx=2048,
                  note="Brown et al. 2020 GPT-3 shape in GPT-2 layout (tied, biases): ≈ 174.6e9, the '175B'"),
        given_total("zero-paper-7.5b", 7_500_000_000, 64,
                    note="ZeRO paper Fig. 1 gives only Ψ = 7.5e9; 64 equal blocks of 117,187,500 are our split"),
    )
}


def get_preset(name: str) -> ModelPreset:
    """A model preset by name (a key of PRESETS), with a clear error listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; presets: {', '.join(PRESETS)}") from None
