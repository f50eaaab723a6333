"""Cross-entropy over a vocabulary split across the TP ranks: each rank holds the logits of its V/T tokens.

Letters: B batch, L sequence length, V vocabulary, T the TP degree; M = B·L rows. Megatron-LM core_v0.19.0,
megatron/core/tensor_parallel/cross_entropy.py, `_VocabParallelCrossEntropy.forward`:

    logits_max   the row max of the rank's logits in fp32           all-reduce MAX over the TP group
    predicted    logits[target] − max where the rank owns target, 0 elsewhere      all-reduce SUM
    sum_exp      Σ exp(logits − max) over the rank's columns, fp32                  all-reduce SUM
    loss         log(sum_exp) − predicted;  softmax = exp(logits − max) / sum_exp  (kept for backward)
    backward     softmax − onehot(target) on the owning rank's column, times dL: no communication

The three statistics are computed here (`row_max`, `row_sums`), their all-reduces by the parallelism before the
loss op (_parallelism.py), which hands the loss a `VocabTarget` in place of the labels. The loss then is the mean
over the M rows, and dy = cast(scale · (softmax − onehot) / M, fmt), as the unsplit LMCrossEntropy's
(models/layers/_lm_loss.py): the same formulas, with the vocabulary's sums taken per rank and then across ranks in
the ring's order (in fp32, as Megatron's `.float()` logits). Every rank ends with the same loss.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models.layers import LMCrossEntropy, acc_dtype
from zerosim.models.meta import like, loss_spec
from zerosim.parallel.tensor._vocab import owned
from zerosim.precision import cast, format_of, get_format
from zerosim.precision.arithmetic import arithmetic_of


@dataclass(frozen=True)
class VocabTarget:
    """What the vocabulary-parallel loss reads in place of the labels: the rank's shifted labels (B, L) and the
    three statistics all-reduced over the TP group, (M,) fp32 each."""

    labels: object  # (B, L) int64: target − the rank's first token (outside [0, V/T): another rank's)
    logits_max: object  # (M,) fp32: max over the whole vocabulary
    predicted: object  # (M,) fp32: logits[target] − max
    sum_exp: object  # (M,) fp32: Σ exp(logits − max) over the whole vocabulary

    @property
    def shape(self) -> tuple:
        return tuple(self.labels.shape)


def _acc(y):
    return acc_dtype(format_of(y))


def _ops(y, fmt):
    """The kernels exp and log run on: the compute format's (the policy's choice), else the portable ones."""
    return arithmetic_of(format_of(y) if fmt is None else get_format(fmt))


def _rows(y):
    """(M, V/T) logits widened to acc (fp32; float64 under fp64)."""
    return y.astype(_acc(y)).reshape(-1, y.shape[-1])


def row_max(y):
    """(M,) the rank's row max in acc: Megatron's `calculate_logits_max`."""
    if getattr(y, "is_meta", False):
        return like(y, (int(np.prod(y.shape[:-1])),), np.dtype(_acc(y)))
    return _rows(y).max(axis=1)


def row_sums(y, labels, logits_max, fmt=None) -> tuple:
    """((M,) predicted, (M,) sum_exp) on this rank: Megatron's `calculate_predicted_logits`, before its two
    all-reduces (predicted is 0 where another rank owns the target). exp runs on the kernels of `fmt`, the compute
    format (precision/arithmetic/: the portable ones unless the policy chose "native")."""
    if getattr(y, "is_meta", False):
        m = like(y, (int(np.prod(y.shape[:-1])),), np.dtype(_acc(y)))
        return m, like(m, m.shape, m.dtype)
    z = _rows(y) - logits_max[:, None]
    flat = labels.reshape(-1)
    mine = owned(flat, z.shape[1])
    predicted = np.zeros(z.shape[0], z.dtype)
    predicted[mine] = z[np.flatnonzero(mine), flat[mine]]
    return predicted, _ops(y, fmt).exp(z).sum(axis=1, dtype=z.dtype)


class VocabParallelCrossEntropy(LMCrossEntropy):
    """The mean over B·L positions of log(sum_exp) − predicted, from the rank's (B, L, V/T) logits and the
    `VocabTarget` the parallelism built (module docstring)."""

    name = "vocab-parallel-xent"

    def __init__(self, variant: str = "probabilities"):
        self.variant = variant  # what the meta backend holds at the loss's peak (models/meta/_loss_peak.py)

    def spec(self, y_shape, y_dtype) -> dict:
        """{name: (shape, dtype)} held at the loss's peak for the rank's (B, L, V/T) logits: this kernel's own
        (Megatron's: the fp32 softmax, "probabilities"), or another implementation's on the rank's columns."""
        if self.variant == "probabilities":
            return self.saved_spec(y_shape, y_dtype)
        B, L, V = y_shape
        return loss_spec(self.variant, B, L, V, 1, acc_dtype(get_format(np.dtype(y_dtype))), loss_parallel=True)

    def forward(self, y, target, fmt=None):
        if getattr(y, "is_meta", False):  # shapes only (the meta backend)
            return float("nan"), {name: like(y, shape, dtype) for name, (shape, dtype)
                                   in self.spec(y.shape, y.dtype).items()}
        z = _rows(y) - target.logits_max[:, None]  # (M, V/T) acc
        ops = _ops(y, fmt)
        probabilities = ops.exp(z) / target.sum_exp[:, None]
        acc = z.dtype
        loss = np.mean(ops.log(target.sum_exp) - target.predicted, dtype=acc)
        return float(loss), {"probabilities": probabilities, "labels": np.asarray(target.labels, np.int64)}

    def backward(self, cache, fmt, scale=1.0):
        labels = cache["labels"]
        if getattr(labels, "is_meta", False):
            V = next(iter(cache.values())).shape[-1]
            return like(labels, (*labels.shape, V), get_format(fmt).dtype)
        p = cache["probabilities"]
        g = p.copy()  # dL/dy = (softmax - onehot) / M, the onehot on the rank that owns the target
        flat = labels.reshape(-1)
        mine = owned(flat, p.shape[1])
        g[np.flatnonzero(mine), flat[mine]] -= 1
        g = g / p.dtype.type(p.shape[0])
        return cast(g * p.dtype.type(scale), get_format(fmt)).reshape(*labels.shape, p.shape[-1])

    def __repr__(self) -> str:
        return "VocabParallelCrossEntropy()"
