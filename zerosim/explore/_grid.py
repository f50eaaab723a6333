"""The explorer page's settings as a grid, each point's numbers the CLI's own: `zerosim memory --json` and `zerosim
timeline --json` run once per point at compile time (`python tools/compile_explorer.py` writes grid.json), so the
page holds no model of its own — it looks a setting up and draws it.

    AXES                      the controls, in order: a name, a label, the values, what each value adds to each command
    argv(point, "timeline")   the command line a point stands for: the same flags a reader types in a terminal
    compile_grid(run_json)    every point's numbers, `run_json(argv) -> dict` being the CLI (tools/ passes it in)

A point is one value per axis. An axis that does not apply (prefetch below stage 3: nothing is gathered before a
layer, so nothing can be fetched early) is held at its first value, and the page greys its control with the reason
(`APPLIES`). A point the CLI refuses (a sequence longer than the model's positions, a TP degree that does not divide
the GPUs, offload beside TP) keeps the CLI's own one-line reason, which the page shows instead of numbers.

What the page draws of a point, each a field of the commands' --json (nothing computed here or in the browser):

    memory     of `zerosim memory --json`'s row for the stage: the peak, each kind at the peak and at rest, the GPU's
               verdict (`gpu.by_stage`: the measured peak plus what no ledger sees — CUDA context, NCCL buffers, the
               allocator's reserve — against the capacity), and with offload what a rank keeps on the host
    time       of `zerosim timeline --json`: the step, compute, communication, its exposed part and the part hidden
               behind compute (overlapped_s), tokens per second per GPU, seconds by purpose; with offload, the CPU's
               and the PCIe link's busy time
"""

from __future__ import annotations

import itertools
import json
from dataclasses import field

from zerosim._dataclass import dataclass

MEMORY, TIMELINE = "memory", "timeline"
# What every point shares, and says on the page: zerosim's own fused kernels at the datasheet's peak rates (what the
# notebooks teach with; the commands' defaults, eager kernels at calibrated rates, hold more and run slower), one
# sequence per GPU per step, bf16 with an fp32 master, Adam.
BASE = {
    MEMORY: ["memory", "--kernels", "fused", "--precision", "bf16-mixed", "--optimizer", "adam", "--batch", "1"],
    TIMELINE: ["timeline", "--kernels", "fused", "--efficiency", "peak", "--precision", "bf16-mixed", "--optimizer",
               "adam", "--batch", "1"],
}
NODE = 8  # GPUs per node: a timeline over more ranks places them in nodes of 8 (NVLink inside, InfiniBand between)


@dataclass(frozen=True)
class Axis:
    name: str
    label: str
    values: tuple
    names: dict  # value -> what the control shows
    flags: object  # value -> {command: [flags]} it adds
    note: str = ""
    # the commands' own flags: how a value is typed into `zerosim memory` / `zerosim timeline`
    commands: tuple = field(default=(MEMORY, TIMELINE))


def _both(*words):
    return {MEMORY: list(words), TIMELINE: list(words)}


def _gpus(n):  # memory refuses --gpus-per-node without --strategy/--tp/offload (the stages' bytes do not depend on it)
    return {MEMORY: ["--ranks", str(n)], TIMELINE: ["--ranks", str(n)] + (["--gpus-per-node", str(NODE)] if n > NODE
                                                                             else [])}


