"""Input checks every collective runs on every rank before any data moves."""

from __future__ import annotations

import functools
import itertools

import numpy as np

from zerosim.cluster import RunCounts
from zerosim.precision import format_of, known_format


def check_inputs(cluster, tensors, what: str, flat: bool = True) -> list:
    """Validate one array per local rank; agree on (length, dtype) with every rank; return arrays.

    Raises ValueError naming the rank and the problem: wrong count, not 1-D, unknown dtype, or a
    length/dtype that differs from rank 0's.
    """
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{what} takes a list with one array per local rank, got {type(tensors).__name__}")
    if len(tensors) != cluster.local_size:
        raise ValueError(
            f"{what} got {len(tensors)} arrays but this process hosts {cluster.local_size} rank(s) "
            f"of a world of {cluster.world_size}: pass one array per local rank"
        )
    arrays, numpy = [], cluster.backend.xp.is_numpy
    if numpy:  # the hot path, every rank at once: host arrays of one kind, a format known by its dtype
        alike = _alike(tensors, flat)
        if alike is not None:
            return list(zip(_indices(cluster), tensors, itertools.repeat(alike)))
    for rank, t in zip(cluster.ranks, tensors):
        if numpy and type(t) is np.ndarray and (t.ndim == 1 or not flat):  # the hot path: the format by dtype
            fmt = known_format(t.dtype)  # None for a dtype no format read so far has: format_of below
            if fmt is not None:
                arrays.append((rank.index, t, fmt))
                continue
        a = t if hasattr(t, "dtype") and hasattr(t, "shape") else np.asarray(t)
        if flat and a.ndim != 1:
            raise ValueError(f"{what}: rank {rank.index} passed shape {a.shape}; collectives cut flat buffers, so "
                             "flatten first")
        try:
            fmt = format_of(a) if cluster.backend.xp.is_numpy else cluster.backend.xp.format_of(a)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: rank {rank.index}: {e}") from None
        arrays.append((rank.index, a, fmt))
    return arrays


def _alike(tensors, flat: bool):
    """The one format of `tensors` when every one is a host array, or every one a data-less (meta) array, (1-D where
    `flat`) of one dtype that a format was read from so far (`known_format`); else None, and `check_inputs` looks rank
    by rank (the same answer, or its error). Sets built at C speed: two passes over the list instead of a Python step
    per rank."""
    kinds = set(map(type, tensors))
    # a data-less array's class says so (`MetaArray.is_meta`): its module is not imported by a first script's names
    if kinds != _HOST and (len(kinds) != 1 or not getattr(next(iter(kinds)), "is_meta", False)):
        return None
    kinds = {(t.ndim == 1 or not flat, t.dtype) for t in tensors}
    if len(kinds) != 1:
        return None
    ((ok, dtype),) = kinds
    return known_format(dtype) if ok else None


_HOST = {np.ndarray}


def _indices(cluster) -> list:
    """Every local rank's index, in the order of `cluster.ranks`."""
    return [rank.index for rank in cluster.ranks]


def require_same(values, what: str, field: str) -> None:
    first = values[0]
    if values.count(first) == len(values):  # all alike (a C loop): nothing to name
        return
    for r, v in enumerate(values):
        if v != first:
            raise ValueError(f"{what}: rank {r} has {field} {v} but rank 0 has {first}; every rank must pass the same "
                             f"{field}")


def require_same_meta(meta: list, what: str, fields: tuple) -> None:
    """`require_same` for each field of every rank's meta tuple (`backend.all_meta`), in `fields`' order: one C-speed
    comparison of the whole tuples where all agree, field by field (to name the first that differs) where not."""
    if meta.count(meta[0]) == len(meta):
        return
    for i, field in enumerate(fields):
        require_same([m[i] for m in meta], what, field)


def check_counts(counts, n: int, what: str) -> tuple:
    """`counts` as a tuple of N non-negative ints, or a ValueError saying what is wrong (cached per tuple); a
    `RunCounts` (a flat range's counts, run-length encoded) checked from its runs and kept as it is."""
    if isinstance(counts, RunCounts):
        if len(counts) != n or any(v < 0 for v, _ in counts.runs):
            raise ValueError(f"{what}: counts must be {n} non-negative integers (one per rank), got {list(counts)}")
        return counts
    try:
        return _valid_counts(tuple(counts), n)
    except TypeError:  # unhashable elements: certainly not integers
        raise ValueError(f"{what}: counts must be integers (one per rank), got {list(counts)}") from None
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


@functools.lru_cache(maxsize=4096)
def _valid_counts(counts: tuple, n: int) -> tuple:
    if not set(map(type, counts)) <= {int}:  # the usual case, plain ints, checked at C speed (N = 4096 per layer)
        if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in counts):
            raise ValueError(f"counts must be integers (one per rank), got {list(counts)}")
        counts = tuple(int(c) for c in counts)
    if len(counts) != n or min(counts, default=0) < 0:
        raise ValueError(f"counts must be {n} non-negative integers (one per rank), got {list(counts)}")
    return counts


def check_group(cluster, group, what: str):
    """`group` as the `Groups` a collective runs over: the cluster's world when None; a clear error when it is not
    a `zerosim.cluster.Groups` of this cluster's N ranks."""
    if group is None:
        return cluster.world
    if not hasattr(group, "members") or not hasattr(group, "positions"):
        raise TypeError(f"{what}: group must be a zerosim.cluster.Groups (e.g. cluster.mesh.groups('gpu')), got "
                        f"{type(group).__name__}")
    if group.world_size != cluster.world_size:
        raise ValueError(f"{what}: {group!r} covers {group.world_size} ranks but the cluster has "
                         f"{cluster.world_size}")
    return group
