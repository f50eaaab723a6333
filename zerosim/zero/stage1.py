"""Stage 1, the seeds' protocol: full local gradients, reduce-scatter, update own shard, all-gather."""

from __future__ import annotations

from zerosim.zero.stage_base import Stage


class Stage1(Stage):
    number = 1
    shards_optimizer = True

    def reduce_gradients(self) -> None:
        shards = self.cluster.reduce_scatter([g.array for g in self.grads], op=self.reduce_op, wire=self.precision.reduce_format, tag="grads")
        self._reduced = []
        for rank, g, shard in zip(self.cluster.ranks, self.grads, shards):
            own = g.array[self.layout.own(rank.index)]
            if shard.dtype == own.dtype:
                own[...] = shard  # lands in the rank's own slice of its gradient buffer (DeepSpeed does the same)
                self._reduced.append(own)
            else:
                self._reduced.append(shard)

    def reduced_gradient(self, i: int):
        return self._reduced[i]

    def refresh_params(self) -> None:
        """All-gather the updated 16-bit shards so every rank holds the whole model again (seed 004 step 4)."""
        own = [p.array[self.layout.own(rank.index)] for rank, p in zip(self.cluster.ranks, self.params)]
        full = self.cluster.all_gather(own, tag="params")
        for p, f in zip(self.params, full):
            p.array[...] = f
