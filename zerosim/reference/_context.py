"""The oracle of context parallelism beside ZeRO: one device runs the C shards of every sequence, with its own plain
ring attention, then reduces their gradients over dp × cp as `Reference` does.

Letters: N ranks, C the CP degree, dp = N / C, p a CP position, L the sequence length, L_r = L / C. For each
data-parallel rank's micro-batch, the C positions' passes (models/_run.py) walk the CP model's schedule side by side,
running its units (shared arithmetic: the norms, GEMMs, rotary, the FFN, the loss) — except the attention core,
which the oracle does itself, for all C positions at once, in code that shares nothing with parallel/context/ but the
kernels (the flash block, models/layers/_flash_attention.py, and Transformer Engine's merge arithmetic,
models/layers/_attention_merge.py):

    whose tokens     its own cut (`_positions`): 1 or 2 chunks a position, position p's chunk(s) p (and 2C − 1 − p)
    forward, ring    for p: the positions p, p − 1, ..., p − C + 1 in turn (the K/V walk p → p + 1); of each block
                     the query rows that see some key and the keys some row sees, found from the tokens' positions
                     (not from a table of sections); the mask: none where every row sees every key, causal where it
                     is the lower triangle; the lse merged and the outputs corrected in that order
    backward, ring   dQ of p summed over its blocks in backward order (p + 1, p + 2, ..., p); dK, dV of position s
                     over the ranks s − 1, s − 2, ..., s (the order they travel back); each row copied on its first
                     write, added in the compute format after
    all-gather       each chunk of p's queries against every key up to its last position (bottom-right causal);
                     backward: dK, dV over the whole sequence summed from zeros, chunk by chunk, then summed over the
                     C positions by the naive twin in the ring's order (collectives/_naive.py)
    torch            torch 2.13.0's own context_parallel as torchtitan 9dec370 runs it (torch/distributed/tensor/
                     experimental/_context_parallel/_attention.py: `_templated_ring_attention`, `_SDPAMerger`,
                     `_templated_ring_attention_backward`, `_is_causal_behavior`, `_partial_update`; zigzag is its
                     head-tail load balancing): K/V repeated to H heads before they travel; for p the steps i = 0, ...,
                     C − 1 attend to position (p − i) mod C's K/V, the same blocks as the ring's (a block whose rows
                     are the second half is torch's "partial" one); the merge in fp32 (acc), each op rounded:
                     out − sigmoid(lse_i − lse)·(out − out_i), lse − logsigmoid(lse − lse_i); backward in the same
                     step order, dQ summed from fp32 zeros, dK/dV of position s from fp32 zeros over the ranks
                     s, s + 1, ..., s + C − 1 (the order `_AllToAllRotater` carries them), each cast to fmt once,
                     then repeat_kv's backward to the G heads (`_torch_attention` runs it all on plain arrays)

Then the dp·C gradients (position c of data-parallel rank d is rank d·C + c: the "fsdp" group's ring order) go to a
`Reference` over dp·C ranks with the engine's stage, recipe and precision. What it checks: the ring's schedule (which
blocks, which rows, which mask), the order of the merge and of the gradient sums, the sends' bookkeeping (whose K/V a
hop holds, whose dK/dV travels with it), the all-gather's reordering and reduce-scatter, the sharding of sequences and
of the gradients over dp × cp.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import naive_reduce
from zerosim.models import Pass, needs_params, schedule
from zerosim.models.layers import flash_attention_backward, flash_attention_forward
from zerosim.models.layers import LOG1P, accumulate, acc_dtype, correct_out, merge_lse
from zerosim.models.llama import repeat_kv, repeat_kv_backward
from zerosim.parallel.context import Located
from zerosim.parallel.tensor import local_flat, placement, whole_flat
from zerosim.precision import cast, get_format
from zerosim.precision.arithmetic import arithmetic_of
from zerosim.reference._oracle import Reference
from zerosim.reference._tensor import TensorReference, sum_sequence_parallel

CHUNKS = {"contiguous": 1, "zigzag": 2}  # chunks a position holds


class _Key:
    """A micro-batch by its place (rank of the dp × cp group, micro-step), in place of data."""

    def __init__(self, r: int, k: int):
        self.r, self.k = r, k


class _Fed(Reference):
    """The data-parallel reference over dp × cp ranks: its gradients come from the CP passes, already made."""

    made: dict

    def gradient(self, x, target) -> tuple:
        return self.made[(x.r, x.k)]


def _positions(length: int, split: str, cp: int, p: int) -> np.ndarray:
    """Position p's tokens, in the order it holds them."""
    n = CHUNKS[split] * cp
    if length % n:
        raise ValueError(f"{length} tokens do not cut into {n} chunks")
    chunk = length // n
    ids = [p] if CHUNKS[split] == 1 else [p, n - 1 - p]
    return np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in ids])


