"""The oracle of tensor parallelism beside ZeRO: one device runs the T slices of every micro-batch and sums their
partial products in the ring's order, then reduces each slice over the data-parallel ranks as `Reference` does.

Letters: N ranks, T the TP degree, dp = N / T, K micro-steps, P_local one TP rank's parameters. For each data-parallel
rank's micro-batch, the T slices' passes (models/_run.py, one per TP position) walk the TP model's schedule side by
side; where _plan.py places an operator (the same table the engine's hooks read), the oracle does it on one device:

    all-reduce        naive_reduce in the ring's order over the T positions (each add exact, rounded once to the
                      tensor's format): collectives/_naive.py, which shares no code with the ring
    all-gather        a concatenation along the sequence (np.concatenate, not the ring's sequence-major flattening)
    reduce-scatter    naive_reduce of the sequence-major vectors, position t keeping its tokens
    split             position t's tokens
    the loss          the max exactly, the predicted logits and sums of exponentials in the ring's order (fp32)

Then each slice is a data-parallel job of its own: a `Reference` over dp ranks (its stage or strategy, recipe,
precision, accumulation) reduces the dp gradients of its slice; with sequence parallelism the norms' and biases'
reduced gradients are summed over the T slices packed as Megatron's coalesced all-reduce packs them, in the ring's
order (_tensor_sums.py, the oracle's own, as are the loss's statistics); the loss scaler decides on an inf or NaN in
any slice (the engine's overflow flag is all-reduced over every rank); and each slice's optimizer steps. What it
shares with the engine: the TP units' arithmetic (_layers.py ...), where the operators sit (the placement table,
parallel/tensor's face), and everything `Reference` shares. What it checks: the TP collectives over the mesh's groups
and their ring order, the hooks' sequencing through the step's contract, and ZeRO's sharding of each slice over its
data-parallel group.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import naive_reduce
from zerosim.models import Pass, needs_params, schedule
from zerosim.parallel.tensor import CONJUGATES, Bundle, VocabTarget, local_flat, placement, whole_flat
from zerosim.reference._oracle import Reference
from zerosim.reference._tensor_sums import (coalesced_length, pack, pieces_of, row_max, row_sums,
                                            sequence_parallel_windows, unpack)


class _Key:
    """A micro-batch by its place (data-parallel rank, micro-step), handed to a slice's Reference in place of data."""

    def __init__(self, d: int, k: int):
        self.d, self.k = d, k


class _Slice(Reference):
    """One TP position's data-parallel reference: its gradients come from the TP pass, already made."""

    made: dict

    def gradient(self, x, target) -> tuple:
        return self.made[(x.d, x.k)]


def _ring_sum(xs: list):
    """Σ over the T positions in the ring's order, each add rounded to the tensors' own format, shape kept."""
    shape = np.shape(xs[0])
    return naive_reduce([np.asarray(x).reshape(-1) for x in xs], order="ring").reshape(shape)


def _seq_major(x):
    B, L, d = x.shape
    return np.swapaxes(x, 0, 1).reshape(L * B * d)


def _reduce_scatter(xs: list) -> list:
    B, L, d = xs[0].shape
    full = np.swapaxes(naive_reduce([_seq_major(x) for x in xs], order="ring").reshape(L, B, d), 0, 1)
    return _split([full] * len(xs))


def _split(xs: list) -> list:
    T, L = len(xs), xs[0].shape[1]
    step = L // T
    return [x[:, t * step:(t + 1) * step].copy() for t, x in enumerate(xs)]


NAIVE = {  # one side of an operator, on one device, over the T positions' tensors
    "identity": lambda xs: list(xs),
    "all-reduce": lambda xs: [_ring_sum(xs)] * len(xs),
    "all-gather": lambda xs: [np.concatenate(xs, axis=1)] * len(xs),
    "reduce-scatter": _reduce_scatter,
    "split": _split,
}


