"""The single-device oracle: what every ZeRO stage must equal, bit for bit.

One device runs each micro-batch's forward/backward the same way the ranks do, reduces the N
gradients with the naive twin in the ring's order and dtypes (`naive_reduce(order="ring")`, which
shares no code with the ring), averages and unscales in fp32, and runs the same optimizer over the
whole flat vector. Because the optimizers are elementwise and the reduction order is the ring's,
the fp32 masters and optimizer states equal every stage's exactly.

`Reference.float64(...)` is the second check: the same micro-batches in float64 end to end, no
rounding to speak of, to measure how far low precision drifts.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import ShardLayout, get_op, naive_reduce
from zerosim.models.run import forward_backward
from zerosim.optim.by_matrix import step_by_matrix
from zerosim.precision import cast, get_precision


class Reference:
    """One device, N micro-batches per step, the same numerics as a ZeRO engine on N ranks."""

    def __init__(self, model, optimizer, precision="fp16-mixed", world_size: int = 1, params=None):
        self.model, self.optimizer = model, optimizer
        self.precision = get_precision(precision)
        self.world_size = world_size
        init = model.init_params() if params is None else np.asarray(params)
        # Pad like the engines so both run the optimizer over the same (N*s,) vector.
        self.padded = ShardLayout(model.num_params, world_size).padded
        wide = np.zeros(self.padded, dtype=np.float64)
        wide[: model.num_params] = init.astype(np.float64)
        p = self.precision
        self.params = cast(wide, p.compute_format)  # (N*s,) compute format
        self.master_buf = cast(wide, p.master_format) if p.master_format is not None else None  # (N*s,) fp32
        upd = p.update_format.dtype
        self.state = {k: np.zeros(self.padded, dtype=upd) for k in optimizer.state_names}
        self.t = 0

    @classmethod
    def float64(cls, model, optimizer, world_size: int = 1, params=None) -> "Reference":
        """The float64 yardstick: compute, reduction and optimizer all in float64."""
        return cls(model, optimizer, "fp64", world_size, params)

    def layer_params(self, layer: int) -> dict:
        return {s.name: self.params[s.offset : s.offset + s.size].reshape(s.shape) for s in self.model.specs if s.layer == layer}

    def gradient(self, x, target) -> tuple:
        """(loss, flat (N*s,) gradient in the compute format) of one micro-batch."""
        grad = np.zeros(self.padded, dtype=self.precision.compute_format.dtype)

        def keep(layer, grads):
            for s in self.model.specs:
                if s.layer == layer:
                    grad[s.offset : s.offset + s.size] = np.asarray(grads[s.name]).reshape(-1)

        loss = forward_backward(
            self.model, x, target, self.precision.compute_format, get_params=self.layer_params,
            on_grads=keep, loss_scale=self.precision.loss_scale,
        )
        return loss, grad

    def reduce(self, grads: list) -> np.ndarray:
        """N micro-batch gradients -> the averaged, unscaled gradient in the update format (N*s,)."""
        p, n = self.precision, len(grads)
        op = "sum" if p.average == "avg" else p.average
        total = naive_reduce(grads, op=op, wire=p.reduce_format, order="ring")
        g = get_op("avg").post(total, n) if p.average == "avg" else total
        upd = p.update_format
        g = cast(g, upd) if g.dtype != upd.dtype else g
        if p.loss_scale != 1:
            g = (g / upd.dtype.type(p.loss_scale)).astype(upd.dtype)
        return g

    def step(self, batches) -> list:
        """One step on len(batches) == world_size micro-batches; returns their losses."""
        if len(batches) != self.world_size:
            raise ValueError(f"the reference was built for {self.world_size} micro-batches per step, got {len(batches)}")
        losses, grads = zip(*(self.gradient(x, t) for x, t in batches))
        g = self.reduce(list(grads))
        if not np.all(np.isfinite(g)):
            raise FloatingPointError("reduced gradient contains NaN or inf; no state was changed")
        self.t += 1
        p = self.precision
        w = self.master_buf if self.master_buf is not None else self.params.astype(p.update_format.dtype)
        if self.optimizer.elementwise:
            self.optimizer.step(w, g, self.state, self.t)
        else:  # Muon: each parameter as a whole matrix
            step_by_matrix(self.optimizer, self.model.specs, w, g, self.state, self.t)
        self.params = p.round_weights(w, self.t, 0)
        return list(losses)

    def master(self) -> np.ndarray:
        """(P,) update-format weights: the fp32 master, or the compute params widened when there is none."""
        w = self.master_buf if self.master_buf is not None else self.params.astype(self.precision.update_format.dtype)
        return w[: self.model.num_params].copy()

    def optimizer_state(self) -> dict:
        return {k: v[: self.model.num_params].copy() for k, v in self.state.items()}
