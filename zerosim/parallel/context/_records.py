"""What travels between the units of a context-parallel attention region: the rank's queries, the keys and values it
holds at this hop, what its hops made so far — and, backward, their gradients.

Letters: B batch, H query heads, G key/value heads, L_r the rank's tokens, d_h head width; arrays in the compute
format fmt unless marked acc (fp32; float64 under fp64). The step calls a parallelism only between units
(parallel/_contract.py), and ring attention sends keys and values between blocks of attention, so the attention
core is cut into units (one per hop, _core.py) and its state crosses each cut in one of these records. Each answers
what the step asks of the activation in flight (models/_run.py, `Pass`): `shape` (the block this op computes: the
FLOPs of a hop follow from it), `dtype`, `nbytes` (every part), `snapshot()` (copies for narration).

    Located    a value beside its tokens' sequence positions: the embedding's ids (the GPT's learned positions), the
               Llama's attention input (rotary positions)
    Ring       forward: the residual stream, Q, own K/V, the K/V held at this hop (and the next hop's, on its way),
               each hop's (out_i, lse_i), the merged lse (torch's ring: the fp32 output merged so far, every rank's
               K/V all-gathered); after the last hop the output O
    RingGrad   backward: dO, O, LSE, Q, the K/V held, the dK/dV travelling with it, dQ, the residual's gradient
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from zerosim._dataclass import dataclass


_FIELDS: dict = {}  # record class -> its fields' names, read once (`fields` builds its tuple at every call)


def _names(record) -> tuple:
    cls = type(record)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


def _parts(record):
    """(field name, place, array) for every array part of `record`, in field order: a field's own array (place None),
    or each array among a tuple field's flattened items (place: its index among them)."""
    for name in _names(record):
        v = getattr(record, name)
        if hasattr(v, "nbytes") and hasattr(v, "dtype"):
            yield name, None, v
        elif isinstance(v, tuple):
            for i, x in enumerate(_flat(v)):
                if hasattr(x, "nbytes"):
                    yield name, i, x


def _arrays(record) -> list:
    return [(name if i is None else f"{name}[{i}]", a) for name, i, a in _parts(record)]


def _flat(t):
    for x in t:
        if isinstance(x, tuple):
            yield from _flat(x)
        elif x is not None:
            yield x


class _Record:
    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for _, _, a in _parts(self))

    @property
    def dtype(self):
        return self.q.dtype

    def snapshot(self) -> dict:
        return {name: np.array(a) for name, a in _arrays(self) if not getattr(a, "is_meta", False)}

    def but(self, **changes):
        return replace(self, **changes)


@dataclass(frozen=True)
class Located:
    """`value` (token ids (B, L_r), or an activation (B, L_r, d) or tensor parallelism's Bundle) beside `positions`
    (L_r,) int64, where its tokens sit in the sequence (_split.py)."""

    value: object
    positions: np.ndarray

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def nbytes(self) -> int:
        return int(self.value.nbytes) + int(self.positions.nbytes)

    def snapshot(self) -> dict:
        inner = self.value.snapshot() if hasattr(self.value, "snapshot") else {"value": np.array(self.value)}
        return {**inner, "positions": np.array(self.positions)}


@dataclass(frozen=True)
class Ring(_Record):
    """Forward state of one rank's attention core (see the module docstring); `work` is (B, H, queries, keys, d_h) of
    the block the next op computes (0 queries: a skipped hop)."""

    residual: object  # the block's input x (B, L_r, d) (tensor parallelism: its Bundle's residual stream)
    q: object  # (B, H, L_r, d_h)
    kv: tuple  # (K, V) own, (B, G, L_r, d_h) each
    held: tuple = None  # (K, V) this hop attends to: position s's
    incoming: tuple = None  # (K, V) of the next hop, sent ahead (its handle waits with the parallelism)
    block: object = None  # this hop's Block (_blocks.py), or the all-gather's reach
    work: tuple = ()  # (B, H, L_q, L_k, d_h) of this op's block
    steps: tuple = ()  # ((out_i (B, H, L_i, d_h), lse_i (B, H, L_i) acc, rows), ...) of the hops so far
    lse: object = None  # (B, H, L_r) acc, merged so far
    gathered: tuple = None  # all-gather: every rank's (K, V) in sequence order, (B, G, L, d_h)
    o: object = None  # (B, H, L_r, d_h) the attention output, once every hop is in
    running: object = None  # torch's ring: (B, H, L_r, d_h) acc, the output merged so far (_torch_core.py)

    @property
    def shape(self) -> tuple:
        return self.work


@dataclass(frozen=True)
class RingGrad(_Record):
    """Backward state (see the module docstring)."""

    residual: object  # dL/dy of the block's output: the residual path's share (tensor parallelism: its Bundle's)
    do: object  # (B, H, L_r, d_h) dL/dO
    o: object  # (B, H, L_r, d_h) O as the forward returned it
    lse: object  # (B, H, L_r) acc
    q: object  # (B, H, L_r, d_h)
    held: tuple = None  # (K, V) this hop's
    incoming: tuple = None  # (K, V) of the next hop (backward order), received with `dkv`
    dkv: tuple = None  # the dK, dV travelling with the held K/V (torch's ring: the fp32 sums that arrived)
    dq: object = None  # (B, H, L_r, d_h) dQ so far (None: nothing written yet; torch's ring: fp32)
    block: object = None
    work: tuple = ()
    gathered: tuple = None
    dk: object = None  # (B, G, L_r, d_h) the rank's own, once the ring is done
    dv: object = None

    @property
    def shape(self) -> tuple:
        return self.work
