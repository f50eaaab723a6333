"""The vocabulary split over the TP ranks: the token embedding's rows and the LM head's rows, V/T each.

Letters: B batch, L sequence length, d model width, V the (padded) vocabulary, T the TP degree; rank r owns tokens
[r·V/T, (r+1)·V/T).

    Embedding   ids (B, L), shifted by the rank's first token (the parallelism does it: it knows the rank) ->
                rows of the rank's wte_r for its own tokens, exact zeros for the others: a partial sum with one
                non-zero term per token, so the all-reduce after it is exact. The GPT's position table is whole on
                every rank and travels beside: Bundle(wpe[:L], tokens), added after the reduce (_replicated.Add).
    Head        logits_r = h W_head,rᵀ (B, L, V/T): a column-parallel GEMM whose output stays split, for the
                vocabulary-parallel cross-entropy (_cross_entropy.py)

Megatron-LM core_v0.19.0, megatron/core/tensor_parallel/layers.py, `VocabParallelEmbedding.forward`: input_mask =
(input_ < vocab_start_index) | (input_ >= vocab_end_index); masked_input = input_ - vocab_start_index, 0 where masked;
output_parallel[input_mask, :] = 0.0; then `reduce_from_tensor_model_parallel_region` (or, sequence parallel without
position embeddings, `reduce_scatter_to_sequence_parallel_region`). megatron/core/models/common/embeddings/
language_model_embedding.py adds the position embeddings after the word embeddings' reduce and, sequence parallel,
`scatter_to_sequence_parallel_region`s the sum. The output layer is a ColumnParallelLinear with gather_output=False
(megatron/core/models/gpt/gpt_model.py) feeding vocab_parallel_cross_entropy. The vocabulary must split evenly:
Megatron pads it (megatron/core/tokenizers/utils/build_tokenizer.py, `vocab_size_with_padding`: up to a multiple of
make_vocab_size_divisible_by (default 128) × T); `padded_vocab` below is that rule.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models.layers import Layer, acc_dtype, linear_flops, tokens_linear_backward, tokens_linear_forward
from zerosim.parallel.tensor._bundle import Bundle
from zerosim.parallel.tensor._layers import token_rows
from zerosim.precision import cast, get_format

MEGATRON_VOCAB_MULTIPLE = 128  # megatron/training/arguments.py: --make-vocab-size-divisible-by's default


def padded_vocab(vocab: int, tp: int, multiple: int = MEGATRON_VOCAB_MULTIPLE) -> int:
    """Megatron's `vocab_size_with_padding`: V rounded up to a multiple of multiple·T (GPT-2's 50,257 at T = 1 and
    the default 128: 50,304; torchtitan does not pad, its Llama 3 vocabulary of 128,256 splits over 8 already)."""
    step = multiple * tp
    return int(math.ceil(vocab / step) * step)


def owned(ids, vocab_r: int):
    """(B, L) bool: the shifted ids this rank owns, those in [0, V/T)."""
    return (ids >= 0) & (ids < vocab_r)


class Embedding(Layer):
    """The rank's V/T rows of the token table (`table`: "wte" or "embed_tokens"), and the GPT's whole position table
    "wpe" when `positions` is its length (module docstring)."""

    saves_input_only = True  # cache == {"input": the shifted ids}
    role = "vocab"

    def __init__(self, vocab: int, d: int, tp: int, table: str = "wte", positions: int | None = None,
                 name: str = "embed"):
        super().__init__(name)
        self.vocab, self.d, self.tp, self.table, self.positions = vocab // tp, d, tp, table, positions  # vocab: V/T
        self.param_shapes = {table: (self.vocab, d)} | ({"wpe": (positions, d)} if positions else {})

    def forward(self, p, x, fmt):
        """x: the shifted ids (B, L), or ids beside their positions (`x.value`, `x.positions`: a context-parallel
        rank's shard of the sequence, parallel/context/), kept as given."""
        f = get_format(fmt)
        ids, at = getattr(x, "value", x), getattr(x, "positions", None)
        mine = owned(ids, self.vocab)
        tokens = cast(p[self.table][np.where(mine, ids, 0)], f)  # (B, L, d) fmt: a gather, exact
        tokens[~mine] = 0  # Megatron's output_parallel[input_mask, :] = 0.0
        if not self.positions:
            return tokens, {"input": x}
        rows = p["wpe"][:ids.shape[1]] if at is None else p["wpe"][at]
        pos = np.broadcast_to(cast(rows, f), tokens.shape).copy()  # (B, L, d) fmt, every rank
        return Bundle(pos, tokens), {"input": x}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        acc = acc_dtype(f)
        at = getattr(cache["input"], "positions", None)
        ids = getattr(cache["input"], "value", cache["input"])
        d_tokens = dy.value if self.positions else dy
        mine = owned(ids, self.vocab).reshape(-1)
        dwte = np.zeros((self.vocab, self.d), acc)  # (V/T, d) acc: the rank's own tokens, in (b, t) order
        np.add.at(dwte, ids.reshape(-1)[mine], d_tokens.astype(acc).reshape(-1, self.d)[mine])
        grads = {self.table: cast(dwte, f)}
        if self.positions:
            dwpe = np.zeros((self.positions, self.d), acc)
            dwpe[slice(0, ids.shape[1]) if at is None else at] = dy.residual.astype(acc).sum(axis=0, dtype=acc)
            grads["wpe"] = cast(dwpe, f)
        return None, grads

    def saved_spec(self, x_shape, fmt, ids_dtype=np.int64) -> dict:
        return {"input": (tuple(x_shape), np.dtype(ids_dtype))}

    def output_shape(self, x_shape):
        return (*x_shape, self.d)

    def flops(self, x_shape, kind):
        tokens = int(np.prod(x_shape, dtype=np.int64))
        # forward a gather (0); backward a scatter-add per element, and the position table's sum over the batch
        return 0 if kind == "forward" else tokens * self.d * (2 if self.positions else 1)


class Head(Layer):
    """The rank's V/T rows of the LM head (`table`: "w_head" or "lm_head"): logits of its own tokens."""

    saves_input_only = False
    role = "column"
    input_name = "head input"

    def __init__(self, d: int, vocab: int, tp: int, table: str = "w_head", name: str = "head",
                 saves_input: bool = True):
        super().__init__(name)
        self.d, self.vocab, self.tp, self.table, self.saves_input = d, vocab // tp, tp, table, saves_input
        self.param_shapes = {table: (self.vocab, d)}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        logits = tokens_linear_forward(x, p[self.table], None, f)  # (B, L, V/T) fmt
        return logits, ({self.input_name: x} if self.saves_input else {})

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        h, dlogits = (cache[self.input_name], dy) if self.saves_input else (dy.input, dy.value)
        dh, dw, _ = tokens_linear_backward(dlogits, h, p[self.table], f)
        return dh, {self.table: dw}  # dh: this rank's partial (f reduces it)

    def saved_spec(self, x_shape, fmt) -> dict:
        return {self.input_name: (tuple(x_shape), get_format(fmt).dtype)} if self.saves_input else {}

    def output_shape(self, x_shape):
        return (*x_shape[:-1], self.vocab)

    def flops(self, x_shape, kind):
        B, L = token_rows(x_shape)
        return linear_flops(B * L, self.d, self.vocab, kind, bias=False)