class TensorReference:
    """One device, every TP slice of every micro-batch: the numbers a `ZeroEngine(tp.model, ..., parallelisms=(tp,))`
    on N ranks must give, bit for bit.

    Args:
        tp: the engine's `TensorParallel` (its model, degree, sequence parallelism, whole initial weights).
        optimizer, precision: as for the engine.
        world_size: N, every rank of the job (dp = N / T micro-batches a step).
        stage: the engine's stage (0-3) or strategy name ("hsdp", "mics", ...), with `shard_group` S where it needs
            one (counted in data-parallel ranks).
        accumulation_steps, recipe: as for the engine.
    """

    def __init__(self, tp, optimizer, precision="fp16-mixed", world_size: int = 2, stage=0,
                 accumulation_steps: int = 1, recipe=None, shard_group: int | None = None):
        if world_size % tp.tp:
            raise ValueError(f"tp = {tp.tp} does not divide the {world_size} ranks")
        self.tp, self.T, self.dp = tp, tp.tp, world_size // tp.tp
        self.model = tp.local
        self.slices = []
        if tp.local is None:  # tp = 1: the data-parallel oracle itself
            self.slices.append(Reference(tp.full, optimizer, precision, world_size, params=tp._whole,
                                         accumulation_steps=accumulation_steps, recipe=recipe, strategy=stage,
                                         shard_group=shard_group))
            self.precision = self.slices[0].precision
            return
        for t in range(self.T):
            s = _Slice(self.model, optimizer, precision, self.dp, params=local_flat(self.model, tp._whole, tp.full, t),
                       accumulation_steps=accumulation_steps, recipe=recipe, strategy=stage, shard_group=shard_group)
            s.made = {}
            self.slices.append(s)
        self.precision = self.slices[0].precision
        self.whole_stage = self.slices[0].plan.stage == 0  # the engine's region at stage 0: the whole reduced buffer

    # -- one step -------------------------------------------------------------------------------------
    def step(self, batches) -> list:
        """`batches`: per data-parallel rank one (x, target) micro-batch or a list of K (every TP rank of a group
        trains on its group's). Returns each data-parallel rank's loss."""
        K = self.slices[0].accumulation_steps
        if self.model is None:
            return self.slices[0].step(batches)
        micro = [[b] if K == 1 and len(b) == 2 and not isinstance(b[0], (list, tuple)) else list(b) for b in batches]
        if len(micro) != self.dp or any(len(m) != K for m in micro):
            raise ValueError(f"the TP reference needs {self.dp} data-parallel ranks' {K} micro-batches")
        scale = self.slices[0].scaler.scale
        with np.errstate(over="ignore", invalid="ignore"):
            for d in range(self.dp):
                for k in range(K):
                    made = self.gradients(*micro[d][k], scale)
                    for s, m in zip(self.slices, made):
                        s.made[(d, k)] = m
            keys = [[(_Key(d, k), None) for k in range(K)] for d in range(self.dp)]
            losses = [[[] for _ in range(self.dp)] for _ in self.slices]
            reduced = [s.reduce_step(keys, lost) for s, lost in zip(self.slices, losses)]
            if self.tp.sequence_parallel:
                self._sum_sequence_parallel(reduced)
        found = any(not np.all(np.isfinite(r.astype(np.float64))) for r in reduced)
        out = [s.apply_step(r, lost, found) for s, r, lost in zip(self.slices, reduced, losses)]
        for s in self.slices:
            s.made = {}
        return out[0]

    def gradients(self, x, target, scale: float = 1.0) -> list:
        """The T slices' (loss, (N*s,) gradient) of one micro-batch, their partial sums added as the ring adds them."""
        model, T, f = self.model, self.T, self.precision.compute_format
        sp = self.tp.sequence_parallel
        passes = [Pass(model, x, target, f, loss_scale=scale) for _ in range(T)]
        grads = [np.zeros(s.padded, f.dtype) for s in self.slices]
        kept = {}
        for op in schedule(model):
            if op.kind == "loss":
                self._loss_statistics(passes)
            else:
                unit = model.layers[op.layer]
                self._before(passes, op, unit, placement(unit, sp), kept)
            for t, (p, s) in enumerate(zip(passes, self.slices)):
                done = p.run(op, s.layer_params(op.layer) if needs_params(model, op) else {})
                for spec in (model.layer_specs(op.layer) if done.grads else ()):
                    grads[t][spec.offset:spec.offset + spec.size] = np.asarray(done.grads[spec.name]).reshape(-1)
            if op.kind != "loss":
                self._after(passes, op, placement(unit, sp))
        return [(p.loss, g) for p, g in zip(passes, grads)]

    # -- the operators, on one device ------------------------------------------------------------------
    def _side(self, passes, slot: str, side: str, both: bool, direction: str) -> None:
        xs = [getattr(p, slot) for p in passes]
        if not isinstance(xs[0], Bundle):
            for p, y in zip(passes, NAIVE[side](xs)):
                setattr(p, slot, y)
            return
        values = NAIVE[side]([x.value for x in xs])
        residuals = [x.residual for x in xs]
        if both:
            residuals = values if direction == "backward" and all(x.residual is x.value for x in xs) \
                else NAIVE[side](residuals)
        for p, x, r, v in zip(passes, xs, residuals, values):
            setattr(p, slot, Bundle(r, v, x.input))

    def _before(self, passes, op, unit, place, kept) -> None:
        if op.kind == "backward":
            for name in reversed(place.exit):
                both = place.both_parts and name == place.exit[-1]  # the exit's last operator cuts the residual too
                self._side(passes, "dy", CONJUGATES[name].backward, both, "backward")
            if place.keeps_shard:
                full = np.concatenate(kept.pop(op.layer), axis=1)
                for p in passes:
                    p.dy = Bundle(p.dy.residual, p.dy.value, full) if isinstance(p.dy, Bundle) else \
                        Bundle(None, p.dy, full)
            return
        if unit.role == "vocab":
            for t, p in enumerate(passes):
                p.a = p.a - t * unit.vocab
        if place.entry is not None:
            if place.keeps_shard:
                kept[op.layer] = [p.a.value if isinstance(p.a, Bundle) else p.a for p in passes]
            self._side(passes, "a", CONJUGATES[place.entry].forward, False, "forward")

    def _after(self, passes, op, place) -> None:
        if op.kind == "backward":
            if place.entry is not None:
                self._side(passes, "dy", CONJUGATES[place.entry].backward, False, "backward")
            return
        for name in place.exit:
            self._side(passes, "a", CONJUGATES[name].forward, place.both_parts and name == place.exit[-1], "forward")

    def _loss_statistics(self, passes) -> None:
        vocab_r = self.model.layers[-1].vocab
        labels = [p.target - t * vocab_r for t, p in enumerate(passes)]
        top = np.max(np.stack([row_max(p.a) for p in passes]), axis=0)  # the max: exact in any order
        sums = [row_sums(p.a, lab, top, self.precision.compute_format) for p, lab in zip(passes, labels)]
        predicted, exp_sum = _ring_sum([s[0] for s in sums]), _ring_sum([s[1] for s in sums])
        for p, lab in zip(passes, labels):
            p.target = VocabTarget(lab, top, predicted, exp_sum)

    def _sum_sequence_parallel(self, reduced: list) -> None:
        sum_sequence_parallel(self.slices[0].layout, self.model, reduced, self.whole_stage)

    # -- looking inside ---------------------------------------------------------------------------------
    def whole_params(self) -> np.ndarray:
        """The whole model's (P,) 16-bit weights, joined from the slices."""
        if self.model is None:
            return self.slices[0].compute_params()
        return whole_flat(self.model, [s.compute_params() for s in self.slices], self.tp.full)

    def whole_master(self) -> np.ndarray:
        if self.model is None:
            return self.slices[0].master()
        return whole_flat(self.model, [s.master() for s in self.slices], self.tp.full)


def sum_sequence_parallel(layout, model, reduced: list, whole_stage: bool) -> None:
    """Each TP slice's reduced norms' and biases' gradients (`reduced[t]`, over `layout`, of `model`: the TP rank's
    units, or a pipeline stage's) summed over the T slices, packed per shard position as the engine packs them (so
    each element lands in the same ring chunk), in place; `whole_stage`: stage 0's one region, the whole buffer."""
    P = model.num_params
    windows = sequence_parallel_windows(model)
    arranged = [np.array(layout.arrange(r[:P])) for r in reduced]  # model order -> the shards' order
    positions = range(1 if whole_stage else layout.world_size)
    size = coalesced_length(layout, windows, whole_stage)
    for q in positions:
        pieces = pieces_of(layout, q, windows, whole_stage)
        regions = [a if whole_stage else a[layout.own(q)] for a in arranged]
        total = naive_reduce([pack(region, pieces, size) for region in regions], order="ring")
        for region in regions:
            unpack(total, pieces, region)
    for r, a in zip(reduced, arranged):
        r[:P] = layout.unarrange(a)
