"""A layout cut over a shard group of S ranks, asked with world ranks: HSDP's and MiCS's shards.

Letters: N ranks, S ranks per shard group, R = N / S replicas, s = the shard (Ψ / S).

With HSDP or MiCS every buffer the plan shards is cut in S shards, not N (the same `FlatLayout` or `ParamLayout`,
built for S), and the R ranks at the same position of their shard groups hold the same shard — FSDP2's
`Shard(0)` on the mesh's "shard" dim with `Replicate()` on its "replicate" dim, MiCS's `param_shard_group`. So
rank r owns shard p = its position in its shard group; everything else about the layout is unchanged. The
engine keeps asking `own(rank)`, `owned_piece(layer, rank)`, `owned_range(lo, hi, rank)` with world ranks:
this wrapper turns the rank into its position and passes everything else through.
"""

from __future__ import annotations


class GroupLayout:
    """`inner` (a layout over S = `groups.size` ranks) asked with world ranks: rank r -> its position in `groups`."""

    def __init__(self, inner, groups):
        if inner.world_size != groups.size:
            raise ValueError(f"a layout over {inner.world_size} ranks cannot be cut over groups of {groups.size}")
        self.inner, self.groups = inner, groups

    def __getattr__(self, name):  # windows, counts, padded, shard_size, to_wire, arrange, ... as the inner layout's
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"GroupLayout({self.inner!r} over {self.groups!r})"

    def own(self, rank: int) -> slice:
        """Rank's shard: its position's, in the (S·s,) buffer."""
        return self.inner.own(self.groups.position(rank))

    def owned_piece(self, layer: int, rank: int) -> tuple:
        return self.inner.owned_piece(layer, self.groups.position(rank))

    def owned_range(self, lo: int, hi: int, rank: int) -> tuple:
        return self.inner.owned_range(lo, hi, self.groups.position(rank))
