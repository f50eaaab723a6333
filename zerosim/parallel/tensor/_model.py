"""One TP rank's model: the GPT's or the Llama's units cut at Megatron's collectives, each holding the rank's slice.

Letters: T the TP degree, V vocabulary, d width, H heads, G key/value heads, F FFN width, L sequence length.
Every TP rank runs the same units on its own slice (the shapes are the same on every rank; the values are the
rank's: _slicing.py), so one `TensorParallelModel` serves them all and ZeRO shards each rank's slice over its
data-parallel group like any model. Its units, per transformer block (unit = one op of the step; between two units
the parallelism runs Megatron's operators, _plan.py):

    embed           vocabulary-parallel embedding (_vocab.py)          then g: all-reduce (SP: reduce-scatter)
    embed.add       GPT only: position + token embedding (_replicated.Add)
    block{i}.ln1    LN1 / norm1 (_replicated.Norm)                     then f
    block{i}.attn   Q, K, V on H/T heads, attention, W_o's columns     then g
    block{i}.ln2    the attention's bias and residual, LN2 / norm2     then f
    block{i}.mlp    W1 (gate, up) rows, the activation, W2 (down) cols then g
    block{i}.out    the MLP's bias and residual
    lnf             the final norm                                     then f
    head            the LM head's V/T rows                             then the vocabulary-parallel loss

Five units a block where the unsplit model has one (or two, unit="sublayer"): a collective may only sit between
units (parallel/_contract.py), and Megatron's f and g sit inside a sub-block. ZeRO-3 therefore gathers a block's
parameters in up to five calls where FSDP wraps the block once (torchtitan's apply_fsdp on each TransformerBlock);
the bytes are the same, the calls more and smaller. Checkpoint blocks ("block", "every-k") keep each block's input
x, as Megatron's full recomputation does; "subblock" is refused (a sub-block's input is a bundle, _bundle.py).

What Megatron refuses is refused here, by its rule (core_v0.19.0, megatron/core/utils.py `divide`: "{} is not
divisible by {}"): H, G and F must split over T. The vocabulary must too: Megatron pads it (_vocab.padded_vocab);
build the model with the padded vocabulary.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models import GPT, Llama
from zerosim.models.gpt import Decoder, check_units, every_k, saved_blocks
from zerosim.models.layers import BLOCK
from zerosim.parallel.tensor._cross_entropy import VocabParallelCrossEntropy
from zerosim.parallel.tensor._layers import MLP, Attention, GQAttention, SwiGLU
from zerosim.parallel.tensor._replicated import Add, Norm
from zerosim.parallel.tensor._vocab import MEGATRON_VOCAB_MULTIPLE, Embedding, Head, padded_vocab

UNITS_PER_BLOCK = 5  # ln1, attn, ln2, mlp, out


def _divides(what: str, n: int, tp: int, fix: str = "") -> None:
    if n % tp:
        raise ValueError(f"{what} = {n} does not split over tp = {tp} ranks (Megatron's divide asserts '{n} is not "
                         f"divisible by {tp}'){fix}")


def _gpt(m, tp, saves):
    """The GPT's TP units and, per local parameter, (its whole-model (block, name), its rule)."""
    d = m.d_model
    layers = [Embedding(m.vocab, d, tp, "wte", positions=m.seq_len), Add("embed.add", d)]
    sources = {(0, "wte"): (("embed", "wte"), "rows"), (0, "wpe"): (("embed", "wpe"), "whole")}
    for i in range(m.n_layers):
        b = f"block{i}"
        units = [
            (Norm(f"{b}.ln1", d, "layernorm", "ln1", "block input", "LN1"), {"ln1.g": "whole", "ln1.b": "whole"}),
            (Attention(d, m.n_heads, tp, m.attention, _flash_block(m), f"{b}.attn", saves),
             {"w_qkv": "thirds", "b_qkv": "thirds", "w_o": "cols"}),
            (Norm(f"{b}.ln2", d, "layernorm", "ln2", "pre-FFN input", "LN2", bias="b_o"),
             {"b_o": "whole", "ln2.g": "whole", "ln2.b": "whole"}),
            (MLP(d, 4 * d, tp, m.activation, f"{b}.mlp", saves), {"w1": "rows", "b1": "rows", "w2": "cols"}),
            (Add(f"{b}.out", d, "b2"), {"b2": "whole"}),
        ]
        for unit, rules in units:
            sources |= {(len(layers), n): ((b, n), rule) for n, rule in rules.items()}
            layers.append(unit)
    sources |= {(len(layers), n): (("head", n), "whole") for n in ("lnf.g", "lnf.b")}
    layers.append(Norm("lnf", d, "layernorm", "lnf", "final LN input", "LN", hands_on_residual=False))
    sources[(len(layers), "w_head")] = (("head", "w_head"), "rows")
    layers.append(Head(d, m.vocab, tp, "w_head", saves_input=saves))
    return layers, sources


