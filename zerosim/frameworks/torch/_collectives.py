"""torch.distributed's own collectives on gloo, run on given arrays: what zerosim's gloo model is checked against.

`torch_gloo(op, per_rank_arrays, ...)` runs one torch collective per array set on N gloo processes and returns
each rank's results as NumPy arrays (bit patterns kept: 16-bit formats travel as their integer views).
"""

from __future__ import annotations

import numpy as np

from zerosim.frameworks.torch._launch import run_on_gloo


def _to_torch(torch, a: np.ndarray):
    name = np.dtype(a.dtype).name
    if name == "bfloat16":  # ml_dtypes' bfloat16 has no torch twin in from_numpy: go through its bits
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a).copy())


def _to_numpy(t, dtype) -> np.ndarray:
    if np.dtype(dtype).name == "bfloat16":
        import torch

        return t.contiguous().view(torch.int16).numpy().copy().view(dtype)
    return t.contiguous().numpy().copy()


def _worker(rank: int, world_size: int, calls: list) -> list:
    import torch
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}
    out = []
    for kind, op, per_rank in calls:
        x = _to_torch(torch, per_rank[rank])
        if kind == "all_reduce":
            dist.all_reduce(x, op=ops[op])
            out.append(_to_numpy(x, per_rank[rank].dtype))
        else:  # reduce_scatter: the input split in N equal blocks (torch's reduce_scatter_tensor)
            y = torch.empty(x.numel() // world_size, dtype=x.dtype)
            dist.reduce_scatter_tensor(y, x, op=ops[op])
            out.append(_to_numpy(y, per_rank[rank].dtype))
    return out


def torch_gloo_calls(calls: list) -> list:
    """Run torch collectives on gloo in one set of N processes: calls = [(kind, op, per_rank_arrays), ...] with
    kind "all_reduce" or "reduce_scatter" (torch's reduce_scatter_tensor: N equal blocks), op "sum", "avg" or
    "max", per_rank_arrays N flat arrays of one length and dtype. Returns `out[call][rank]`: rank r's result."""
    if not calls:
        return []
    n = len(calls[0][2])
    for kind, op, per_rank in calls:
        if kind not in ("all_reduce", "reduce_scatter"):
            raise ValueError(f"kind must be 'all_reduce' or 'reduce_scatter', got {kind!r}")
        if op not in ("sum", "avg", "max"):
            raise ValueError(f"op must be 'sum', 'avg' or 'max', got {op!r}")
        if len(per_rank) != n:
            raise ValueError("every call needs one array per rank, the same number of ranks")
    per_rank = run_on_gloo(_worker, n, list(calls))  # per_rank[r][call]
    return [[per_rank[r][i] for r in range(n)] for i in range(len(calls))]


def torch_gloo(kind: str, cases: list, op: str = "sum") -> list:
    """torch's `kind` ("all_reduce" or "reduce_scatter") with `op` on gloo, once per case (a list of N arrays);
    `out[case][rank]` (see `torch_gloo_calls`)."""
    return torch_gloo_calls([(kind, op, c) for c in cases])
