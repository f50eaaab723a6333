"""Stage 0, plain data parallel: all-reduce the gradients; every rank keeps everything."""

from __future__ import annotations

from zerosim.zero.stage_base import Stage


class Stage0(Stage):
    number = 0

    def reduce_gradients(self) -> None:
        p = self.precision
        reduced = self.cluster.all_reduce([g.array for g in self.grads], op=self.reduce_op, wire=p.reduce_format, tag="grads")
        self._reduced = []
        for i, (g, r) in enumerate(zip(self.grads, reduced)):
            if r.dtype == g.array.dtype:
                g.array[...] = r  # in place, as DDP's all-reduce writes into the gradient buckets
                self._reduced.append(g.array)
            else:
                self._reduced.append(r)

    def reduced_gradient(self, i: int):
        return self._reduced[i]

    def refresh_params(self) -> None:
        pass  # every rank ran the same update on the same full buffer
