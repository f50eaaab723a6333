"""The events behind one element of a run's reduced gradient: each rank's accumulation, the recipe's division before
the wire, the ring's hops with their partial sums, what the recipe does after — replayed on the run's own local
gradients (the logical checkpoints both runs share up to here) in the order the run's layout gives, and kept only if
the replay ends on the very bits the run recorded.

The ring is NCCL's for one ring in rank order (DESIGN.md): the sum of the chunk owned by ring position c starts at
position c+1 and ends at c, each hop rounded once to the wire format. The layout says which chunk an element is in
(`owner_chunks`: its owner); an all-reduce's own chunk map (NCCL's, gloo's) or a bucket all-reduced whole may put it
in another, so where the owner's order does not give the recorded bits every other start (and gloo's direction) is
tried, and the one that does is named. Arithmetic is the package's one definition of each step: the recipe's
`reduce_op` and `after_reduce`, `accumulate` (parallel/data/recipes/_averaging.py) and the naive ring
(`naive_reduce`), never written again here. Stages 0/1 accumulate each rank's K micro-batches, then reduce once;
stages 2/3 reduce every micro-step, then accumulate the reduced gradient (_averaging.py says so).
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import naive_reduce
from zerosim.diff._events import Event, number, same_bits
from zerosim.diff._names import AFTER
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face
from zerosim.parallel.data.recipes import call_chunks, flat_chunks, range_slices, ready_order, split_calls


def reduction_chain(side, step: int, param, index: int) -> list:
    """The events that made element `index` of `param`'s reduced gradient in step `step` of run `side`."""
    run, facts = side.recorder, side.facts
    record = run.steps[step]
    q = param.offset + index
    local = {g: record.flats[g, "grad"][q] for g in _micro_batches(record)}
    recorded = record.flats[AFTER, "reduced"][q]
    cut = _chunk(side, record, param, q)  # the chunk the run's collective put the element in, where it can be read
    tried = [cut] if cut is not None else []
    tried += [(c, d) for d in (1, -1) for c in range(facts.dp) if (c, d) not in tried]
    for start, direction in tried:
        events, value = _replay(side, record, param, local, start, direction)
        if same_bits(value, recorded):
            if (start, direction) != cut:  # an order the bits allow, one of several perhaps: said so
                events.append(Event("reduction", "(an order found by its bits: the collective's cut of this element "
                                                 "was not read from the run)", ("chunk map", start, direction)))
            return events
    call = _call(record, param, side, 0)
    return [Event("reduction", f"{_call_text(call)}: the {facts.dp} ranks' gradients reduced by recipe "
                               f"{facts.recipe} ({facts.averaging}, {facts.reduce}); no ring order replayed here gives "
                               f"its bits", ("reduction", facts.recipe, facts.dp, facts.reduce, facts.allreduce,
                                              facts.bucket), number(recorded))]


def _micro_batches(record) -> list:
    return sorted(k[0] for k in record.flats if k[1] == "grad")


