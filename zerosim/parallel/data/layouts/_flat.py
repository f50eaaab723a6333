"""The flat parameter buffer every stage shares: P parameters in layer order, padded to N*s.

Rank r owns elements [r*s, (r+1)*s) of the padded buffer at every stage (the shard arithmetic comes
from `ShardLayout`); the stages differ only in *which* buffers they cut this way. A layer occupies a
window [a, b) of the flat buffer, which may straddle shards: its per-layer collectives at stages 2
and 3 move window ∩ shard_r for each rank r (the counts below), so rank r is still the owner of the
same elements, and every element is still summed in the same ring order as at stage 1.
"""

from __future__ import annotations

import functools

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import RunCounts
from zerosim.collectives import ShardLayout


@dataclass(frozen=True)
class FlatLayout:
    """The model's flat parameter buffer on N ranks: shards, and each layer's window and per-rank counts."""

    num_params: int  # P
    world_size: int  # N
    windows: tuple  # ((a, b), ...) per layer, in the flat buffer
    sends_as_is = True  # `staged_for_wire` hands every x back as it is: a caller of n ranks may skip asking n times

    @classmethod
    def for_model(cls, model, world_size: int) -> "FlatLayout":
        return cls(model.num_params, world_size, tuple(model.layer_window(i) for i in range(len(model.layers))))

    @functools.cached_property  # asked on every collective: build it once (a frozen dataclass still has a __dict__)
    def shards(self) -> ShardLayout:
        return ShardLayout(self.num_params, self.world_size)

    @property
    def shard_size(self) -> int:
        """s = ceil(P / N): elements each rank owns, padding included."""
        return self.shards.shard_size

    @property
    def padded(self) -> int:
        """N * s."""
        return self.shards.padded

    def own(self, rank: int) -> slice:
        """Rank's shard in the padded flat buffer."""
        return slice(*self.shards.bounds(rank))

    def counts(self, layer: int) -> RunCounts:
        """Elements of layer `layer`'s window that each rank owns (window ∩ shard_r), in rank order."""
        found = self._counts.get(layer)
        if found is None:  # every collective of the layer asks: made once per layer (and in O(1): RunCounts)
            found = self._counts[layer] = self.range_counts(*self.windows[layer])
        return found

    @functools.cached_property
    def _counts(self) -> dict:
        return {}  # layer -> counts

    def range_counts(self, a: int, b: int) -> RunCounts:
        """Elements of the flat range [a, b) that each rank owns ([a, b) ∩ shard_r), in rank order: zeros, a partial
        head, whole shards, a partial tail, zeros — run-length encoded (cluster/_runs.py), the tuple it equals."""
        return RunCounts.of_range(a, b, self.shard_size, self.world_size)

    def owned_piece(self, layer: int, rank: int) -> tuple:
        """(start, stop) of window ∩ shard_rank, in the rank's shard coordinates (0..s)."""
        piece = self._pieces.get((layer, rank))
        if piece is None:  # every rank asks for every layer's piece at every gather: found once
            piece = self._pieces[layer, rank] = self.owned_range(*self.windows[layer], rank)
        return piece

    @functools.cached_property
    def _pieces(self) -> dict:
        return {}  # (layer, rank) -> owned_piece

    def owned_range(self, a: int, b: int, rank: int) -> tuple:
        """(start, stop) of [a, b) ∩ shard_rank, in the rank's shard coordinates (0..s); (0, 0) if empty."""
        s = self.shard_size
        lo, hi = max(a, rank * s), min(b, (rank + 1) * s)
        if hi <= lo:
            return 0, 0
        return lo - rank * s, hi - rank * s

    # -- the packing between the model's order and the shards' (_partition.py has a layout where it is not identity)
    def to_wire(self, lo: int, hi: int, x, out=None):
        """[lo, hi) of the model's vector as its collective moves it: itself (shards are model order here)."""
        return x

    def from_wire(self, lo: int, hi: int, y):
        return y

    def staged_for_wire(self, lo: int, hi: int, x, alloc) -> tuple:
        """(x as its collective sends it, the buffer `alloc(elements, dtype)` made for it or None): x itself here."""
        return x, None

    def arrange(self, x: np.ndarray, empty=np.empty) -> np.ndarray:
        """(P,) -> (Ψ,): zero padding at the end, in a new array from `empty(shape, dtype)` (a backend's)."""
        if x.shape != (self.num_params,):
            raise ValueError(f"expected a flat buffer of {self.num_params} elements, got shape {x.shape}")
        out = empty((self.padded,), x.dtype)
        out[: self.num_params] = x
        out[self.num_params :] = 0
        return out

    def unarrange(self, y: np.ndarray) -> np.ndarray:
        """(Ψ,) -> (P,): the padding dropped (a view)."""
        return y[: self.num_params]

    def owner_chunks(self, length: int) -> list:
        """[(owner, start, stop), ...] covering a model-order vector of `length` (>= P) elements: rank r's sum of
        [r*s, (r+1)*s) ends at rank r (`naive_reduce(chunks=...)`, the oracle's side)."""
        s = self.shard_size
        return [(r, min(r * s, length), min((r + 1) * s, length)) for r in range(self.world_size)]

    def describe(self) -> dict:
        """What a checkpoint's manifest records of this layout (`layouts.from_description` reads it back)."""
        return {"kind": "flat", "num_params": self.num_params, "shard_size": self.shard_size, "padded": self.padded,
                "padding": self.padded - self.num_params}

    def draw_index(self, region: slice) -> int:
        """Where `region` starts in the model's vector, for stochastic rounding's draws."""
        return region.start
