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
from zerosim.models.layers import Layer, acc_dtype
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
                       positions=None) -> tuple[np.ndarray, np.ndarray]:
    """(dwte (V, d), dwpe (L_max, d)) in fmt; rows of wpe no token sits at get exact zeros."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    (ids,) = cache
    B, L, d = dy.shape
    dy_acc = dy.astype(acc)
    dwte = zeros_like_space(dy, (vocab, d), acc)  # (V, d) acc, where dy lives
    if isinstance(dwte, np.ndarray):
        np.add.at(dwte, ids.reshape(-1), dy_acc.reshape(-1, d))  # tokens in (b, t) order, like a sequential scatter
    else:  # a device: the same adds in the same order (its atomic scatter-add would add in any order)
        rows = dy_acc.reshape(-1, d)
        for j, token in enumerate(ids.reshape(-1).get().tolist()):
            dwte[token] += rows[j]
    dwpe = zeros_like_space(dy, (max_len, d), acc)  # (L_max, d) acc
    dwpe[slice(0, L) if positions is None else positions] = dy_acc.sum(axis=0, dtype=acc)
    return cast(dwte, f), cast(dwpe, f)


class Embedding(Layer):
    """Token table "wte" (V, d) and learned position table "wpe" (L_max, d), GPT-2 style."""

    saves_input_only = True  # cache == {"input": ids}

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