def _span(index) -> slice:
    """A run of consecutive indices as a slice (the kernels take a block of rows)."""
    index = np.asarray(index)
    if len(index) == 0 or not np.array_equal(index, np.arange(index[0], index[0] + len(index))):
        raise AssertionError(f"rows {index.tolist()} are not one block")
    return slice(int(index[0]), int(index[-1]) + 1)


class ContextReference:
    """One device, every CP shard of every micro-batch: the numbers a `ZeroEngine(cp.model, ..., parallelisms=(cp,))`
    on N ranks must give, bit for bit.

    Args:
        cp: the engine's `ContextParallel` (its model, degree, style, split, mask).
        optimizer, precision: as for the engine.
        world_size: N (dp = N / C micro-batches a step).
        stage, accumulation_steps, recipe: as for the engine (the flat stages 0-3).
        reduce_bucket_size: the engine's `CommSchedule.reduce_bucket_size`, as `Reference` takes it.
    """

    def __init__(self, cp, optimizer, precision="bf16-mixed", world_size: int = 2, stage=0,
                 accumulation_steps: int = 1, recipe=None, reduce_bucket_size: int | None = None):
        T = 1 if cp.tensor is None else cp.tensor.tp
        if world_size % (cp.cp * T):
            raise ValueError(f"cp = {cp.cp} · tp = {T} does not divide the {world_size} ranks")
        self.cp, self.C, self.T, self.dp = cp, cp.cp, T, world_size // (cp.cp * T)
        self.model = cp.model
        # beside tensor parallelism, its operators as TensorReference does them, on one device (and its slices)
        self.tensor = None if T == 1 else TensorReference(cp.tensor, optimizer, precision, world_size // cp.cp,
                                                          stage, accumulation_steps, recipe)
        tp = cp.tensor  # each TP slice's weights, cut from the whole model's as TensorReference cuts them
        params = [cp.full.init_params()] if T == 1 else [local_flat(tp.local, tp._whole, tp.full, t) for t in range(T)]
        self.slices = [_Fed(self.model, optimizer, precision, self.dp * self.C, params=w,
                            accumulation_steps=accumulation_steps, recipe=recipe, strategy=stage,
                            reduce_bucket_size=reduce_bucket_size) for w in params]
        for s in self.slices:
            s.made = {}
        self.inner = self.slices[0]
        self.precision = self.inner.precision
        if cp.local is None:  # cp = 1: the data-parallel (or tensor-parallel) oracle itself
            self.inner = self.tensor if T > 1 else Reference(cp.full, optimizer, precision, world_size,
                                                             accumulation_steps=accumulation_steps, recipe=recipe,
                                                             strategy=stage, reduce_bucket_size=reduce_bucket_size)

    def step(self, batches) -> list:
        """`batches`: per data-parallel rank one (x, target) (B, L) micro-batch or a list of K. Returns each rank's loss
        (rank d·C + c: position c of data-parallel rank d; beside TP, those of TP position 0)."""
        if self.cp.local is None:
            return self.inner.step(batches)
        K = self.inner.accumulation_steps
        micro = [[b] if K == 1 and len(b) == 2 and not isinstance(b[0], (list, tuple)) else list(b) for b in batches]
        scale = self.inner.scaler.scale
        with np.errstate(over="ignore", invalid="ignore"):
            for d in range(self.dp):
                for k in range(K):
                    for c, per_slice in enumerate(self.gradients(*micro[d][k], scale)):
                        for s, made in zip(self.slices, per_slice):
                            s.made[(d * self.C + c, k)] = made
            keys = [[(_Key(r, k), None) for k in range(K)] for r in range(self.dp * self.C)]
            losses = [[[] for _ in keys] for _ in self.slices]
            reduced = [s.reduce_step(keys, lost) for s, lost in zip(self.slices, losses)]
            if self.T > 1 and self.cp.tensor.sequence_parallel:  # the norms' and biases' sums over the TP slices
                sum_sequence_parallel(self.inner.layout, self.cp.tensor.local, reduced, self.inner.plan.stage == 0)
        found = any(not np.all(np.isfinite(r.astype(np.float64))) for r in reduced)  # the engine's flag: every rank
        out = [s.apply_step(r, lost, found) for s, r, lost in zip(self.slices, reduced, losses)]
        for s in self.slices:
            s.made = {}
        return out[0]

    def whole_params(self) -> np.ndarray:
        """The whole model's (P,) 16-bit weights (joined from the TP slices beside tensor parallelism)."""
        if self.cp.local is None and self.tensor is not None:
            return self.tensor.whole_params()
        if self.tensor is None:
            return self.inner.compute_params()
        return whole_flat(self.cp.tensor.local, [s.compute_params() for s in self.slices], self.cp.full)

    def whole_master(self) -> np.ndarray:
        if self.cp.local is None and self.tensor is not None:
            return self.tensor.whole_master()
        if self.tensor is None:
            return self.inner.master()
        return whole_flat(self.cp.tensor.local, [s.master() for s in self.slices], self.cp.full)

    # -- one micro-batch's C shards (each on T TP slices) ------------------------------------------------------------
    def gradients(self, x, target, scale: float = 1.0) -> list:
        """`[position c][TP slice t]` (loss, (padded,) gradient) of one micro-batch (B, L)."""
        model, C, T, f, split = self.model, self.C, self.T, self.precision.compute_format, self.cp.split
        x, target = np.asarray(x), np.asarray(target)
        where = [_positions(x.shape[1], split, C, c) for c in range(C)]
        passes = [[Pass(model, x[:, w], target[:, w], f, loss_scale=scale) for _ in range(T)] for w in where]
        grads = [[np.zeros(self.inner.padded, f.dtype) for _ in range(T)] for _ in range(C)]
        kept = [{} for _ in range(C)]  # each position's sequence shards (SP), by unit
        for op in schedule(model):
            unit = model.layers[op.layer] if op.layer >= 0 else None
            if getattr(unit, "core", False):  # the attention core: the oracle's own, at its first unit
                if not hasattr(unit, "hop") or unit.hop == (0 if op.kind == "forward" else C - 1):
                    for t in range(T):  # each TP slice's heads: a ring of its own over the C positions
                        (self._forward if op.kind == "forward" else self._backward)([ps[t] for ps in passes],
                                                                                     where, unit)
                continue
            place = None if self.tensor is None or unit is None else placement(unit, self.cp.tensor.sequence_parallel)
            for ps, shards in zip(passes, kept) if self.tensor is not None else ():
                if op.kind == "loss":
                    self.tensor._loss_statistics(ps)
                else:
                    self.tensor._before(ps, op, unit, place, shards)
            if op.kind == "forward" and op.layer in model.positioned:
                for ps, w in zip(passes, where):
                    for p in ps:
                        p.a = Located(p.a, w)
            for c, ps in enumerate(passes):
                for t, p in enumerate(ps):
                    done = p.run(op, self.slices[t].layer_params(op.layer) if needs_params(model, op) else {})
                    for spec in (model.layer_specs(op.layer) if done.grads else ()):
                        grads[c][t][spec.offset:spec.offset + spec.size] = np.asarray(
                            done.grads[spec.name]).reshape(-1)
            if place is not None:
                for ps in passes:
                    self.tensor._after(ps, op, place)
        return [[(p.loss, g) for p, g in zip(ps, gs)] for ps, gs in zip(passes, grads)]

    # -- attention, forward ----------------------------------------------------------------------------------------
    def _forward(self, passes, where, unit) -> None:
        f, C, n_rep = self.precision.compute_format, self.C, unit.n_rep
        states = [p.a for p in passes]
        if self.cp.style == "torch":  # torch's CP moves the K/V repeat_kv made (torchtitan repeats before SDPA)
            reps = [tuple(repeat_kv(a, n_rep) for a in s.kv) for s in states]
            for c, (p, s) in enumerate(zip(passes, states)):
                o, lse = _torch_forward(s.q, reps, where, c, self.cp.causal, self.cp.split, f, unit.block)
                B, H, L, dh = o.shape
                p.a = s.but(o=o, lse=lse, held=reps[c], work=(B, L, H * dh))
            return
        for c, (p, s) in enumerate(zip(passes, states)):
            if self.cp.style == "allgather":
                o, lse = self._gathered(s, states, where, c, unit)
            else:
                o, lse = None, None
                steps = []
                for j in range(C):
                    src = (c - j) % C
                    rows, cols, causal = self._block(where[c], where[src])
                    if rows is None:
                        continue
                    k, v = (repeat_kv(a[..., cols, :], n_rep) for a in states[src].kv)
                    out, (*_, lse_j) = flash_attention_forward(s.q[..., rows, :], k, v, f, unit.block, causal)
                    lse = lse_j if lse is None else merge_lse(lse, lse_j, f, rows)
                    steps.append((out, lse_j, rows))
                for out, lse_j, rows in steps:
                    o = correct_out(o, out, lse, lse_j, f, rows)
            B, H, L, dh = o.shape
            p.a = s.but(o=o, lse=lse, held=s.kv, work=(B, L, H * dh))

    def _block(self, q_pos, k_pos):
        """(query rows, key rows, causal) of a block of attention from the tokens' positions, or (None, ..) when no
        query sees any of the keys."""
        return _block(q_pos, k_pos, self.cp.causal)

    def _gathered(self, s, states, where, c, unit):
        f, n_rep = self.precision.compute_format, unit.n_rep
        order = np.argsort(np.concatenate(where))
        k_all, v_all = (np.concatenate([st.kv[i] for st in states], axis=-2)[..., order, :] for i in (0, 1))
        outs, lses = [], []
        for rows, stop in self._chunks(where[c]):
            k, v = (repeat_kv(a[..., :stop, :], n_rep) for a in (k_all, v_all))
            out, (*_, lse) = flash_attention_forward(s.q[..., rows, :], k, v, f, unit.block, self.cp.causal)
            outs.append(out)
            lses.append(lse)
        return np.concatenate(outs, axis=-2), np.concatenate(lses, axis=-1)

    def _chunks(self, pos) -> list:
        """(rows, keys it attends to) for each chunk of a position's tokens: every key up to its last position."""
        n = CHUNKS[self.cp.split]
        size = len(pos) // n
        total = len(pos) * self.C
        return [(slice(i * size, (i + 1) * size), int(pos[(i + 1) * size - 1]) + 1 if self.cp.causal else total)
                for i in range(n)]

    # -- attention, backward ---------------------------------------------------------------------------------------
    def _backward(self, passes, where, unit) -> None:
        f, C = self.precision.compute_format, self.C
        grads = [p.dy for p in passes]
        if self.cp.style == "torch":  # `held`: each position's own K/V, already repeated to H heads (forward)
            made = _torch_backward([g.do for g in grads], [g.q for g in grads], [g.o for g in grads],
                                   [g.lse for g in grads], [g.held for g in grads], where, self.cp.causal,
                                   self.cp.split, f, unit.block, unit.n_rep)
            for p, g, (dq, dk, dv) in zip(passes, grads, made):
                p.dy = g.but(dq=dq, dk=dk, dv=dv)
            return
        ring = self.cp.style != "allgather"
        parts = {}  # (c, src) -> (rows, dq part, cols, dk part, dv part)
        for c, g in enumerate(grads):
            for src in range(C):
                if ring:
                    rows, cols, causal = self._block(where[c], where[src])
                    if rows is not None:
                        parts[(c, src)] = (rows, cols) + self._grad(g, grads[src].held, rows, cols, causal, unit)
        if not ring:
            self._gathered_backward(passes, grads, where, unit)
            return
        for c, g in enumerate(grads):
            dq = _Sum(g.q.shape, f)
            for j in reversed(range(C)):  # backward's order: the blocks of p + 1, p + 2, ..., p
                got = parts.get((c, (c - j) % C))
                if got is not None:
                    dq.add(got[0], got[2])
            dk, dv = _Sum(grads[c].held[0].shape, f), _Sum(grads[c].held[1].shape, f)
            for h in reversed(range(C)):  # the ranks c − 1, c − 2, ..., c, as the sum travels back
                got = parts.get(((c + h) % C, c))
                if got is not None:
                    dk.add(got[1], got[3])
                    dv.add(got[1], got[4])
            passes[c].dy = g.but(dq=dq.total, dk=dk.total, dv=dv.total)

    def _grad(self, g, kv, rows, cols, causal, unit) -> tuple:
        f, n_rep = self.precision.compute_format, unit.n_rep
        k, v = (repeat_kv(a[..., cols, :], n_rep) for a in kv)
        dq, dk, dv = flash_attention_backward(g.do[..., rows, :], (g.q[..., rows, :], k, v, g.o[..., rows, :],
                                                                   g.lse[..., rows]), f, unit.block, causal)
        return dq, repeat_kv_backward(dk, n_rep, f), repeat_kv_backward(dv, n_rep, f)

    def _gathered_backward(self, passes, grads, where, unit) -> None:
        f, C, n_rep = self.precision.compute_format, self.C, unit.n_rep
        order = np.argsort(np.concatenate(where))
        k_all, v_all = (np.concatenate([g.held[i] for g in grads], axis=-2)[..., order, :] for i in (0, 1))
        whole = []
        for c, g in enumerate(grads):
            dk, dv = np.zeros_like(k_all), np.zeros_like(v_all)
            dq = []
            for rows, stop in self._chunks(where[c]):
                k, v = (repeat_kv(a[..., :stop, :], n_rep) for a in (k_all, v_all))
                dq_, dk_, dv_ = flash_attention_backward(g.do[..., rows, :], (g.q[..., rows, :], k, v,
                                                                              g.o[..., rows, :], g.lse[..., rows]),
                                                         f, unit.block, self.cp.causal)
                dq.append(dq_)
                dk[..., :stop, :] = accumulate(dk[..., :stop, :], repeat_kv_backward(dk_, n_rep, f), f)
                dv[..., :stop, :] = accumulate(dv[..., :stop, :], repeat_kv_backward(dv_, n_rep, f), f)
            whole.append((np.concatenate(dq, axis=-2), dk, dv))
        for i in (1, 2):  # each position's rows, summed over the C positions in the ring's order
            flat = [np.concatenate([w[i][..., where[s], :].reshape(-1) for s in range(C)]) for w in whole]
            total = naive_reduce(flat, op="sum", wire=f, order="ring")
            size = total.size // C
            for c in range(C):
                shape = grads[c].held[i - 1].shape
                whole[c] = whole[c][:i] + (total[c * size:(c + 1) * size].reshape(shape),) + whole[c][i + 1:]
        for p, g, (dq, dk, dv) in zip(passes, grads, whole):
            p.dy = g.but(dq=dq, dk=dk, dv=dv)


