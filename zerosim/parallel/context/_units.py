"""The units of a context-parallel attention region: what runs on one rank between the ring's sends.

Letters: B batch, L_r the rank's tokens (L / C), d model width, H query heads, G key/value heads (G = H for the
GPT), d_h head width, n_rep = H / G. The unsplit attention sub-block (models/gpt/_attention.py,
models/llama/_attention.py) is cut where Transformer Engine's CP path communicates (records: _records.py):

    attn.qkv           the norm, the QKV GEMM (Llama: rotary at the tokens' own positions)  -> Ring(Q, K, V, x)
    attn.hop{j}        ring, j = 0 .. C−1: one block of flash attention (the held K/V, _blocks.py's Block),
                       its lse merged in (TE's flash_attn_fwd_softmax_lse_correction); the last hop corrects
                       every step's output (flash_attn_fwd_out_correction): O
    attn.gathered      all-gather: each piece of Q against the gathered keys it sees, one flash call each
    attn.out           W_o, its bias, the residual add                                       -> y (B, L_r, d)

Every rounding is the unsplit unit's (the same kernels: models/layers), except where the ring adds its own: each
hop's output is rounded to fmt and rescaled (models/layers/_attention_merge.py), and dQ, dK, dV are sums of the
hops' 16-bit gradients (`accumulate`). Backward runs the hops in reverse; the K/V a hop attends to and the dK/dV it
adds to arrive with the record, moved by the parallelism (_parallelism.py).

Saved for backward (one rank; names as the unsplit unit's): "block input", the norm's statistics ("LN1 mean", "LN1
rstd" / "norm1 rstd") and, Llama, the tokens' "positions" (L_r,) int64 in attn.qkv; "attention output" (B, L_r,
H·d_h), "Q" (B, H, L_r, d_h), "K" and "V" (B, G, L_r, d_h: the ring's last held pair, position p + 1's, which its
backward starts from, as Transformer Engine saves `p2p_comm_buffers[-1]`; the all-gather's own pair) and "LSE" (B,
H, L_r) acc in attn.out. The hops save nothing. All of it is L_r = L / C tokens long: O(L / C) a rank.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.gpt import embedding_backward, embedding_forward
from zerosim.models.layers import (
    Layer,
    acc_dtype,
    flash_attention_backward,
    flash_attention_flops,
    flash_attention_forward,
    linear_flops,
    merge_heads,
    prenorm_linear_forward,
    prenorm_residual_backward,
    prenorm_residual_flops,
    residual_add,
    rmsnorm_backward,
    rmsnorm_flops,
    rmsnorm_forward,
    rmsnorm_output,
    rope_backward,
    rope_flops,
    rope_forward,
    rope_tables,
    split_heads,
    tokens_linear_backward,
    tokens_linear_forward,
)
from zerosim.models.layers._attention_merge import accumulate, correct_out, merge_lse
from zerosim.models.llama import repeat_kv, repeat_kv_backward
from zerosim.parallel.context._records import Ring, RingGrad
from zerosim.precision import get_format

# Per merged row: max, min, subtract, exp, log1p, add (merge_lse); per corrected row its exp and subtract and per
# element a multiply and an add (correct_out)
MERGE_FLOPS, CORRECT_ROW_FLOPS, CORRECT_FLOPS = 6, 2, 2


def rows_of(pieces: tuple, count: int, length: int) -> slice:
    """The rows of `pieces` (consecutive piece numbers) of a rank's `length` tokens cut in `count` pieces."""
    size = length // count
    return slice(min(pieces) * size, (max(pieces) + 1) * size)


# -- the two ends of the region ----------------------------------------------------------------------------------
class GptQKV(Layer):
    """LN1, then qkv = ln W_qkvᵀ + b_qkv, split into heads (models/gpt/_attention.py's first half)."""

    saves_input_only = False

    def __init__(self, d: int, heads: int, name: str):
        super().__init__(name)
        self.d, self.heads = d, heads
        self.param_shapes = {"ln1.g": (d,), "ln1.b": (d,), "w_qkv": (3 * d, d), "b_qkv": (3 * d,)}

    def forward(self, p, x, fmt):
        f, d = get_format(fmt), self.d
        qkv, (_, mean, rstd) = prenorm_linear_forward(x, p["ln1.g"], p["ln1.b"], p["w_qkv"], p["b_qkv"], f)
        q, k, v = (split_heads(qkv[..., i * d:(i + 1) * d], self.heads) for i in range(3))  # (B, H, L_r, d_h) fmt
        return Ring(x, q, (k, v)), {"block input": x, "LN1 mean": mean, "LN1 rstd": rstd}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        dqkv = np.concatenate([merge_heads(dy.dq), merge_heads(dy.dk), merge_heads(dy.dv)], axis=-1)  # (B, L_r, 3d)
        ln_cache = (cache["block input"], cache["LN1 mean"], cache["LN1 rstd"])
        dx, dg, db, dw, dbias = prenorm_residual_backward(dqkv, dy.residual, ln_cache, p["ln1.g"], p["ln1.b"],
                                                          p["w_qkv"], f)
        return dx, {"ln1.g": dg, "ln1.b": db, "w_qkv": dw, "b_qkv": dbias}

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        B, L, _ = x_shape
        acc = np.dtype(acc_dtype(f))
        return {"block input": (tuple(x_shape), f.dtype), "LN1 mean": ((B, L), acc), "LN1 rstd": ((B, L), acc)}

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        return prenorm_residual_flops(B * L, d, kind) + linear_flops(B * L, d, 3 * d, kind)