def _chunk(side, record, param, q: int) -> tuple | None:
    """(the ring chunk whose sum holds whole-model element q, the ring's direction) as the run's collective cut it,
    from the recipe's own rules — a bucket all-reduced whole (DeepSpeed ZeRO-1/2: the bucket's parameters in
    gradient-ready order, cut where the owner changes, its calls by the bucket limit, each call's chunk map), a whole
    buffer's all-reduce by its chunk map (stage 0: NCCL's, gloo's or the ring's), else the layout's owner (a
    reduce-scatter to the owners) — or None beside tensor parallelism, where the element's place in a slice is the
    slicing rule's (every order is tried instead)."""
    if side.recorder.tensor is not None and side.recorder.tensor.local is not None:
        return None
    engine, facts = side.recorder.engine, side.facts
    ctx, itemsize = engine.ctx, engine.precision.reduce_format.itemsize
    call = _call(record, param, side, 0)
    if facts.collective == "bucket all-reduce" and call is not None and call.layers:
        params = [p for p in ready_order(list(ctx.params)) if p[0] in call.layers]
        slices = range_slices(ctx.layout, [(a, b) for _, a, b in params])
        for piece in split_calls(slices, ctx.bucket_limit):
            chunks, direction = flat_chunks(piece, facts.dp, itemsize, facts.allreduce)
            found = next((c for c, a, b in chunks if a <= q < b), None)
            if found is not None:
                return found, direction
        return None
    if call is not None and not call.layers and call.collective != "reduce_scatter":  # stage 0: the whole buffer
        m = engine.model.num_params if facts.allreduce != "ring" else ctx.layout.padded  # over P: NCCL's and gloo's
        chunks, direction = call_chunks(m, facts.dp, itemsize, facts.allreduce)
        return next(((c, direction) for c, a, b in chunks if a <= q < b), None)
    layout = ctx.layout
    return next(((c, 1) for c, a, b in layout.owner_chunks(layout.padded) if a <= q < b), None)


def _replay(side, record, param, local: dict, start: int, direction: int) -> tuple:
    """(events, final value) of the reduction with ring chunk `start` (its sum ends at position `start`)."""
    facts, engine = side.facts, side.recorder.engine
    policy, recipe, n, K = engine.precision, engine.recipe, facts.dp, facts.K
    op = averaging.reduce_op(policy, n, recipe)
    wire = policy.reduce_format
    order = [(start + direction * j) % n for j in range(1, n + 1)]  # the positions the partial sum visits
    events = []
    if not facts.reduces_per_unit:  # stages 0/1: each rank adds its own K micro-batches, then one reduction
        sums = {p: _accumulate(side, record, p, [p * K + k for k in range(K)], local, facts.accum_local, events)
                for p in range(n)}
        value, expr = _ring(side, record, param, sums, order, op, wire, events, K - 1)
        return events, value
    total = None  # stages 2/3: every micro-step reduced, the reduced pieces accumulated
    for k in range(K):
        sums = {p: ((p * K + k,), local[p * K + k]) for p in range(n)}
        value, expr = _ring(side, record, param, sums, order, op, wire, events, k)
        if K > 1:
            fmt = averaging.accum_format(policy, True, recipe)
            acc = np.zeros(1, fmt.dtype) if total is None else np.asarray([total[1]], fmt.dtype)
            averaging.accumulate(acc, np.asarray([value]), first=total is None)
            key = expr if total is None else ("+", fmt.name, total[0], expr)
            total = (key, acc[0])
            events.append(Event("accumulation", f"the reduced micro-step {k} accumulated into the gradient shard in "
                                                f"{fmt.name}", held(key, acc[0]), number(acc[0])))
            value = acc[0]
    return events, value


def _accumulate(side, record, p: int, micro: list, local: dict, fmt: str, events: list) -> tuple:
    """Ring position p's own gradient: its micro-batches' local gradients added in order in `fmt` (param.grad += g).
    Returns (its expression: the micro-batches as nested pairs, its value)."""
    dtype = np.dtype(_dtype(fmt))
    acc = np.zeros(1, dtype)
    expr = None
    for k, g in enumerate(micro):
        averaging.accumulate(acc, np.asarray([local[g]]), first=k == 0)
        expr = (g,) if expr is None else ("+", fmt, expr, (g,))
        if k:
            events.append(Event("accumulation", f"rank {_rank(record, p)} adds micro-batch {g}'s gradient to its "
                                                f"micro-batch{'es' if k > 1 else ''} "
                                                f"{', '.join(map(str, micro[:k]))} in {fmt} (param.grad += g)",
                                held(expr, acc[0]), number(acc[0])))
    return expr, acc[0]


