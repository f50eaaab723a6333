"""Per-parameter partitions, as DeepSpeed ZeRO-3 and FSDP2 cut them; and which layout a recipe uses.

zerosim's default (_flat.py) cuts the whole flat vector in N equal shards, so a parameter may straddle
two ranks. DeepSpeed ZeRO-3 cuts *each parameter* on its own: a parameter of n elements is flattened
and cut into N chunks of c = ceil(n/N) elements, the last ones padded (deepspeed/runtime/zero/
partition_parameters.py: `_partition_param`, `partition_numel`; deepspeed/runtime/comm/
coalesced_collectives.py: `reduce_scatter_coalesced`). Rank r owns elements [r*c, (r+1)*c) ∩ [0, n)
of every parameter. FSDP2 cuts each parameter on dim 0 instead (`Shard(0)`): chunks of ceil(rows/N)
rows, so c = ceil(rows/N) * (n/rows) elements and the last ranks may hold nothing; the rest is the same.

Letters: P parameters in the flat vector (model order), n_p and c_p = ceil(n_p/N) one parameter's
elements and chunk, s = Σ c_p the shard, Ψ = N*s.

Every buffer the engine shards lives in *shard order*: rank r's shard is [p_1's r-th chunk, p_2's r-th
chunk, ...] in model order, padded chunk by chunk — exactly the interleaved buffer
`reduce_scatter_coalesced` builds before its one reduce-scatter. So a unit (layer) occupies the same
contiguous piece [q_u, q_u + Σ_{p in u} c_p) of every rank's shard, its all-gather and reduce-scatter
stay one call with equal counts, and only the packing between model order and shard order changes
(`to_wire` / `from_wire`; identity for the flat layout). The owner of an element decides the order
its ring sum adds in, so the per-parameter layout gives other bits than the flat one for N >= 3.

Example (tests/test_partition.py): parameters of 5 and 3 elements on N = 3 ranks: c = 2 and 1, s = 3;
rank 0 owns p1[0:2], p2[0:1]; rank 1 p1[2:4], p2[1:2]; rank 2 p1[4:5] + 1 padding, p2[2:3].
"""

from __future__ import annotations

import functools

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.collectives import ShardLayout


