"""The Llama's token embedding: no position table (rotary encodes positions in attention); a ZeRO unit of its own.

Letters: B batch, L sequence length, d model width, V vocabulary. Hugging Face transformers,
models/llama/modeling_llama.py: `LlamaModel.embed_tokens` (V, d).

    embedding   y = wte[ids]  (an exact copy of fmt values)      backward: dwte[v] = Σ_{ids = v} dy  (acc, one rounding)
"""

from __future__ import annotations

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import Layer, acc_dtype, token_places, written_into
from zerosim.precision import cast, get_format


def token_embedding_forward(ids: np.ndarray, wte: np.ndarray, fmt) -> np.ndarray:
    """ids (B, L) integers, wte (V, d) -> y (B, L, d) in fmt: a gather, exact when wte is already in fmt."""
    return cast(wte[ids], fmt)


def token_embedding_backward(dy: np.ndarray, ids: np.ndarray, vocab: int, fmt, n: int | None = None) -> np.ndarray:
    """dwte (V, d) in fmt: a scatter-add of dy (B, L, d) in acc over tokens in (b, t) order, rounded once. `n`: dy
    and the ids hold n ranks' micro-batches stacked along axis 0, and dwte is (n, V, d), each rank's own table (its
    tokens alone, in their order: np.add.at at (rank, token), as the GPT's embedding scatters)."""
    acc = acc_dtype(get_format(fmt))
    d = dy.shape[-1]
    dwte = np.zeros((vocab, d) if n is None else (n, vocab, d), acc)  # ((n,) V, d) acc
    np.add.at(dwte, token_places(ids, n), dy.astype(acc).reshape(-1, d))
    return cast(dwte, fmt)


class TokenEmbedding(Layer):
    """ "embed_tokens" (V, d): token ids (B, L) -> (B, L, d). Saves the ids."""

    saves_input_only = True  # cache == {"input": ids}
    rows_apart = rows_apart_nd = True  # each sequence's tokens alone; a context-parallel rank's ids wrapped (the loop)

    def __init__(self, vocab: int, d: int, name: str = "embed"):
        super().__init__(name)
        self.vocab, self.d = vocab, d
        self.param_shapes = {"embed_tokens": (vocab, d)}

    def forward(self, p, x, fmt):
        return token_embedding_forward(x, p["embed_tokens"], fmt), {"input": x}

    def backward(self, p, dy, cache, fmt):
        return None, {"embed_tokens": token_embedding_backward(dy, cache["input"], self.vocab, fmt)}

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        return None, written_into(out, {"embed_tokens": token_embedding_backward(dy, cache["input"], self.vocab, fmt,
                                                                                 n)})

    def saved_spec(self, x_shape, fmt, ids_dtype=np.int64) -> dict:
        """{"input": ((B, L), ids_dtype)}: the ids as given (the driver passes integers uncast)."""
        return {"input": (tuple(x_shape), np.dtype(ids_dtype))}

    def output_shape(self, x_shape):
        return (*x_shape, self.d)  # (B, L) ids -> (B, L, d)

    def flops(self, x_shape, kind):
        # forward: a gather (no arithmetic: counted 0); backward: one scatter-add per element
        return 0 if kind == "forward" else int(np.prod(x_shape, dtype=np.int64)) * self.d

    def init(self, rng):
        return {"embed_tokens": (INIT_STD * rng.standard_normal((self.vocab, self.d))).astype(np.float32)}
