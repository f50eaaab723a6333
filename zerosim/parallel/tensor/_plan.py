"""Where tensor parallelism's operators sit around each kind of unit, as data: the engine's hooks and the oracle both
read this table, so they cannot disagree about *where* TP communicates — only about how (rings over the mesh in the
engine, naive sums on one device in the oracle).

A unit's `entry` operator sits before it (its forward side runs before the unit's forward, its backward side after
the unit's backward); its `exit` operators after it (forward sides after the forward, in order; backward sides
before the backward, in reverse). Operators are _communication.CONJUGATES' (Megatron's mappings.py names).

    role          unit (_model.py)          no sequence parallelism           sequence parallelism
    vocab         the embedding             exit: g = reduce_from             exit: reduce_scatter_to_sequence
                                                                              (GPT: reduce_from, then scatter: the
                                                                              positions join after the reduce)
    column-row    attention, MLP            entry: f = copy_to                entry: gather_from_sequence
                                            exit: g = reduce_from             exit: reduce_scatter_to_sequence
    column        the LM head; context      entry: f = copy_to                entry: gather_from_sequence
                  parallelism's QKV end
    row           context parallelism's     exit: g = reduce_from             exit: reduce_scatter_to_sequence
                  output end
    replicated    norms, bias + residual    -                                 - (on sequence shards)

With sequence parallelism a column GEMM's input is kept as the rank's sequence shard and gathered again for the
weight gradient (`keeps_shard`: Megatron's LinearWithGradAccumulationAndAsyncCommunication saves the shard and
all-gathers it in backward; Korthikanti et al. 2022 count it as sbh/t).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models.meta import like


@dataclass(frozen=True)
class Placement:
    entry: str | None = None  # the operator before the unit
    exit: tuple = ()  # the operators after it, in forward order
    both_parts: bool = False  # the exit's last operator cuts the residual too (the GPT's scatter of wpe + tokens)
    keeps_shard: bool = False  # keep the entry's input shard for backward's gather (sequence parallelism)


COPY, REDUCE = "copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region"
GATHER, SCATTER_REDUCE = "gather_from_sequence_parallel_region", "reduce_scatter_to_sequence_parallel_region"
SPLIT = "scatter_to_sequence_parallel_region"

PLACEMENTS = {  # (role, sequence parallel, the embedding has positions) -> Placement
    ("vocab", False, False): Placement(exit=(REDUCE,)),
    ("vocab", False, True): Placement(exit=(REDUCE,)),
    ("vocab", True, False): Placement(exit=(SCATTER_REDUCE,)),
    ("vocab", True, True): Placement(exit=(REDUCE, SPLIT), both_parts=True),
    ("column-row", False, False): Placement(entry=COPY, exit=(REDUCE,)),
    ("column-row", True, False): Placement(entry=GATHER, exit=(SCATTER_REDUCE,), keeps_shard=True),
    ("column", False, False): Placement(entry=COPY),
    ("row", False, False): Placement(exit=(REDUCE,)),  # context parallelism's cut of the attention region
    ("column", True, False): Placement(entry=GATHER, keeps_shard=True),
    ("row", True, False): Placement(exit=(SCATTER_REDUCE,)),
    ("replicated", False, False): Placement(),
    ("replicated", True, False): Placement(),
}


# PLACEMENTS where the layout keeps the gathered input, not the shard: made once (asked before and after every unit)
GATHERED_INPUT = {key: replace(place, keeps_shard=False) for key, place in PLACEMENTS.items()}


def placement(unit, sequence_parallel: bool, keeps_shard: bool = True) -> Placement:
    """Where the operators sit around `unit` (a TP unit of _model.py); `keeps_shard` False: the layout keeps the
    gathered input instead of the shard (torch DTensor's, _model.py LAYOUTS), so nothing is gathered again."""
    table = PLACEMENTS if keeps_shard else GATHERED_INPUT
    return table[(unit.role, bool(sequence_parallel), bool(getattr(unit, "positions", None)))]


def shard_name(unit) -> str:
    """The ledger name of a column GEMM's kept input shard (sequence parallelism)."""
    return f"{unit.name}.{unit.input_name} (sequence shard)"


# -- sequence parallelism's gradient sum: which elements a rank sends, where in the coalesced buffer ----------------

def sequence_parallel_windows(model) -> list:
    """[(lo, hi)] in the flat vector of every parameter whose gradient is partial under sequence parallelism (the
    replicated units' `sequence_parallel_params`: norms and row-parallel biases), in model order."""
    return [(s.offset, s.offset + s.size) for s in model.specs
            if s.name in getattr(model.layers[s.layer], "sequence_parallel_params", ())]


def packed_pieces(layout, rank: int, windows: list, whole: bool) -> list:
    """[(a, b)] of a rank's reduced region to send, in order: every window where the region is the whole padded
    buffer (stage 0), else the rank's owned part of each (its shard's)."""
    pieces = [(lo, hi) if whole else layout.owned_range(lo, hi, rank) for lo, hi in windows]
    return [(a, b) for a, b in pieces if b > a]


def packed_length(layout, windows: list, whole: bool) -> int:
    """The coalesced buffer's length: the most any shard position sends (`range_counts`: each position's part of a
    window), so every group's all-reduce moves the same length (each rank pads its own with zeros)."""
    if whole:
        return sum(hi - lo for lo, hi in windows)
    totals = None
    for lo, hi in windows:
        counts = layout.range_counts(lo, hi)
        totals = list(counts) if totals is None else [t + c for t, c in zip(totals, counts)]
    return max(totals) if totals else 0


def pack(region, pieces: list, size: int):
    """(size,) in the region's dtype: its `pieces` one after another, zeros after (the coalesced buffer)."""
    if getattr(region, "is_meta", False):
        return like(region, (size,), region.dtype)
    buf, at = np.zeros(size, region.dtype), 0
    for a, b in pieces:
        buf[at:at + b - a] = region[a:b]
        at += b - a
    return buf


def unpack(buf, pieces: list, region) -> None:
    """The summed buffer's pieces back into the region, in place."""
    at = 0
    for a, b in pieces:
        region[a:b] = buf[at:at + b - a]
        at += b - a


