"""Stage 3: parameters sharded too. Gather a layer before each use, free it after; no all-gather
after the step, because each rank only ever keeps its own shard (seed 004 stage 3)."""

from __future__ import annotations

from zerosim.zero.stage2 import Stage2


class Stage3(Stage2):
    number = 3
    shards_params = True

    def get_params(self, i: int, layer: int) -> dict:
        a, b = self.layout.windows[layer]
        if b <= a:
            return {}
        rank = self.cluster.ranks[i]
        lo, hi = self.layout.owned_piece(layer, rank.index)
        counts = self.layout.counts(layer)
        window = self.collective(
            i, self.params[i].array[lo:hi],
            lambda xs: self.cluster.all_gather(xs, counts=counts, tag=f"{self.model.layers[layer].name} params"),
        )
        gathered = rank.ledger.adopt(f"layer {layer} params (gathered)", window, "params")  # (b-a,) compute fmt
        return self.model.unflatten(gathered.array, layer)

    def release_params(self, i: int, layer: int) -> None:
        a, b = self.layout.windows[layer]
        if b > a:
            self.cluster.ranks[i].ledger.free(f"layer {layer} params (gathered)")

    def refresh_params(self) -> None:
        pass  # the update already cast the master shard into this rank's params shard
