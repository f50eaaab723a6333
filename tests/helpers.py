"""Helpers the tests share, in one place (import as `from helpers import bits`).

    bits(a)        an array's bit patterns: equality of two is bitwise (signed zeros and NaN payloads included)
    same(a, b)     deep equality of nested dicts / lists of arrays, bitwise for arrays
    snapshot(e)    what an engine holds on every local rank (t, masters, optimizer state, 16-bit params) as bits
    HANG_TIMEOUT   the one limit a test puts on a subprocess, a thread or a notebook cell: only a hang reaches it
"""

from __future__ import annotations

import numpy as np

# Seconds. No test may depend on the machine's speed: starved to a nice-19 share beside busy loops on every core
# (about 1.5 % of a CPU), a job that takes 10 s of CPU takes ~11 minutes, and pip's install in the README test
# over half an hour. Four hours stops only a job that hangs.
HANG_TIMEOUT = 4 * 3600


def bits(a) -> np.ndarray:
    """The bit patterns of `a` as unsigned integers of its width (fp16 -> uint16, fp32 -> uint32, ...)."""
    a = np.ascontiguousarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}")


def same(a, b) -> bool:
    """a == b for nested dicts and lists, arrays compared bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))
    return a == b


def snapshot(engine) -> dict:
    """Everything a step may change on every local rank, as bit patterns (copies)."""
    return {
        "t": engine.t,
        "master": [bits(m).copy() for m in engine.master_shards()],
        "optimizer": [{k: bits(v).copy() for k, v in s.items()} for s in engine.optimizer_shards()],
        "params": [bits(engine.compute_params(i)).copy() for i in range(engine.cluster.local_size)],
    }


def by_gid(ax, gid: str) -> list:
    """The artists of a figure's axes that carry gid `gid` (figures mark what they draw with gids)."""
    return [a for a in ax.get_children() if a.get_gid() == gid]
