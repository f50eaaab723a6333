"""GPT: token + position embedding, n_layers pre-LN transformer blocks, final LayerNorm and LM head.

Letters: B batch, L sequence length (<= seq_len), d = d_model, H = n_heads, V = vocab.

Units (each layer of the Model is one ZeRO unit; stage 3 gathers it before each use):

    unit="block"      embed · block0 · block1 · ... · head                 (FSDP's one-block wrap)
    unit="sublayer"   embed · block0.attn · block0.ffn · block1.attn · ... · head

Activation checkpointing (seed 001 §5e, "Activation checkpointing and selective recomputation"),
as the Model's checkpoint blocks; the engine runs with checkpoint=gpt.checkpointing:

    "none"       nothing recomputed: every unit keeps its cache
    "block"      keep each transformer block's input, recompute the block in backward
    "subblock"   keep the attention and the FFN sub-blocks' inputs (needs unit="sublayer")
    "every-k"    keep the input of every k-th block, k = round(√n_layers): seed 001's optimum,
                 O(n_layers/k + k) memory; a checkpoint block recomputes k blocks at once

The embedding and the head are checkpoint blocks of their own, not recomputed (models/_decoder.py `saved_blocks`).
Attention: "standard" (P kept), "selective" (P dropped, rebuilt from Q and K in backward: seed
001's selective retention, bitwise the same gradients) or "flash" (tiled, no L² buffer at all).
"""

from __future__ import annotations

import numpy as np

from zerosim.models._decoder import Decoder, check_units, saved_blocks, strategy_blocks
from zerosim.models.gpt._attention import AttentionBlock
from zerosim.models.gpt._block import TransformerBlock
from zerosim.models.gpt._embedding import Embedding
from zerosim.models.gpt._head import LMHead
from zerosim.models.gpt._mlp import FFNBlock, check_activation
from zerosim.models.layers import BLOCK, LMCrossEntropy, check_heads, check_mode


class GPT(Decoder):
    """A GPT-2-shaped decoder over token ids (B, L) with next-token targets (B, L)."""

    def __init__(
        self,
        vocab: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        seq_len: int,
        unit: str = "block",
        activation: str = "gelu",
        attention: str = "standard",
        checkpoint: str = "none",
        flash_block: int = BLOCK,
    ):
        for name, value in (("vocab", vocab), ("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers),
                            ("seq_len", seq_len), ("flash_block", flash_block)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        check_heads(d_model, n_heads)
        check_mode(attention)
        check_activation(activation)
        check_units(unit, checkpoint)
        layers = [Embedding(vocab, seq_len, d_model)]
        per_block = []  # [start, stop) layer range of each transformer block
        for i in range(n_layers):
            start = len(layers)
            if unit == "block":
                layers.append(
                    TransformerBlock(d_model, n_heads, activation, attention, n_layers, flash_block, name=f"block{i}")
                )
            else:
                layers.append(AttentionBlock(d_model, n_heads, attention, n_layers, flash_block, name=f"block{i}.attn"))
                layers.append(FFNBlock(d_model, activation, n_layers, name=f"block{i}.ffn"))
            per_block.append((start, len(layers)))
        layers.append(LMHead(d_model, vocab))
        blocks = strategy_blocks(per_block, len(layers), checkpoint)
        super().__init__(layers, LMCrossEntropy(), checkpoint_blocks=blocks, saved_blocks=saved_blocks(blocks))
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = vocab, d_model, n_heads, n_layers, seq_len
        self.unit, self.activation, self.attention, self.checkpoint = unit, activation, attention, checkpoint

    def __repr__(self) -> str:
        return (f"GPT(vocab={self.vocab}, d_model={self.d_model}, n_heads={self.n_heads}, n_layers={self.n_layers}, "
                f"seq_len={self.seq_len}, unit={self.unit!r}, activation={self.activation!r}, "
                f"attention={self.attention!r}, checkpoint={self.checkpoint!r}, P={self.num_params})")
