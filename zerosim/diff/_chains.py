"""Each kind of logical tensor's chain of events, as a table (CHAINS): kind -> the function that lists, for one run,
the events that made one element of such a tensor, from the run's trace and facts (_events.py says how two chains
are read). The reduced gradient's chain is _reduction.py's.

A chain names the run's own events: the Compute op that made an activation (its rank, layer and format), the
tensor-parallel collectives between two whole-model layers, the Call and ring hop that carried a partial sum, the
GradClip that scaled a gradient, the OptimizerStep's intermediates.
"""

from __future__ import annotations

import numpy as np

from zerosim.diff._events import Event, number
from zerosim.diff._names import AFTER
from zerosim.diff._reduction import reduction_chain
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face


def _weights(side, t, index, param, value) -> list:
    f = side.facts
    fmt = f.compute if t.kind == "params" else f.master
    return [Event("init", f"the initial weights drawn in fp32 from seed {f.seed + 1} (the model's init)",
                  ("init", f.seed, f.model)),
            Event("cast", f"rounded to {fmt} (to nearest, ties to even) to start the run", ("cast", t.kind, fmt),
                  number(value))]


def _scale(side, t, index, param, value) -> list:
    return [Event("loss scale", f"the loss multiplied by S = {float(value):g} before backward "
                                f"(loss_scale {side.facts.loss_scale!r})", ("scale", float(value)), number(value))]


def _data(side, t, index, param, value) -> list:
    f, record = side.facts, side.recorder.steps[t.step]
    rank = next((r for r, _, tp, ids in record.placement if t.slot in ids and tp == 0), None)
    ran = "not run: this run's step has fewer" if rank is None else f"run by rank {rank}"
    return [Event("data", f"micro-batch {t.slot} of step {t.step}: drawn from the pool of seed {f.seed} "
                          f"({f.micro_batches} micro-batches of {f.batch} a step), {ran}",
                  ("data", f.seed, f.micro_batches, f.batch, t.step, t.slot), number(value))]


def _where(side, t) -> str:
    record = side.recorder.steps[t.step]
    found = next(((r, ids.index(t.slot)) for r, _, tp, ids in record.placement if t.slot in ids and tp == 0), None)
    return "" if found is None else f" on rank {found[0]} (its micro-batch {found[1]})"


def _op(side, t) -> tuple:
    f = side.facts
    return (f.compute, f.arithmetic, f.attention, f.tp, f.sp)


def _forward(side, t, index, param, value) -> list:
    f = side.facts
    events = _tensor_parallel(side, t) if f.tp > 1 else []
    what = "the loss" if t.kind == "loss" else f"{t.name}.forward"
    return events + [Event("forward", f"{what}{_where(side, t)} in {f.compute} ({f.arithmetic} kernels"
                                      f"{', tensor parallel over ' + str(f.tp) + ' ranks' if f.tp > 1 else ''})",
                           ("forward", t.kind, t.name, _op(side, t)), number(value))]


def _tensor_parallel(side, t) -> list:
    """The tensor-parallel collectives of the micro-batch's forward up to the tensor (the sums of partial products
    Megatron's row-parallel layers and vocabulary-parallel loss make), in the order they ran."""
    record, f = side.recorder.steps[t.step], side.facts
    micro = next((ids.index(t.slot) for _, _, _, ids in record.placement if t.slot in ids), 0)
    compared = set(side.recorder.layer_ends.values())  # the whole layers whose output the run recorded
    events = []
    for kind, item in record.tp_forward.get(micro, ()):
        if kind == "unit" and t.kind == "out" and item == t.name:
            break
        if kind == "unit" and item in compared:  # an earlier whole layer ended (and matched): its sums are behind
            events = []
        elif kind == "call" and item.op == "sum" and not item.tag.startswith("embed"):
            # (the vocabulary-parallel embedding's sum is exact: each token's row lives on one TP rank, the others add
            # zeros — Megatron's VocabParallelEmbedding — so it makes no other bits and is passed over)
            events.append(Event("tensor parallel", f"{item.collective} call #{item.call} ({item.tag!r}, {item.dtype}, "
                                                   f"over the {item.world_size} TP ranks): each rank's partial sum "
                                                   f"added in the ring's order", ("tp", item.tag, f.tp, f.sp)))
    return events


