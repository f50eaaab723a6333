"""Token + position embedding: a forward/backward pair and the Embedding unit (a ZeRO unit of its own).

Letters: B batch, L sequence length (L <= L_max, the longest the position table holds), d model
width, V vocabulary.

    forward   y[b, t] = cast(wte[ids[b, t]] + wpe[t], fmt)      the two fmt values added in acc, rounded once
    backward  dwte[v] = Σ_{(b,t): ids[b,t] = v} dy[b, t]        a scatter-add, accumulated in acc ...
              dwpe[t] = Σ_b dy[b, t]                            ... and rounded once to fmt each

Saved: the token ids, and only they ({"input": ids}: the weights come back for backward). There is
no gradient with respect to integer ids, so backward returns dx = None.
"""

from __future__ import annotations

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models._spaces import zeros_like_space
from zerosim.models.layers import Layer, acc_dtype, token_places, written_into
from zerosim.precision import cast, get_format


def embedding_forward(ids: np.ndarray, wte: np.ndarray, wpe: np.ndarray, fmt,
                      positions=None) -> tuple[np.ndarray, tuple]:
    """ids (B, L) integers, wte (V, d), wpe (L_max, d) -> (y (B, L, d) in fmt, (ids,)). `positions` (L,): where the
    tokens sit in their sequence (context parallelism's shard of it: parallel/context/); default 0 .. L−1."""
    acc = acc_dtype(get_format(fmt))
    L = ids.shape[1]
    rows = wpe[:L] if positions is None else wpe[positions]
    y = wte.astype(acc)[ids] + rows.astype(acc)  # (B, L, d) acc
    return cast(y, fmt), (ids,)


def embedding_backward(dy: np.ndarray, cache: tuple, vocab: int, max_len: int, fmt,
                       positions=None, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(dwte (V, d), dwpe (L_max, d)) in fmt; rows of wpe no token sits at get exact zeros. `n`: dy and the ids hold
    n ranks' micro-batches stacked along axis 0 (models/_stacked.py), and the tables are each rank's own, (n, V, d)
    and (n, L_max, d): every rank's tokens scattered into its own table, in its own (b, t) order."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    (ids,) = cache
    B, L, d = dy.shape
    ranks = () if n is None else (n,)
    dy_acc = dy.astype(acc)
    tokens = ids.reshape(-1)  # (B·L,) in (b, t) order: rank by rank where stacked
    dwte = zeros_like_space(dy, (*ranks, vocab, d), acc)  # ((n,) V, d) acc, where dy lives
    if isinstance(dwte, np.ndarray):
        # tokens in (b, t) order, like a sequential scatter (np.add.at adds one index after another, unbuffered);
        # stacked, each at (its rank, its token): rank r's table meets its own tokens alone, in their order
        np.add.at(dwte, token_places(ids, n), dy_acc.reshape(-1, d))
    else:  # a device: the same adds in the same order (its atomic scatter-add would add in any order)
        rows = dy_acc.reshape(-1, d)
        for j, token in enumerate(tokens.get().tolist()):
            dwte[token if n is None else (j * n // tokens.size, token)] += rows[j]
    dwpe = zeros_like_space(dy, (*ranks, max_len, d), acc)  # ((n,) L_max, d) acc
    at = slice(0, L) if positions is None else positions
    if n is None:
        dwpe[at] = dy_acc.sum(axis=0, dtype=acc)
    else:  # each rank's sum over its own sequences, row after row as its own call adds them
        dwpe[:, at] = dy_acc.reshape(n, -1, L, d).sum(axis=1, dtype=acc)
    return cast(dwte, f), cast(dwpe, f)


class Embedding(Layer):
    """Token table "wte" (V, d) and learned position table "wpe" (L_max, d), GPT-2 style."""

    saves_input_only = True  # cache == {"input": ids}
    rows_apart = True  # each sequence's tokens alone; ids (B, L) are 2-D, a context-parallel rank's wrapped (the loop)
    rows_apart_nd = True

    def __init__(self, vocab: int, max_len: int, d: int, name: str = "embed"):
        super().__init__(name)
        self.vocab, self.max_len, self.d = vocab, max_len, d
        self.param_shapes = {"wte": (vocab, d), "wpe": (max_len, d)}

    def forward(self, p, x, fmt):
        """x: token ids (B, L), or ids beside their positions (`x.value`, `x.positions`: a context-parallel rank's
        shard of the sequence, parallel/context/_records.py), kept as given."""
        y, _ = embedding_forward(getattr(x, "value", x), p["wte"], p["wpe"], fmt, getattr(x, "positions", None))
        return y, {"input": x}

    def backward(self, p, dy, cache, fmt):
        x = cache["input"]
        dwte, dwpe = embedding_backward(dy, (getattr(x, "value", x),), self.vocab, self.max_len, fmt,
                                        getattr(x, "positions", None))
        return None, {"wte": dwte, "wpe": dwpe}

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        x = cache["input"]
        dwte, dwpe = embedding_backward(dy, (getattr(x, "value", x),), self.vocab, self.max_len, fmt,
                                        getattr(x, "positions", None), n)
        return None, written_into(out, {"wte": dwte, "wpe": dwpe})

    def saved_spec(self, x_shape, fmt, ids_dtype=np.int64) -> dict:
        """{"input": ((B, L), ids_dtype)}: the ids as given (the driver passes integers uncast)."""
        return {"input": (tuple(x_shape), np.dtype(ids_dtype))}

    def output_shape(self, x_shape):
        return (*x_shape, self.d)  # (B, L) ids -> (B, L, d)

    def flops(self, x_shape, kind):
        tokens = int(np.prod(x_shape, dtype=np.int64))  # B·L
        # forward: one add per output element; backward: one scatter-add into wte and one add into wpe per element
        return tokens * self.d * (1 if kind == "forward" else 2)

    def init(self, rng):
        return {k: (INIT_STD * rng.standard_normal(s)).astype(np.float32) for k, s in self.param_shapes.items()}
