"""nano.py: ZeRO in one file. Stages 0-3 on N simulated ranks, read top to bottom, bit for bit zerosim's engine.

    from zerosim.nano import NanoZero
    nano = NanoZero([4, 16, 3], n=3, stage=3, precision="bf16-mixed", params=w)   # w: (P,) fp32 initial weights
    losses = nano.step(batches)   # batches[r]: rank r's K micro-batches [(x (B, 4), t (B, 3)), ...]; one loss a rank

ZeRO (Rajbhandari et al. 2020) keeps a model's training state cut in N shards, one per rank, instead of N copies:
stage 1 cuts the optimizer's state (the fp32 master and Adam's m and v), stage 2 the gradients too, stage 3 the 16-bit
weights too, which each layer then gathers just before it needs them. Everything a rank sends crosses a ring.

The model is the MLP the engine and the oracle both run (zerosim.models.MLP with its defaults): Linear, ReLU, ...,
Linear, half-MSE. Its parameters form one flat vector, each layer's W (row-major) then b, layer after layer. The
arithmetic is the engine's own kernels, imported through their faces: the casts, the Linear and ReLU pairs (each
product exact, rounded once: the same bits on every machine) and Adam. Everything else is here, in NumPy.

What it leaves out, and where the package has it (docs/explanation/architecture.md maps every file):
    the ring as messages between ranks, its trace     collectives/_ring.py, its naive twin collectives/_naive.py
    the stages as plans, the step as a schedule        parallel/data/_plan.py, parallel/data/_engine.py
    gathering a unit ahead of time, freeing it         parallel/data/_fetch.py, parallel/data/_gather.py
    a unit reduce-scattered as backward finishes it    parallel/data/_reduce.py (the same sums, element by element)
    each rank's buffers in its memory ledger           parallel/data/_state.py, cluster/_ledger.py
    loss scaling, other formats and policies           precision/_policy.py, precision/_loss_scaling.py
    DDP's, DeepSpeed's and FSDP2's averaging           parallel/data/recipes/ (the default, the seeds', is here)
    activation checkpointing, GPT and Llama            models/_schedule.py, models/gpt/, models/llama/
    other optimizers, clipping, offload, ZeRO++        optim/, parallel/data/_clipping.py, parallel/offload/, ...
    many nodes (HSDP, MiCS, hpZ), tensor parallelism   parallel/data/multinode/, parallel/tensor/
    MPI and GPUs as the ranks                          backends/
The oracle it is also checked against, one device in the ring's order: reference/_oracle.py.

Letters: N ranks, P parameters, s = ceil(P/N) the shard, Ψ = N·s the padded length (the tail is zeros), K
micro-steps a step (gradient accumulation), B a micro-batch's rows, D_0 ... D_L the widths, L the Linear layers.
"""

from __future__ import annotations

import numpy as np

from zerosim.models import linear_backward, linear_forward, relu_backward, relu_forward
from zerosim.optim import Adam
from zerosim.precision import cast, get_format

F32 = np.float32

PRECISIONS = {  # name: (the format of the weights, gradients and the wire; the optimizer's copy of the weights)
    "fp32": ("fp32", "fp32"),  # one format throughout (the optimizer steps the weights themselves)
    "fp16-mixed": ("fp16", "fp32"),  # 16-bit weights and gradients, fp32 master weights (Micikevicius et al. 2018)
    "bf16-mixed": ("bf16", "fp32"),
}

SHARDED = {  # ZeRO's stages (the paper's Figure 1): which of a rank's buffers hold only its 1/N shard
    0: (),  # plain data parallelism: every rank holds everything
    1: ("optimizer",),  # P_os: the fp32 master and Adam's m and v
    2: ("optimizer", "grads"),  # P_os+g
    3: ("optimizer", "grads", "params"),  # P_os+g+p
}


# -- 1. The ring: rank r sends to rank r+1 and receives from rank r-1 (mod N) ---------------------------------------
def reduce_scatter(xs: list) -> list:
    """N ranks' (Ψ,) arrays -> rank c's (s,) chunk c of their sum, hop by hop in NCCL's order.

    The partial sum of chunk c starts at rank c+1 and travels the ring, so rank c ends with
    ((x[c+1] + x[c+2]) + ...) + x[c]. Each hop adds in the arrays' own format (the wire's), one rounding per add,
    as NCCL's kernels do (NCCL 2.30.7 src/device/reduce_scatter.h, reduce.h: runRing): a 16-bit sum of N terms
    rounds N-1 times, and so its bits depend on this order. NOTE: that is one ring in rank order (NCCL_ALGO=Ring,
    one channel); NCCL's own all-reduce cuts the buffer otherwise, and more channels, trees or NVLS add in other
    orders (docs/explanation/nccl.md)."""
    n = len(xs)
    s = len(xs[0]) // n

    def chunk(r, c):  # rank r's own copy of chunk c, a view
        c %= n
        return xs[r][c * s : (c + 1) * s]

    held = [chunk(r, r - 1).copy() for r in range(n)]  # (s,) each: rank r starts chunk r-1's sum with its own piece
    for step in range(1, n):  # N-1 steps; each rank sends s elements a step, (N-1)/N of the buffer in all
        # rank r receives rank r-1's partial sum (of chunk r-1-step) and adds its own piece of that chunk
        held = [held[r - 1] + chunk(r, r - 1 - step) for r in range(n)]
    return held  # rank r now holds chunk r - 1 - (N-1) = r, summed over every rank


