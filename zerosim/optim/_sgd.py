"""SGD, with optional heavy-ball momentum in PyTorch's convention (dampening 0, no Nesterov).

One step, in w.dtype (c(x): x rounded once to w.dtype, see _base.py):

    momentum == 0:  update = c(lr)*g                        no state at all (seed 001: "zero overhead")
    momentum  > 0:  b = c(mu)*b + g;  update = c(lr)*b      state "b", one buffer
    w = w - update

PyTorch starts the buffer as a copy of the first gradient; ours starts at zero, and mu*0 + g = g,
so the first step is the same (up to the sign of a zero gradient).
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.optim._base import Optimizer, check_nonneg, scalar


@dataclass(frozen=True)
class SGD(Optimizer):
    """Stochastic gradient descent; `record` keys: "b" (with momentum) and "update"."""

    lr: float = 1e-3  # PyTorch's default
    momentum: float = 0.0  # mu; 0 means plain SGD and no optimizer state

    name = "sgd"

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.momentum, "momentum")
        if self.momentum >= 1:
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum!r}")

    @property
    def state_names(self) -> tuple:
        return ("b",) if self.momentum else ()

    def _update(self, w, g, s, t, record, first_step=1):  # first_step: only DeepSpeed's CPU Adam reads it
        lr = scalar(self.lr, w.dtype)
        if self.momentum:
            b = s["b"]
            b *= scalar(self.momentum, w.dtype)
            b += g
            update = lr * b
        else:
            update = lr * g
        w -= update
        if record is not None:
            record.update(update=update, **({"b": s["b"].copy()} if self.momentum else {}))
