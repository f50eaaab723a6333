"""The second-order optimizers seed 001 names (Shampoo, K-FAC), in memory and against ZeRO's shards.

Letters: a weight W is m × n; N ranks; s = ceil(P/N) the shard of the flat buffer.

Shampoo keeps, per weight matrix, a left factor L = Σ GGᵀ (m × m) and a right factor R = Σ GᵀG (n × n); K-FAC
keeps the same two shapes (the layer input's and the output gradient's covariances). In fp32 that is 4(m² + n²)
bytes where Adam keeps 8mn. Two things follow, and `second_order_memory` measures both on a real model's shapes:

* the factors are not a per-parameter quantity: a square d × d matrix's factors (8d² bytes) are the size of
  Adam's state, a 32,000 × 4,096 embedding's are 4.2 GB against Adam's 1.0 GB; implementations block or skip the
  embeddings (Shampoo's "block size", SOAP's, DistributedShampoo's `max_preconditioner_dim`) — not modelled here;
* ZeRO-2/3 cut the flat buffer into N contiguous shards, so most matrices are split across ranks (the flat
  layout's shard boundaries fall inside them) and no rank holds a whole G to form GGᵀ from; and a factor is indexed
  by rows or columns, not by parameters, so it cannot be cut along ZeRO's axis at all. Seed 001: "they cannot be
  naively partitioned along the parameter axis" — the count of split matrices below is that sentence measured.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class SecondOrder:
    matrices: int  # 2-D weights
    params: int  # P, every parameter
    factors: int  # bytes of Shampoo's / K-FAC's two fp32 factors over every matrix (vectors: none)
    adam: int  # bytes of Adam's fp32 m and v over every parameter: 8P
    largest: tuple  # (name, m, n, bytes of its factors): the matrix whose factors are largest
    split: int  # matrices a ZeRO-2/3 shard boundary falls inside, at `ranks`
    ranks: int


def second_order_memory(model, ranks: int) -> SecondOrder:
    """Shampoo's factors against Adam's state for `model` (a zerosim model, e.g. a MetaLlama), and how many of its
    matrices the flat layout's N shards split."""
    from zerosim.collectives import ShardLayout

    shard = ShardLayout(model.num_params, ranks).shard_size
    at, matrices, factors, split, largest = 0, 0, 0, 0, ("", 0, 0, 0)
    for layer in model.layers:
        for name, shape in layer.param_shapes.items():
            size = 1
            for x in shape:
                size *= x
            if len(shape) == 2:
                m, n = shape
                matrices += 1
                f = 4 * (m * m + n * n)
                factors += f
                if f > largest[3]:
                    largest = (f"{layer.name}.{name}", m, n, f)
                split += (at // shard) != ((at + size - 1) // shard)  # its first and last element on two ranks
            at += size
    return SecondOrder(matrices, model.num_params, factors, 8 * model.num_params, largest, split, ranks)
