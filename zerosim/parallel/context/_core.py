"""The attention core of a context-parallel rank: a hop of ring attention, or the all-gather's one call per piece.

Letters: B batch, L_r the rank's tokens (L / C), H query heads, G key/value heads, d_h head width, n_rep = H / G.
Between the QKV end and the output end (_ends.py), in the record that crosses the cuts (_records.py):

    attn.hop{j}     ring, j = 0 .. C−1: the block the record names (_blocks.py: which pieces of Q meet which of the
                    held K/V, masked or not), one flash call (models/layers/_flash_attention.py); its lse merged in
                    (Transformer Engine's flash_attn_fwd_softmax_lse_correction); the last hop corrects every step's
                    output with the final lse (flash_attn_fwd_out_correction): models/layers/_attention_merge.py
    attn.gathered   all-gather: each piece of Q against the gathered keys it sees, one flash call each, no merge

Backward runs the hops in reverse; each adds its block's dQ into the rank's dQ and its dK, dV into the sums that travel
with the K/V (a piece copied on its first write, added in fmt after: `accumulate`). The K/V a hop attends to, and the
dK/dV it adds to, arrive with the record: the parallelism moves them (_parallelism.py), so a hop never asks which rank
it runs on. The hops save nothing: what backward needs (Q, the last K/V held, O, the lse) the output end keeps.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import Layer, flash_attention_backward, flash_attention_flops, flash_attention_forward
from zerosim.models.layers import accumulate, correct_out, merge_lse
from zerosim.models.llama import repeat_kv, repeat_kv_backward
from zerosim.precision import get_format

# Per merged row: max, min, subtract, exp, log1p, add (merge_lse); per corrected row its exp and subtract and per
# element a multiply and an add (correct_out)
MERGE_FLOPS, CORRECT_ROW_FLOPS, CORRECT_FLOPS = 6, 2, 2


def attend(x, step, pieces: int, n_rep: int, block: int, f, first: bool) -> tuple:
    """(out (fmt), lse (acc), the query rows) of the block `step` names: its rows of Q against its rows of the held
    K/V (repeated n_rep times), one flash call. The `first` block of a ring must hold every query row (its step 0)."""
    L = x.q.shape[-2]
    qr, kr = rows_of(step.q, pieces, L), rows_of(step.k, pieces, L)
    if first and qr != slice(0, L):
        raise RuntimeError("a ring's first block must hold every query row (its step 0)")
    k, v = (repeat_kv(a[..., kr, :], n_rep) for a in x.held)
    out, (*_, lse) = flash_attention_forward(x.q[..., qr, :], k, v, f, block, step.causal)
    return out, lse, qr


def rows_of(pieces: tuple, count: int, length: int) -> slice:
    """The rows of `pieces` (consecutive piece numbers) of a rank's `length` tokens cut in `count` pieces."""
    size = length // count
    return slice(min(pieces) * size, (max(pieces) + 1) * size)


class Hop(Layer):
    """Hop j of ring attention (module docstring): the block the record names, merged into the running lse; the last
    hop corrects every step's output with the final lse. Backward: the block's dQ, dK, dV, added into the rank's dQ
    and into the dK/dV travelling with the held K/V."""

    saves_input_only = False
    core = True  # a unit of the attention core (the oracle does the core in its own code)
    cp_part = "core"  # what the time model charges it as (analysis/costs/_context_work.py)
    role = "replicated"  # beside tensor parallelism: no operator around it (parallel/tensor/_plan.py)

    def __init__(self, hop: int, hops: int, pieces: int, n_rep: int, block: int, name: str,
                 keep_steps: bool = False):
        super().__init__(name)
        self.hop, self.hops, self.pieces, self.n_rep, self.block = hop, hops, pieces, n_rep, block
        self.keep_steps = keep_steps  # the last hop hands every step's (out_i, lse_i) on, for a narration to read

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        step, lse, steps = x.block, x.lse, x.steps
        if step is not None:
            out, lse_step, qr = attend(x, step, self.pieces, self.n_rep, self.block, f, lse is None)
            lse = lse_step if lse is None else merge_lse(lse, lse_step, f, qr)
            steps = steps + ((out, lse_step, qr),)
        if self.hop < self.hops - 1:
            return x.but(steps=steps, lse=lse), {}
        o = None
        for out, lse_step, qr in steps:  # TE: every step's output corrected with the final lse, in step order
            o = correct_out(o, out, lse, lse_step, f, qr)
        return x.but(steps=steps if self.keep_steps else (), lse=lse, o=o, incoming=None, work=_merged(o)), {}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        step = dy.block
        if step is None:
            return self._done(dy), {}
        L = dy.q.shape[-2]
        qr, kr = rows_of(step.q, self.pieces, L), rows_of(step.k, self.pieces, L)
        k, v = (repeat_kv(a[..., kr, :], self.n_rep) for a in dy.held)
        dq_, dk_, dv_ = flash_attention_backward(dy.do[..., qr, :], (dy.q[..., qr, :], k, v, dy.o[..., qr, :],
                                                                     dy.lse[..., qr]), f, self.block, step.causal)
        dk_, dv_ = repeat_kv_backward(dk_, self.n_rep, f), repeat_kv_backward(dv_, self.n_rep, f)
        dq = _add_pieces(dy.dq, dq_, step.q, step.first_dq, qr.start, self.pieces, L, f)
        dkv = tuple(_add_pieces(total, part, step.k, step.first_dkv, kr.start, self.pieces, L, f)
                    for total, part in zip(dy.dkv, (dk_, dv_)))
        return self._done(dy.but(dq=dq, dkv=dkv)), {}

    def _done(self, dy):
        """After hop 0 (the rank's own K/V, the last to be added to) the travelling dK, dV are the rank's own."""
        return dy.but(dk=dy.dkv[0], dv=dy.dkv[1], dkv=None, incoming=None) if self.hop == 0 else dy

    def saved_spec(self, x_shape, fmt) -> dict:
        return {}

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        """The block's flash attention (x_shape = Ring.work: (B, H, queries, keys, d_h)), its merge, and on the last
        hop the output's correction."""
        B, H, Lq, Lk, dh = x_shape
        if Lq == 0:
            return 0
        total = flash_attention_flops(B, H, Lq, dh, kind, self.block, keys=Lk)
        if kind == "forward":
            total += MERGE_FLOPS * B * H * Lq if self.hop else 0
        return total


