"""Planted: sums in float64 and rounds once at the end (no per-hop rounding)."""
import math

import numpy as np


def ring_reduce_scatter(xs, wire):
    n, length = len(xs), len(xs[0])
    s = math.ceil(length / n) if length else 0
    total = np.zeros(n * s)
    for x in xs:
        total[:length] += np.asarray(x).astype(wire).astype(np.float64)
    return [total[r * s: r * s + max(0, min(s, length - r * s))].astype(wire) for r in range(n)]


def ring_all_gather(shards):
    return [np.concatenate(shards) for _ in shards]


def predict_2048():
    return {"fp16": [2052, 2052, 2048, 2048], "bf16": [2048, 2048, 2048, 2048]}