class _Sum:
    """A gradient summed row block by row block: each row copied on its first write, added in fmt after."""

    def __init__(self, shape, f):
        self.total, self.written, self.f = np.zeros(shape, f.dtype), np.zeros(shape[-2], bool), f

    def add(self, rows: slice, part) -> None:
        fresh = ~self.written[rows]
        block = self.total[..., rows, :]
        summed = accumulate(block, part, self.f)
        block[..., fresh, :] = part[..., fresh, :]
        block[..., ~fresh, :] = summed[..., ~fresh, :]
        self.written[rows] = True


def _block(q_pos, k_pos, causal: bool):
    """(query rows, key rows, causal) of a block of attention from the tokens' positions, or (None, ..) when no query
    sees any of the keys."""
    seen = k_pos[None, :] <= q_pos[:, None] if causal else np.ones((len(q_pos), len(k_pos)), bool)
    rows, cols = np.flatnonzero(seen.any(axis=1)), np.flatnonzero(seen.any(axis=0))
    if len(rows) == 0:
        return None, None, False
    sub = seen[np.ix_(rows, cols)]
    if sub.all():
        return _span(rows), _span(cols), False
    if len(rows) == len(cols) and np.array_equal(sub, np.tril(np.ones_like(sub))):
        return _span(rows), _span(cols), True
    raise AssertionError("a block whose mask is neither full nor causal")


