"""A model's step compiled once into coefficients, so that any (B, L) is a few multiplications away: what the page
and its Python twin (_closed.py) evaluate instead of running the engine.

Letters: B micro-batch, L sequence length, T = ceil(L / 64) flash-attention key tiles, u_i unit i's parameters.

The engine's step on the meta backend (the run `zerosim memory` / `zerosim timeline` make) is the same sequence of
ops whatever B, L and N are: the schedule (models/_schedule.py) depends on the model and its checkpointing only.
What changes with B and L is every activation buffer's size and every op's FLOPs and bytes, and each of those is a
whole-number combination of five terms,

    (B·L, B·L², B·L·T, B, 1)            e.g. Q: 2·d·BL bytes; P: 2·H·BL²; flash's per-tile work: BLT

so five runs at five (B, L) fix the coefficients, and three more check them (a size that is not such a
combination fails the check here, before anything ships). What changes with N (shards, the padded flat buffer,
which ranks a unit's window touches) is arithmetic on the units' sizes, which _closed.py does itself.

Per op of the schedule the compiled record keeps: its FLOPs and bytes moved (the timeline's roofline), the net
change of the activation bytes it leaves behind, and the prefix sums of its activation allocations and frees that
can be the step's peak (the others are dominated: another prefix holds at least as much of every term, earlier or
strictly more). The activation events of op i are read from a stage-3 run, where the gathered unit's allocation
and free bracket every op that reads weights (the loss and "keep input" ops read none and sit between brackets).
"""

from __future__ import annotations

import math
from fractions import Fraction

from zerosim.models import needs_params, schedule

TILE = 64  # flash attention's keys per tile (models/layers/_flash_attention.py BLOCK): the T in B·L·T
TERMS = ("BL", "BL2", "BLT", "B", "1")
FIT = ((1, 64), (1, 128), (2, 64), (1, 200), (3, 300))  # (B, L): five runs fix the five coefficients
CHECK = ((2, 1000), (5, 777), (1, 1024))  # three more must agree (L past several tiles, odd, a power of two)
KINDS = ("forward", "loss", "recompute", "keep input", "backward")  # models/_schedule.py KINDS, by index


def terms(batch: int, seq_len: int) -> tuple:
    """The five terms at (B, L)."""
    t = -(-seq_len // TILE)
    return batch * seq_len, batch * seq_len * seq_len, batch * seq_len * t, batch, 1


def value(coef, batch: int, seq_len: int) -> int:
    """A compiled quantity at (B, L): Σ coef·term, exactly."""
    return sum(c * x for c, x in zip(coef, terms(batch, seq_len)))


class NotCompilable(ValueError):
    """A size or count the five terms do not describe (the engine changed what a step holds): say which."""


def _solve(rows: list, values: list) -> tuple:
    """The whole-number coefficients c with rows·c = values (5 x 5, exact rational elimination)."""
    n = len(rows[0])
    m = [[Fraction(x) for x in r] + [Fraction(v)] for r, v in zip(rows, values)]
    for col in range(n):
        pivot = next(i for i in range(col, n) if m[i][col] != 0)
        m[col], m[pivot] = m[pivot], m[col]
        for i in range(n):
            if i != col and m[i][col] != 0:
                f = m[i][col] / m[col][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[col])]
    out = tuple(m[i][n] / m[i][i] for i in range(n))
    if any(c.denominator != 1 for c in out):
        raise NotCompilable(f"coefficients {out} are not whole numbers")
    return tuple(int(c) for c in out)


def fit(samples: list, what: str) -> tuple:
    """Coefficients of one quantity from its value at FIT + CHECK (in that order); NotCompilable if the CHECK
    points disagree."""
    rows = [terms(b, length) for b, length in FIT]
    coef = _solve(rows, samples[: len(FIT)])
    for (b, length), got in zip(CHECK, samples[len(FIT):]):
        if value(coef, b, length) != got:
            raise NotCompilable(f"{what}: {got} at B = {b}, L = {length}, but the fit {coef} gives "
                                f"{value(coef, b, length)}")
    return coef