class LlamaQKV(Layer):
    """RMSNorm, the fused Q/K/V GEMM, rotary at the tokens' positions (models/llama/_attention.py's first half)."""

    saves_input_only = False
    needs_positions = True  # its input comes as Located (the parallelism wraps it)

    def __init__(self, attn, name: str):
        super().__init__(name)
        self.d, self.heads, self.kv_heads, self.head_dim = attn.d, attn.heads, attn.kv_heads, attn.head_dim
        self.rope_theta, self.rms_eps, self.qkv_bias = attn.rope_theta, attn.rms_eps, attn.qkv_bias
        self.param_shapes = {k: v for k, v in attn.param_shapes.items() if k not in ("o_proj", "o_bias")}

    def _widths(self) -> tuple:
        return self.heads * self.head_dim, self.kv_heads * self.head_dim

    def _tables(self, positions, f):
        """cos, sin (L_r, d_h) at the tokens' positions: rows of the whole sequence's tables (each row a function
        of its position alone, so the same bits as the unsplit unit's)."""
        cos, sin = rope_tables(int(positions.max()) + 1, self.head_dim, self.rope_theta, f)
        return cos[positions], sin[positions]

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        x, positions = x.value, x.positions
        wq, wkv = self._widths()
        ln, (_, rstd) = rmsnorm_forward(x, p["norm1.w"], f, self.rms_eps)
        w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])
        b = np.concatenate([p["q_bias"], p["k_bias"], p["v_bias"]]) if self.qkv_bias else None
        qkv = tokens_linear_forward(ln, w, b, f)  # (B, L_r, (H+2G)·d_h) fmt
        cos, sin = self._tables(positions, f)
        q = rope_forward(split_heads(qkv[..., :wq], self.heads), cos, sin, f)
        k = rope_forward(split_heads(qkv[..., wq:wq + wkv], self.kv_heads), cos, sin, f)
        v = split_heads(qkv[..., wq + wkv:], self.kv_heads)
        return Ring(x, q, (k, v)), {"block input": x, "norm1 rstd": rstd, "positions": positions}

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        x = cache["block input"]
        cos, sin = self._tables(cache["positions"], f)
        dq = rope_backward(dy.dq, cos, sin, f)
        dk = rope_backward(dy.dk, cos, sin, f)
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dy.dv)], axis=-1)
        norm_cache = (x, cache["norm1 rstd"])
        ln = rmsnorm_output(norm_cache, p["norm1.w"], f)
        w = np.concatenate([p["q_proj"], p["k_proj"], p["v_proj"]])
        dln, dw, db = tokens_linear_backward(dqkv, ln, w, f)
        dx_norm, dw_norm = rmsnorm_backward(dln, norm_cache, p["norm1.w"], f)
        wq, wkv = self._widths()
        grads = {"norm1.w": dw_norm, "q_proj": dw[:wq], "k_proj": dw[wq:wq + wkv], "v_proj": dw[wq + wkv:]}
        if self.qkv_bias:
            grads |= {"q_bias": db[:wq], "k_bias": db[wq:wq + wkv], "v_bias": db[wq + wkv:]}
        return residual_add(dy.residual, dx_norm, f), grads  # the residual's two gradient paths, summed once

    def saved_spec(self, x_shape, fmt) -> dict:
        f = get_format(fmt)
        B, L, _ = x_shape
        return {"block input": (tuple(x_shape), f.dtype), "norm1 rstd": ((B, L), np.dtype(acc_dtype(f))),
                "positions": ((L,), np.dtype(np.int64))}

    def flops(self, x_shape, kind):
        B, L, d = x_shape
        rows, (wq, wkv) = B * L, self._widths()
        total = rmsnorm_flops(rows, d, kind) + linear_flops(rows, d, wq + 2 * wkv, kind, self.qkv_bias)
        total += rope_flops(rows * (wq + wkv), kind)
        return total + (rmsnorm_flops(rows, d, "rebuild output") + rows * d if kind == "backward" else 0)


