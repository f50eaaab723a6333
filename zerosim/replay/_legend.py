"""The replay's words for its numbers: how a value prints (compact, or with its exact twin), the spacing an update
must beat, and a plain-words legend for the buffer names the ledgers use (`call13.staged`, `loss.y - t`, `grad32`).
"""

from __future__ import annotations

import math
import re

import numpy as np

from zerosim.precision import get_format, lost_update, ulp


def num(x: float) -> str:
    """Shortest decimal that reads back to the same float64 (so fp16 2.099609375 prints in full); inf and nan as
    words."""
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if 0 < abs(x) < 1e-4:  # 1e-05, not 0.00001
        return np.format_float_scientific(x, trim="-", exp_digits=2)
    return np.format_float_positional(x, trim="-") if abs(x) < 1e6 else repr(x)


def vec(xs) -> str:
    return "[" + ", ".join(num(x) for x in xs) + "]"


def fp32(x: float, exact: bool) -> str:
    """An fp32 value as fp32 prints it ('2.1'); with `exact`, its exact value beside it when that differs:
    '2.1 (exactly 2.0999999046325684)'."""
    if not math.isfinite(float(x)):
        return num(x)
    f = np.float32(x)
    short = (np.format_float_scientific(f, trim="-", exp_digits=2) if 0 < abs(f) < 1e-4 else
             np.format_float_positional(f, trim="-"))
    whole = num(x)
    return f"{short} (exactly {whole})" if exact and short != whole else short


def half_gap(w: float, step: float, fmt: str) -> float:
    """Half the spacing of `fmt` between w and its neighbour in the direction w moves (w + step): an update smaller
    than this rounds back to w. Toward zero from a power of two the neighbour is half as far (ulp() is the gap
    above |w|)."""
    gap = float(ulp(np.float64(w), fmt))
    mantissa, _ = math.frexp(abs(w))
    toward_zero = w != 0 and (step < 0) == (w > 0)
    if toward_zero and mantissa == 0.5 and abs(w) > get_format(fmt).finfo.smallest_normal:
        gap /= 2
    return gap / 2


def is_lost(w: float, step: float, fmt: str) -> bool:
    """True when w + step, rounded once to `fmt`, is w again (precision/_ulp.py, lost_update)."""
    return bool(lost_update(np.float64(w), np.float64(step), fmt))


def legend(name: str, calls: dict, n: int, compute: str) -> str | None:
    """A buffer name from a ledger in plain words (None when the name says it already)."""
    staged = re.fullmatch(r"call(\d+)\.staged", name)
    if staged:
        what = calls.get(staged.group(1), "a collective")
        return (f"collective call {staged.group(1)}'s input ({what}), copied into the format it travels in and "
                f"padded to a multiple of {n} GPUs, for the ring to read")
    if name.endswith(".block input"):
        return (f"the input of the checkpointed block starting at {name.split('.')[0]}: the one activation kept "
                "through forward; backward recomputes the rest from it")
    if name.startswith("loss."):
        return "the loss's saved y - t, kept from forward: backward starts from dL/dy = y - t"
    if name.endswith(".input"):
        return f"{name.split('.')[0]}'s input, saved in forward because its backward needs it"
    if name.endswith("(gathered)"):
        return f"{name.split(' params')[0]}'s whole {compute} parameters, all-gathered for this use and freed after"
    if re.fullmatch(r"layer \d+ grads", name):
        return f"{name.split(' grads')[0]}'s fresh {compute} gradients, held until they are reduce-scattered"
    return {
        "grad32": "the fp32 averaged gradient the optimizer reads (the reduced sum cast to fp32 and divided by N), "
                  "freed after the update",
        "update scratch": f"Adam's fp32 update before it is rounded into the {compute} weights (no master copy)",
        "overflow flag": "one fp32 number per GPU, 1 if its gradients hold inf or NaN, all-reduced with MAX so that "
                         "every GPU skips the step together",
        "m": "Adam's first moment (optim:m): the running mean of the gradient",
        "v": "Adam's second moment (optim:v): the running mean of the squared gradient",
        "master": "the fp32 copy of the weights the optimizer updates",
    }.get(name)
