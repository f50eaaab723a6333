"""Every rank's op as one computation: the ranks' micro-batches stacked row by row, the layer run once, each rank's
rows handed back to it.

Letters: n passes (one per rank), B rows each (a micro-batch), D widths.

In a data-parallel step every rank runs the same layer with the same weights over its own micro-batch. A layer that
treats rows apart (`Layer.rows_apart`: Linear, ReLU, GELU; `Loss.rows_apart`: half-MSE), on kernels whose products treat
rows apart (`Arithmetic.rows_apart`: the portable kernels, each element its own exact dot product rounded once), gives
rank r's rows of one (n·B, D) batch the bits that rank's own (B, D) run gives. So one call serves n ranks, and the
Python a layer costs per call is paid once, not n times (docs/speed.md, section 1, item 13). What sums over one rank's
rows (a Linear's dW and db) comes from `Layer.backward_ranks`, over each rank's block of rows. On kernels whose
products are not rows apart (the machine's sgemm, "native"), 2-D layers still run once for every rank: their products
as a stack of n matrices, (n, B, D) @ (D, D'), which NumPy's matmul makes one BLAS call a matrix, with the shape,
strides and transposes the matrix alone gets (NumPy 2.4, numpy/_core/src/umath/matmul.c.src, `@TYPE@_matmul`: its
loop over the outer dimension calls `@TYPE@_matmul_matrixmatrix` on each matrix), so each rank's product is the call
its own run makes (a Linear's forward is handed the (n, B, D) view; its backward's dx is made so), and everything else
they do is elementwise or each rank's own sums. A GPT's and a Llama's
units and their LM loss (`rows_apart_nd`) treat each sequence of a (B, L, ...) activation apart: their rows are the
sequences, along axis 0, and their weight gradients (the Linears', the norms', the embeddings' scatter) each rank's own
sums.

    stacks(passes, op, model)         whether `run_stacked` may serve `op` (checked before anything is made): a
                                      forward (one that keeps its block's checkpoint too), a recompute (one that
                                      starts from it too), a backward, or the loss (`Loss.rows_apart`: half-MSE,
                                      each rank's loss its own sum over its rows)
    run_stacked(passes, op, model, p)  op computed once for every pass; then every pass's rows land: its saved tensors
                                      (and checkpoints) adopted or freed in its ledger as `Pass.run` does it, all
                                      passes' in one call per tensor (models/_run.py `put_ranks`, `drop_ranks`), its
                                      tensor in flight replaced; a `Landing`: what the op cost each pass, the ledger
                                      events by pass, and a backward's gradients of every pass at once (`grads`; pass
                                      i's, `grads_of(i)`), for a caller that packs them in one go

The ledger events come back unrecorded, a list of n per alloc or free: a caller that records pass i's row, then its
own events of rank i, rank after rank (cluster/_trace.py `Trace.record_ranks`), writes the log a loop over `Pass.run`
writes. That loop is the naive twin (tests/test_stacked_ranks.py: the same bits, events and ledgers).
A pass's saved tensors and its tensor in flight are views of the stacked arrays: its ledger counts their bytes as
it counted its own arrays'.
"""

from __future__ import annotations

import operator

import numpy as np

