"""Lion, "EvoLved Sign Momentum" (Chen et al., 2023, Algorithm 2): one momentum, a sign update.

One step, in this order, in w.dtype (c(x): x rounded once to w.dtype, see _base.py):

    c      = c(b1)*m + c(1-b1)*g             # interpolate momentum and gradient...
    u      = sign(c)                         # ...and keep only the sign: every |update| is lr (or 0)
    update = c(lr) * (u + c(wd)*w)           # decoupled weight decay inside, as the paper writes it
    w      = w - update
    m      = c(b2)*m + c(1-b2)*g             # the momentum update uses b2, *after* the weight update

Seed 001: one state tensor, 4 bytes/param in fp32, half of Adam's.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.optim._base import Optimizer, check_betas, check_nonneg, scalar


@dataclass(frozen=True)
class Lion(Optimizer):
    """Lion on a flat shard: state "m". `record` keys: "c", "update", "m" (after the step)."""

    lr: float = 1e-4  # the paper's advice: 3-10x smaller than AdamW's, since every step is +-lr
    betas: tuple = (0.9, 0.99)  # (b1: interpolation for the update, b2: momentum decay), paper defaults
    weight_decay: float = 0.0  # lambda; the paper uses 3-10x AdamW's to keep lr*wd alike

    name = "lion"
    state_names = ("m",)

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.weight_decay, "weight_decay")
        object.__setattr__(self, "betas", check_betas(self.betas, 2))

    def _update(self, w, g, s, t, record, first_step=1):  # first_step: only DeepSpeed's CPU Adam reads it
        dt = w.dtype
        b1, b2 = self.betas
        m = s["m"]
        c = scalar(b1, dt) * m + scalar(1.0 - b1, dt) * g
        update = scalar(self.lr, dt) * (np.sign(c) + scalar(self.weight_decay, dt) * w)
        w -= update
        m *= scalar(b2, dt)
        m += scalar(1.0 - b2, dt) * g
        if record is not None:
            record.update(c=c, update=update, m=m.copy())