class AttentionOut(Layer):
    """O merged from its heads, W_o (and its bias), the residual add; saves the core's tensors for its backward."""

    saves_input_only = False

    def __init__(self, d: int, heads: int, kv_heads: int, head_dim: int, weight: str, bias: str | None, name: str):
        super().__init__(name)
        self.d, self.heads, self.kv_heads, self.head_dim = d, heads, kv_heads, head_dim
        self.weight, self.bias = weight, bias
        self.param_shapes = {weight: (d, heads * head_dim), **({bias: (d,)} if bias else {})}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        o = merge_heads(x.o)  # (B, L_r, H·d_h) fmt
        out = tokens_linear_forward(o, p[self.weight], p[self.bias] if self.bias else None, f)
        k, v = x.held
        cache = {"attention output": o, "Q": x.q, "K": k, "V": v, "LSE": x.lse}
        return residual_add(x.residual, out, f), cache

    def backward(self, p, dy, cache, fmt):
        f = get_format(fmt)
        o = cache["attention output"]
        do, dw, db = tokens_linear_backward(dy, o, p[self.weight], f)  # the residual passes dy on unchanged
        grads = {self.weight: dw, **({self.bias: db} if self.bias else {})}
        heads = self.heads
        return RingGrad(dy, split_heads(do, heads), split_heads(o, heads), cache["LSE"], cache["Q"],
                        held=(cache["K"], cache["V"])), grads

    def saved_spec(self, x_shape, fmt) -> dict:
        """x_shape = (B, L_r, H·d_h): the merged output's (the first saved, as `Pass.run` reads it)."""
        f = get_format(fmt)
        B, L, _ = x_shape
        act, kv = f.dtype, ((B, self.kv_heads, L, self.head_dim), f.dtype)
        return {"attention output": ((B, L, self.heads * self.head_dim), act),
                "Q": ((B, self.heads, L, self.head_dim), act), "K": kv, "V": kv,
                "LSE": ((B, self.heads, L), np.dtype(acc_dtype(f)))}

    def flops(self, x_shape, kind):
        B, L, width = x_shape
        return linear_flops(B * L, width, self.d, kind, bool(self.bias)) + B * L * self.d


# -- the core: hops of the ring, or one gathered call --------------------------------------------------------------
class Hop(Layer):
    """Hop j of ring attention (module docstring): the block the record names, merged into the running lse; the last
    hop corrects every step's output with the final lse. Backward: the block's dQ, dK, dV, added into the rank's dQ
    and into the dK/dV travelling with the held K/V."""

    saves_input_only = False
    core = True  # a unit of the attention core (the oracle does the core in its own code)

    def __init__(self, hop: int, hops: int, pieces: int, n_rep: int, block: int, name: str):
        super().__init__(name)
        self.hop, self.hops, self.pieces, self.n_rep, self.block = hop, hops, pieces, n_rep, block

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        step, lse, steps = x.block, x.lse, x.steps
        if step is not None:
            L = x.q.shape[-2]
            qr, kr = rows_of(step.q, self.pieces, L), rows_of(step.k, self.pieces, L)
            k, v = (repeat_kv(a[..., kr, :], self.n_rep) for a in x.held)
            out, (*_, lse_step) = flash_attention_forward(x.q[..., qr, :], k, v, f, self.block, step.causal)
            if lse is None and qr != slice(0, L):
                raise RuntimeError("the ring's first block must hold every query row (Transformer Engine's step 0)")
            lse = lse_step if lse is None else merge_lse(lse, lse_step, f, qr)
            steps = steps + ((out, lse_step, qr),)
        if self.hop < self.hops - 1:
            return x.but(steps=steps, lse=lse), {}
        o = None
        for out, lse_step, qr in steps:  # TE: every step's output corrected with the final lse, in step order
            o = correct_out(o, out, lse, lse_step, f, qr)
        return x.but(steps=(), lse=lse, o=o, incoming=None, work=_merged(o)), {}

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


# -- the GPT's embedding at the tokens' positions -------------------------------------------------------------------
class PositionedEmbedding(Layer):
    """The GPT's token + learned position embedding at the rank's tokens' positions (its input Located): the same
    rounding as models/gpt/_embedding.py, position t's row of wpe for token t wherever t sits."""

    saves_input_only = True  # cache == {"input": Located(ids, positions)}
    needs_positions = True

    def __init__(self, unit):
        super().__init__(unit.name)
        self.vocab, self.max_len, self.d = unit.vocab, unit.max_len, unit.d
        self.param_shapes = dict(unit.param_shapes)
        self._unit = unit

    def forward(self, p, x, fmt):
        y, _ = embedding_forward(x.value, p["wte"], p["wpe"], fmt, x.positions)
        return y, {"input": x}

    def backward(self, p, dy, cache, fmt):
        x = cache["input"]
        dwte, dwpe = embedding_backward(dy, (x.value,), self.vocab, self.max_len, fmt, x.positions)
        return None, {"wte": dwte, "wpe": dwpe}

    def saved_spec(self, x_shape, fmt, ids_dtype=np.int64) -> dict:
        return {"input": (tuple(x_shape), np.dtype(ids_dtype))}

    def output_shape(self, x_shape):
        return (*x_shape, self.d)

    def flops(self, x_shape, kind):
        return self._unit.flops(x_shape, kind)

    def init(self, rng):
        return self._unit.init(rng)

