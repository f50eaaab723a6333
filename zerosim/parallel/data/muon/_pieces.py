"""Where Muon's matrices lie on the shards: each matrix's window, shape and the piece each position holds.

The shard arithmetic is the layout's (`range_counts`, `owned_range`, `to_wire` / `from_wire`: parallel/data/layouts),
asked one parameter at a time: a matrix [lo, hi) of the model's flat vector is held as pieces c_M(p), position p's
at `owned_range(lo, hi, rank)` of its shard. With the flat layout the pieces are the matrix's own elements cut by
the shard boundaries (most positions hold none); with per-parameter layouts every position holds ceil(n/N)
elements or rows of it, the last ones padded. Concatenated in position order the pieces are the matrix "on the
wire", which `from_wire` turns into model order and `to_wire` back.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.optim import matrix_shape


@dataclass(frozen=True)
class Matrix:
    """One of Muon's matrices on the shards."""

    spec: object  # the model's ParamSpec
    lo: int  # its window [lo, hi) in the model's flat vector
    hi: int
    shape: tuple  # (rows, cols) as Muon sees it (a 1-D parameter: 1 x n)
    counts: tuple  # c_M(p): elements each position holds (its piece, padding included)

    @property
    def name(self) -> str:
        return f"{self.spec.layer}.{self.spec.name}"

    @property
    def wire(self) -> int:
        """Σ_p c_M(p): the matrix on the wire, padding included."""
        return sum(self.counts)

    def start(self, position: int) -> int:
        """Where position's piece starts on the wire."""
        return sum(self.counts[:position])

    def holders(self) -> tuple:
        """S(M): the positions holding a non-empty piece."""
        return tuple(p for p, c in enumerate(self.counts) if c)


def muon_matrices(optimizer, specs, layout) -> tuple:
    """The `Matrix` of every parameter `optimizer` steps as a matrix, in model order."""
    out = []
    for spec in sorted(specs, key=lambda s: s.offset):
        if optimizer.is_matrix(spec.name, spec.shape):
            lo, hi = spec.offset, spec.offset + spec.size
            out.append(Matrix(spec, lo, hi, matrix_shape(spec.shape), tuple(layout.range_counts(lo, hi))))
    return tuple(out)


def aux_params(optimizer, specs) -> tuple:
    """The parameters `optimizer` keeps off Muon (MuonAdamW's embeddings, head, norms, biases), in model order."""
    return tuple(s for s in sorted(specs, key=lambda s: s.offset) if not optimizer.is_matrix(s.name, s.shape))


def piece(layout, lo: int, hi: int, rank: int) -> slice:
    """Rank's piece of the parameter [lo, hi) in its shard's coordinates."""
    return slice(*layout.owned_range(lo, hi, rank))
