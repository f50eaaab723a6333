"""Losses: half mean squared error and softmax cross-entropy, each a forward/backward pair.

Letters: B batch, D_out outputs (C classes for cross-entropy).

Precision: the loss and dL/dy are computed in fp32 (float64 when y is float64), from y widened
exactly. dy = cast(scale * (dL/dy), fmt): one rounding to the compute format, after the loss scale
is applied (a power-of-two scale multiplies exactly, so it only moves small values out of fp16's
subnormal range — the point of loss scaling).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.models._spaces import space_of
from zerosim.models.layers._basic import acc_dtype
from zerosim.precision import cast, format_of, get_format
from zerosim.precision.arithmetic import arithmetic_of


def _acc_of(y: np.ndarray) -> type:
    return acc_dtype(format_of(y))


class Loss:
    """forward(y, target, fmt) -> (loss: float, cache {name: array});  backward(cache, fmt, scale=1.0) -> dy in fmt.

    forward's `fmt` is the compute format, for the kernels it names (`Format.arithmetic`); None: y's format.
    """

    name = "loss"
    # n ranks' predictions may go through as one batch of their rows (models/_stacked.py): `forward_ranks` gives each
    # rank's loss as its own forward does, `backward_ranks` each row's dy
    rows_apart: bool = False
    # `rows_apart` holds for predictions of any rank, its rows the slices along axis 0 (an LM's (B, L, V) logits); else
    # for 2-D ones only
    rows_apart_nd: bool = False
    # `check_target` decides row by row: a (batch, ...) target passes exactly where each of its rows would, so n ranks'
    # targets of one shape and dtype pass where their stack does (parallel/data/_batches.py asks the stack once)
    targets_rows_apart: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("rows_apart"):  # what the declaration vouches for: these, not an override or a patch
            cls._rows_apart_for = (cls.forward, cls.backward, cls.forward_ranks, cls.backward_ranks)
        if cls.__dict__.get("targets_rows_apart"):
            cls._targets_rows_apart_for = cls.check_target

    def checks_rows(self) -> bool:
        """`targets_rows_apart`, with `check_target` still the one it was declared for (an override or a patch is
        asked rank by rank)."""
        return (self.targets_rows_apart and type(self).check_target is getattr(type(self), "_targets_rows_apart_for",
                                                                                None)
                and "check_target" not in self.__dict__)

    def stacks_rows(self) -> bool:
        """`rows_apart`, with the methods still the ones it was declared for (a patched or overridden forward or
        backward runs rank by rank)."""
        cls = type(self)
        return (self.rows_apart and (cls.forward, cls.backward, cls.forward_ranks, cls.backward_ranks)
                == getattr(cls, "_rows_apart_for", None) and not {"forward", "backward"} & self.__dict__.keys())

    def forward_ranks(self, y, target, fmt, n: int) -> tuple[list, dict]:
        """`forward` for n ranks' predictions and targets stacked row by row: ([each rank's loss], cache by rows)."""
        raise NotImplementedError(f"{type(self).__name__} has no forward for stacked ranks")

    def backward_ranks(self, cache: dict, fmt, n: int, scale: float = 1.0):
        """`backward` of `forward_ranks`'s cache: dy with its rows, rank r's as its own backward gives them."""
        raise NotImplementedError(f"{type(self).__name__} has no backward for stacked ranks")

    def forward(self, y: np.ndarray, target: np.ndarray, fmt=None) -> tuple[float, tuple]:
        raise NotImplementedError

    def backward(self, cache: dict, fmt, scale: float = 1.0) -> np.ndarray:
        raise NotImplementedError

    def flops(self, y_shape: tuple) -> int:
        """Operations of the loss's forward and backward together, for the compute events (a few per element)."""
        return 4 * math.prod(y_shape)

    def check_target(self, target, batch: int, outputs: int) -> None:
        """Raise ValueError saying what is wrong if `target` cannot be this loss's target for a
        (batch, outputs) prediction (called before anything runs, so nothing is half-done)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HalfMSE(Loss):
    """L = 0.5 * mean over the batch of sum over outputs (y - t)^2; one sample gives seed 004's 0.5 (y - t)^2."""

    name = "mse"
    rows_apart = True
    targets_rows_apart = True  # its shape (batch, outputs), a numeric dtype, every element finite: row by row

    def check_target(self, target, batch, outputs):
        t = np.asarray(target)
        if t.shape != (batch, outputs):
            raise ValueError(f"half-MSE needs targets of shape (batch, outputs) = ({batch}, {outputs}), got {t.shape}")
        if t.dtype.kind not in "iuf" and t.dtype.name != "bfloat16":
            raise ValueError(f"half-MSE needs numeric targets, got dtype {t.dtype}")
        if not (np.isfinite(t).all() if t.dtype in (np.float32, np.float64) else
                np.all(np.isfinite(t.astype(np.float64)))):  # finite in float32 is finite in float64
            raise ValueError("the targets contain NaN or inf")

    def forward(self, y, target, fmt=None):
        acc = _acc_of(y)
        diff = y.astype(acc) - cast(target, acc).reshape(y.shape)  # (B, D_out) in acc; the cache
        loss = 0.5 * np.sum(diff * diff, dtype=acc) / y.shape[0]
        return float(loss), {"y - t": diff}

    def backward(self, cache, fmt, scale=1.0):
        diff = cache["y - t"]
        g = diff / diff.dtype.type(diff.shape[0])  # dL/dy = (y - t) / B, in acc
        return cast(g * diff.dtype.type(scale), get_format(fmt))

    def forward_ranks(self, y, target, fmt, n):
        acc = _acc_of(y)
        diff = y.astype(acc) - cast(target, acc).reshape(y.shape)  # (n·B, D_out) in acc, elementwise: each rank's own
        rows = y.shape[0] // n
        # each rank's sum over its own (B, D_out) rows as its `forward` makes it: NumPy sums a contiguous block whole
        # (its axes coalesced) in one pairwise pass, and each row of the (n, B·D_out) squares alike, in one call for
        # all n (a call per rank was ~0.3 ms of benchmarks/yardstick.py's small step); then 0.5·s / B in acc per rank,
        # as its own scalar arithmetic rounds it (tests/test_stacked_ranks.py: every rank's bits, blocks of up to
        # 10k elements)
        squares = diff * diff  # (n·B, D_out) contiguous
        sums = np.sum(squares.reshape(n, -1), axis=1, dtype=acc)  # (n,) in acc
        return (0.5 * sums / rows).tolist(), {"y - t": diff}

    def backward_ranks(self, cache, fmt, n, scale=1.0):
        diff = cache["y - t"]
        g = diff / diff.dtype.type(diff.shape[0] // n)  # dL/dy = (y - t) / B, B a rank's rows
        return cast(g * diff.dtype.type(scale), get_format(fmt))


class SoftmaxCrossEntropy(Loss):
    """L = mean over the batch of -log softmax(y)[label]; targets are integer labels (B,)."""

    name = "xent"

    def check_target(self, target, batch, outputs):
        t = np.asarray(target)
        if t.shape != (batch,) or t.dtype.kind not in "iu":
            raise ValueError(f"cross-entropy needs integer class labels of shape ({batch},), got {t.dtype} {t.shape}")
        if batch and (t.min() < 0 or t.max() >= outputs):
            raise ValueError(f"class labels must lie in [0, {outputs}), got {t.min()}..{t.max()}")

    def forward(self, y, target, fmt=None):
        terms, cache = self.row_losses(y, target, fmt)
        return float(np.mean(terms, dtype=_acc_of(y))), cache

    def row_losses(self, y, target, fmt=None) -> tuple:
        """(each row's −log softmax(y)[label] (B,) in acc, the cache): `forward`'s loss before its mean over the rows,
        each row's its own (a max, a sum and a log over that row alone)."""
        acc, ops = _acc_of(y), arithmetic_of(format_of(y) if fmt is None else get_format(fmt))
        t = target if hasattr(target, "astype") else np.asarray(target)  # an array stays where it lives (a device)
        labels = t.astype(np.int64).reshape(y.shape[0])  # (B,)
        z = y.astype(acc)
        z = z - z.max(axis=1, keepdims=True)  # shift so exp cannot overflow; softmax is unchanged
        e = ops.exp(z)  # (B, C)
        s = e.sum(axis=1, keepdims=True, dtype=acc)  # (B, 1)
        rows = space_of(z).arange(y.shape[0])  # made where z lives (a device indexes with its own arrays)
        return ops.log(s[:, 0]) - z[rows, labels], {"probabilities": e / s, "labels": labels}  # (B, C) acc, (B,) int64

    def backward(self, cache, fmt, scale=1.0):
        p = cache["probabilities"]
        return self._scaled(p, cache["labels"], p.shape[0], fmt, scale)

    @staticmethod
    def _scaled(p, labels, rows: int, fmt, scale: float):
        """dy = cast(scale · (softmax(y) − onehot(label)) / rows, fmt): the mean's gradient over `rows` rows (a rank's
        own, where p holds several ranks' rows), elementwise in acc."""
        g = p.copy()
        g[space_of(g).arange(len(labels)), labels] -= 1
        g = g / p.dtype.type(rows)
        return cast(g * p.dtype.type(scale), get_format(fmt))


LOSSES = {"mse": HalfMSE, "xent": SoftmaxCrossEntropy}


def get_loss(name: "str | Loss") -> Loss:
    """A loss by name: "mse" (half MSE) or "xent" (softmax cross-entropy); a `Loss` passes through."""
    if isinstance(name, Loss):
        return name
    try:
        return LOSSES[name]()
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}") from None