AXES = (
    Axis("model", "model", ("gpt2-xl", "llama-2-7b", "llama-2-70b"),
         {"gpt2-xl": "GPT-2 XL (1.6B)", "llama-2-7b": "Llama-2-7B", "llama-2-70b": "Llama-2-70B"},
         lambda v: _both("--model", v)),
    Axis("gpus", "GPUs in all", (1, 8, 64, 512), {}, _gpus, "nodes of 8: beyond one node the rings cross InfiniBand"),
    Axis("tp", "tensor parallel T", (1, 2, 8), {1: "1 (off)"}, lambda v: _both(*(["--tp", str(v)] if v > 1 else [])),
         "T GPUs split every layer (Megatron); ZeRO shards over the GPUs / T data-parallel ranks"),
    Axis("stage", "ZeRO stage", (0, 1, 2, 3),
         {0: "0: nothing sharded (plain data parallel)", 1: "1: optimizer states and master", 2: "2: + gradients",
          3: "3: + parameters"}, lambda v: {MEMORY: [], TIMELINE: ["--stage", str(v)]}),
    Axis("seq_len", "sequence length L (tokens)", (1024, 4096), {}, lambda v: _both("--seq-len", str(v))),
    Axis("checkpoint", "activation checkpointing", ("none", "block"),
         {"none": "none: keep every activation", "block": "block: keep each block's input, recompute the rest"},
         lambda v: _both("--checkpoint", v)),
    Axis("gpu", "GPU", ("a100-40gb", "h100-80gb"), {"a100-40gb": "A100 40GB", "h100-80gb": "H100 80GB"},
         lambda v: _both("--gpu", v), "its capacity and its compute rates"),
    Axis("prefetch", "prefetch the next layer's gather", ("off", "on"), {},
         lambda v: _both(*(["--forward-prefetch", "--backward-prefetch", "pre"] if v == "on" else [])),
         "FSDP's forward_prefetch and backward_prefetch=BACKWARD_PRE"),
    Axis("bucket", "gradient bucket (elements)", ("none", "5e7", "5e8"),
         {"none": "none: one call per layer, or one after backward", "5e7": "5·10⁷", "5e8": "5·10⁸ (DeepSpeed's)"},
         lambda v: _both(*(["--reduce-bucket-size", v] if v != "none" else [])),
         "DeepSpeed's reduce_bucket_size: a full bucket is reduced while backward goes on"),
    Axis("overlap", "communication beside compute", ("on", "off"),
         {"on": "on: its own stream", "off": "off: one stream (DeepSpeed overlap_comm=False)"},
         lambda v: _both(*(["--no-overlap"] if v == "off" else []))),
    Axis("offload", "offload", ("none", "cpu"), {"none": "none", "cpu": "optimizer on the CPU (ZeRO-Offload)"},
         lambda v: _both(*(["--offload-optimizer", "cpu"] if v == "cpu" else [])),
         "the fp32 master and Adam's state on the host; the CPU runs the update"),
)
NAMES = tuple(a.name for a in AXES)
# axis -> {other axis: the values at which it applies}; elsewhere it is held at its first value
APPLIES = {"prefetch": {"stage": (3,)}}
WHY_NOT = {"prefetch": "below stage 3 every GPU holds the whole model: no layer is gathered, so none is prefetched"}


def canonical(point: dict) -> dict:
    """`point` with every axis that does not apply held at its first value."""
    out = dict(point)
    for name, where in APPLIES.items():
        if any(out[other] not in values for other, values in where.items()):
            out[name] = next(a for a in AXES if a.name == name).values[0]
    return out


def points():
    """Every canonical point of the grid, in index order (the last axis fastest)."""
    for values in itertools.product(*(a.values for a in AXES)):
        p = dict(zip(NAMES, values))
        if canonical(p) == p:
            yield p


def index(point: dict) -> int:
    """A point's place in the grid's flat arrays (mixed radix, the last axis fastest)."""
    i = 0
    for a in AXES:
        i = i * len(a.values) + a.values.index(point[a.name])
    return i


def argv(point: dict, command: str) -> list:
    """The command line `point` stands for (`command`: "memory" or "timeline"), --json added."""
    out = list(BASE[command])
    for a in AXES:
        out += a.flags(point[a.name])[command]
    return out + ["--json"]


def memory_numbers(report: dict, stage: int) -> dict:
    """What the page draws of `zerosim memory --json` for `stage` (module docstring)."""
    row = next(r for r in report["stages"] if r["stage"] == stage)
    fit = next(v for v in report["gpu"]["by_stage"] if v["stage"] == stage)
    out = {"peak": row["peak"], "at_peak": row["at_peak"], "resting": row["resting"],
           "fit": {k: fit[k] for k in ("measured", "overheads_total", "total", "capacity", "margin", "fits")},
           "overheads": [[o["name"], o["bytes"]] for o in fit["overheads"]], "params": report["params"]}
    if "host" in row:  # offload: what one rank keeps on the host, and the node's verdict
        node = row["offload"]["fit"]
        out["host"] = {"resting": row["host"]["resting"], "peak": row["host"]["peak"],
                       "per_node": node["host"]["per_node"], "capacity": node["host"]["capacity"],
                       "fits": node["host"]["fits"], "ranks_per_node": node["ranks_per_node"]}
    return out


