"""What a step carries to the next besides the model states, and what a refused or a skipped step does to it.

Besides the 16-bit params, fp32 master and optimizer state (which only an update changes: a skipped step returns
before it, as DeepSpeed's `step` does), a step may change state it hands on:

    state                      a skipped step (overflow, dynamic scaler)          a refused step (it raises)
    LoCo's error buffers       dropped: the next qgZ call starts from zero         as they were before the step
    (qgZ, zeropp_loco_param)   errors (DeepSpeed, `_loco_err_buf_update`:
                               `del p.intra_ef_buf`); a clean step whose scale
                               changed rescales them (LocoState.after_step)
    fp8 amax histories         the forward's amax of the unchanged weights is      as they were before the step
    (DelayedScaling)           recorded, as Transformer Engine's forward records
                               it whatever the optimizer then does
    DDP's buckets              rebuilt after the first backward, skipped or not    as they were (engine.ddp_rebuilt
                               (torch reducer.cpp, Reducer::rebuild_buckets)       is set only by a step that ends)
    the loss scaler            backs off: the point of the skip                    as it was

A refused step is one the engine raises in — a static loss scale's overflow, DeepSpeed's scaler at its minimum,
a learner's hook that fails: the caller is told no state changed, and here nothing did. `carry(ctx)` wraps a step:
it keeps what a refusal must put back and puts it back; `after_decision` applies the skip's and the scale change's
rules once the loss scaler has decided (_step_checks.py).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import replace

from zerosim.parallel.data import zeropp  # ZeRO++'s LoCo, by its lazy face: loaded when a step first asks


@contextmanager
def carry(ctx):
    """Around one step: on any exception, the wire's carried state (LoCo's errors and counter, the fp8 recipes) is
    put back as it was when the step began."""
    wire = ctx.wire
    if wire is None:
        yield
        return
    kept = _kept(wire)
    try:
        yield
    except BaseException:
        _restore(wire, kept, ctx.ranks)
        raise


def after_decision(ctx, decision) -> None:
    """The loss scaler's decision, applied to LoCo's errors as DeepSpeed applies it (the table above)."""
    wire = ctx.wire
    if wire is None or wire.loco is None:
        return
    wire.loco.after_step(decision.skip, decision.scale_after / decision.scale_before)
    if decision.skip:
        _drop_rows(ctx.ranks)


def _kept(wire) -> tuple:
    loco = wire.loco
    buffers = None if loco is None else {key: {r: (_copy(a), _copy(b)) for r, (a, b) in per.items()}
                                         for key, per in loco.buffers.items()}
    return copy.deepcopy(wire.recipes), buffers, None if loco is None else loco.idx


def _restore(wire, kept: tuple, ranks) -> None:
    recipes, buffers, idx = kept
    wire.recipes = recipes
    if wire.loco is not None:
        wire.loco.buffers, wire.loco.idx = buffers, idx
        _drop_rows(ranks)
        for key in buffers:
            zeropp.ledger_rows(ranks, wire.loco, key)


def _drop_rows(ranks) -> None:
    """Free LoCo's ledger rows on every rank (the buffers they stood for are gone or replaced)."""
    for rank in ranks:
        for name in [n for n in rank.ledger.live if n.startswith(zeropp.LOCO)]:
            rank.ledger.free(name)


def _copy(q):
    return replace(q, payload=q.payload.copy(), scales=q.scales.copy())
