"""Softmax cross-entropy over the vocabulary, the mean over all B·L token positions (next-token loss).

Letters: B batch, L sequence length, V vocabulary. The logits (B, L, V) are B·L rows of
losses.SoftmaxCrossEntropy, whose numerics this reuses unchanged: the loss and dL/dy in fp32 from
logits widened exactly, dy = cast(scale · (softmax − onehot) / (B·L), fmt). Its cache
{"probabilities": (B·L, V) fp32, "labels": (B, L) int64} is what a fused cross-entropy keeps.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.models.layers._losses import SoftmaxCrossEntropy
from zerosim.precision import get_format


class LMCrossEntropy(SoftmaxCrossEntropy):
    """L = mean over the B·L positions of −log softmax(logits[b, t])[target[b, t]]; targets (B, L) integers."""

    name = "lm-xent"
    rows_apart = rows_apart_nd = True  # each sequence's tokens alone: `forward_ranks`, `backward_ranks`
    targets_rows_apart = True  # (batch, L) integers in [0, V): each sequence's own

    def check_target(self, target, batch, outputs):
        """`batch` is B and `outputs` is V here; the target's length must be checked against the input's
        (GPT.check_batch)."""
        t = np.asarray(target)
        if t.ndim != 2 or t.shape[0] != batch or t.dtype.kind not in "iu":
            raise ValueError(f"the LM loss needs integer next-token targets of shape ({batch}, L), got {t.dtype} "
                             f"{t.shape}")
        if t.size and (t.min() < 0 or t.max() >= outputs):
            raise ValueError(f"target tokens must lie in [0, {outputs}), got {t.min()}..{t.max()}")

    def forward(self, y, target, fmt=None):
        B, L, V = y.shape
        t = target if hasattr(target, "reshape") else np.asarray(target)  # an array stays where it lives (a device)
        loss, cache = super().forward(y.reshape(B * L, V), t.reshape(B * L), fmt)
        return loss, {"probabilities": cache["probabilities"], "labels": cache["labels"].reshape(B, L)}

    def backward(self, cache, fmt, scale=1.0):
        labels = cache["labels"]  # (B, L): its shape gives dy's
        dy = super().backward({"probabilities": cache["probabilities"], "labels": labels.reshape(-1)}, fmt, scale)
        return dy.reshape(*labels.shape, dy.shape[-1])  # (B, L, V) fmt

    def forward_ranks(self, y, target, fmt, n):
        """Each rank's loss, the mean over its own B·L tokens as its `forward` takes it (NumPy sums each row of the
        (n, B·L) token losses as it sums one rank's (B·L,) alone: tests/test_stacked_gpt.py); the cache of the
        n·B·L rows, rank r's B·L rows the r-th block of each."""
        B, L, V = y.shape
        terms, cache = self.row_losses(y.reshape(B * L, V), target.reshape(B * L), fmt)  # (n·B·L,) acc
        losses = np.mean(terms.reshape(n, -1), axis=1, dtype=terms.dtype)  # (n,) acc
        return losses.tolist(), {"probabilities": cache["probabilities"], "labels": cache["labels"].reshape(B, L)}

    def backward_ranks(self, cache, fmt, n, scale=1.0):
        """dy of each rank's mean: (softmax − onehot) / (its own B·L tokens), elementwise."""
        labels = cache["labels"]  # (n·B, L)
        dy = self._scaled(cache["probabilities"], labels.reshape(-1), labels.size // n, fmt, scale)
        return dy.reshape(*labels.shape, dy.shape[-1])  # (n·B, L, V) fmt

    def saved_spec(self, y_shape, y_dtype) -> dict:
        """{name: (shape, dtype)} of exactly what forward keeps for logits of y_shape = (B, L, V) in y_dtype."""
        B, L, V = y_shape
        acc = np.dtype(acc_dtype(get_format(np.dtype(y_dtype))))  # fp32, or float64 under fp64
        return {"probabilities": ((B * L, V), acc), "labels": ((B, L), np.dtype(np.int64))}

    def __repr__(self) -> str:
        return "LMCrossEntropy()"