def time_numbers(report: dict) -> dict:
    """What the page draws of `zerosim timeline --json` (module docstring)."""
    out = {k: report[k] for k in ("step_s", "compute_s", "comm_s", "exposed_comm_s", "overlapped_s",
                                  "tokens_per_s_per_gpu", "device", "link")}
    out["inter_link"] = report.get("inter_link")
    out["by_purpose"] = {k: v["seconds"] for k, v in report["by_purpose"].items()}
    if report.get("offload"):
        o = report["offload"]
        out["offload"] = {"cpu_s": o["busy_s"]["cpu"], "pcie_s": o["busy_s"]["pcie"], "idle_s": o["idle_s"]}
    return out


def point_numbers(point: dict, run_json, memory_runs: dict) -> tuple:
    """(memory, time) of `point`: each the record the page draws, or the CLI's one-line refusal (a str).
    `run_json(argv)` runs a command and returns its JSON, raising ValueError with its refusal; `memory_runs` keeps a
    memory run's records by its command line (one run answers the four stages)."""
    line = tuple(argv(point, MEMORY))
    if line not in memory_runs:
        try:
            report = run_json(list(line))
            memory_runs[line] = {r["stage"]: memory_numbers(report, r["stage"]) for r in report["stages"]}
        except ValueError as e:
            memory_runs[line] = str(e)
    stages = memory_runs[line]
    if isinstance(stages, str):
        memory = stages
    elif point["stage"] not in stages:  # offload runs at stages 1-3
        memory = f"this offload does not run at stage {point['stage']} (its stages: {', '.join(map(str, stages))})"
    else:
        memory = stages[point["stage"]]
    try:
        time = time_numbers(run_json(argv(point, TIMELINE)))
    except ValueError as e:
        time = str(e)
    return memory, time


def pack(numbers: dict) -> dict:
    """The grid as the page reads it, from {index: (memory, time)}: {"axes", "memory": [record], "time": [record],
    "errors": [line], "points": {index: [m, t]}}, m and t a record's number, or -1 - k for errors[k]; each record
    and refusal kept once."""
    tables = {"memory": [], "time": [], "errors": []}
    seen = {k: {} for k in tables}

    def keep(table, record):
        if isinstance(record, str):
            table, record = "errors", record
        key = json.dumps(record, sort_keys=True)
        if key not in seen[table]:
            seen[table][key] = len(tables[table])
            tables[table].append(record)
        at = seen[table][key]
        return -1 - at if table == "errors" else at

    points = {str(i): [keep("memory", m), keep("time", t)] for i, (m, t) in sorted(numbers.items())}
    return {"axes": list(NAMES), **tables, "points": points}


def unpack(grid: dict) -> dict:
    """`pack`'s inverse: {index: (memory, time)}, each a record or its refusal (a str)."""
    def record(table, k):
        return grid["errors"][-1 - k] if k < 0 else grid[table][k]

    return {int(i): (record("memory", m), record("time", t)) for i, (m, t) in grid["points"].items()}


def compile_grid(run_json, todo=None, show_progress: bool | None = None) -> dict:
    """{index: (memory, time)} of every canonical point (or of `todo`'s), a memory run shared by the points it
    answers. tools/compile_explorer.py runs this in parts, one per core, and `pack`s the whole."""
    from zerosim.progress import progress

    todo = list(points()) if todo is None else list(todo)
    todo.sort(key=lambda p: argv(p, MEMORY))  # a memory run's points together: its records are kept until the next
    out, memory_runs = {}, {}
    for p in progress(todo, "compiling the explorer's grid", enabled=show_progress, unit="point"):
        line = tuple(argv(p, MEMORY))
        if line not in memory_runs:
            memory_runs.clear()
        out[index(p)] = point_numbers(p, run_json, memory_runs)
    return out
