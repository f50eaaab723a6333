"""Every rank's op as one computation: the ranks' micro-batches stacked row by row, the layer run once, each rank's
rows handed back to it.

Letters: n passes (one per rank), B rows each (a micro-batch), D widths.

In a data-parallel step every rank runs the same layer with the same weights over its own micro-batch. A layer that
treats rows apart (`Layer.rows_apart`: Linear, ReLU, GELU; `Loss.rows_apart`: half-MSE), on kernels whose products treat
rows apart (`Arithmetic.rows_apart`: the portable kernels, each element its own exact dot product rounded once), gives
rank r's rows of one (n·B, D) batch the bits that rank's own (B, D) run gives. So one call serves n ranks, and the
Python a layer costs per call is paid once, not n times (docs/speed.md, section 1, item 13). What sums over one rank's
rows (a Linear's dW and db) comes from `Layer.backward_ranks`, over each rank's block of rows.

    stacks(passes, op, model)         whether `run_stacked` may serve `op` (checked before anything is made): a
                                      forward (one that keeps its block's checkpoint too), a recompute (one that
                                      starts from it too), a backward, or the loss (`Loss.rows_apart`: half-MSE,
                                      each rank's loss its own sum over its rows)
    run_stacked(passes, op, model, p)  op computed once for every pass, changing nothing; then, pass by pass, its
                                      rows land: its saved tensors (and checkpoints) adopted or freed in its ledger
                                      as `Pass.run` does it, its tensor in flight replaced; a `Landing` that yields
                                      (i, Done) after pass i has landed, and holds a backward's gradients of every
                                      pass at once (`grads`; pass i's, `grads_of(i)`), for a caller that packs them
                                      in one go

Each pass lands before the next, so a caller that records rank i's events between yields writes the log a loop
over `Pass.run` writes. That loop is the naive twin (tests/test_stacked_ranks.py: the same bits, events and ledgers).
A pass's saved tensors and its tensor in flight are views of the stacked arrays: its ledger counts their bytes as
it counted its own arrays'.
"""

from __future__ import annotations

import numpy as np

from zerosim.models._run import done
from zerosim.precision.arithmetic import arithmetic_of, used_once

KINDS = ("forward", "recompute", "loss", "backward")  # not "keep input": it computes nothing


def _input(work, op):
    """What a forward or recompute multiplies: its block's checkpoint where it starts from one (read, not freed yet:
    `Pass.run` frees it first, the landing here), else the activation in flight; None where there is none."""
    if not op.from_checkpoint:
        return work.a
    key = ("checkpoint", op.layer)
    return work.saved.peek(key).get("block input") if key in work.saved.items else None


def stacks(passes: list, op, model) -> bool:
    """Whether `op` may run as one computation over `passes`: two or more passes, a forward, recompute or backward
    of a `rows_apart` layer (or the loss of a `rows_apart` loss) on `rows_apart` kernels, no values kept for
    narration, and every pass's tensor in flight (its block's checkpoint, for a recompute that starts from one) a 2-D
    host array of one shape and dtype (with its saved tensors at hand, for a backward; its target alike and one loss
    scale, for the loss). A checkpoint under op-level selective checkpointing keeps the loop (`Pass._selective`
    decides what it keeps, or refuses)."""
    if len(passes) < 2 or op.kind not in KINDS:
        return False
    if op.checkpoint and getattr(model, "checkpoint", None) == "op-sac":
        return False
    loss = op.kind == "loss"
    if not (model.loss if loss else model.layers[op.layer]).stacks_rows():
        return False
    first, backward = passes[0], op.kind == "backward"
    if first.keep_values or not arithmetic_of(first.fmt).rows_apart:
        return False
    x, t = first.dy if backward else _input(first, op), first.target
    if type(x) is not np.ndarray or x.ndim != 2 or (loss and (type(t) is not np.ndarray or t.shape != x.shape)):
        return False
    shape, dtype, fmt, scale = x.shape, x.dtype, first.fmt, first.loss_scale
    for work in passes:
        x = work.dy if backward else _input(work, op)
        if (type(x) is not np.ndarray or x.shape != shape or (x.dtype is not dtype and x.dtype != dtype)
                or (work.fmt is not fmt and work.fmt != fmt) or work.keep_values):  # `is` first: the passes share them
            return False
        if backward and op.layer not in work.saved.items:
            return False
        if loss and (type(work.target) is not np.ndarray or work.target.shape != t.shape or work.target.dtype !=
                     t.dtype or work.loss_scale != scale):
            return False
    return True


