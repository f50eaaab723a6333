"""The attention core of torch's own context parallelism: one step of its ring, as torchtitan runs it.

torch 2.13.0, torch/distributed/tensor/experimental/_context_parallel/_attention.py, on the path its defaults take
(`_ContextParallelOptions`: convert_to_f32, enable_load_balance, rotate_method ALL_GATHER; torchtitan 9dec370, the
commit of its published Llama 3.1 405B runs, sets "allgather" and the head-tail load balancer, and its Llama calls
repeat_kv before SDPA, so the keys and values torch moves have every query head's copy). Letters: C the CP degree,
p a rank's position, i the step, s = (p − i) mod C whose K/V step i attends to, acc fp32.

    forward, i = 0 .. C−1     `_templated_ring_attention`: the block of step i (_blocks.py: the ring's blocks, which
                              are torch's `_is_causal_behavior` and its load-balanced halves) against K/V of s, taken
                              from one all-gather of every rank's K/V (the parallelism's); its output widened to fp32
                              and merged into the running fp32 output and lse (`_SDPAMerger`: `merge_sigmoid`); the
                              last step rounds the output to the compute format
    backward, i = 0 .. C−1    `_templated_ring_attention_backward`, in torch's order: unit hop{C−1−i} runs step i (the
                              engine runs units last first); the block's dQ added into an fp32 dQ started at zeros, its
                              dK, dV added into the fp32 sum for s that arrived from p − 1 (at i = 0 a new one from
                              zeros), which the parallelism sends on to p + 1; after step C−1 the sum that arrives is
                              p's own: `finish` rounds it to the compute format and sums each key head's copies
                              (repeat_kv's backward), and rounds dQ

Every add starts from fp32 zeros or from what arrived, as torch's `zeros_like` and `+=` do (so −0 becomes +0); a
skipped step (contiguous, s > p: torch's SKIP) adds zeros. "fp32" is the compute format's accumulator (acc_dtype):
under fp64 compute zerosim keeps float64, where torch's convert_to_f32 would narrow a float64 run's sums to fp32
(its flash kernels take no float64: a float64 run takes another SDPA backend). The hops save nothing: the output
end keeps Q, O, the lse and the rank's own repeated K/V.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import Layer, acc_dtype, flash_attention_backward, flash_attention_flops, merge_sigmoid
from zerosim.models.llama import repeat_kv, repeat_kv_backward
from zerosim.models.meta import like
from zerosim.parallel.context._core import _merged, attend, rows_of
from zerosim.precision import cast, get_format

# Per merged row: subtract, negate, exp, add, divide (the sigmoid), subtract, min, abs, negate, exp, log1p, two
# subtracts (the lse); per element: subtract, multiply, subtract (the output)
MERGE_ROW_FLOPS, MERGE_FLOPS = 13, 3


def step_of(hop: int, hops: int, kind: str) -> int:
    """The step of torch's ring unit hop{hop} runs: forward its own, backward C − 1 − hop (torch's backward runs its
    steps in forward order; the engine runs the units last first)."""
    return hop if kind == "forward" else hops - 1 - hop


class TorchHop(Layer):
    """Step `step_of(hop, hops, kind)` of torch's ring (module docstring)."""

    saves_input_only = False
    core = True  # a unit of the attention core (the oracle does the core in its own code)
    cp_part = "core"  # what the time model charges it as (analysis/costs/_context_work.py)
    role = "replicated"  # beside tensor parallelism: no operator around it (parallel/tensor/_plan.py)

    def __init__(self, hop: int, hops: int, pieces: int, n_rep: int, block: int, name: str):
        super().__init__(name)
        self.hop, self.hops, self.pieces, self.n_rep, self.block = hop, hops, pieces, n_rep, block

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        out, lse, step = x.running, x.lse, x.block
        if step is not None:  # the held K/V came repeated to every query head
            out_i, lse_i, qr = attend(x, step, self.pieces, 1, self.block, f, out is None)
            out, lse = merge_sigmoid(out, lse, out_i, lse_i, f, qr)
        if self.hop < self.hops - 1:
            return x.but(running=out, lse=lse), {}
        o = cast(out, f)
        own = tuple(repeat_kv(a, self.n_rep) for a in x.kv)  # what SDPA was handed, and saved (its inputs)
        return x.but(o=o, lse=lse, running=None, held=own, gathered=None, incoming=None, work=_merged(o)), {}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        acc = acc_dtype(f)
        step, L = dy.block, dy.q.shape[-2]
        dq = np.zeros(dy.q.shape, acc) if dy.dq is None else dy.dq
        total = tuple(np.zeros(a.shape, acc) for a in dy.held) if dy.dkv is None else dy.dkv
        if step is None:  # torch's SKIP: zeros added everywhere
            return dy.but(dq=dq + acc(0), dkv=tuple(t + acc(0) for t in total)), {}
        qr, kr = rows_of(step.q, self.pieces, L), rows_of(step.k, self.pieces, L)
        k, v = (a[..., kr, :] for a in dy.held)
        parts = flash_attention_backward(dy.do[..., qr, :], (dy.q[..., qr, :], k, v, dy.o[..., qr, :],
                                                             dy.lse[..., qr]), f, self.block, step.causal)
        dq = _add_rows(dq, parts[0], qr, acc)
        dkv = tuple(_add_rows(t, part, kr, acc) for t, part in zip(total, parts[1:]))
        return dy.but(dq=dq, dkv=dkv), {}

    def saved_spec(self, x_shape, fmt) -> dict:
        return {}

    def output_shape(self, x_shape):
        return tuple(x_shape)

    def flops(self, x_shape, kind):
        """The block's flash attention (x_shape: (B, H, queries, keys, d_h)) and, forward after the first step, its
        merge."""
        B, H, Lq, Lk, dh = x_shape
        if Lq == 0:
            return 0
        total = flash_attention_flops(B, H, Lq, dh, kind, self.block, keys=Lk)
        if kind == "forward" and self.hop:
            total += MERGE_ROW_FLOPS * B * H * Lq + MERGE_FLOPS * B * H * Lq * dh
        return total


def _add_rows(total, part, rows: slice, acc):
    """`total` (fp32) with `part` (fmt) widened and added into `rows`: a new array."""
    out = total.copy()
    out[..., rows, :] = total[..., rows, :] + part.astype(acc)
    return out


def finish(dy, n_rep: int, fmt):
    """After torch's last step: dQ and the rank's own dK, dV (arrived in `dkv`, fp32, every query head's copy)
    rounded to the compute format, then repeat_kv's backward (each key head's copies summed): the record the QKV end
    reads."""
    f = get_format(fmt)
    dk, dv = (repeat_kv_backward(cast(a, f), n_rep, f) for a in dy.dkv)
    dq = like(dy.q, dy.q.shape, f.dtype) if getattr(dy.q, "is_meta", False) else cast(dy.dq, f)
    return dy.but(dq=dq, dk=dk, dv=dv, dkv=None, gathered=None, incoming=None)
