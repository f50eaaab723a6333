"""Adam (Kingma & Ba, 2015) exactly as seed 001 writes it, and AdamW (Loshchilov & Hutter, 2019).

One step, in this order, every operation in w.dtype and rounded once (c(x) is the float64 number x
rounded once to w.dtype; see base.py):

    m     = c(b1)*m + c(1-b1)*g                 # first moment
    v     = c(b2)*v + c(1-b2)*(g*g)             # second moment (g*g first, then the scale)
    m_hat = m / c(1 - b1**t)                    # bias corrections: b**t and 1 - b**t in float64,
    v_hat = v / c(1 - b2**t)                    #   the result rounded once to w.dtype
    update = (c(lr)*m_hat) / (sqrt(v_hat) + c(eps))   # eps outside the square root, as the seed
    w     = w - update

AdamW first shrinks the weights, as torch.optim.AdamW does: w = w * c(1 - lr*wd), then the above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zerosim.optim.base import Optimizer, check_betas, check_nonneg, scalar


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam on a flat shard: state m (first moment) and v (second moment), 8 bytes/param in fp32.

    `record` keys: "m", "v", "m_hat", "v_hat", "update" (= lr*m_hat/(sqrt(v_hat)+eps)).
    """

    lr: float = 1e-3  # PyTorch's default
    betas: tuple = (0.9, 0.999)  # (b1, b2): decay of the first and second moments, the paper's values
    eps: float = 1e-8  # added to sqrt(v_hat), outside the root (NOTE: rounds to 0 in fp16)

    name = "adam"
    state_names = ("m", "v")

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.eps, "eps")
        object.__setattr__(self, "betas", check_betas(self.betas, 2))

    def _update(self, w, g, s, t, record):
        dt = w.dtype
        b1, b2 = self.betas
        m, v = s["m"], s["v"]
        m *= scalar(b1, dt)
        m += scalar(1.0 - b1, dt) * g
        v *= scalar(b2, dt)
        v += scalar(1.0 - b2, dt) * (g * g)
        # Transients the size of the shard; a fused kernel would keep them in registers.
        m_hat = m / scalar(1.0 - b1**t, dt)
        v_hat = v / scalar(1.0 - b2**t, dt)
        update = scalar(self.lr, dt) * m_hat / (np.sqrt(v_hat) + scalar(self.eps, dt))
        w -= update
        if record is not None:
            record.update(m=m.copy(), v=v.copy(), m_hat=m_hat, v_hat=v_hat, update=update)


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay, applied first: w *= 1 - lr*wd (torch.optim.AdamW's order).

    `record` keys: Adam's, plus "decayed" (the weights after the decay, before the Adam update).
    """

    weight_decay: float = 0.01  # PyTorch's default for AdamW

    name = "adamw"

    def __post_init__(self):
        super().__post_init__()
        check_nonneg(self.weight_decay, "weight_decay")

    def _update(self, w, g, s, t, record):
        w *= scalar(1.0 - self.lr * self.weight_decay, w.dtype)  # 1 - lr*wd formed in float64
        if record is not None:
            record["decayed"] = w.copy()
        super()._update(w, g, s, t, record)
