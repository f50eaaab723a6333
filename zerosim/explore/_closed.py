"""The explorer's numbers from a compiled step (_compile.py) at any N, B, L: no engine run. The web page's page.js
is this file in JavaScript; tests hold both to `explore` (_numbers.py, one run of the engine) and to the CLI.

Letters: P parameters, N ranks, s = ceil(P / N) the shard, Ψ = N·s the padded flat buffer, u_i unit i's parameters
at offset o_i of it, p / g the bytes of a parameter / gradient element (2, or 4 in fp32).

What one rank holds (the ledger of _measured.py `measure_stage`, event by event):

    at rest             params p·(s at stage 3, else Ψ); grads g·(s from stage 2, else Ψ); master 4·(s from stage
                        1, else Ψ) in mixed precision; each optimizer state 4·(s from stage 1, else Ψ)
    each op             stage 3: its unit gathered, p·u_i, for as long as the op runs (ops that read weights);
                        its activation allocations and frees (compiled); backward at stage 2/3: the unit's
                        gradients, g·u_i, from the op's end until its reduce-scatter
    the optimizer       the fp32 gradient (grad32), 4·(Ψ at stage 0, else s); fp32 also an update scratch as large

and the step's log (the timeline's input) is the schedule's computes with the stage's collectives between them:
stage 3 gathers a unit before every op that reads it; stages 2/3 reduce-scatter a unit's gradients after its
backward; stage 0 all-reduces Ψ (two phases), stage 1 reduce-scatters Ψ, once backward is done; the optimizer
waits for the last reduction; stages 1/2 all-gather Ψ to refresh the params. A ring phase's busiest rank sends
every chunk but the smallest (backends/_meta.py `_trace_ring`): the chunks are the unit's window cut by the shards.
"""

from __future__ import annotations

from zerosim.explore._compile import KINDS, value

GPUS_PER_NODE = 8  # as _numbers.py: ranks placed in nodes of 8; a ring over more leaves a node


