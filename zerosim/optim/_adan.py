"""Adan, adaptive Nesterov momentum (Xie et al., TPAMI 2024), as the authors' code runs it.

Betas follow the authors' PyTorch code (sail-sg/Adan): b = 1 - beta_paper, so (0.98, 0.92, 0.99)
is the paper's (0.02, 0.08, 0.01). Like that code, we bias-correct all three moments (the paper's
Algorithm 1 does not) and use the proximal weight decay (the paper's default, `no_prox=False`).

State: m (gradient moment), v (gradient-difference moment), n (second moment of the Nesterov
gradient) and g_prev, the previous step's gradient. On the first step g_prev is taken to be g
itself, so d = 0 (the code re-initialises it from the gradient at step 1; the zeros allocated for
it are never read).

One step, in this order, in w.dtype (c(x): x formed in float64, rounded once to w.dtype):

    d     = g - g_prev                         # (g_prev := g when t == 1)
    m     = c(b1)*m + c(1-b1)*g
    v     = c(b2)*v + c(1-b2)*d
    z     = g + c(b2)*d                        # the paper's g_k + (1 - beta2) (g_k - g_{k-1})
    n     = c(b3)*n + c(1-b3)*(z*z)
    denom = sqrt(n) / c(sqrt(1 - b3**t)) + c(eps)
    w     = w - c(lr / (1 - b1**t)) * (m / denom)
    w     = w - c(lr*b2 / (1 - b2**t)) * (v / denom)
    w     = w / c(1 + lr*wd)                   # proximal decay: (1 + lr*wd)^-1 [ ... ]
    g_prev = g

Seed 001 counts 12 bytes/param of moments plus g_prev in fp16 (2 bytes); here g_prev is kept in the
state dtype, because the optimizer receives the gradient in that dtype: 16 bytes/param in fp32.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.optim._base import Optimizer, check_betas, check_nonneg, scalar


@dataclass(frozen=True)
class Adan(Optimizer):
    """Adan on a flat shard. `record` keys: "d", "m", "v", "n", "denom", "update" (w_before - w_after)."""

    lr: float = 1e-3  # the authors' code default
    betas: tuple = (0.98, 0.92, 0.99)  # (b1, b2, b3) as 1 - the paper's betas; the authors' defaults
    eps: float = 1e-8  # added to the bias-corrected sqrt(n)
    weight_decay: float = 0.0  # lambda of the proximal step

    name = "adan"
    state_names = ("m", "v", "n", "g_prev")

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.eps, "eps")
        check_nonneg(self.weight_decay, "weight_decay")
        object.__setattr__(self, "betas", check_betas(self.betas, 3))

    def _update(self, w, g, s, t, record, first_step=1):  # first_step: only DeepSpeed's CPU Adam reads it
        dt, lr = w.dtype, self.lr
        b1, b2, b3 = self.betas
        m, v, n, g_prev = s["m"], s["v"], s["n"], s["g_prev"]
        d = g - (g if t == 1 else g_prev)
        m *= scalar(b1, dt)
        m += scalar(1.0 - b1, dt) * g
        v *= scalar(b2, dt)
        v += scalar(1.0 - b2, dt) * d
        z = g + scalar(b2, dt) * d
        n *= scalar(b3, dt)
        n += scalar(1.0 - b3, dt) * (z * z)
        denom = np.sqrt(n) / scalar(math.sqrt(1.0 - b3**t), dt) + scalar(self.eps, dt)
        w_before = w.copy() if record is not None else None
        w -= scalar(lr / (1.0 - b1**t), dt) * (m / denom)
        w -= scalar(lr * b2 / (1.0 - b2**t), dt) * (v / denom)
        w /= scalar(1.0 + lr * self.weight_decay, dt)
        g_prev[...] = g
        if record is not None:
            record.update(d=d, m=m.copy(), v=v.copy(), n=n.copy(), denom=denom, update=w_before - w)
