"""One CP rank's model: the GPT's or the Llama's units with each attention sub-block cut where the ring communicates.

Letters: C the CP degree, L_r = L / C the tokens a rank holds. Every CP rank runs the whole model (all parameters,
unsplit) on its own tokens, so one `ContextParallelModel` serves them all and its flat parameter vector is the whole
model's, in the same order: ZeRO shards it over dp × cp (parallel/data/multinode/_groups.py). Its units:

    embed                        GPT: token + learned position embedding at the rank's positions; Llama: as is
    block{i}.attn.qkv            the norm and the QKV GEMM (Llama: rotary at the rank's positions)   _ends.py
    block{i}.attn.hop0 .. hop{C−1}   ring: one block of attention a hop (the K/V arrive between hops); torch:
                                     one step of torch's ring a hop (_torch_core.py)
      or block{i}.attn.gathered      all-gather: the local queries against the gathered keys
    block{i}.attn.out            W_o, its bias, the residual add
    block{i}.ffn                 the FFN sub-block, as is (a token's FFN needs no other token)
    head                         as is; the loss is each rank's mean over its own B·L_r tokens

Beside tensor parallelism the units cut are a TP rank's (parallel/tensor/_model.py): its attention region (the
column-parallel QKV GEMM, attention, the row-parallel W_o) becomes the QKV end, the core and the output end, with f
before the first and g after the last (parallel/tensor/_plan.py's "column" and "row"; with sequence parallelism SP's
all-gather and reduce-scatter, the QKV end's input kept as its sequence shard).

A GPT or Llama of unit="block" has its block cut in two here (attention, FFN), as unit="sublayer" has it: a
collective may only sit between units (parallel/_contract.py). ZeRO-3 therefore gathers a block's parameters in three
calls where FSDP wraps the block once (the bytes are the same). Checkpoint blocks follow the model's own, each
mapped to the units it became.

Refused as the frameworks refuse it: attention that is not "flash" (Transformer Engine 2.18,
dot_product_attention/utils.py `get_attention_backend`: "Disabling UnfusedDotProductAttention as it does not support
context parallelism"; torch's ring runs the flash, memory-efficient or cuDNN SDPA kernels, which return the lse it
merges), and op-level selective checkpointing (the data-less twins' only).
"""

from __future__ import annotations

import numpy as np

from zerosim.models import GPT, Llama
from zerosim.models.gpt import AttentionBlock, Decoder, Embedding, FFNBlock, TransformerBlock
from zerosim.models.llama import LlamaAttention, LlamaBlock
from zerosim.parallel.context._split import SPLITS, check_split
from zerosim.parallel.context._core import Gathered, Hop
from zerosim.parallel.context._torch_core import TorchHop
from zerosim.parallel.context._ends import AttentionOut, GptQKV, LlamaQKV, TensorOut, TensorQKV

# Transformer Engine's cp_comm_type "p2p" and "all_gather"; torch's own context_parallel (_torch_core.py)
STYLES = ("ring", "allgather", "torch")


def check_style(style: str) -> str:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES} (ring: K/V passed round the CP ring hop by hop; allgather: "
                         f"K/V all-gathered, then attention, as Llama 3; torch: torch's context_parallel, K/V "
                         f"all-gathered, merged step by step in fp32), got {style!r}")
    return style


def check_mask(style: str, split: str, causal: bool) -> None:
    """torch's load balancing (the zigzag split) needs the causal mask: refused otherwise, as torch refuses it."""
    if style == "torch" and split == "zigzag" and not causal:
        raise ValueError("style 'torch' with split 'zigzag' needs causal attention (torch 2.13: 'Load balancing "
                         "requires `is_causal=True`'); use split 'contiguous' for attention without its mask")


def check_cp(cp) -> int:
    if isinstance(cp, bool) or not isinstance(cp, (int, np.integer)) or cp < 1:
        raise ValueError(f"cp must be a positive integer (the GPUs of a CP group), got {cp!r}")
    return int(cp)


def check_options(attention: str, checkpoint: str | None) -> None:
    """The attention and checkpointing a CP rank's model may be built with (see the module docstring), refused
    otherwise: the one rule the model, the planner and the commands follow."""
    if attention != "flash":
        raise ValueError(f"context parallelism runs attention as flash blocks, whose log-sum-exp the ring merges: "
                         f"build the model with attention='flash', not {attention!r} (Transformer Engine disables "
                         "UnfusedDotProductAttention with context parallelism)")
    if checkpoint == "op-sac":
        raise ValueError("checkpoint='op-sac' is modelled on the data-less twins only; use 'none', 'block', "
                         "'subblock' or 'every-k'")


def check_model(full) -> None:
    """What a CP rank's model is built from, refused otherwise (see the module docstring)."""
    if type(full) not in (GPT, Llama):
        raise TypeError(f"context parallelism splits zerosim's GPT and Llama, got {type(full).__name__}")
    check_options(full.attention, full.checkpoint)


