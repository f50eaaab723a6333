"""The events behind one element of a logical tensor, in the order a run made them: what `zerosim diff` names as the
event that first produced different bits in each run.

An `Event` says what happened (its text, from the run's trace and facts), what it computed (`key`: the operation and
its operands — which micro-batches a partial sum holds and in what order, which format it is rounded to — so the
same computation in two runs has the same key) and its output at the element (`value`). Two runs' chains for the same
element part at each run's first event whose key the other run never forms (`parting_events`).
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import to_float64


@dataclass(frozen=True)
class Event:
    """One thing a run did on the way to an element: `what` it was (one of EVENT_KINDS), its one-line `text`, the
    `key` naming what it computed, and its output at the element (None where no single value is its output)."""

    what: str
    text: str
    key: tuple
    value: float | None = None

    def as_json(self) -> dict:
        return {"what": self.what, "text": self.text, "value": self.value}


EVENT_KINDS = ("data", "init", "cast", "loss scale", "forward", "backward", "tensor parallel", "accumulation",
               "pre-divide", "ring hop", "reduction", "after", "averaging", "clipping", "optimizer", "store", "update")


def parting_events(a: list, b: list) -> tuple:
    """(run A's event, run B's event) that first produced different bits: each run's first event whose key the other
    run's chain lacks; where the two chains form the same computations, the first pair whose outputs differ."""
    keys_a, keys_b = {e.key for e in a}, {e.key for e in b}
    first_a = next((e for e in a if e.key not in keys_b), None)
    first_b = next((e for e in b if e.key not in keys_a), None)
    if first_a is not None or first_b is not None:
        return first_a or _counterpart(b, first_b, a), first_b or _counterpart(a, first_a, b)
    for x, y in zip(a, b):
        if not same_bits(x.value, y.value):
            return x, y
    return (a[-1] if a else None), (b[-1] if b else None)


def _counterpart(chain: list, event, other: list):
    """The event of `other` at the place `event` holds in `chain` (where one run's chain has the first parting event
    and the other's is a prefix of it: the other run's last event before it)."""
    i = chain.index(event)
    return other[min(i, len(other) - 1)] if other else None


def same_bits(x, y) -> bool:
    """Two values are the same bits (equal as float64 with the same sign, or both NaN); None matches only None."""
    if x is None or y is None:
        return x is None and y is None
    a, b = float(to_float64(np.asarray(x))), float(to_float64(np.asarray(y)))
    return (a == b and np.signbit(a) == np.signbit(b)) or (np.isnan(a) and np.isnan(b))


def number(x) -> float | None:
    """A value as a plain float (None for None, or for a whole tensor: one a run lacks, or of another shape)."""
    return None if x is None or np.ndim(x) else float(to_float64(np.asarray(x)))