class Gathered(Layer):
    """All-gather: each piece of Q against the gathered keys it sees (_blocks.py `Reach`), one flash call each, its
    own output and lse kept (no merge: Transformer Engine's AttnFuncWithCPAndKVAllGather). Backward: dQ by piece,
    dK and dV over the whole sequence (zeros, then each piece's added, in fmt), for the parallelism to
    reduce-scatter to their owners."""

    saves_input_only = False
    core = True
    cp_part = "core"
    role = "replicated"

    def __init__(self, pieces: int, n_rep: int, block: int, name: str):
        super().__init__(name)
        self.pieces, self.n_rep, self.block = pieces, n_rep, block

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        L = x.q.shape[-2]
        outs, lses = [], []
        for reach in x.block:
            rows = rows_of((reach.q,), self.pieces, L)
            k, v = (repeat_kv(a[..., :reach.stop, :], self.n_rep) for a in x.gathered)
            out, (*_, lse) = flash_attention_forward(x.q[..., rows, :], k, v, f, self.block, reach.causal)
            outs.append(out)
            lses.append(lse)
        o, lse = np.concatenate(outs, axis=-2), np.concatenate(lses, axis=-1)
        return x.but(o=o, lse=lse, held=x.kv, gathered=None, work=_merged(o)), {}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        L = dy.q.shape[-2]
        dk, dv = (np.zeros_like(a) for a in dy.gathered)  # (B, G, L, d_h) fmt: TE's torch.zeros, then add_
        dq = [None] * self.pieces
        for reach in dy.block:
            rows = rows_of((reach.q,), self.pieces, L)
            k, v = (repeat_kv(a[..., :reach.stop, :], self.n_rep) for a in dy.gathered)
            dq_, dk_, dv_ = flash_attention_backward(dy.do[..., rows, :], (dy.q[..., rows, :], k, v,
                                                                           dy.o[..., rows, :], dy.lse[..., rows]),
                                                     f, self.block, reach.causal)
            dq[reach.q] = dq_  # dq[:, i].copy_(dq_per_step[i])
            for total, part in ((dk, dk_), (dv, dv_)):
                total[..., :reach.stop, :] = accumulate(total[..., :reach.stop, :],
                                                        repeat_kv_backward(part, self.n_rep, f), f)
        return dy.but(dq=np.concatenate(dq, axis=-2), dkv=(dk, dv), gathered=None), {}

    def saved_spec(self, x_shape, fmt) -> dict:
        return {}

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        """x_shape = Ring.work: (B, H, queries, keys, d_h) summed over the pieces (_parallelism.py sets it per
        piece: `work` holds one row per piece)."""
        return sum(flash_attention_flops(B, H, Lq, dh, kind, self.block, keys=Lk) for B, H, Lq, Lk, dh in
                   _rows(x_shape))


def _merged(o) -> tuple:
    """(B, L_r, H·d_h): the output's shape once its heads are merged, what the output unit computes on."""
    B, H, L, dh = o.shape
    return (B, L, H * dh)


def _rows(work) -> list:
    return [work] if work and not isinstance(work[0], tuple) else list(work)


def _add_pieces(total, part, pieces: tuple, first: tuple, start: int, count: int, length: int, f):
    """`total` (the rank's whole dQ, or the travelling dK/dV; None before any write) with `part` (the block's rows,
    from row `start`) written in piece by piece: copied where this block writes a piece first, added in fmt after."""
    out = np.zeros(part.shape[:-2] + (length, part.shape[-1]), part.dtype) if total is None else total.copy()
    for piece in pieces:
        rows = rows_of((piece,), count, length)
        mine = part[..., rows.start - start:rows.stop - start, :]
        out[..., rows, :] = mine if piece in first else accumulate(out[..., rows, :], mine, f)
    return out