def candidates(deltas: list) -> list:
    """The prefix sums of one op's activation changes (coefficient vectors, the empty prefix first) that can be the
    step's first peak: not matched by an earlier prefix in every term, nor exceeded by a later one."""
    prefix, sums = (0,) * len(TERMS), [(0,) * len(TERMS)]
    for d in deltas:
        prefix = tuple(a + b for a, b in zip(prefix, d))
        sums.append(prefix)

    def covers(a, b):  # a holds at least b of every term: a's bytes >= b's at every (B, L)
        return all(x >= y for x, y in zip(a, b))

    return [p for i, p in enumerate(sums)
            if not any(covers(q, p) for q in sums[:i]) and not any(covers(q, p) and q != p for q in sums[i + 1:])]


def _run(model_name: str, checkpoint: str, precision: str, stage: int, batch: int, seq_len: int):
    """One meta-backend step of the explorer's model on 2 ranks: (model, log, ledger timeline of rank 0)."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.explore._settings import Settings, model_for

    s = Settings(model=model_name, ranks=2, stage=stage, precision=precision, seq_len=seq_len, micro_batch=batch,
                 checkpoint=checkpoint)
    model = model_for(s)
    _, cluster, _ = measure_stage(model, 2, stage, s.optimizer, precision, micro_batch=(batch, seq_len))
    return model, cluster.trace.log, cluster.ranks[0].ledger.timeline


def _ops_of(model_name, checkpoint, precision, batch, seq_len):
    """Per op of the schedule: (layer, kind, FLOPs, bytes, [signed activation bytes]) from a stage-3 run."""
    from zerosim.cluster import Compute

    model, log, timeline = _run(model_name, checkpoint, precision, 3, batch, seq_len)
    ops = schedule(model, model.checkpointing)
    computes = iter(e for e in log if type(e) is Compute and e.rank == 0)
    events = iter(timeline)
    out, pending = [], []  # activation events seen since the last bracket closed
    for op in ops:
        acts = []
        if needs_params(model, op):  # its events lie between its gathered unit's alloc and free
            for e in events:
                if e.kind == "params" and e.action == "alloc" and "(gathered)" in e.name:
                    break
                if e.kind == "activations":
                    pending.append(e)
            if pending:  # a bookkeeping op before this one (the loss, a "keep input") owns them
                raise NotCompilable(f"{len(pending)} activation events before {op} belong to no op")
            for e in events:
                if e.kind == "params" and e.action == "free" and "(gathered)" in e.name:
                    break
                if e.kind == "activations":
                    acts.append(e.nbytes if e.action == "alloc" else -e.nbytes)
        else:  # the loss and "keep input": the activation events up to the next bracket
            for e in events:
                if e.kind == "params" and e.action == "alloc" and "(gathered)" in e.name:
                    pending_alloc = e
                    break
                if e.kind == "activations":
                    acts.append(e.nbytes if e.action == "alloc" else -e.nbytes)
                if e.kind == "grad32":  # the optimizer: backward is over
                    pending_alloc = None
                    break
            else:
                pending_alloc = None
            if pending_alloc is not None:  # put the bracket's opening back for the next op
                events = _chain(pending_alloc, events)
        c = next(computes) if op.computes else None
        flops = c.flops if c else 0
        moved = c.bytes_read + c.bytes_written if c else 0
        out.append((op.layer, op.kind, flops, moved, acts))
    if next(computes, None) is not None:
        raise NotCompilable("the log holds more computes than the schedule has ops")
    return model, out


def _chain(first, rest):
    yield first
    yield from rest


def compile_model(model_name: str, checkpoint: str, precision: str) -> dict:
    """The compiled step of `model_name` with `checkpoint` in `precision`'s compute format (JSON-ready):

        {"units": [u_i], "params": P, "ops": [[layer, kind index, template index], ...],
         "templates": [{"flops": c, "bytes": c, "net": c, "cands": [c, ...]}, ...]}

    every c a coefficient vector over TERMS. The activation bytes only depend on the compute format's width, so
    fp16-mixed and bf16-mixed compile alike."""
    runs = [_ops_of(model_name, checkpoint, precision, b, length) for b, length in FIT + CHECK]
    model, first = runs[0]
    for _, other in runs[1:]:
        if [(o[0], o[1], len(o[4])) for o in other] != [(o[0], o[1], len(o[4])) for o in first]:
            raise NotCompilable(f"{model_name} / {checkpoint}: the step's ops differ between (B, L) points")
    templates, index, ops = [], {}, []
    for i, (layer, kind, _, _, acts) in enumerate(first):
        name = f"{model_name} {checkpoint} op {i} ({kind} {layer})"
        flops = fit([r[1][i][2] for r in runs], name + " FLOPs")
        moved = fit([r[1][i][3] for r in runs], name + " bytes")
        deltas = [fit([r[1][i][4][j] for r in runs], f"{name} activation event {j}") for j in range(len(acts))]
        net = tuple(sum(d[t] for d in deltas) for t in range(len(TERMS)))
        record = {"flops": flops, "bytes": moved, "net": net, "cands": candidates(deltas)}
        key = repr(record)
        if key not in index:
            index[key] = len(templates)
            templates.append(record)
        ops.append([layer, KINDS.index(kind), index[key]])
    units = [int(sum(math.prod(s) for s in layer.param_shapes.values())) for layer in model.layers]
    if sum(units) != model.num_params:
        raise NotCompilable(f"{model_name}: the units' sizes add up to {sum(units)}, not {model.num_params}")
    return {"units": units, "params": model.num_params,
            "ops": ops, "templates": [{k: list(v) if k != "cands" else [list(c) for c in v] for k, v in t.items()}
                                      for t in templates]}


WIDTHS = {"16": "bf16-mixed", "32": "fp32"}  # the compute format's width decides every activation's bytes


def width(precision: str) -> str:
    """"32" for fp32, "16" for the 16-bit mixed precisions: the key under which their step is compiled."""
    return "32" if precision == "fp32" else "16"


def runs(ops: list) -> list:
    """`ops` ([layer, kind, template] each) as runs [first layer, layer step, count, kind, template]: a model's
    blocks repeat one template, so 96 blocks' forwards are one run."""
    out = []
    for layer, kind, t in ops:
        if out:
            first, step, count, k, tt = out[-1]
            if (k, tt) == (kind, t) and (count == 1 and abs(layer - first) == 1 or
                                         count > 1 and layer == first + step * count):
                out[-1] = [first, layer - first if count == 1 else step, count + 1, k, tt]
                continue
        out.append([layer, 0, 1, kind, t])
    return out


def unrun(packed: list) -> list:
    """The ops back from `runs`."""
    return [[first + step * i, kind, t] for first, step, count, kind, t in packed for i in range(count)]


def compile_all(models=None, checkpoints=None, show_progress: bool | None = None) -> dict:
    """Every shipped model's step under every checkpointing strategy in both widths (what the page carries):
    {"tile", "terms", "steps": {"model|checkpoint|width": compiled, with "ops" as `runs`}}."""
    from zerosim.analysis.costs import PRESETS
    from zerosim.models.gpt import STRATEGIES
    from zerosim.progress import progress

    models = models or sorted(k for k, p in PRESETS.items() if p.config is not None)
    checkpoints = checkpoints or tuple(STRATEGIES)
    keys = [(m, c, w) for m in models for c in checkpoints for w in WIDTHS]
    steps = {}
    for m, c, w in progress(keys, "compiling the explorer's steps", enabled=show_progress, unit="step"):
        compiled = compile_model(m, c, WIDTHS[w])
        steps[f"{m}|{c}|{w}"] = {**compiled, "ops": runs(compiled["ops"])}
    return {"tile": TILE, "terms": list(TERMS), "steps": steps}