def _layout(units: list, ranks: int) -> tuple:
    """(s, Ψ, offsets): the shard, the padded flat length and each unit's offset in it (units in order)."""
    total = sum(units)
    shard = -(-total // ranks)
    offsets, at = [], 0
    for u in units:
        offsets.append(at)
        at += u
    return shard, shard * ranks, offsets


def chunk_sizes(start: int, stop: int, shard: int, ranks: int) -> tuple:
    """The ring's chunks of the window [start, stop) of the flat buffer: its overlap with each rank's shard."""
    return tuple(max(0, min(stop, (r + 1) * shard) - max(start, r * shard)) for r in range(ranks))


def resting(units: list, ranks: int, stage: int, precision: str, optimizer: str) -> dict:
    """{kind: bytes} rank 0 holds at rest (module docstring)."""
    from zerosim.optim import get_optimizer

    s, padded, _ = _layout(units, ranks)
    p = 4 if precision == "fp32" else 2
    held = {"params": p * (s if stage == 3 else padded), "grads": p * (s if stage >= 2 else padded)}
    if precision != "fp32":
        held["master"] = 4 * (s if stage >= 1 else padded)
    for name in get_optimizer(optimizer).state_names:
        held[f"optim:{name}"] = 4 * (s if stage >= 1 else padded)
    return held


def memory(compiled: dict, ranks: int, stage: int, precision: str, optimizer: str, batch: int, seq_len: int) -> dict:
    """{"resting", "peak", "at_peak"} of rank 0 (the ledger's first moment at its peak)."""
    units = compiled["units"]
    s, padded, _ = _layout(units, ranks)
    p = 4 if precision == "fp32" else 2
    rest = resting(units, ranks, stage, precision, optimizer)
    live = dict(rest)
    most, best = sum(rest.values()), {k: v for k, v in rest.items() if v}

    def moment(total):
        nonlocal most, best
        if total > most:
            most, best = total, {k: v for k, v in live.items() if v}

    def total():
        return sum(live.values())

    live["activations"] = 0
    for layer, kind, t in compiled["ops"]:
        tpl, kind = compiled["templates"][t], KINDS[kind]
        gathered = stage == 3 and kind not in ("loss", "keep input") and units[layer] > 0
        if gathered:
            live["params"] += p * units[layer]
            moment(total())
        before = live["activations"]
        for c in tpl["cands"]:
            live["activations"] = before + value(c, batch, seq_len)
            moment(total())
        live["activations"] = before + value(tpl["net"], batch, seq_len)
        if kind == "backward" and stage >= 2:
            live["grads"] += p * units[layer]
            moment(total())
        if gathered:
            live["params"] -= p * units[layer]
        if kind == "backward" and stage >= 2:
            live["grads"] -= p * units[layer]
    region = padded if stage == 0 else s
    live["grad32"] = 4 * region
    moment(total())
    if precision == "fp32":
        live["scratch"] = 4 * region
        moment(total())
    return {"resting": rest, "peak": most, "at_peak": best}


def log(compiled: dict, ranks: int, stage: int, precision: str, optimizer: str, batch: int, seq_len: int) -> tuple:
    """(the step's log, {call: (chunk sizes, itemsize, lag)}) as the engine writes them (module docstring)."""
    from zerosim.cluster import INTER, INTRA, Call, Compute, OptimizerStep
    from zerosim.precision import get_precision

    units = compiled["units"]
    s, padded, offsets = _layout(units, ranks)
    wire = get_precision(precision).compute  # "fp16", "bf16" or "fp32"
    itemsize = 4 if precision == "fp32" else 2
    out, rings = [], {}

    tier = INTER if ranks > GPUS_PER_NODE else INTRA  # a ring over more than a node leaves it (nodes of 8)

    def call(collective, op, elements, purpose, window, lag):
        number = len(rings)
        out.append(Call(number, collective, op, ranks, elements, wire, purpose=purpose, step=1, tier=tier))
        rings[number] = (chunk_sizes(*window, s, ranks) if ranks > 1 else (), itemsize, lag)
        return number

    last = None
    for layer, kind, t in compiled["ops"]:
        tpl, kind = compiled["templates"][t], KINDS[kind]
        needs = ()
        window = (offsets[layer], offsets[layer] + units[layer]) if layer >= 0 else None
        if stage == 3 and kind not in ("loss", "keep input"):
            needs = (call("all_gather", "gather", units[layer], "gather params", window, 0),)
        if kind != "keep input":
            out.append(Compute(0, 1, 0, layer, "", kind, value(tpl["flops"], batch, seq_len),
                               value(tpl["bytes"], batch, seq_len), 0, needs))
        if kind == "backward" and stage >= 2:
            last = (call("reduce_scatter", "sum", units[layer], "reduce grads", window, 1),)
    whole = (0, padded)
    if stage == 0:
        last = (call("all_reduce", "sum", padded, "reduce grads", whole, 1),
                call("all_reduce", "gather", padded, "reduce grads", whole, 0))
    elif stage == 1:
        last = (call("reduce_scatter", "sum", padded, "reduce grads", whole, 1),)
    out.append(OptimizerStep(0, 1, 0, padded if stage == 0 else s, optimizer, last))
    if stage in (1, 2):
        call("all_gather", "gather", padded, "refresh params", whole, 0)
    return out, {c: r for c, r in rings.items() if len(r[0]) > 1}


class _Trace:
    """What `simulate` reads of a trace: the log, no per-hop events, the ring summaries, N, the nodes' size."""

    def __init__(self, events, rings, world_size):
        self.log, self.events, self.ring_calls, self.world_size = events, (), rings, world_size
        self.gpus_per_node = GPUS_PER_NODE if world_size > GPUS_PER_NODE else None  # as _numbers.py places the ranks
        self.call_groups = {}  # every call is over the world


def check_ranks(ranks: int) -> None:
    """N ranks placed in nodes of 8 (as `explore` and `zerosim timeline --gpus-per-node 8` place them): beyond one
    node, N must fill whole nodes (the Cluster's own refusal, word for word)."""
    if ranks > GPUS_PER_NODE and ranks % GPUS_PER_NODE:
        raise ValueError(f"{ranks} ranks do not fill nodes of {GPUS_PER_NODE} GPUs: gpus_per_node must divide "
                         "world_size")


def closed_form(compiled: dict, settings, gpu) -> dict:
    """Every number `explore(settings)` gives, from `compiled` (compile_model of its model, checkpointing and
    precision) and `gpu` (a zerosim.analysis.costs.GPU)."""
    from zerosim.analysis.timeline import Hardware, TimeModel, simulate
    from zerosim.precision import get_precision

    s = settings
    check_ranks(s.ranks)
    mem = memory(compiled, s.ranks, s.stage, s.precision, s.optimizer, s.micro_batch, s.seq_len)
    events, rings = log(compiled, s.ranks, s.stage, s.precision, s.optimizer, s.micro_batch, s.seq_len)
    nodes = s.ranks > GPUS_PER_NODE  # two link tiers: NVLink inside a node, InfiniBand NDR between them
    hw = Hardware(gpu.device, "nvlink4", get_precision(s.precision).compute, inter_link="ib_ndr" if nodes else None)
    t = simulate(_Trace(events, rings, s.ranks), hw)  # the datasheet roofline (explore's TimeModel(None))
    return {"params": compiled["params"], "ranks": s.ranks, "stage": s.stage, "precision": s.precision,
            "at_peak": mem["at_peak"], "peak": mem["peak"], "resting": mem["resting"], "capacity": gpu.capacity,
            "gpu": gpu.name, "fits": mem["peak"] <= gpu.capacity, "step_s": t.step_time,
            "compute_s": float(t.compute_busy[0]), "comm_s": float(t.comm_busy[0]),
            "exposed_s": float(t.exposed_comm[0]), "link": (hw.inter_link or hw.link).name, "device": hw.device.name,
            "time_model": TimeModel(None).describe()}
