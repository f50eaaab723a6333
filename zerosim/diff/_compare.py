"""The first bit where two runs part: both runs' logical checkpoints walked in the canonical order (_names.py) —
step, micro-batch, tensor, element — and compared bit for bit.

Two values are the same bits when they are equal as float64 (every format widens to it exactly), with the same sign
(−0 is not +0) or both NaN; two runs that hold a tensor in different formats (bf16 beside fp32) then part exactly
where the values do. A tensor held by one run only parts at once, except a kind the caller calls optional (an
activation where one run's layers are tensor-parallel units: _record.py). Per-parameter tensors are compared a whole
(P,) vector at a time and only a vector that differs is searched for its first parameter, in the canonical order.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.diff._names import AFTER, BEFORE, KINDS, MICRO, STEP_END, STEP_START, Tensor, backward_order
from zerosim.precision import to_float64

KIND_ORDER = {k: i for i, k in enumerate(STEP_START + MICRO + STEP_END)}


@dataclass(frozen=True)
class Parting:
    """Where two runs part: the tensor, the element (its flat index in the tensor; None when the tensor itself
    differs: held by one run only, or another shape) and the two values there (None where a run has none)."""

    tensor: Tensor
    index: int | None
    a: object
    b: object
    why: str  # "bits", "only in run A", "only in run B", "shape ..."
    shape: tuple = ()  # the tensor's shape (a parameter's own, not its flat view)


def blocks(record, layers: tuple) -> dict:
    """{(slot, kind, name): array or value} of one step's record in the canonical order: a per-parameter kind's whole
    (P,) vector under name "" (an optimizer state's under its state's name), each layer's activation under its name."""
    out = {}
    for kind in STEP_START:
        _block(out, record, BEFORE, kind)
    slots = {k[0] for k in record.values} | {k[0] for k in record.flats}
    for g in sorted(s for s in slots if s not in (BEFORE, AFTER)):
        for kind in MICRO:
            if kind == "out":
                for layer in layers:
                    if (g, "out", layer) in record.values:
                        out[g, "out", layer] = record.values[g, "out", layer]
            else:
                _block(out, record, g, kind)
    for kind in STEP_END:
        named = {"state": record.states, "stored": record.stored}.get(kind)
        for name in named if named is not None else ("",):
            flat = record.flats.get((AFTER, f"{kind}:{name}" if named is not None else kind))
            if flat is not None:
                out[AFTER, kind, name] = flat
    return out


def _block(out: dict, record, slot: int, kind: str) -> None:
    if KINDS[kind][2]:
        if (slot, kind) in record.flats:
            out[slot, kind, ""] = record.flats[slot, kind]
    elif (slot, kind, "") in record.values:
        out[slot, kind, ""] = record.values[slot, kind, ""]


def first_parting(a, b, step: int, params, layers: tuple, optional=()) -> Parting | None:
    """The first tensor and element of step `step` at which recorders `a` and `b` part, or None. `optional`: kinds a
    run may lack without parting ("out" when one run is tensor-parallel)."""
    ba = blocks(a.steps[step], layers) if step in a.steps else {}
    bb = blocks(b.steps[step], layers) if step in b.steps else {}
    place = {k: i for i, k in enumerate(ba)}
    place.update({k: len(ba) + i for i, k in enumerate(bb) if k not in place})
    for key in sorted(place, key=lambda k: (_slot(k[0]), KIND_ORDER[k[1]], place[k])):
        slot, kind, name = key
        per_param = KINDS[kind][2]
        if key not in ba or key not in bb:
            if kind in optional:
                continue
            first = (backward_order(params) if kind == "grad" else params)[0].name if per_param else name
            t = Tensor(step, slot, kind, _named(kind, name, first) if per_param else name)
            return Parting(t, None, ba.get(key), bb.get(key), "only in run A" if key in ba else "only in run B")
        x, y = np.asarray(ba[key]), np.asarray(bb[key])
        if x.shape != y.shape:
            if kind in optional:
                continue
            return Parting(Tensor(step, slot, kind, name), None, x, y, f"shape {x.shape} in run A, {y.shape} in run B")
        if _same_bytes(x, y):  # the common case, at memcmp's speed
            continue
        differ = differing(x, y)
        if not differ.any():
            continue
        if not per_param:
            i = int(np.flatnonzero(differ)[0])
            return Parting(Tensor(step, slot, kind, name), i, x.reshape(-1)[i], y.reshape(-1)[i], "bits", x.shape)
        for p in backward_order(params) if kind == "grad" else params:
            mine = differ[p.offset: p.offset + p.size]
            if mine.any():
                i = int(np.argmax(mine))
                return Parting(Tensor(step, slot, kind, _named(kind, name, p.name)), i, x[p.offset + i],
                               y[p.offset + i], "bits", p.shape)
    return None


def _slot(slot: int) -> int:
    return {BEFORE: -1, AFTER: 1 << 31}.get(slot, slot)


def _named(kind: str, state: str, param: str) -> str:
    """A per-parameter tensor's name: the parameter's, after its state's for an optimizer state ("m fc1.w")."""
    return f"{state} {param}" if kind in ("state", "stored") else param


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """x and y hold the same bytes in the same dtype (then the same bits; else `differing` decides)."""
    if x.dtype != y.dtype or not (x.flags.c_contiguous and y.flags.c_contiguous):
        return False
    return np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))


def differing(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(flat) True where x and y are not the same bits (see the module docstring)."""
    a, b = to_float64(np.asarray(x)).reshape(-1), to_float64(np.asarray(y)).reshape(-1)
    same = ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    return ~same


def value_of(record, t: Tensor, params, layers: tuple):
    """A run's whole tensor `t` from its step record (a parameter's flat view for per-parameter kinds), or None."""
    found = blocks(record, layers).get((t.slot, t.kind, t.name.split(" ")[0] if t.kind in ("state", "stored")
                                        else ("" if KINDS[t.kind][2] else t.name)))
    if found is None or not KINDS[t.kind][2]:
        return found
    p = next(p for p in params if p.name == t.name.split(" ")[-1])
    return np.asarray(found)[p.offset: p.offset + p.size]