def _llama(m, tp, saves):
    d, eps = m.d_model, m.rms_eps
    layers = [Embedding(m.vocab, d, tp, "embed_tokens")]
    sources = {(0, "embed_tokens"): (("embed", "embed_tokens"), "rows")}
    qkv = {n: "rows" for n in ("q_proj", "k_proj", "v_proj")} | (
        {n: "rows" for n in ("q_bias", "k_bias", "v_bias")} if m.qkv_bias else {})
    for i in range(m.n_layers):
        b = f"block{i}"
        units = [
            (Norm(f"{b}.ln1", d, "rmsnorm", "norm1", "block input", "norm1", eps), {"norm1.w": "whole"}),
            (GQAttention(d, m.n_heads, m.n_kv_heads, m.head_dim, tp, m.attention, m.rope_theta, m.qkv_bias,
                         _flash_block(m), f"{b}.attn", saves), {**qkv, "o_proj": "cols"}),
            (Norm(f"{b}.ln2", d, "rmsnorm", "norm2", "pre-FFN input", "norm2", eps, bias="o_bias" if m.o_bias else ""),
             {"norm2.w": "whole"} | ({"o_bias": "whole"} if m.o_bias else {})),
            (SwiGLU(d, m.d_ff, tp, f"{b}.mlp", saves), {"gate_proj": "rows", "up_proj": "rows", "down_proj": "cols"}),
            (Add(f"{b}.out", d), {}),
        ]
        for unit, rules in units:
            sources |= {(len(layers), n): ((b, n), rule) for n, rule in rules.items()}
            layers.append(unit)
    sources[(len(layers), "norm.w")] = (("head", "norm.w"), "whole")
    layers.append(Norm("lnf", d, "rmsnorm", "norm", "final norm input", "final norm", eps, hands_on_residual=False))
    sources[(len(layers), "lm_head")] = (("head", "lm_head"), "rows")
    layers.append(Head(d, m.vocab, tp, "lm_head", saves_input=saves))
    return layers, sources


def _flash_block(m) -> int:
    """The flash attention tile the whole model's blocks use (GPT and Llama keep it on their attention units)."""
    for unit in m.layers:
        inner = getattr(unit, "attn", unit)
        if hasattr(inner, "block"):
            return inner.block
    return BLOCK


FAMILIES = {GPT: _gpt, Llama: _llama}  # the whole model's class -> its TP units

@dataclass(frozen=True)
class Layout:
    """What a TP rank keeps for backward, by the framework that runs it."""

    name: str
    keeps_shard: bool  # with SP: keep the column GEMM's input as the sequence shard and all-gather it again in backward
    why: str  # the source, in words


LAYOUTS = {layout.name: layout for layout in (
    # Megatron-LM core_v0.19.0, tensor_parallel/layers.py: LinearWithGradAccumulationAndAsyncCommunication saves the
    # input shard (`ctx.save_for_backward(input, weight)` before the all-gather) and all-gathers it again for the
    # weight gradient; Korthikanti et al. 2022, Table 2: "sbh/t"
    Layout("megatron", True, "Megatron: each column GEMM keeps its input's sequence shard, all-gathered again in "
                             "backward (Korthikanti et al. 2022)"),
    # torch's DTensor TP as torchtitan plans it (a33d0e3, torchtitan/models/llama3/infra/parallelize.py `apply_tp`:
    # PrepareModuleInput(Shard(1) -> Replicate()) before attention and feed_forward, ColwiseParallel on wq, wk, wv,
    # w1, w3): the redistribute's output is the linears' input, and autograd saves it whole
    Layout("torchtitan", False, "torch DTensor TP as torchtitan plans it: each column GEMM keeps its all-gathered "
                                "input (autograd saves the redistribute's output)"),
)}
DEFAULT_LAYOUT = "megatron"  # the library's default; the commands pick by framework (torchtitan's for FSDP's schedule)

REFUSED_CHECKPOINTS = {  # checkpointing TP's units cannot run -> why (the planner leaves these strategies out)
    "subblock": "checkpoint='subblock' keeps each sub-block's input, which beside tensor parallelism is a bundle of "
                "the residual stream and a partial sum: use 'block' or 'every-k'",
    "op-sac": "op-level selective checkpointing ('op-sac') keeps every other matmul's output by op, and a TP rank's "
              "units are not split by op: use 'block' (torchtitan's 'full', what its TP runs use) or 'none'",
}


def check_checkpoint(checkpoint: str | None) -> None:
    """Refuse a checkpointing scheme tensor parallelism's units cannot run (REFUSED_CHECKPOINTS), saying why."""
    if checkpoint in REFUSED_CHECKPOINTS:
        raise ValueError(REFUSED_CHECKPOINTS[checkpoint])


def check_splits(full, tp: int) -> None:
    """Refuse, as Megatron does, a model whose heads, key/value heads, FFN width or vocabulary do not split over T."""
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if type(full) not in FAMILIES:
        raise TypeError(f"tensor parallelism splits zerosim's GPT and Llama, got {type(full).__name__}")
    _divides("n_heads", full.n_heads, tp)
    if isinstance(full, Llama):
        _divides("n_kv_heads", full.n_kv_heads, tp, " (Megatron divides num_query_groups by T)")
        _divides("d_ff", full.d_ff, tp)
    _divides("vocab", full.vocab, tp, f": pad it as Megatron does, e.g. vocab={padded_vocab(full.vocab, tp)} "
                                      "(zerosim.parallel.tensor.padded_vocab)")


