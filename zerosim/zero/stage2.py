"""Stage 2: reduce-scatter each layer's gradients as soon as backward makes them, then free them.

Only the rank's gradient shard (s elements) lives between layers; one layer's gradients are live at
a time. The update and the all-gather are stage 1's.
"""

from __future__ import annotations

from zerosim.zero.stage1 import Stage1


class Stage2(Stage1):
    number = 2
    shards_grads = True

    def on_grads(self, i: int, layer: int, grads: dict) -> None:
        a, b = self.layout.windows[layer]
        if b <= a:
            return
        rank = self.cluster.ranks[i]
        local = rank.ledger.adopt(f"layer {layer} grads", self.model.pack(layer, grads), "grads")  # (b-a,) compute fmt
        counts = self.layout.counts(layer)
        piece = self.collective(
            i, local.array,
            lambda xs: self.cluster.reduce_scatter(xs, op=self.reduce_op, wire=self.precision.reduce_format, counts=counts, tag=f"{self.model.layers[layer].name} grads"),
        )
        lo, hi = self.layout.owned_piece(layer, rank.index)
        self.grads[i].array[lo:hi] = piece
        local.free()  # seed 004 stage 2, step 1c: freed at once

    def reduce_gradients(self) -> None:
        pass  # already done, layer by layer, during backward

    def reduced_gradient(self, i: int):
        return self.grads[i].array