from zerosim.models._run import backward_shape, done, drop_ranks, put_ranks
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
    of a `rows_apart` layer (or the loss of a `rows_apart` loss), no values kept for narration, and every pass's
    tensor in flight (its block's checkpoint, for a recompute that starts from one) a host array of one shape and
    dtype, 2-D (or, on `rows_apart` kernels, of any rank, rows along axis 0, for a `rows_apart_nd` layer or loss),
    with its saved tensors at hand, for a backward; for the loss, its target alike (a host array with a row for each
    of the prediction's, the rest of its shape `Loss.check_target`'s to vouch for: `Loss.checks_rows`) and one loss
    scale. A checkpoint under op-level selective checkpointing keeps the loop (`Pass._selective` decides what it
    keeps, or refuses)."""
    if len(passes) < 2 or op.kind not in KINDS:
        return False
    if op.checkpoint and getattr(model, "checkpoint", None) == "op-sac":
        return False
    loss = op.kind == "loss"
    unit = model.loss if loss else model.layers[op.layer]
    if not unit.stacks_rows() or (loss and not unit.checks_rows()):
        return False
    first, backward, ops = passes[0], op.kind == "backward", arithmetic_of(passes[0].fmt)
    if first.keep_values:
        return False
    x, t = first.dy if backward else _input(first, op), first.target
    if type(x) is not np.ndarray or not (x.ndim == 2 or (x.ndim > 2 and unit.rows_apart_nd)):
        return False
    if not ops.rows_apart and (x.ndim != 2 or unit.rows_apart_nd):  # products a rank's matrix each: 2-D layers only
        return False
    if loss and (type(t) is not np.ndarray or t.shape[:1] != x.shape[:1]):
        return False
    shape, dtype, fmt, scale, unledgered = x.shape, x.dtype, first.fmt, first.loss_scale, first.saved.ledger is None
    for work in passes:
        x = work.dy if backward else _input(work, op)
        if (type(x) is not np.ndarray or x.shape != shape or (x.dtype is not dtype and x.dtype != dtype)
                or (work.fmt is not fmt and work.fmt != fmt) or work.keep_values  # `is` first: the passes share them
                or (work.saved.ledger is None) is not unledgered):  # a ledger on every pass, or on none
            return False
        if backward and op.layer not in work.saved.items:
            return False
        if loss and (type(work.target) is not np.ndarray or work.target.shape != t.shape or work.target.dtype !=
                     t.dtype or work.loss_scale != scale):
            return False
    return True


def run_stacked(passes: list, op, model, params: dict, grads_out: dict | None = None):
    """`op` on every pass at once (`stacks` said it may), with the weights every pass reads (`params`, by name),
    every pass's rows landed: a `Landing` (its ledger events not recorded yet); None, with nothing changed, where the
    layer's results do not come back with the passes' rows (a cache of another shape). `grads_out`: for a backward,
    {name: (n, ...) array, or a list of each pass's array} the layer may write its gradients into
    (`Layer.backward_ranks`' `out`)."""
    f, n = passes[0].fmt, len(passes)
    if op.kind == "loss":
        y0 = passes[0].a  # (B, D_out)
        rows = y0.shape[0]
        y = _stack(passes, "a", [work.a for work in passes])  # (n·B, D_out)
        target = np.concatenate([work.target for work in passes])  # (n·B, ...)
        # [n floats], {what: (n·R, ...)}: each rank's R rows a block (R = B, or B·L for an LM's tokens)
        losses, cache = model.loss.forward_ranks(y, target, f, n)
        dy = model.loss.backward_ranks(cache, f, n, scale=passes[0].loss_scale)  # (n·B, D_out) fmt
        if len(losses) != n or not _rows_of(n * rows, dy) or not all(_blocks_of(n, a) for a in cache.values()):
            return None
        made = done(None, model.loss.flops(y0.shape), int(y0.nbytes), int(dy[:rows].nbytes))
        return Landing(made, _land_loss(passes, rows, losses, cache, dy))
    layer = model.layers[op.layer]
    weights = sum(int(a.nbytes) for a in params.values())
    if op.kind != "backward":  # a forward or recompute
        x0 = _input(passes[0], op)  # (B, D_in)
        rows = x0.shape[0]
        # (n·B, D_in) the ranks' rows, rank by rank: the array the last landing cut them from, else a copy
        x = _stack(passes, "a", [_input(work, op) for work in passes])
        by_rank = not arithmetic_of(f).rows_apart  # the products each rank's own matrix: (n, B, D_in) (module doc)
        with used_once(x):  # a stack the portable kernels keep nothing of (its backward's dW meets it once more)
            out, cache = layer.forward(params, x.reshape(n, rows, *x.shape[1:]) if by_rank else x, f)  # (n·B, D_out)
        if by_rank:  # back to the ranks' rows, one after another: views of the same arrays
            out, cache = _rows(out, n, rows), {k: _rows(a, n, rows) for k, a in cache.items()}
        if not _rows_of(n * rows, out, *cache.values()):
            return None
        made = done(None, layer.flops(x0.shape, "forward"), weights + int(x0.nbytes), int(out[:rows].nbytes))
        return Landing(made, _land_forward(passes, op, layer.name, rows, out, cache))
    dy0 = passes[0].dy  # (B, D_out)
    rows, cache = dy0.shape[0], _saved_stack(passes, op.layer)  # {what: (n·B, ...)}: what the forward landed
    if cache is None:  # not (all) landed by one stacked forward: every pass's read (not freed yet), stacked afresh
        saved = [work.saved.peek(op.layer) for work in passes]
        if not _alike(saved) or not _rows_of(rows, *saved[0].values()):
            return None
        cache = {k: np.concatenate([s[k] for s in saved]) for k in saved[0]}  # {what: (n·B, ...)}
    elif not _rows_of(n * rows, *cache.values()):
        return None
    first = passes[0].saved.peek(op.layer)
    dy = _stack(passes, "dy", [work.dy for work in passes])  # (n·B, D_out)
    with used_once(dy, *cache.values()):
        dx, grads = layer.backward_ranks(params, dy, cache, f, n, grads_out)  # (n·B, D_in), {name: n ranks' (...)}
    if not (dx is None or _rows_of(n * rows, dx)) or any(len(g) != n for g in grads.values()):
        return None  # (dx None: the embedding's, no gradient for integer ids)
    x_shape = backward_shape(first, dy0)
    read = weights + int(dy0.nbytes) + sum(int(a.nbytes) for a in first.values())
    written = (0 if dx is None else int(dx[:rows].nbytes)) + sum(int(g[0].nbytes) for g in grads.values())
    made = done(None, layer.flops(x_shape, "backward"), read, written)
    return Landing(made, _land_backward(passes, op, rows, dx), grads)


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


def _rows(a, n: int, rows: int):
    """An (n, B, ...) array as (n·B, ...), its rows rank after rank; anything else as it is (the check after the
    forward then refuses it, and the loop runs the op)."""
    if getattr(a, "shape", ())[:2] != (n, rows):
        return a
    return a.reshape(n * rows, *a.shape[2:])


def _blocks_of(n: int, a) -> bool:
    """Whether `a`'s leading axis splits into n blocks of one length (the loss's cache: each rank's rows a block)."""
    return getattr(a, "ndim", 0) >= 1 and a.shape[0] % n == 0


def _stack(passes: list, key, arrays: list):
    """The (n·B, ...) stack of `arrays` (pass i's at [i]): the array the last landing cut them from (`_cut`), where
    they are still its n row blocks in order (the same elements, so the same bits as their concatenation, with no
    copy: the next layer's forward reads the last one's output so, the loss the model's, a backward the gradient the
    last one handed back); else their concatenation."""
    cut = passes[0].stacks.get(key)
    if cut is not None and len(cut[0]) == len(arrays) and all(map(operator.is_, arrays, cut[0])):
        return cut[1]
    return np.concatenate(arrays)


def _cut(passes: list, key, a, n: int, rows: int) -> list:
    """`_each_pass(a, n, rows)`, remembered on the first pass under `key` for `_stack` where `a` is C-contiguous (the
    layout a concatenation of the parts makes, so a layer reading it sees what it saw before)."""
    parts = _each_pass(a, n, rows)
    if type(a) is np.ndarray and a.flags.c_contiguous:
        passes[0].stacks[key] = (parts, a)
    else:
        passes[0].stacks.pop(key, None)
    return parts


def _saved_stack(passes: list, layer: int) -> dict | None:
    """{what: (n·B, ...)}: what every pass saved for `layer`'s backward, as the stacked forward made it, where each
    pass still holds the very tensors it landed (`_land_forward` remembers them: the dicts it put); None elsewhere."""
    cut = passes[0].stacks.pop(("saved", layer), None)
    if cut is None or len(cut[0]) != len(passes):
        return None
    held = [work.saved.items.get(layer) for work in passes]
    return cut[1] if all(map(operator.is_, held, cut[0])) else None


class Landing:
    """`run_stacked`'s answer, once every pass has landed: `made`, what the op cost each pass (one `Done` for every
    pass: the same; its `grads` None); `events`, the ledger events of the landing, a list of n per alloc or free
    (rank i's at [i]; a pass's row, its events in the order its `Pass.run` makes them), for the caller to record
    rank by rank with its own (cluster/_trace.py `Trace.record_ranks`); `grads`, for a backward, the layer's gradients
    of every pass at once ({name: n passes' (n, ...) array, or a list of n}), for a caller that keeps them for all
    passes in one go (parallel/data/_compute.py), pass i's own as `grads_of(i)` (what its `Pass.run` gives as
    `Done.grads`); None for other ops."""

    __slots__ = ("made", "events", "grads")

    def __init__(self, made, events: list, grads: dict | None = None):
        self.made, self.events, self.grads = made, events, grads

    def grads_of(self, i: int) -> dict:
        """Pass i's gradients, by name ({}: none)."""
        return {k: g[i] for k, g in (self.grads or {}).items()}


def _each_pass(a, n: int, rows: int) -> list:
    """[a[i·rows:(i+1)·rows] for i < n]: pass i's rows of a stacked array, views of it alike (its shape, strides and
    bytes), from one reshape where `a` is contiguous (a slice per pass costs more)."""
    if type(a) is np.ndarray and a.flags.c_contiguous:
        return list(a.reshape(n, rows, *a.shape[1:]))
    return [a[i * rows:(i + 1) * rows] for i in range(n)]


def _land_forward(passes, op, name: str, rows: int, out, cache: dict) -> list:
    """Every pass's landing of a forward or recompute, as its `Pass.run` makes it: its block's input freed (a
    recompute from a checkpoint), its own input kept as its block's checkpoint, its saved tensors adopted, its tensor
    in flight replaced; the ledger events, a list of n per alloc or free, in that order."""
    n, saves = len(passes), [work.saved for work in passes]
    events = []
    if op.from_checkpoint:  # its block's input freed, as `Pass.run` frees it before the recompute
        events += drop_ranks(saves, ("checkpoint", op.layer))
    if op.checkpoint:  # its own input kept as its block's checkpoint, as `Pass.run` keeps it before the forward
        events += put_ranks(saves, ("checkpoint", op.layer), name, ("block input",), [[work.a for work in passes]])
    if op.save:
        events += put_ranks(saves, op.layer, name, tuple(cache), [_each_pass(a, n, rows) for a in cache.values()])
        if all(type(a) is np.ndarray and a.flags.c_contiguous for a in cache.values()):  # for its backward's stack
            passes[0].stacks[("saved", op.layer)] = ([saved.items[op.layer] for saved in saves], cache)
    for work, a in zip(passes, _cut(passes, "a", out, n, rows)):
        work.a = a  # (B, D_out)
    return events


def _land_loss(passes, rows: int, losses: list, cache: dict, dy) -> list:
    """Every pass's landing of the loss: its cache adopted and freed, its loss and gradient set."""
    n, saves = len(passes), [work.saved for work in passes]
    events = put_ranks(saves, "loss", "loss", tuple(cache), [_each_pass(a, n, a.shape[0] // n) for a in cache.values()])
    events += drop_ranks(saves, "loss")
    for work, loss, d in zip(passes, losses, _cut(passes, "dy", dy, n, rows)):
        work.loss, work.dy = loss, d  # (B, D_out)
    return events


def _land_backward(passes, op, rows: int, dx) -> list:
    """Every pass's landing of a backward: its saved tensors freed (`Pass.run` frees them before the layer's
    backward; read already: `peek`), its gradient in flight replaced."""
    events = drop_ranks([work.saved for work in passes], op.layer)
    if dx is None:  # no gradient to hand on (the embedding's: integer ids), as each pass's own backward gives
        passes[0].stacks.pop("dy", None)
        for work in passes:
            work.dy = None
        return events
    for work, d in zip(passes, _cut(passes, "dy", dx, len(passes), rows)):
        work.dy = d  # (B, D_in)
    return events