def run_stacked(passes: list, op, model, params: dict, grads_out: dict | None = None):
    """`op` on every pass at once (`stacks` said it may), with the weights every pass reads (`params`, by name):
    a `Landing`, an iterable of (i, Done) that lands pass i's rows just before its yield; None, with nothing changed,
    where the layer's results do not come back with the passes' rows (a cache of another shape). `grads_out`: for a
    backward, {name: (n, ...) array} the layer may write its gradients into (`Layer.backward_ranks`' `out`)."""
    f, n = passes[0].fmt, len(passes)
    if op.kind == "loss":
        y0 = passes[0].a  # (B, D_out)
        rows = y0.shape[0]
        y = np.concatenate([work.a for work in passes])  # (n·B, D_out)
        target = np.concatenate([work.target for work in passes])  # (n·B, D_out)
        losses, cache = model.loss.forward_ranks(y, target, f, n)  # [n floats], {what: (n·B, ...)}
        dy = model.loss.backward_ranks(cache, f, n, scale=passes[0].loss_scale)  # (n·B, D_out) fmt
        if len(losses) != n or not _rows_of(n * rows, dy, *cache.values()):
            return None
        made = done(None, model.loss.flops(y0.shape), int(y0.nbytes), int(dy[:rows].nbytes))
        return Landing(_land_loss(passes, rows, losses, cache, dy, made))
    layer = model.layers[op.layer]
    weights = sum(int(a.nbytes) for a in params.values())
    if op.kind != "backward":  # a forward or recompute
        x0 = _input(passes[0], op)  # (B, D_in)
        rows = x0.shape[0]
        x = np.concatenate([_input(work, op) for work in passes])  # (n·B, D_in) the ranks' rows, rank by rank: a copy
        with used_once(x):  # a stack no later product meets again: the portable kernels keep nothing of it
            out, cache = layer.forward(params, x, f)  # (n·B, D_out), {what: (n·B, ...)}
        if not _rows_of(n * rows, out, *cache.values()):
            return None
        made = done(None, layer.flops(x0.shape, "forward"), weights + int(x0.nbytes), int(out[:rows].nbytes))
        return Landing(_land_forward(passes, op, layer.name, rows, out, cache, made))
    dy0 = passes[0].dy  # (B, D_out)
    rows, saved = dy0.shape[0], [work.saved.peek(op.layer) for work in passes]  # read, not freed yet
    first = saved[0]
    if not _alike(saved) or not _rows_of(rows, *first.values()):
        return None
    dy = np.concatenate([work.dy for work in passes])  # (n·B, D_out)
    cache = {k: np.concatenate([s[k] for s in saved]) for k in first}  # {what: (n·B, ...)}
    with used_once(dy, *cache.values()):
        dx, grads = layer.backward_ranks(params, dy, cache, f, n, grads_out)  # (n·B, D_in), {name: n ranks' (...)}
    if not _rows_of(n * rows, dx) or any(len(g) != n for g in grads.values()):
        return None
    x_shape = next(iter(first.values())).shape if first else dy0.shape
    read = weights + int(dy0.nbytes) + sum(int(a.nbytes) for a in first.values())
    written = int(dx[:rows].nbytes) + sum(int(g[0].nbytes) for g in grads.values())
    made = done(None, layer.flops(x_shape, "backward"), read, written)
    return Landing(_land_backward(passes, op, rows, dx, made), grads)


