"""Synthetic sequence tasks a small GPT can learn: copy, reverse or sort a random string of tokens.

Letters: M micro-batches, B batch, n string length, V vocabulary. Symbols are the tokens 0..V-2 and
token V-1 is the separator. One example is the 2n + 1 tokens

    s_1 ... s_n  SEP  a_1 ... a_n        a = s (copy), reversed(s) (reverse) or sorted(s) (sort)

and the model reads its first 2n tokens and predicts each next one: x = seq[:-1], target = seq[1:],
both (B, 2n) int64. The first n − 1 targets are random symbols no model can predict (their loss
stays near log(V − 1)); the answer is target positions n..2n−1 (`answer_positions`), where a model
that solved the task is always right and chance is 1/(V − 1).
"""

from __future__ import annotations

import numpy as np

from zerosim.models.data._regression import check_pool

TASKS = ("copy", "reverse", "sort")


def answer_positions(n: int) -> slice:
    """The target positions holding the answer a_1..a_n, for strings of length n."""
    return slice(n, 2 * n)


def make_sequence_task(rng: np.random.Generator, n_micro: int, batch: int, n: int, vocab: int,
                       task: str = "copy") -> list[tuple[np.ndarray, np.ndarray]]:
    """M pairs (x (B, 2n) int64, target (B, 2n) int64); needs a GPT with seq_len >= 2n and this vocab."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if vocab < 3:
        raise ValueError(f"the vocabulary needs at least two symbols and the separator, got vocab={vocab}")
    if min(n_micro, batch, n) < 1:
        raise ValueError(f"n_micro, batch and n must be positive, got {n_micro}, {batch}, {n}")
    check_pool(n_micro, batch, 32 * int(n), "the task's strings")  # (B, 2n) ids and targets, int64
    sep = vocab - 1
    out = []
    for _ in range(n_micro):
        s = rng.integers(0, vocab - 1, size=(batch, n))  # (B, n) symbols
        answer = {"copy": s, "reverse": s[:, ::-1], "sort": np.sort(s, axis=1)}[task]
        seq = np.concatenate([s, np.full((batch, 1), sep), answer], axis=1).astype(np.int64)  # (B, 2n + 1)
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out
