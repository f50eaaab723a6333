"""Gradients waiting for their collective in one micro-step: DeepSpeed's bucket rule, decided here once.

Units join as backward finishes them; the bucket is sent before a unit that would overflow
`reduce_bucket_size` (so only a unit larger than the limit makes a bucket larger than it), or at once
when there is no bucket size (seed 004: unit by unit) — DeepSpeed's `reduce_independent_p_g_buckets_and
_remove_grads` (deepspeed/runtime/zero/stage_1_and_2.py).

    stages 2/3          each bucket is reduce-scattered into the shards (reduce.reduce_units; a bucket of one
                        unit goes through the engine's `Hooks.reduce_unit`)
    stages 0/1 bucketed the end-of-backward collective ("all_reduce" or "reduce_scatter") done bucket by
                        bucket on the whole gradient buffer (reduce.reduce_range), the padding [P, Ψ) with the
                        bucket of the last unit

Two recipes bucket by parameter instead (_param_buckets.py decides the buckets, `ParamBucket` sends them):
`ddp` (DDP's buckets, every step at stage 0) and `deepspeed-zero12` (DeepSpeed's ipg bucket filled parameter by
parameter, each bucket all-reduced whole: _bucket_allreduce.py); `grad_buckets` picks.
"""

from __future__ import annotations

from collections import Counter

from zerosim.cluster import Handle
from zerosim.parallel.data._reduce import reduce_range, reduce_unit, reduce_units


class GradBucket:
    """One micro-step's gradient buckets (see the module docstring). `whole`: None at stages 2/3, else the
    end-of-backward collective the buckets split. `reduce_one` / `reduce_many`: how a bucket of one unit / of
    several is reduce-scattered (_reduce.py's; an engine's `Hooks.reduce_unit` for one). `first`: this is the step's
    first micro-step. `last`: None, or (a plan whose replicas all-reduce: HSDP, MiCS, _replicate.py) whether this is
    its last micro-step — then every bucket goes through `reduce_many(ctx, units, first, last)`."""

    def __init__(self, ctx, limit: int | None, first: bool, whole: str | None = None, reduce_one=reduce_unit,
                 reduce_many=reduce_units, last: bool | None = None):
        self.ctx, self.limit, self.first, self.whole, self.final = ctx, limit, first, whole, last
        self.reduce_one, self.reduce_many = reduce_one, reduce_many
        self.units, self.filled, self.last, self.sent = [], 0, Handle(), False

    def reduce(self, layer: int) -> None:
        """Backward has made `layer`'s gradients: send the bucket first if this unit would overflow it."""
        a, b = self.ctx.layout.windows[layer]
        if b <= a:
            return
        if self.units and self.limit is not None and self.filled + (b - a) > self.limit:
            self._send()
        self.units.append(layer)
        self.filled += b - a
        if self.limit is None:
            self._send()

    def flush(self) -> Handle:
        """Send what waits (end of backward); the last call's handle (the optimizer waits for it)."""
        if self.units:
            self._send()
        return self.last

    def _send(self) -> None:
        ctx, units = self.ctx, self.units
        if self.whole is not None:  # the padding [P, Ψ) goes with the bucket of the model's last unit: the first
            windows = ctx.layout.windows  # sent in a backward, or a pipeline chunk's (each its own buckets)
            lo, hi = windows[min(units)][0], windows[max(units)][1]
            end = ctx.layout.padded if hi == max(b for _, b in windows) else hi
            sent = reduce_range(ctx, lo, end, self.whole, tuple(units))
        elif self.final is not None:  # the replicas agree on the last micro-step: the reducer needs to know it
            sent = self.reduce_many(ctx, units, self.first, self.final)
        elif len(units) == 1:
            sent = self.reduce_one(ctx, units[0], self.first)
        else:
            sent = self.reduce_many(ctx, units, self.first)
        self.last, self.sent = sent or self.last, True
        self.units, self.filled = [], 0


class ParamBucket:
    """Buckets of parameters decided before backward (_param_buckets.py), each sent as soon as its framework sends
    it. `eager` (DDP's Reducer::mark_bucket_ready, and DeepSpeed without a bucket size): once all its gradients are
    ready, buckets in their order; otherwise (DeepSpeed's ipg bucket) when the next bucket's first parameter is
    ready — the parameter that did not fit — or at the end of backward. `send(bucket, free)`: the collective, told
    which units' gradients it sends the last of."""

    def __init__(self, buckets: list, send, eager: bool):
        self.pending, self.send, self.eager = list(buckets), send, eager
        self.ready, self.last = set(), Handle()
        self.left = Counter(x for bucket in self.pending for x, _, _ in bucket)  # per unit: parameters not yet sent

    def reduce(self, layer: int) -> None:
        """Backward has made `layer`'s gradients: send every bucket now due."""
        self.ready.add(layer)
        while self.pending and self._due():
            self._send()

    def flush(self) -> Handle:
        """Send what waits (end of backward); the last call's handle."""
        while self.pending:
            self._send()
        return self.last

    def _due(self) -> bool:
        if self.eager:
            return all(x in self.ready for x, _, _ in self.pending[0])
        return len(self.pending) > 1 and self.pending[1][0][0] in self.ready

    def _send(self) -> None:
        bucket = self.pending.pop(0)
        self.left.subtract(x for x, _, _ in bucket)
        free = [x for x in dict.fromkeys(x for x, _, _ in bucket) if self.left[x] == 0]
        self.last = self.send(bucket, free) or self.last


def grad_buckets(ctx, limit: int | None, first: bool, whole: str | None, reduce_one, last: bool | None,
                 rebuilt: bool):
    """The micro-step's bucketer: `ParamBucket` for `ddp` (DDP's buckets; `rebuilt`: after the first synchronised
    backward, Reducer::rebuild_buckets) and for `deepspeed-zero12`'s bucket all-reduce, else `GradBucket` (its
    arguments: see there)."""
    rules = ctx.recipe.rules
    if rules.name == "ddp":
        from zerosim.parallel.data.recipes import (
            ddp_all_reduce,  # the recipes' own, where they run
            ddp_buckets,
        )

        buckets = ddp_buckets(list(ctx.params), ctx.policy.compute_format.itemsize, ctx.ddp_caps, rebuilt)
        return ParamBucket(buckets, lambda bucket, free: ddp_all_reduce(ctx, bucket), eager=True)
    if rules.collective == "bucket all-reduce" and whole != "all_reduce":
        from zerosim.parallel.data.recipes import all_reduce_bucket, ipg_buckets, ready_order

        held = whole is None  # stage 2: the units' gradients wait in their own buffers
        return ParamBucket(
            ipg_buckets(ready_order(list(ctx.params)), limit),
            lambda bucket, free: all_reduce_bucket(ctx, bucket, first, limit, held, free if held else ()),
            eager=limit is None,
        )
    return GradBucket(ctx, limit, first, whole, reduce_one, last=last)
