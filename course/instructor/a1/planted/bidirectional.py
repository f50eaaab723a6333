"""Planted: the all-reduce's time at the link's bidirectional bandwidth (seed 001's 31 ms)."""
import math

import numpy as np


def predict_2048():
    # fp16 (spacing 2 at 2048): chunks 0 and 1 reach 2048 + 3 = 2051 -> 2052 (tie to even) and 2 + 2048 = 2050 then
    # 2051 -> 2052; chunks 2 and 3 meet 2048 early and lose each 1 (2049 -> 2048). bf16 (spacing 16): all 2048.
    return {"fp16": [2052, 2052, 2048, 2048], "bf16": [2048, 2048, 2048, 2048]}


def predict_ring_bytes(N, elements, itemsize):
    # two phases of N - 1 steps, one chunk of ceil(E / N) values sent per step
    return 2 * (N - 1) * math.ceil(elements / N) * itemsize


def predict_allreduce_ms(gigabytes, N, link_GBps, alpha_us):
    both = link_GBps * 1e9
    return 1e3 * (2 * (N - 1) / N * gigabytes * 1e9 / both + 2 * (N - 1) * alpha_us * 1e-6)


def ring_reduce_scatter(xs, wire):
    n, length = len(xs), len(xs[0])
    s = math.ceil(length / n) if length else 0
    padded = [np.zeros(n * s, wire) for _ in range(n)]  # (N*s,) per rank, in the wire format
    for p, x in zip(padded, xs):
        p[:length] = np.asarray(x).astype(wire)  # inputs rounded to the wire first
    chunk = lambda c: slice(c * s, (c + 1) * s)  # noqa: E731
    partial = {i: padded[i][chunk((i - 1) % n)].copy() for i in range(n)}  # step 0: rank i starts chunk i - 1
    for k in range(n - 1):
        moved = {}
        for i in range(n):  # rank i sends its partial of chunk (i - k - 1) mod N to rank i + 1
            c, dst = (i - k - 1) % n, (i + 1) % n
            moved[dst] = (partial[i] + padded[dst][chunk(c)]).astype(wire)  # the add rounds to the wire
        partial = moved
    return [partial[r][: max(0, min(s, length - r * s))] for r in range(n)]  # rank r owns chunk r


def ring_all_gather(shards):
    n = len(shards)
    out = [[None] * n for _ in range(n)]
    for r in range(n):
        out[r][r] = shards[r]
    for k in range(n - 1):  # rank i forwards the shard it received last step to rank i + 1
        for i in range(n):
            c = (i - k) % n
            out[(i + 1) % n][c] = out[i][c]
    return [np.concatenate(o) for o in out]


def ring_all_reduce(xs, wire):
    n, length = len(xs), len(xs[0])
    s = math.ceil(length / n)
    owned = ring_reduce_scatter(xs, wire)
    full = [np.concatenate([o, np.zeros(s - len(o), wire)]) for o in owned]  # each chunk back to s (padding)
    return [g[:length] for g in ring_all_gather(full)]


def tree_all_reduce(xs, wire):
    n = len(xs)
    staged = [np.asarray(x).astype(wire) for x in xs]

    def partial(r):
        acc = staged[r]
        for child in (2 * r + 1, 2 * r + 2):  # left child first
            if child < n:
                acc = (acc.astype(np.float64) + partial(child).astype(np.float64)).astype(wire)  # one rounding
        return acc

    root = partial(0)
    return [root.copy() for _ in range(n)]
