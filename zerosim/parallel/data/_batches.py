"""A step's micro-batches, checked on every rank before anything runs."""

from __future__ import annotations

import numpy as np


def micro_batches(model, cluster, batches, accumulation_steps: int) -> list:
    """Per local rank, the list of its K micro-batches (x, target); raises on every rank (they agree through
    the backend) before anything runs if the batches are malformed."""
    local, K = cluster.local_size, accumulation_steps
    if not isinstance(batches, (list, tuple)) or len(batches) != local:
        got = len(batches) if isinstance(batches, (list, tuple)) else type(batches).__name__
        what = "one (x, target) micro-batch" if K == 1 else f"a list of {K} (x, target) micro-batches"
        raise ValueError(f"step needs {what} per local rank ({local}), got {got}")
    micro, problems = [], []
    if _checked_together(model, batches, K):  # every rank's micro-batches pass: no problem to find rank by rank
        cluster.agree([None] * local, "; nothing was run")
        return [[b] for b in batches]  # K = 1: each rank its one pair
    for b in batches:
        pairs = [b] if K == 1 and _is_pair(b) else b
        if not isinstance(pairs, (list, tuple)) or len(pairs) != K or not all(_is_pair(p) for p in pairs):
            want = "an (x, target) pair" if K == 1 else f"a list of {K} (x, target) pairs (accumulation_steps={K})"
            micro.append(None)
            problems.append(f"each rank's micro-batches must be {want}")
            continue
        micro.append(list(pairs))
        try:
            for x, target in pairs:
                model.check_batch(_on_host(x), _on_host(target))  # a device batch is checked on a host copy
            problems.append(None)
        except ValueError as e:
            problems.append(str(e))
    cluster.agree(problems, "; nothing was run")
    return micro


def _checked_together(model, batches, K: int) -> bool:
    """Whether every rank's micro-batches pass `model.check_batch`, asked once of their stack (every input stacked row
    by row, every target alike) where that is the same question: a plain `Model`'s check (an input's width, dtype and
    finiteness: row by row) of NumPy arrays of one shape and dtype, with a loss whose `check_target` decides row by
    row (`Loss.checks_rows`). False where it cannot say (or the stack fails): they are checked rank by rank, and
    each rank's problem named as before."""
    from zerosim.models import Model

    if K != 1 or len(batches) < 2 or type(model).check_batch is not Model.check_batch or not model.loss.checks_rows():
        return False
    if not all(_is_pair(b) for b in batches):
        return False
    x0, t0 = batches[0]
    if type(x0) is not np.ndarray or type(t0) is not np.ndarray or x0.ndim != 2:
        return False
    for x, t in batches:
        if (type(x) is not np.ndarray or type(t) is not np.ndarray or x.shape != x0.shape or t.shape != t0.shape
                or x.dtype != x0.dtype or t.dtype != t0.dtype):
            return False
    try:
        model.check_batch(np.concatenate([x for x, _ in batches]), np.concatenate([t for _, t in batches]))
    except ValueError:
        return False
    return True


def _is_pair(b) -> bool:
    return isinstance(b, (list, tuple)) and len(b) == 2 and not isinstance(b[0], (list, tuple))


def _on_host(a):
    """A device array (CuPy's, which refuses np.asarray) as a host copy; anything else as it is."""
    return a.get() if hasattr(a, "get") and hasattr(a, "dtype") and not isinstance(a, dict) else a
