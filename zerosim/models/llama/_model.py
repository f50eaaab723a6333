"""Llama: token embedding, n_layers decoder layers (RMSNorm, grouped-query attention with rotary embeddings,
SwiGLU), a final RMSNorm and an untied LM head — Hugging Face's `LlamaForCausalLM`, and with q/k/v biases its
`Qwen2ForCausalLM`; Mistral is a Llama with grouped-query attention (its sliding window is not modelled).

Letters: B batch, L sequence length (<= seq_len), d = d_model, H = n_heads, G = n_kv_heads, d_h = head_dim,
F = d_ff, V = vocab.

Units, as the GPT's (_model.py): unit="block" makes one unit per decoder layer (_block.py), unit="sublayer"
one per attention and per SwiGLU sub-block; the embedding and the head are units of their own. Checkpointing
strategies and attention modes are the GPT's, by the same names (gpt.STRATEGIES): "block", "subblock",
"every-k" keep only checkpoint inputs; attention "selective" drops P, "flash" never builds it.

    model = Llama(vocab=8, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=8)
    model = Llama.from_config(read_hf_config("config.json"), seq_len=8)     # a model's shape, any size
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._decoder import Decoder, check_units, saved_blocks, strategy_blocks
from zerosim.models.layers import BLOCK, RMS_EPS, ROPE_THETA, LMCrossEntropy, check_mode
from zerosim.models.llama._attention import LlamaAttention, check_gqa
from zerosim.models.llama._block import LlamaBlock
from zerosim.models.llama._embedding import TokenEmbedding
from zerosim.models.llama._head import LlamaHead
from zerosim.models.llama._mlp import SwiGLUFFN


def default_ffn(d_model: int) -> int:
    """The Llama paper's SwiGLU width 2/3·4d, rounded up to a multiple of 8 (Meta's code rounds to 256)."""
    return 8 * math.ceil(8 * d_model / 3 / 8)


def _llama_layers(vocab, d_model, n_heads, n_kv_heads, head_dim, d_ff, n_layers, unit, attention, common) -> tuple:
    """The layers in order, embedding, a block (or its attention and FFN, as `unit` says) per decoder layer, head;
    and each decoder layer's [start, stop) layer range."""
    layers = [TokenEmbedding(vocab, d_model)]
    per_block = []  # [start, stop) layer range of each decoder layer
    for i in range(n_layers):
        start = len(layers)
        if unit == "block":
            layers.append(
                LlamaBlock(
                    d_model, n_heads, n_kv_heads, head_dim, d_ff, attention, n_layers, name=f"block{i}", **common
                )
            )
        else:
            layers.append(
                LlamaAttention(
                    d_model, n_heads, n_kv_heads, head_dim, attention, n_layers, name=f"block{i}.attn", **common
                )
            )
            layers.append(SwiGLUFFN(d_model, d_ff, n_layers, common["rms_eps"], name=f"block{i}.ffn"))
        per_block.append((start, len(layers)))
    layers.append(LlamaHead(d_model, vocab, common["rms_eps"]))
    return layers, per_block


class Llama(Decoder):
    """A Llama-family decoder over token ids (B, L) with next-token targets (B, L)."""

    def __init__(
        self,
        vocab: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        seq_len: int,
        d_ff: int | None = None,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        rope_theta: float = ROPE_THETA,
        rms_eps: float = RMS_EPS,
        qkv_bias: bool = False,
        o_bias: bool = False,
        unit: str = "block",
        attention: str = "standard",
        checkpoint: str = "none",
        flash_block: int = BLOCK,
    ):
        for name, value in (
            ("vocab", vocab),
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("n_layers", n_layers),
            ("seq_len", seq_len),
            ("flash_block", flash_block),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model = {d_model} does not split into n_heads = {n_heads} heads: give head_dim")
            head_dim = d_model // n_heads
        d_ff = default_ffn(d_model) if d_ff is None else d_ff
        check_gqa(n_heads, n_kv_heads, head_dim)
        check_mode(attention)
        check_units(unit, checkpoint)
        common = dict(rope_theta=rope_theta, rms_eps=rms_eps, qkv_bias=qkv_bias, o_bias=o_bias, block=flash_block)
        layers, per_block = _llama_layers(vocab, d_model, n_heads, n_kv_heads, head_dim, d_ff, n_layers, unit,
                                          attention, common)
        blocks = strategy_blocks(per_block, len(layers), checkpoint)
        super().__init__(layers, LMCrossEntropy(), checkpoint_blocks=blocks, saved_blocks=saved_blocks(blocks))
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = vocab, d_model, n_heads, n_layers, seq_len
        self.n_kv_heads, self.head_dim, self.d_ff = n_kv_heads, head_dim, d_ff
        self.rope_theta, self.rms_eps, self.qkv_bias, self.o_bias = float(rope_theta), rms_eps, qkv_bias, o_bias
        self.unit, self.attention, self.checkpoint = unit, attention, checkpoint

    @classmethod
    def from_config(cls, config, seq_len: int | None = None, **options) -> "Llama":
        """The Llama of a `DecoderConfig` (_config.py) of layout "llama"; `options`: unit, attention, checkpoint,
        flash_block. `seq_len` defaults to the config's max_position_embeddings."""
        if config.layout != "llama":
            raise ValueError(
                f"{config.name!r} is a {config.model_type!r} model with GPT-2's blocks, not a Llama: "
                "build zerosim.models.GPT for it"
            )
        if config.tied:
            raise ValueError(
                f"{config.name!r} ties its LM head to the token embedding (tie_word_embeddings): a real "
                "Llama here has an untied head (one parameter in two ZeRO units is not built); "
                "the data-less twin MetaLlama counts a tied head"
            )
        return cls(
            config.vocab,
            config.d_model,
            config.n_heads,
            config.n_layers,
            config.max_positions if seq_len is None else seq_len,
            config.d_ff,
            config.n_kv_heads,
            config.head_dim,
            config.rope_theta,
            config.rms_eps,
            config.qkv_bias,
            config.o_bias,
            **options,
        )

    def __repr__(self) -> str:
        return (
            f"Llama(vocab={self.vocab}, d_model={self.d_model}, n_heads={self.n_heads}, "
            f"n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, d_ff={self.d_ff}, n_layers={self.n_layers}, "
            f"seq_len={self.seq_len}, unit={self.unit!r}, attention={self.attention!r}, "
            f"checkpoint={self.checkpoint!r}, P={self.num_params})"
        )
