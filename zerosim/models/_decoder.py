"""What the decoder families (GPT, Llama) share: token ids in, next-token targets, a unit layout and seed 001's
activation checkpointing strategies by name.

Activation checkpointing (seed 001 §5e, "Activation checkpointing and selective recomputation"),
as the Model's checkpoint blocks; the engine runs with checkpoint=model.checkpointing:

    "none"       nothing recomputed: every unit keeps its cache
    "block"      keep each transformer block's input, recompute the block in backward
    "subblock"   keep the attention and the FFN sub-blocks' inputs (needs unit="sublayer")
    "every-k"    keep the input of every k-th block, k = round(√n_layers): seed 001's optimum,
                 O(n_layers/k + k) memory; a checkpoint block recomputes k blocks at once
    "op-sac"     torchtitan's op-level selective checkpointing: each block's input and the outputs of every
                 other product and of attention kept (models/meta/_sac.py; the data-less twins only)

The embedding and the head are checkpoint blocks of their own that checkpointing leaves alone (`saved_blocks`): they
keep their caches in forward and are not recomputed, as the frameworks checkpoint the transformer blocks only.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._model import Model

INIT_STD = 0.02  # GPT-2 / nanoGPT: every embedding and Linear weight drawn from N(0, 0.02²); the Llama's too

UNITS = ("block", "sublayer")
CHECKPOINTS = ("none", "block", "subblock", "every-k", "op-sac")

# Seed 001 §5e's strategies by one name each (`zerosim memory --checkpoint`, notebook 04, benchmarks/gpt.py),
# as the GPT options that build them. "selective" and "flash" are attention modes, the rest checkpoint blocks.
STRATEGIES = {
    "none": {},  # every unit keeps its cache
    "block": {"checkpoint": "block"},  # each block's input kept, the block recomputed
    "subblock": {"unit": "sublayer", "checkpoint": "subblock"},  # the attention and FFN inputs kept
    "selective": {"attention": "selective"},  # only P dropped, rebuilt from Q and K
    "every-k": {"checkpoint": "every-k"},  # every k = √layers blocks' input kept
    "flash": {"attention": "flash"},  # tiled attention: an fp32 log-sum-exp per row instead of P
}


# Checkpointing that composes with flash attention (its recompute builds no L×L buffer either), and torchtitan's
# op-level selective checkpointing (models/meta/_sac.py), which runs SDPA's flash kernel. Real jobs run these.
COMPOSED = {
    "block-flash": {"checkpoint": "block", "attention": "flash"},  # full activation checkpointing, flash attention
    "subblock-flash": {"unit": "sublayer", "checkpoint": "subblock", "attention": "flash"},
    "every-k-flash": {"checkpoint": "every-k", "attention": "flash"},
    "op-sac": {"checkpoint": "op-sac", "attention": "flash"},  # torchtitan's selective_ac_option = "op"
}
ALL_STRATEGIES = {**STRATEGIES, **COMPOSED}


def strategy_options(name: str) -> dict:
    """The GPT keyword arguments of strategy `name` (a key of STRATEGIES, seed 001's, or of COMPOSED)."""
    if name not in ALL_STRATEGIES:
        raise ValueError(f"checkpointing strategy must be one of {tuple(ALL_STRATEGIES)}, got {name!r}")
    return dict(ALL_STRATEGIES[name])


def every_k(n_layers: int) -> int:
    """Seed 001: checkpoints every k = √n_layers blocks minimise n_layers/k + k; rounded, at least 1."""
    return max(1, round(math.sqrt(n_layers)))


def check_units(unit: str, checkpoint: str) -> None:
    """A unit layout and a checkpointing arrangement that go together (the GPT's and the Llama's)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {CHECKPOINTS}, got {checkpoint!r}")
    if checkpoint == "subblock" and unit != "sublayer":
        raise ValueError("checkpoint='subblock' keeps the attention and FFN inputs separately, so it needs "
                         "unit='sublayer' (with unit='block' the two halves are one layer)")


def strategy_blocks(per_block: list, n_units: int, checkpoint: str) -> list:
    """The checkpoint blocks of a decoder whose units are the embedding (unit 0), the transformer blocks
    (per_block: the [start, stop) units of each) and the head (the last unit), for strategy `checkpoint`.
    The embedding and the head are blocks of their own; the GPT and the Llama share this arrangement."""
    n_layers = len(per_block)
    if checkpoint == "subblock":
        middle = [(i, i + 1) for i in range(1, n_units - 1)]
    elif checkpoint == "every-k":
        k = every_k(n_layers)
        middle = [(per_block[i][0], per_block[min(i + k, n_layers) - 1][1]) for i in range(0, n_layers, k)]
    else:  # "block", and "none" (where the blocks are not used)
        middle = per_block
    return [(0, 1), *middle, (n_units - 1, n_units)]


def saved_blocks(blocks: list) -> tuple:
    """The checkpoint blocks of a decoder that activation checkpointing leaves alone (`Model.saved_blocks`): the
    embedding's (the first) and the head's (the last, with the final norm). The frameworks recompute the transformer
    blocks only: torchtitan wraps each TransformerBlock in `checkpoint_wrapper` and nothing else (pytorch/torchtitan
    at 9dec370, torchtitan/parallelisms/parallelize_llama.py, `apply_ac`), Megatron runs its layers through
    `checkpointed_forward` and the final layernorm and the output layer after it, saving as usual (Megatron-LM
    core_v0.19.0, megatron/core/transformer/transformer_block.py `TransformerBlock.forward`,
    megatron/core/models/gpt/gpt_model.py `GPTModel._postprocess`); Composer's MPT and HF Transformers' gradient
    checkpointing wrap the decoder layers alike."""
    return (blocks[0], blocks[-1])


def check_token_batch(model, x, target) -> None:
    """Raise ValueError saying what is wrong with token ids x (B, L) and next-token targets (B, L) for a decoder
    `model` with `vocab`, `seq_len` and an LM loss (the GPT and the Llama)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype.kind not in "iu":
        raise ValueError(f"{type(model).__name__} input must be integer token ids of shape (batch, length), "
                         f"got {x.dtype} {x.shape}")
    B, L = x.shape
    if B < 1 or L < 1:
        raise ValueError(f"a micro-batch needs at least one sequence of at least one token, got shape {x.shape}")
    if L > model.seq_len:
        raise ValueError(f"sequences of {L} tokens are longer than the model's seq_len = {model.seq_len}")
    if x.min() < 0 or x.max() >= model.vocab:
        raise ValueError(f"token ids must lie in [0, {model.vocab}), got {x.min()}..{x.max()}")
    t = np.asarray(target)
    if t.shape != x.shape:
        raise ValueError(f"targets must have the input's shape {x.shape} (one next token per position), got {t.shape}")
    model.loss.check_target(t, B, model.vocab)


class Decoder(Model):
    """What the GPT and the Llama share: token ids in, a checkpointing strategy by name (`checkpoint`)."""

    @property
    def checkpointing(self) -> bool:
        """Whether the engine should run with checkpoint=True (any strategy but "none")."""
        return self.checkpoint != "none"

    def check_batch(self, x, target) -> None:
        """Raise ValueError saying what is wrong with token ids x (B, L) and next-token targets (B, L)."""
        check_token_batch(self, x, target)
