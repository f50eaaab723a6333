"""The tensor-parallel oracle's own sums: the vocabulary-parallel loss's statistics, and the packing of sequence
parallelism's partial gradients — written again here, apart from the engine's (parallel/tensor/).

Letters: M = B·L rows, V/T a rank's vocabulary columns, T the TP degree. Megatron-LM core_v0.19.0
megatron/core/tensor_parallel/cross_entropy.py, `_VocabParallelCrossEntropy.forward`, per rank:

    row_max     the row max of its logits in fp32 (then a MAX over the T ranks: exact in any order)
    row_sums    logits[target] − max where it owns the target (0 elsewhere), and Σ exp(logits − max) over its columns

With sequence parallelism the norms' and row-parallel biases' gradients are partial on each TP rank (Megatron's
`_allreduce_layernorm_grads` for parameters marked `sequence_parallel`): each rank's owned part of every such
parameter, one after another, zeros after, is summed over the T ranks in one coalesced all-reduce.
"""

from __future__ import annotations

import numpy as np

from zerosim.models import acc_dtype
from zerosim.precision import format_of, get_format
from zerosim.precision.arithmetic import arithmetic_of


def _rows(y):
    """(M, V/T) logits widened to fp32 (float64 under fp64)."""
    return y.astype(acc_dtype(format_of(y))).reshape(-1, y.shape[-1])


def row_max(y):
    """(M,) the rank's row max: Megatron's `calculate_logits_max`."""
    return _rows(y).max(axis=1)


def row_sums(y, labels, logits_max, fmt) -> tuple:
    """((M,) predicted, (M,) sum_exp) on this rank, before their all-reduces; exp on the compute format's kernels."""
    z = _rows(y) - logits_max[:, None]
    flat = labels.reshape(-1)
    mine = (flat >= 0) & (flat < z.shape[1])  # the shifted labels this rank's columns hold
    predicted = np.zeros(z.shape[0], z.dtype)
    predicted[mine] = z[np.flatnonzero(mine), flat[mine]]
    return predicted, arithmetic_of(get_format(fmt)).exp(z).sum(axis=1, dtype=z.dtype)


def sequence_parallel_windows(model) -> list:
    """[(lo, hi)] of every parameter a unit marks as partial under sequence parallelism, in model order."""
    return [(s.offset, s.offset + s.size) for s in model.specs
            if s.name in getattr(model.layers[s.layer], "sequence_parallel_params", ())]


def pieces_of(layout, rank: int, windows: list, whole: bool) -> list:
    """[(a, b)] of a shard position's region to send: every window (stage 0: the region is the whole buffer), else
    the position's owned part of each."""
    pieces = [(lo, hi) if whole else layout.owned_range(lo, hi, rank) for lo, hi in windows]
    return [(a, b) for a, b in pieces if b > a]


def coalesced_length(layout, windows: list, whole: bool) -> int:
    """The all-reduce's length: the most any shard position sends (each pads its own buffer with zeros)."""
    if whole:
        return sum(hi - lo for lo, hi in windows)
    n = layout.world_size
    return max((sum(b - a for a, b in pieces_of(layout, q, windows, False)) for q in range(n)), default=0)


def pack(region, pieces: list, size: int):
    """(size,) in the region's dtype: its pieces one after another, zeros after."""
    parts = [region[a:b] for a, b in pieces]
    return np.concatenate(parts + [np.zeros(size - sum(len(p) for p in parts), region.dtype)])


def unpack(buf, pieces: list, region) -> None:
    """The summed buffer's pieces back into the region, in place."""
    starts = np.cumsum([0] + [b - a for a, b in pieces])
    for (a, b), at in zip(pieces, starts):
        region[a:b] = buf[at:at + b - a]
