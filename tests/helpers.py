"""Helpers the tests share, in one place (import as `from helpers import bits`).

    bits(a)        an array's bit patterns: equality of two is bitwise (signed zeros and NaN payloads included)
    same(a, b)     deep equality of nested dicts / lists of arrays, bitwise for arrays
    snapshot(e)    what an engine holds on every local rank (t, masters, optimizer state, 16-bit params) as bits
"""

from __future__ import annotations

import numpy as np


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