class TensorParallelModel(Decoder):
    """One TP rank's units of `full` (a GPT or a Llama) at degree `tp`, with or without sequence parallelism (module
    docstring). `sources[(unit, name)]` = ((block, name) in `full`, rule): where each parameter comes from."""

    def __init__(self, full, tp: int, sequence_parallel: bool = False, layout: str = "megatron"):
        check_splits(full, tp)
        check_checkpoint(full.checkpoint)
        check_units(full.unit, full.checkpoint)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {tuple(LAYOUTS)} (what a TP rank keeps for backward), got "
                             f"{layout!r}")
        # the column GEMMs keep their (gathered) input, unless Megatron's SP keeps the shard and gathers it again
        saves = not sequence_parallel or not LAYOUTS[layout].keeps_shard
        layers, sources = FAMILIES[type(full)](full, tp, saves)
        first = 2 if isinstance(full, GPT) else 1  # the embedding's units
        per_block = [(first + UNITS_PER_BLOCK * i, first + UNITS_PER_BLOCK * (i + 1)) for i in range(full.n_layers)]
        blocks = _blocks(per_block, len(layers), first, full.checkpoint)
        super().__init__(layers, VocabParallelCrossEntropy(), checkpoint_blocks=blocks,
                         saved_blocks=saved_blocks(blocks))
        self.full, self.tp, self.sequence_parallel, self.sources = full, tp, sequence_parallel, sources
        self.layout = layout
        # what FSDP wraps as one unit: each transformer block's five units (torchtitan's apply_fsdp calls fully_shard
        # on every TransformerBlock, TP inside it), the embedding's, the final norm and head
        self.wrap_units = [(0, first), *per_block, (len(layers) - 2, len(layers))]
        self.vocab, self.d_model, self.n_heads, self.n_layers, self.seq_len = (
            full.vocab, full.d_model, full.n_heads, full.n_layers, full.seq_len)
        self.attention, self.checkpoint, self.unit = full.attention, full.checkpoint, "tensor parallel"
        self.family = "gpt" if isinstance(full, GPT) else "llama"

    def check_batch(self, x, target) -> None:
        super().check_batch(x, target)  # token ids of the whole vocabulary
        L = np.asarray(x).shape[1]
        if self.sequence_parallel and L % self.tp:
            raise ValueError(f"sequence parallelism cuts each sequence's {L} tokens over tp = {self.tp} ranks: the "
                             "length must be a multiple of tp (Megatron asserts the same)")

    def __repr__(self) -> str:
        sp = ", sequence parallel" if self.sequence_parallel else ""
        layout = "" if self.layout == "megatron" else f", layout={self.layout!r}"
        return f"TensorParallelModel({self.full!r}, tp={self.tp}{sp}{layout}, P per rank={self.num_params})"


def _blocks(per_block: list, n_units: int, first: int, checkpoint: str) -> list:
    """Checkpoint blocks: the embedding's units, the transformer blocks (k at a time with "every-k"), the final norm
    and the head — every block's input a plain activation; the first and the last are not recomputed
    (models/_decoder.py `saved_blocks`)."""
    if checkpoint == "every-k":
        k = every_k(len(per_block))
        per_block = [(per_block[i][0], per_block[min(i + k, len(per_block)) - 1][1])
                     for i in range(0, len(per_block), k)]
    return [(0, first), *per_block, (n_units - 2, n_units)]


def padded_model(full, tp: int, multiple: int | None = None):
    """`full` (a GPT or Llama, or its meta twin) with its vocabulary padded as Megatron pads it (_vocab.padded_vocab:
    up to a multiple of multiple·T, Megatron's default 128), or `full` itself when the vocabulary splits already and
    no multiple is asked for. The extra rows are new tokens no data uses (Megatron's "dummy tokens")."""
    twin = getattr(full, "gpt", None)
    model = full if twin is None else twin
    if multiple is None and model.vocab % tp == 0:
        return full
    vocab = padded_vocab(model.vocab, tp, MEGATRON_VOCAB_MULTIPLE if multiple is None else multiple)
    if vocab == model.vocab:
        return full
    if isinstance(model, GPT):
        new = GPT(vocab, model.d_model, model.n_heads, model.n_layers, model.seq_len, model.unit, model.activation,
                  model.attention, model.checkpoint, _flash_block(model))
    else:
        new = Llama(vocab, model.d_model, model.n_heads, model.n_layers, model.seq_len, model.d_ff, model.n_kv_heads,
                    model.head_dim, model.rope_theta, model.rms_eps, model.qkv_bias, model.o_bias, model.unit,
                    model.attention, model.checkpoint, _flash_block(model))
    if twin is None:
        return new
    return type(full)(new, **({"tied_head": full.tied_head} if hasattr(full, "tied_head") else {}),
                      name=f"{full.name}, vocabulary padded to {vocab:,}")