@dataclass(frozen=True)
class ParamLayout:
    """Per-parameter partitions on N ranks: each parameter cut in N chunks of ceil(n/N) (DeepSpeed ZeRO-3)."""

    sizes: tuple  # n_p of each parameter, in model order (they tile [0, P))
    windows: tuple  # ((a, b), ...) per layer, in the model's flat vector
    world_size: int  # N
    rows: tuple | None = None  # None: chunks of ceil(n_p/N) elements (DeepSpeed); else each parameter's dim 0 (FSDP2)
    sends_as_is = False  # `staged_for_wire` copies x into shard order (FlatLayout's sends it as it is)

    @classmethod
    def for_model(cls, model, world_size: int, dim0: bool = False) -> "ParamLayout":
        specs = sorted(model.specs, key=lambda s: s.offset)
        rows = tuple(s.shape[0] if s.shape else 1 for s in specs) if dim0 else None
        windows = tuple(model.layer_window(i) for i in range(len(model.layers)))
        return cls(tuple(s.size for s in specs), windows, world_size, rows)

    @property
    def split(self) -> str:
        """How a parameter is cut: "elements" (DeepSpeed ZeRO-3) or "dim 0" (FSDP2's Shard(0))."""
        return "elements" if self.rows is None else "dim 0"

    @functools.cached_property
    def num_params(self) -> int:
        return sum(self.sizes)

    @functools.cached_property
    def offsets(self) -> tuple:
        """o_p: where each parameter starts in the model's flat vector."""
        return tuple(np.cumsum((0,) + self.sizes[:-1]).tolist()) if self.sizes else ()

    @functools.cached_property
    def _cuts(self) -> tuple:
        """Per parameter: (how its rows are cut in N — the shard arithmetic of `ShardLayout`, elements per row).
        Elements (DeepSpeed): n_p rows of one element; dim 0 (FSDP2): rows_p rows of n_p / rows_p elements."""
        rows = self.sizes if self.rows is None else self.rows
        return tuple((ShardLayout(r, self.world_size), size // r if r else 0) for size, r in zip(self.sizes, rows))

    @functools.cached_property
    def chunks(self) -> tuple:
        """c_p, each parameter's chunk, padding included: ceil(n_p / N) elements (DeepSpeed's `partition_numel`), or
        ceil(rows_p / N) rows of n_p / rows_p elements (FSDP2: _fsdp_param.py, FSDPParam._init_sharded_param,
        `_chunk_with_empty(param_data, N, dim=0)`, `padded_sharded_size = chunks[0].size()`)."""
        return tuple(cut.shard_size * per_row for cut, per_row in self._cuts)

    def _real(self, p: int, rank: int) -> int:
        """Real elements of parameter p in rank `rank`'s chunk (the rest of its c_p is padding)."""
        cut, per_row = self._cuts[p]
        return cut.real_size(rank) * per_row

    @functools.cached_property
    def chunk_offsets(self) -> tuple:
        """q_p: where each parameter's chunk starts in every rank's shard."""
        return tuple(np.cumsum((0,) + self.chunks[:-1]).tolist()) if self.chunks else ()

    @property
    def shard_size(self) -> int:
        """s = Σ c_p: elements each rank owns, padding included."""
        return sum(self.chunks)

    @property
    def padded(self) -> int:
        """Ψ = N * s."""
        return self.shard_size * self.world_size

    def own(self, rank: int) -> slice:
        """Rank's shard in the shard-ordered (Ψ,) buffer."""
        return slice(rank * self.shard_size, (rank + 1) * self.shard_size)

    # -- a unit, or adjacent units: [lo, hi) of the model's flat vector ----------------------------
    @functools.cache
    def _params_in(self, lo: int, hi: int) -> range:
        """The parameters that tile [lo, hi) exactly (a range of indices); ValueError if one straddles an end."""
        first = next((p for p, o in enumerate(self.offsets) if o >= lo), len(self.sizes))
        last = first
        while last < len(self.sizes) and self.offsets[last] + self.sizes[last] <= hi:
            last += 1
        covered = sum(self.sizes[first:last])
        if hi > lo and (first == len(self.sizes) or self.offsets[first] != lo or covered != hi - lo):
            raise ValueError(f"[{lo}, {hi}) is not a run of whole parameters: per-parameter partitions move whole "
                             "parameters")
        return range(first, last)

    def counts(self, layer: int) -> tuple:
        """Elements of layer `layer` each rank holds: Σ c_p over its parameters, the same on every rank."""
        return self.range_counts(*self.windows[layer])

    def range_counts(self, lo: int, hi: int) -> tuple:
        ps = self._params_in(lo, hi)
        return (sum(self.chunks[p] for p in ps),) * self.world_size

    def owned_piece(self, layer: int, rank: int) -> tuple:
        """(start, stop) of layer `layer`'s chunks in every rank's shard coordinates (0..s)."""
        return self.owned_range(*self.windows[layer], rank)

    def owned_range(self, lo: int, hi: int, rank: int) -> tuple:
        ps = self._params_in(lo, hi)
        if not ps:
            return 0, 0
        q = self.chunk_offsets[ps[0]]
        return q, q + sum(self.chunks[p] for p in ps)

    @functools.cache
    def _wire_index(self, lo: int, hi: int) -> tuple:
        """(positions in the (N*len,) shard-ordered buffer, model positions - lo) of [lo, hi)'s real elements."""
        ps, n = self._params_in(lo, hi), self.world_size
        length = sum(self.chunks[p] for p in ps)
        wire, model = [], []
        q = 0
        for p in ps:
            c, o = self.chunks[p], self.offsets[p]
            for r in range(n):
                real = self._real(p, r)  # rank r's chunk of p: its real elements; the rest is padding
                wire.append(np.arange(real) + r * length + q)
                model.append(np.arange(real) + o + r * c - lo)
            q += c
        return np.concatenate(wire or [np.zeros(0, int)]), np.concatenate(model or [np.zeros(0, int)])

    def to_wire(self, lo: int, hi: int, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """[lo, hi) of the model's vector (hi-lo,) -> (N*len,) in shard order, padding 0 (`reduce_scatter_coalesced`'s
        interleaving: for each rank, each parameter's chunk of that rank). A data-less array (the meta backend)
        has nothing to permute: its shape alone comes back, and no index is built (at N = 4096 it would be Ψ long)."""
        if _data_less(x):
            return out if out is not None else x.__array_namespace__().empty((sum(self.range_counts(lo, hi)),), x.dtype)
        wire, model = self._wire_index(lo, hi)
        if out is None:
            out = np.zeros(sum(self.range_counts(lo, hi)), x.dtype)
        else:
            out[...] = 0
        out[wire] = x[model]
        return out

    def from_wire(self, lo: int, hi: int, y: np.ndarray) -> np.ndarray:
        """The inverse: (N*len,) shard order -> (hi-lo,) model order, padding dropped (a new array)."""
        if _data_less(y):
            return y.__array_namespace__().empty((hi - lo,), y.dtype)
        wire, model = self._wire_index(lo, hi)
        out = np.empty(hi - lo, y.dtype)
        out[model] = y[wire]
        return out

    def staged_for_wire(self, lo: int, hi: int, x, alloc) -> tuple:
        """(x in shard order in a buffer `alloc(elements, dtype)` made, that buffer): `reduce_scatter_coalesced`'s
        interleaved copy, (N*Σc_p,) in x's dtype."""
        buf = alloc(sum(self.range_counts(lo, hi)), x.dtype)
        return self.to_wire(lo, hi, x, out=buf.array), buf

    def arrange(self, x: np.ndarray, empty=None) -> np.ndarray:
        """(P,) model order -> (Ψ,) shard order: rank r's shard at [r*s, (r+1)*s). (`empty` is unused: numpy arrays.)"""
        return self.to_wire(0, self.num_params, x)

    def unarrange(self, y: np.ndarray) -> np.ndarray:
        """(Ψ,) shard order -> (P,) model order."""
        return self.from_wire(0, self.num_params, y)

    def owner_chunks(self, length: int) -> list:
        """[(owner, start, stop), ...] covering a model-order vector of `length` (>= P) elements: who each element's
        ring sum ends at (`naive_reduce(chunks=...)`, the oracle's side); the zero tail [P, length) goes to rank 0."""
        n = self.world_size
        chunks = [(r, o + min(r * c, size), o + min((r + 1) * c, size))
                  for o, c, size in zip(self.offsets, self.chunks, self.sizes) for r in range(n)]
        return chunks + ([(0, self.num_params, length)] if length > self.num_params else [])

    def describe(self) -> dict:
        """What a checkpoint's manifest records of this layout (`layouts.from_description` reads it back)."""
        return {"kind": "per-parameter", "num_params": self.num_params, "shard_size": self.shard_size,
                "padded": self.padded, "padding": self.padded - self.num_params, "split": self.split,
                "chunks": list(self.chunks)}

    def draw_index(self, region: slice):
        """Where the elements of `region` (a rank's shard) sit in the model's vector, for stochastic rounding's
        draws: ((offset in the region, model start, count), ...) per parameter chunk."""
        rank = region.start // self.shard_size if self.shard_size else 0
        return tuple((q, o + rank * c, self._real(p, rank))
                     for p, (o, c, q) in enumerate(zip(self.offsets, self.chunks, self.chunk_offsets)))


def _data_less(x) -> bool:
    """True for the meta backend's arrays (shape and dtype, no values: `is_meta`)."""
    return getattr(x, "is_meta", False)
