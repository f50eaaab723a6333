"""Activation memory of a transformer, per layer and in total (seed 001, section 5).

Letters, in this file only: B micro-batch size, L sequence length, d model width, H attention heads.

Per layer, seed 001 counts ≈ 14·B·L·d + B·H·L² elements saved for the backward pass: the block input,
Q, K, V, the attention output, the pre-FFN input (B·L·d each), the FFN's x1 and x2 (4·B·L·d each with
d_ff = 4d), and the softmax output P (B·H·L²). Seed 001 says the 14 merges bookkeeping choices;
only the B·H·L² term is implementation-invariant. Activations are per micro-batch, so ZeRO does not
shard them: every rank holds its own.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

LINEAR_TERMS = 14  # seed 001's "≈ 14 BLd": 1 + 3 + 1 + 1 + 4 + 4 (see module docstring)
STRATEGIES = ("none", "selective", "block")


@dataclass(frozen=True)
class ActivationShape:
    batch: int  # B: sequences per micro-batch on one rank
    seq_len: int  # L: tokens per sequence
    d_model: int  # d: hidden width
    n_heads: int  # H: attention heads (the B·H·L² softmax output)
    n_layers: int  # transformer blocks
    bytes_per_element: int = 2  # fp16/bf16 activations


@dataclass(frozen=True)
class ActivationMemory:
    """Bytes one rank holds for activations at the backward pass's peak."""

    strategy: str  # "none", "selective" or "block"
    stored_per_layer: int  # kept from forward to backward, per layer
    recompute: int  # one layer's activations rebuilt during backward (block checkpointing only)
    n_layers: int

    @property
    def total(self) -> int:
        return self.n_layers * self.stored_per_layer + self.recompute


def layer_elements(batch: int, seq_len: int, d_model: int, n_heads: int, strategy: str = "none") -> int:
    """Elements one layer keeps for backward: 14·B·L·d + B·H·L² (none); 14·B·L·d (selective); B·L·d (block).

    "selective" drops only the softmax output P (recomputed from Q, K, as memory-efficient attention
    does); "block" keeps only the block input and recomputes the whole block in backward.
    """
    bld = batch * seq_len * d_model
    if strategy == "none":
        return LINEAR_TERMS * bld + batch * n_heads * seq_len**2
    if strategy == "selective":
        return LINEAR_TERMS * bld
    if strategy == "block":
        return bld
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def activation_memory(shape: ActivationShape, strategy: str = "none") -> ActivationMemory:
    """Activation bytes across all layers for one micro-batch.

    none:      n_layers · (14·B·L·d + B·H·L²) · bytes
    selective: n_layers · 14·B·L·d · bytes
    block:     (n_layers · B·L·d + 14·B·L·d + B·H·L²) · bytes — every block input, plus one layer's
               full activations while it is recomputed in backward (seed 001, "block-level checkpointing").
    """
    s, b = shape, shape.bytes_per_element
    stored = layer_elements(s.batch, s.seq_len, s.d_model, s.n_heads, strategy) * b
    recompute = layer_elements(s.batch, s.seq_len, s.d_model, s.n_heads, "none") * b if strategy == "block" else 0
    return ActivationMemory(strategy, stored, recompute, s.n_layers)