def _backward(side, t, index, param, value) -> list:
    f, record = side.facts, side.recorder.steps[t.step]
    scale = record.values.get((-1, "loss scale", ""), 1.0)
    layer = side.recorder.whole.layers[param.layer].name
    return [Event("loss scale", f"the loss gradient multiplied by S = {scale:g}", ("scale", scale)),
            Event("backward", f"{layer}.backward{_where(side, t)} in {f.compute} "
                              f"({f.arithmetic} kernels"
                              f"{', its TP slices joined' if f.tp > 1 else ''}), loss-scaled by {scale:g}",
                  ("backward", param.name, _op(side, t), scale), number(value))]


def _reduced(side, t, index, param, value) -> list:
    return reduction_chain(side, t.step, param, index)


def _averaged(side, t, index, param, value) -> list:
    f, record, engine = side.facts, side.recorder.steps[t.step], side.recorder.engine
    reduced = record.flats[AFTER, "reduced"][param.offset + index]
    scale = record.values.get((-1, "loss scale", ""), 1.0)
    averaged = averaging.finish(np.asarray([reduced]), engine.precision, f.dp, f.K, scale, recipe=engine.recipe)[0]
    divisor = f.K if f.divides_by_n else f.dp * f.K
    events = [Event("averaging", f"cast to {f.update}, divided by {divisor}"
                                 f"{' (the recipe divided by N already)' if f.divides_by_n else ''}, unscaled by "
                                 f"S = {scale:g} ({f.unscale})",
                    ("average", divisor, f.divides_by_n, scale, f.unscale, f.update), number(averaged))]
    clip = record.clip
    if clip is None:
        events.append(Event("clipping", "no clipping (clip_grad unset): the averaged gradient as it is",
                            ("clip", None), number(value)))
    else:
        cut = clip.coef < 1
        events.append(Event("clipping", f"clip_grad_norm_: global norm {clip.norm:.9g} "
                                        f"{'>' if cut else '<='} max_norm {clip.max_norm:g}, every gradient times "
                                        f"coef {clip.coef:.9g}{'' if cut else ' (clamped to 1: unchanged)'}",
                            ("clip", clip.coef if cut else None), number(value)))
    return events


def _state(side, t, index, param, value) -> list:
    f = side.facts
    state = t.name.split(" ", 1)[0]
    return [Event("optimizer", f"{f.optimizer} step: its {state} computed in {f.update}",
                  ("state", state, f.optimizer, f.update), number(value))]


def _stored(side, t, index, param, value) -> list:
    f = side.facts
    state = t.name.split(" ", 1)[0]
    return [Event("store", f"{state} stored in {f.state} between steps", ("store", state, f.optimizer, f.state),
                  number(value))]


def _master(side, t, index, param, value) -> list:
    f = side.facts
    return [Event("update", f"{f.optimizer} update of the {f.master or f.update + ' (no master: pure)'} weights",
                  ("update", f.optimizer, f.master, f.update), number(value))]


def _params(side, t, index, param, value) -> list:
    f = side.facts
    return [Event("cast", f"the new weights rounded to {f.compute} ({f.rounding})", ("round", f.compute, f.rounding),
                  number(value))]


CHAINS = {  # a logical tensor's kind (_names.py) -> its chain of events in one run
    "params": _weights,
    "master": _weights,
    "loss scale": _scale,
    "input": _data,
    "target": _data,
    "out": _forward,
    "loss": _forward,
    "grad": _backward,
    "reduced": _reduced,
    "grad32": _averaged,
    "state": _state,
    "stored": _stored,
    "new master": _master,
    "new params": _params,
}