def _ring(side, record, param, sums: dict, order: list, op, wire, events: list, micro: int) -> tuple:
    """The ring sum of the positions' values along `order`, with the recipe's op before the wire and its `after`
    after: events appended; (the final value, its expression)."""
    facts, engine = side.facts, side.recorder.engine
    n = len(order)
    pre = {}
    for p in order:
        expr, value = sums[p]
        wired = op.pre(np.asarray([value]), n, wire)
        if op.changes_input:
            expr = ("pre", op.name, n, expr)
            events.append(Event("pre-divide", f"rank {_rank(record, p)}: {op.description}", held(expr, wired[0]),
                                number(wired[0])))
        pre[p] = (expr, wired)
    call = _call(record, param, side, micro)
    expr, partial = pre[order[0]]
    for j in range(1, n):
        p = order[j]
        expr = ("+", wire.name, expr, pre[p][0])
        terms = [pre[q][1] for q in order[: j + 1]]
        partial = naive_reduce(terms, op="sum", wire=wire, order="ring", chunks=[(j, 0, 1)])
        events.append(Event("ring hop", f"{_call_text(call)}: hop {j}, rank {_rank(record, order[j - 1])} -> rank "
                                        f"{_rank(record, p)}, partial sum of micro-batches "
                                        f"{{{', '.join(map(str, members(expr)))}}} rounded to {wire.name} = "
                                        f"{number(partial[0])!r}", held(expr, partial[0]), number(partial[0])))
    out = averaging.after_reduce(op.post(np.asarray(partial), n), engine.precision, n, engine.recipe)
    if not same_bits(out[0], partial[0]) or out.dtype != partial.dtype:
        expr = ("after", facts.recipe, expr)
        events.append(Event("after", f"recipe {facts.recipe} keeps the reduced piece as {out.dtype.name}",
                            held(expr, out[0]), number(out[0])))
    return out[0], expr


def members(expr) -> tuple:
    """The micro-batches an expression holds, in the order it added them (an expression: (g,) for one micro-batch's
    gradient, or an operation's name and arguments, e.g. ("+", "bf16", left, right))."""
    if len(expr) == 1 and isinstance(expr[0], (int, np.integer)):
        return (int(expr[0]),)
    return tuple(g for part in expr if isinstance(part, tuple) for g in members(part))


def held(expr, value) -> tuple:
    """An event's key: which micro-batches its value holds and its bits. Two runs form the same value when they sum
    the same micro-batches to the same bits, whatever the order or the words (DeepSpeed's div_ by 4 and FSDP2's
    premultiply by 1/4 make the same bits); a value the other run never forms is where it parts."""
    return ("value", frozenset(members(expr)), np.asarray(value, np.float64).tobytes())


def _rank(record, position: int) -> int:
    """The rank at data-parallel position `position` (of tensor-parallel position 0)."""
    return next((r for r, dp, tp, _ in record.placement if dp == position and tp == 0), position)


def _call(record, param, side, micro: int):
    """The step's reducing Call that carried the parameter's unit (at micro-step `micro` where every micro-step
    reduces), or None."""
    layer = _local_layer(side, param)
    calls = [c for c in record.calls if c.purpose == "reduce grads"]
    mine = [c for c in calls if layer in c.layers] or [c for c in calls if not c.layers]
    at = [c for c in mine if c.micro == micro] or mine
    return at[0] if at else None


def _local_layer(side, param) -> int:
    tensor = side.recorder.tensor
    if tensor is None or tensor.local is None:
        return param.layer
    block, _, name = param.name.partition(".")
    return next((layer for (layer, pname), (key, _) in tensor.local.sources.items() if key == (block, name)),
                param.layer)


def _call_text(call) -> str:
    if call is None:
        return "the gradient reduction"
    return f"{call.collective} call #{call.call} ({call.tag!r}, {call.dtype}, {call.world_size} ranks)"


def _dtype(fmt: str):
    from zerosim.precision import get_format

    return get_format(fmt).dtype