def _alike(saved: list) -> bool:
    """Whether every pass saved what the first did: the same names, each of one shape and dtype."""
    first = saved[0]
    if len(first) == 1:  # one tensor (a Linear's input, a ReLU's): its shape and dtype read once, no inner loop
        ((what, a),) = first.items()
        shape, dtype = a.shape, a.dtype
        return all(len(s) == 1 and s[what].shape == shape and s[what].dtype == dtype for s in saved)
    return not any(len(s) != len(first) or any(s[k].shape != a.shape or s[k].dtype != a.dtype
                                                for k, a in first.items()) for s in saved)


def _rows_of(rows: int, *arrays) -> bool:
    return all(getattr(a, "ndim", 0) >= 1 and a.shape[0] == rows for a in arrays)


class Landing:
    """`run_stacked`'s answer: iterated, (i, Done) as pass i lands, one `Done` for every pass (what the op cost each:
    the same; its `grads` None); `grads`, for a backward, the layer's gradients of every pass at once ({name: n
    passes' (n, ...) array, or a list of n}), for a caller that keeps them for all passes in one go
    (parallel/data/_compute.py), pass i's own as `grads_of(i)` (what its `Pass.run` gives as `Done.grads`); None for
    other ops."""

    __slots__ = ("_lands", "grads")

    def __init__(self, lands, grads: dict | None = None):
        self._lands, self.grads = lands, grads

    def __iter__(self):
        return self._lands

    def grads_of(self, i: int) -> dict:
        """Pass i's gradients, by name ({}: none)."""
        return {k: g[i] for k, g in (self.grads or {}).items()}


def _each_pass(a, n: int, rows: int) -> list:
    """[a[i·rows:(i+1)·rows] for i < n]: pass i's rows of a stacked array, views of it alike (its shape, strides and
    bytes), from one reshape where `a` is contiguous (a slice per pass costs more)."""
    if type(a) is np.ndarray and a.flags.c_contiguous:
        return list(a.reshape(n, rows, *a.shape[1:]))
    return [a[i * rows:(i + 1) * rows] for i in range(n)]


def _land_forward(passes, op, name: str, rows: int, out, cache: dict, made):
    n = len(passes)
    outs = _each_pass(out, n, rows)  # (B, D_out) each
    parts = list(zip(*(_each_pass(a, n, rows) for a in cache.values()))) if op.save and cache else None
    whats = tuple(cache)
    for i, work in enumerate(passes):
        if op.from_checkpoint:  # its block's input freed, as `Pass.run` frees it before the recompute
            work.saved.pop(("checkpoint", op.layer))
        if op.checkpoint:  # its own input kept as its block's checkpoint, as `Pass.run` keeps it before the forward
            work.saved.put(("checkpoint", op.layer), name, {"block input": work.a})
        if op.save:
            work.saved.put_each(op.layer, name, whats, parts[i] if parts else ())
        work.a = outs[i]  # (B, D_out)
        yield i, made


def _land_loss(passes, rows: int, losses: list, cache: dict, dy, made):
    n = len(passes)
    dys, whats = _each_pass(dy, n, rows), tuple(cache)
    parts = list(zip(*(_each_pass(a, n, rows) for a in cache.values()))) if cache else None
    for i, work in enumerate(passes):
        work.loss = losses[i]
        work.saved.put_each("loss", "loss", whats, parts[i] if parts else ())  # its cache, adopted and freed
        work.saved.drop("loss")
        work.dy = dys[i]  # (B, D_out)
        yield i, made


def _land_backward(passes, op, rows: int, dx, made):
    dxs = _each_pass(dx, len(passes), rows)  # (B, D_in) each
    for i, work in enumerate(passes):
        work.saved.drop(op.layer)  # its frees, as `Pass.run` makes them before the layer's backward (read: `peek`)
        work.dy = dxs[i]
        yield i, made