class ContextParallelModel(Decoder):
    """One CP rank's units of `full` (a GPT or a Llama with attention="flash") at degree `cp`, communicating in
    `style` ("ring" or "allgather"), its sequences cut by `split` ("contiguous" or "zigzag"); `causal` False drops
    the attention's mask (a model that sees both ways). `tensor`: a TP rank's model of `full`
    (parallel/tensor's TensorParallelModel), whose units are cut instead (its attention region into its column and
    row halves: _ends.py). `base[i]` is the index of the unit of the model cut that unit i came from; `positioned`
    the units whose input comes beside the tokens' positions (the GPT's embedding, the Llama's QKV end)."""

    def __init__(self, full, cp: int, style: str = "ring", split: str = "zigzag", causal: bool = True,
                 tensor=None):
        check_model(full)
        self.cp, self.style, self.split = check_cp(cp), check_style(style), check_split(split)
        self.causal = bool(causal)
        check_mask(self.style, self.split, self.causal)
        self.full, self.cut = full, full if tensor is None else tensor
        layers, base, spans, positioned = [], [], [], set()
        for i, unit in enumerate(self.cut.layers):
            start = len(layers)
            for made in self._units(unit):
                if getattr(unit, "positions", None) or isinstance(unit, Embedding) or isinstance(made, LlamaQKV) or (
                        isinstance(made, TensorQKV) and made.gqa):
                    positioned.add(len(layers))
                layers.append(made)
                base.append(i)
            spans.append((start, len(layers)))
        blocks = [(spans[s][0], spans[e - 1][1]) for s, e in self.cut.checkpoint_blocks]
        saved = [(spans[s][0], spans[e - 1][1]) for s, e in self.cut.saved_blocks]
        super().__init__(layers, self.cut.loss, checkpoint_blocks=blocks, saved_blocks=saved)
        self.base, self.positioned = tuple(base), frozenset(positioned)
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = (
            full.vocab, full.d_model, full.n_heads, full.n_layers, full.seq_len)
        self.attention, self.checkpoint, self.unit = full.attention, full.checkpoint, "context parallel"
        self.family = "gpt" if isinstance(full, GPT) else "llama"
        if [(s.name, s.shape) for s in self.specs] != [(s.name, s.shape) for s in self.cut.specs]:
            raise AssertionError("the CP rank's units must hold the cut model's parameters in its flat order")

    def _units(self, unit) -> list:
        if getattr(unit, "role", None) == "column-row" and hasattr(unit, "heads") and hasattr(unit, "block"):
            return self._tensor_attention(unit)  # tensor parallelism's attention region
        if isinstance(unit, TransformerBlock):
            return self._gpt_attention(unit, unit.name) + [FFNBlock(unit.d, unit.activation, unit.n_layers,
                                                                    name=f"{unit.name}.ffn")]
        if isinstance(unit, AttentionBlock):
            return self._gpt_attention(unit, unit.name.removesuffix(".attn"))
        if isinstance(unit, LlamaBlock):
            return self._llama_attention(unit.attn) + [unit.ffn]
        if isinstance(unit, LlamaAttention):
            return self._llama_attention(unit)
        return [unit]

    def _core(self, name: str, heads: int, kv_heads: int) -> list:
        pieces, n_rep = SPLITS[self.split], heads // kv_heads
        block = self._flash_block
        if self.style == "allgather":
            return [Gathered(pieces, n_rep, block, f"{name}.attn.gathered")]
        if self.style == "torch":
            return [TorchHop(j, self.cp, pieces, n_rep, block, f"{name}.attn.hop{j}") for j in range(self.cp)]
        return [Hop(j, self.cp, pieces, n_rep, block, f"{name}.attn.hop{j}") for j in range(self.cp)]

    def _saved_kv_heads(self, heads: int, kv_heads: int) -> int:
        """The key/value heads the output end keeps for backward: torch's ring keeps SDPA's inputs, repeated to every
        query head (torchtitan's repeat_kv before SDPA); the others the model's own."""
        return heads if self.style == "torch" else kv_heads

    def _gpt_attention(self, unit, name: str) -> list:
        self._flash_block = unit.block
        d, heads = unit.d, unit.heads
        return [GptQKV(d, heads, f"{name}.attn.qkv"), *self._core(name, heads, heads),
                AttentionOut(d, heads, heads, d // heads, "w_o", "b_o", f"{name}.attn.out")]

    def _llama_attention(self, attn) -> list:
        self._flash_block = attn.block
        name = attn.name.removesuffix(".attn")
        return [LlamaQKV(attn, f"{name}.attn.qkv"), *self._core(name, attn.heads, attn.kv_heads),
                AttentionOut(attn.d, attn.heads, self._saved_kv_heads(attn.heads, attn.kv_heads), attn.head_dim,
                             "o_proj",
                             "o_bias" if attn.o_bias else None, f"{name}.attn.out")]

    def _tensor_attention(self, unit) -> list:
        self._flash_block = unit.block
        name = unit.name.removesuffix(".attn")
        return [TensorQKV(unit, f"{name}.attn.qkv"), *self._core(name, unit.heads, getattr(unit, "kv_heads",
                                                                                           unit.heads)),
                TensorOut(unit, f"{name}.attn.out", self._saved_kv_heads(unit.heads, getattr(unit, "kv_heads",
                                                                                             unit.heads)))]

    def init_params(self, rng=None):
        """The cut model's initial weights (the same flat vector, in the same order)."""
        return self.cut.init_params(rng)

    def __repr__(self) -> str:
        mask = "" if self.causal else ", not causal"
        return (f"ContextParallelModel({self.full!r}, cp={self.cp}, style={self.style!r}, split={self.split!r}"
                f"{mask})")
