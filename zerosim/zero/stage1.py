"""Stage 1, the seeds' protocol: full local gradients, reduce-scatter, update own shard, all-gather.

A matrix optimizer (Muon) needs whole matrices, so with Muon stage 1 all-reduces the gradients
(seed 001's stage 1), updates its own shard of the momentum, all-gathers the momentum so every
rank can orthogonalise whole matrices, and applies only its own part of the update (the
"distributed Muon" of Moonlight, Liu et al. 2025): one extra fp32 all-gather per step.
"""

from __future__ import annotations

import numpy as np

from zerosim.optim.by_matrix import matrix_shape
from zerosim.zero.stage_base import Stage


class Stage1(Stage):
    number = 1
    shards_optimizer = True

    def reduce_gradients(self) -> None:
        if not self.optimizer.elementwise:
            return self.all_reduce_gradients()  # Muon needs whole matrices: see the module docstring
        shards = self.cluster.reduce_scatter([g.array for g in self.grads], op=self.reduce_op, wire=self.precision.reduce_format, tag="grads")
        for i, (rank, g, shard) in enumerate(zip(self.cluster.ranks, self.grads, shards)):
            self.keep_reduced(i, shard, g.array[self.layout.own(rank.index)])  # lands in its own slice

    def update_all(self, grads32: list, t: int, records: list) -> None:
        if self.optimizer.elementwise:
            return super().update_all(grads32, t, records)
        opt, ranks = self.optimizer, self.cluster.ranks
        own = [self.layout.own(rank.index) for rank in ranks]
        for i, g32 in enumerate(grads32):  # (N*s,) full averaged gradient on every rank
            opt.momentum_(self.opt_state[i]["b"].array, g32[own[i]])  # (s,) fp32 momentum shard
        gathered = self.cluster.all_gather([self.opt_state[i]["b"].array for i in range(len(ranks))], tag="muon momentum")
        for i, (rank, g32, b) in enumerate(zip(ranks, grads32, gathered)):
            held = rank.ledger.adopt("muon momentum (gathered)", b, "comm")  # (N*s,) fp32, transient
            update = np.zeros_like(g32)  # (N*s,) fp32: every rank computes the whole matrices' updates
            for spec in self.model.specs:
                window, shape = slice(spec.offset, spec.offset + spec.size), matrix_shape(spec.shape)
                update[window] = opt.direction(g32[window].reshape(shape), b[window].reshape(shape))[0].reshape(-1)
            self.update(i, g32, t, records[i], step=lambda w, state, u=update[own[i]]: opt.apply_(w, u))
            held.free()

    def refresh_params(self) -> None:
        """All-gather the updated 16-bit shards so every rank holds the whole model again (seed 004 step 4)."""
        own = [p.array[self.layout.own(rank.index)] for rank, p in zip(self.cluster.ranks, self.params)]
        full = self.cluster.all_gather(own, tag="params")
        for p, f in zip(self.params, full):
            p.array[...] = f
