"""A step's micro-batches, checked on every rank before anything runs."""

from __future__ import annotations


def micro_batches(model, cluster, batches, accumulation_steps: int) -> list:
    """Per local rank, the list of its K micro-batches (x, target); raises on every rank (they agree through
    the backend) before anything runs if the batches are malformed."""
    local, K = cluster.local_size, accumulation_steps
    if not isinstance(batches, (list, tuple)) or len(batches) != local:
        got = len(batches) if isinstance(batches, (list, tuple)) else type(batches).__name__
        what = "one (x, target) micro-batch" if K == 1 else f"a list of {K} (x, target) micro-batches"
        raise ValueError(f"step needs {what} per local rank ({local}), got {got}")
    micro, problems = [], []
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


def _is_pair(b) -> bool:
    return isinstance(b, (list, tuple)) and len(b) == 2 and not isinstance(b[0], (list, tuple))


def _on_host(a):
    """A device array (CuPy's, which refuses np.asarray) as a host copy; anything else as it is."""
    return a.get() if hasattr(a, "get") and hasattr(a, "dtype") and not isinstance(a, dict) else a