def all_gather(pieces: list) -> list:
    """N ranks' pieces -> every rank's copy of all of them, joined in rank order: N-1 hops, each rank forwarding to
    rank r+1 the piece it received last. Copies only: no arithmetic, no rounding."""
    n = len(pieces)
    have = [{r: pieces[r]} for r in range(n)]  # what rank r holds, by the rank it came from
    for step in range(1, n):
        for r in range(n):
            have[r][(r - step) % n] = have[r - 1][(r - step) % n].copy()  # received from rank r-1
    return [np.concatenate([have[r][q] for q in range(n)]) for r in range(n)]


# -- 2. The model's flat vector ------------------------------------------------------------------------------------
def windows_of(widths: list) -> list:
    """Each Linear's [a, b) in the flat vector: W (D_out, D_in) row-major, then b (D_out,)."""
    out, a = [], 0
    for d_in, d_out in zip(widths[:-1], widths[1:]):
        out.append((a, a + d_out * d_in + d_out))
        a = out[-1][1]
    return out


def half_mse(y, t, fmt) -> tuple:
    """(L = ½ Σ (y - t)² / B in fp32, dL/dy rounded once to fmt): zerosim.models.HalfMSE's arithmetic."""
    d = y.astype(F32) - t.astype(F32)  # (B, D_L) fp32
    loss = float(0.5 * np.sum(d * d, dtype=F32) / d.shape[0])
    return loss, cast(d / F32(d.shape[0]), fmt)  # (B, D_L) fmt: the gradient that starts backward