# -- the style "torch": torch 2.13.0's _templated_ring_attention(_backward), on plain arrays ------------------------
def _torch_steps(where, c: int, causal: bool, split: str) -> list:
    """Position c's steps i = 0, ..., C − 1, each (source s, query rows, key rows, causal) or (s, None, None, False)
    where torch skips it; the blocks from the tokens' positions (`_block`), checked against torch's own rule
    (`_is_causal_behavior` and the three branches of `_templated_ring_attention`)."""
    C, L = len(where), len(where[c])
    half, whole, first, second = L // 2, slice(0, L), slice(0, L // 2), slice(L // 2, L)
    steps = []
    for i in range(C):
        s = (c - i) % C
        rows, cols, mask = _block(where[c], where[s], causal)
        if split == "zigzag":  # load balancing: torch refuses it without the causal mask
            assert causal and L % 2 == 0 and half > 0, "torch's load balancing needs the causal mask"
            want = (whole, whole, True) if i == 0 else (whole, first, False) if i <= c else (second, whole, False)
        elif causal:  # no load balancing: own block causal, earlier positions whole, later ones skipped
            want = (whole, whole, True) if i == 0 else (whole, whole, False) if s < c else (None, None, False)
        else:
            want = (whole, whole, False)
        vacuous = want[2] and rows is not None and rows.stop - rows.start == 1  # a 1 × 1 causal mask masks nothing
        assert (rows, cols, mask) == want or vacuous and (rows, cols) == want[:2], (split, causal, c, i,
                                                                                     (rows, cols, mask), want)
        steps.append((s, rows, cols, mask))
    return steps