# -- 3. The trainer ------------------------------------------------------------------------------------------------
class NanoZero:
    """ZeRO stage 0-3 on N ranks for MLP(widths), in a mixed precision, with Adam (seed 001's formula) on each rank's
    fp32 shard. `params`: the (P,) initial weights; `accumulation_steps`: K micro-batches per rank per step."""

    def __init__(self, widths, n: int, stage: int, precision: str = "fp16-mixed", params=None, lr: float = 1e-3,
                 accumulation_steps: int = 1):
        self.widths, self.n, self.stage, self.K = list(widths), n, stage, accumulation_steps
        self.sharded = SHARDED[stage]
        self.fmt, master_fmt = (get_format(name) for name in PRECISIONS[precision])
        self.windows = windows_of(self.widths)
        self.P = self.windows[-1][1]
        self.s = -(-self.P // n)  # s = ceil(P/N): the padding of the last shards is zeros, and stays zero
        padded = np.zeros(n * self.s)  # (Ψ,) float64
        padded[: self.P] = params
        master = cast(padded, master_fmt)  # (Ψ,) fp32: each weight rounded once
        weights = cast(padded, self.fmt)  # (Ψ,) 16-bit: the copy forward and backward read
        self.master = [self.mine(master, r, "optimizer") for r in range(n)]  # (s,) fp32 a rank (stage 0: (Ψ,))
        self.m = [np.zeros_like(w) for w in self.master]  # Adam's first moment, shaped like the master
        self.v = [np.zeros_like(w) for w in self.master]  # and its second
        self.params = [self.mine(weights, r, "params") for r in range(n)]  # (Ψ,) 16-bit a rank (stage 3: (s,))
        self.adam, self.t = Adam(lr=lr), 0  # t: optimizer steps taken

    def mine(self, whole, r: int, buffer: str):
        """Rank r's copy of a (Ψ,) buffer: its shard [r·s, (r+1)·s) where this stage shards `buffer`, else all."""
        return whole[r * self.s : (r + 1) * self.s].copy() if buffer in self.sharded else whole.copy()

    def layer(self, i: int) -> list:
        """Layer i's (W, b) on every rank. Stage 3: all-gathered from the shards that hold [a, b), in forward and again
        in backward (a rank keeps no whole layer between the two); stages 0-2: every rank's own whole copy."""
        a, b = self.windows[i]
        if "params" in self.sharded:
            s = self.s
            # rank q's piece: [a, b) ∩ its shard [q·s, (q+1)·s), in the shard's own coordinates (maybe empty)
            pieces = [p[min(max(a - q * s, 0), s) : min(max(b - q * s, 0), s)] for q, p in enumerate(self.params)]
            window = all_gather(pieces)  # (b - a,) 16-bit on every rank
        else:
            window = [p[a:b] for p in self.params]
        d_in, d_out = self.widths[i], self.widths[i + 1]
        return [(x[: d_out * d_in].reshape(d_out, d_in), x[d_out * d_in :]) for x in window]

    def forward_backward(self, micro: list) -> tuple:
        """One micro-step on every rank, layer by layer (the engine's schedule): (each rank's loss, each rank's (Ψ,)
        gradient in the 16-bit format). `micro[r]`: rank r's (x (B, D_0), t (B, D_L))."""
        n, fmt, L = self.n, self.fmt, len(self.windows)
        acts = [cast(x, fmt) for x, _ in micro]  # (B, D_0) a rank, rounded once to 16 bits
        saved = [[] for _ in range(n)]  # what backward needs of each layer: its input, and the ReLU's input
        for i in range(L):
            weights = self.layer(i)
            for r in range(n):
                y, _ = linear_forward(acts[r], *weights[r], fmt)  # (B, D_i+1) = fmt(x @ W.T + b)
                saved[r].append((acts[r], y))
                acts[r] = relu_forward(y, fmt)[0] if i < L - 1 else y
        losses, dys = zip(*(half_mse(acts[r], micro[r][1], fmt) for r in range(n)))
        dys, grads = list(dys), [np.zeros(n * self.s, fmt.dtype) for _ in range(n)]  # (Ψ,) 16-bit a rank
        for i in reversed(range(L)):
            weights, (a, b) = self.layer(i), self.windows[i]
            for r in range(n):
                x, y = saved[r][i]
                dy = relu_backward(dys[r], (y,), fmt) if i < L - 1 else dys[r]  # through the ReLU after layer i
                dys[r], dw, db = linear_backward(dy, (x,), weights[r][0], fmt)  # (B, D_i), (D_i+1, D_i), (D_i+1,)
                grads[r][a:b] = np.concatenate([dw.reshape(-1), db])
        return list(losses), grads

    def step(self, batches: list) -> list:
        """One optimizer step on N ranks' K micro-batches each (`batches[r][k]`; K = 1 may give (x, t) alone).
        Returns each rank's loss, the mean over its micro-batches."""
        n, K, sharded = self.n, self.K, self.sharded
        batches = [[b] if K == 1 and not isinstance(b[0], (list, tuple)) else b for b in batches]
        losses, acc = [[] for _ in range(n)], None
        for k in range(K):
            loss, grads = self.forward_backward([batches[r][k] for r in range(n)])
            if "grads" in sharded:  # stages 2/3: every micro-step's gradient is reduce-scattered; a rank keeps (s,)
                grads = reduce_scatter(grads)
            # gradient accumulation in 16 bits: the first micro-step's as it is, then one rounding per add
            acc = grads if k == 0 else [x + g for x, g in zip(acc, grads)]
            for r in range(n):
                losses[r].append(loss[r])
        if "grads" not in sharded:  # stages 0/1: each rank's own K gradients, reduced once at the end
            acc = reduce_scatter(acc)  # (s,) a rank: stage 1 updates its shard alone
            if "optimizer" not in sharded:  # stage 0: all-reduce = reduce-scatter, then all-gather
                acc = all_gather(acc)  # (Ψ,) a rank, every rank the same
        if not all(np.isfinite(g.astype(F32)).all() for g in acc):  # NOTE: a 16-bit sum may overflow to inf
            raise FloatingPointError("the reduced gradient holds inf or NaN (no loss scaling here); nothing changed")
        self.t += 1
        fresh = []
        for r in range(n):
            # the seeds' averaging: summed in the wire's format above, cast to fp32 (exact), divided by N·K once
            g = acc[r].astype(F32) / F32(n * K)  # (s,) fp32 (stage 0: (Ψ,))
            self.adam.step(self.master[r], g, {"m": self.m[r], "v": self.v[r]}, self.t)  # elementwise, in place
            fresh.append(cast(self.master[r], self.fmt))  # the new 16-bit weights: one rounding each
        if "optimizer" in sharded and "params" not in sharded:  # stages 1/2: every rank needs every weight again
            fresh = all_gather(fresh)
        self.params = fresh  # stage 0: each rank updated all of it; stage 3: each keeps its shard
        return [float(np.mean(np.asarray(x, dtype=np.float64))) for x in losses]

    # -- looking inside: the (P,) vectors as one device would hold them ----------------------------------------------
    def full(self, held: list, buffer: str) -> np.ndarray:
        return (np.concatenate(held) if buffer in self.sharded else held[0])[: self.P].copy()

    def full_master(self) -> np.ndarray:
        return self.full(self.master, "optimizer")

    def full_params(self) -> np.ndarray:
        return self.full(self.params, "params")