def _torch_merge(out, lse, out_i, lse_i, rows: slice, f):
    """`_SDPAMerger._merge_one` (convert_to_f32): the running out (B, H, L, d_h) and lse (B, H, L), both acc, with
    step i's out_i (fmt) and lse_i (acc) merged into their rows `rows` (torch's "partial": the second half). Each op
    in acc, rounded: out − sigmoid(lse_i − lse)·(out − out_i); lse − logsigmoid(lse − lse_i), torch's CUDA kernels
    sigmoid = 1 / (1 + exp(−d)) and log_sigmoid_forward = min(x, 0) − log1p(exp(−|x|)). New arrays."""
    acc, ops = acc_dtype(f), arithmetic_of(f)
    one, zero = acc(1), acc(0)
    o_old, l_old = out[..., rows, :], lse[..., rows]
    sig = one / (one + ops.exp(-(lse_i - l_old)))
    t1 = o_old - out_i.astype(acc)
    t2 = sig[..., None] * t1
    x = l_old - lse_i
    logsig = np.minimum(x, zero) - LOG1P[ops.name](ops.exp(-np.abs(x)))
    out, lse = out.copy(), lse.copy()
    out[..., rows, :] = o_old - t2
    lse[..., rows] = l_old - logsig
    return out, lse


def _torch_forward(q, reps, where, c: int, causal: bool, split: str, fmt, block: int):
    """Position c's attention output (B, H, L_r, d_h) in fmt and lse (B, H, L_r) in acc: its queries q against every
    position's K/V `reps` [(K, V) (B, H, L_r, d_h), repeated to H heads], in torch's steps and merge."""
    f = get_format(fmt)
    acc = acc_dtype(f)
    out = lse = None
    for s, rows, cols, mask in _torch_steps(where, c, causal, split):
        if rows is None:
            continue
        k, v = (a[..., cols, :] for a in reps[s])
        out_i, (*_, lse_i) = flash_attention_forward(q[..., rows, :], k, v, f, block, mask)
        if out is None:  # the first step (i = 0, every row): the merger keeps it (`.to(torch.float32)`)
            out, lse = out_i.astype(acc), lse_i.astype(acc)
        else:
            out, lse = _torch_merge(out, lse, out_i, lse_i.astype(acc), rows, f)
    return cast(out, f), lse


def _torch_backward(dos, qs, os, lses, reps, where, causal: bool, split: str, fmt, block: int, n_rep: int) -> list:
    """Every position's (dQ (B, H, L_r, d_h), dK, dV (B, G, L_r, d_h)) in fmt, as `_templated_ring_attention_backward`
    makes them: each step's flash backward against the merged O and lse; dQ summed in acc from zeros in step order;
    dK/dV of position s summed in acc from zeros over the ranks s, s + 1, ..., s + C − 1 (rank r adds at its step
    (r − s) mod C, on the key rows it attended: the first half under load balancing where i ≤ r; a skipped step adds
    zeros), cast to fmt, then repeat_kv's backward (the groups of n_rep summed in acc, rounded once)."""
    f = get_format(fmt)
    acc, C = acc_dtype(f), len(where)
    dq = [np.zeros(q.shape, acc) for q in qs]
    parts = {}  # (rank r, source s) -> (key rows, dK_, dV_) in fmt at H heads, or None: skipped (fp32 zeros)
    for c in range(C):
        for s, rows, cols, mask in _torch_steps(where, c, causal, split):
            if rows is None:
                parts[(c, s)] = None
                dq[c] = dq[c] + np.zeros(dq[c].shape, acc)  # the SKIP branch's zeros, added as torch adds them
                continue
            k, v = (a[..., cols, :] for a in reps[s])
            dq_, dk_, dv_ = flash_attention_backward(dos[c][..., rows, :], (qs[c][..., rows, :], k, v,
                                                                            os[c][..., rows, :], lses[c][..., rows]),
                                                     f, block, mask)
            dq[c][..., rows, :] = dq[c][..., rows, :] + dq_.astype(acc)
            parts[(c, s)] = (cols, dk_, dv_)
    made = []
    for c in range(C):
        bufs = [np.zeros(a.shape, acc) for a in reps[c]]
        for r in (c + j for j in range(C)):  # rank s, s + 1, ..., s + C − 1 (s = c), as the sum travels
            got = parts[(r % C, c)]
            for buf, j in zip(bufs, (1, 2)):
                if got is None:
                    buf += np.zeros(buf.shape, acc)
                else:
                    buf[..., got[0], :] = buf[..., got[0], :] + got[j].astype(acc)
        dk, dv = (repeat_kv_backward(cast(b, f), n_rep, f) for b in bufs)
        made.append((cast(dq[c], f), dk, dv))
    return made


def _torch_attention(qs, ks, vs, dos, where, causal: bool, split: str, fmt, block: int) -> list:
    """The style "torch" on plain arrays, for checking it alone: per position (O, lse, dQ, dK, dV) from its Q (B, H,
    L_r, d_h), K, V (B, G, L_r, d_h) and dO, `where` its tokens' sequence positions (`_positions`)."""
    n_rep = qs[0].shape[1] // ks[0].shape[1]
    reps = [(repeat_kv(k, n_rep), repeat_kv(v, n_rep)) for k, v in zip(ks, vs)]
    fwd = [_torch_forward(q, reps, where, c, causal, split, fmt, block) for c, q in enumerate(qs)]
    bwd = _torch_backward(dos, qs, [o for o, _ in fwd], [lse for _, lse in fwd], reps, where, causal, split, fmt,
                          block, n_rep)
    return [(o, lse, dq, dk, dv) for (o, lse), (dq, dk, dv) in zip(fwd, bwd)]
