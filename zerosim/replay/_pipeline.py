"""Seed 004's network cut into two pipeline stages: its two samples as two micro-batches through 1F1B, told number by
number.

Seed 004's network is h = w1·x1 + w2·x2, a = ReLU(h), y = w3·a + w4. Here GPU 0 holds stage 0 (layer 1 and its ReLU:
w1, w2) and GPU 1 stage 1 (layer 2 and the loss: w3, w4), torchtitan's even split of its two layers
(parallel/pipeline/_stages.py). The two samples that seed 004 gave one to each GPU become two micro-batches of one
data-parallel rank (Megatron's num_microbatches = 2), driven through torch 2.13's Schedule1F1B table: GPU 0 runs both
forwards, then both backwards; GPU 1 runs each micro-batch's forward and backward in turn. A stage's forward sends its
output to the next stage (torch's batch_isend_irecv: `zerosim.collectives.send_pairs`), a backward sends the input's
gradient back; each stage sums its weights' gradients over the micro-batches and averages them once, so the step's
gradient is seed 004's average, reached by one GPU per weight instead of a reduce-scatter.

Every number is read from the run (a PipelineEngine on the numpy backend with the trace keeping values): the compute
events' outputs and gradients, the sends' values, the table's order, the ledgers and the masters after Adam. Nothing
is typed in. `pipeline_replay()` returns plain data; `narrate_pipeline()` tells it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Cluster, Compute
from zerosim.models import HalfMSE, Linear, Model, ReLU, TinyNet
from zerosim.optim import Adam
from zerosim.parallel.pipeline import PipelineEngine
from zerosim.prose import wrap
from zerosim.replay._run import SEED_LR

PP, MICRO = 2, 2


def _f(x) -> list:
    return np.asarray(x).astype(np.float64).reshape(-1).tolist()


def seed_model() -> Model:
    """TinyNet's layers, the ReLU numbered with its layer (a pipeline cuts between numbered layers: _stages.py)."""
    return Model([Linear(2, 1, bias=False, name="layer1"), ReLU(name="relu1"), Linear(1, 1, bias=True, name="layer2")],
                 HalfMSE())


def pipeline_replay(precision: str = "fp16-mixed", lr: float = SEED_LR) -> dict:
    """One 1F1B step of seed 004's network over 2 pipeline stages, its two samples as two micro-batches (module
    docstring); every number the narration tells (JSON-ready)."""
    model = seed_model()
    cluster = Cluster(PP, gpus_per_node=1, keep_values=True)  # a stage a node: the sends cross InfiniBand
    engine = PipelineEngine(model, cluster, 0, Adam(lr=lr), precision, pp=PP, micro_batches=MICRO,
                            params=np.array(TinyNet.WEIGHTS, np.float32))
    samples = TinyNet.seed_batches()
    losses = engine.step([samples])
    trace = cluster.trace
    actions = []  # in the order the run made them: (rank, kind, micro, {layer name: values})
    for ev in trace.log:
        if type(ev) is Compute and ev.kind in ("forward", "backward", "loss"):
            if not actions or actions[-1][:3] != (ev.rank, "backward" if ev.kind == "backward" else "forward",
                                                  ev.micro):
                actions.append((ev.rank, "backward" if ev.kind == "backward" else "forward", ev.micro, {}))
            actions[-1][3][f"{ev.name} {ev.kind}"] = {k: _f(v) for k, v in (ev.values or {}).items()
                                                      if k != "grads" and v is not None} | (
                {f"d{n}": _f(g) for n, g in ev.values["grads"].items()} if ev.values and ev.values.get("grads")
                else {})
    sends = [{"call": c.call, "tag": c.tag, "micro": c.micro, "tier": c.tier, "dtype": c.dtype,
              "src": e.src, "dst": e.dst, "bytes": e.bytes, "values": _f(e.values)}
             for c in trace.calls if c.collective == "send_recv" for e in trace.events if e.call == c.call]
    return {
        "precision": precision, "lr": lr, "weights": list(TinyNet.WEIGHTS),
        "stages": [[model.layers[u].name for u in part.units] for part in engine.stage_models],
        "table": engine.table.rows(),
        "samples": [{"x": _f(x), "t": _f(t)} for x, t in samples],
        "actions": [{"gpu": r, "kind": k, "micro": m, "layers": v} for r, k, m, v in actions],
        "sends": sends, "loss": losses[0],
        "masters": _f(engine.full_master()), "params": _f(engine.full_params()),
        "peak_activations": [r.ledger.peak("activations") for r in cluster.ranks],
    }


def _vec(v) -> str:
    return "[" + ", ".join(f"{x:g}" for x in v) + "]"


def _values(action: dict) -> str:
    parts = []
    for name, vals in action["layers"].items():
        keys = ("loss",) if "loss" in vals else ("out",) + tuple(k for k in vals if k.startswith("d"))
        shown = ", ".join(f"{k} = {_vec(vals[k])}" for k in keys if k in vals)
        if shown:
            parts.append(f"{name.split()[0]}: {shown}")
    return "; ".join(parts)


def narrate_pipeline(r: dict) -> str:
    """The replay as text, in the order the schedule ran it."""
    w, g = r["weights"], (lambda v: f"{v:g}")
    lines = [
        f"zerosim replay --pp 2: seed 004's network cut into 2 pipeline stages, its two samples as 2 micro-batches "
        f"(1F1B), {r['precision']}",
        "",
        "Setup",
        "  model: h = w1*x1 + w2*x2, a = ReLU(h), y = w3*a + w4, loss = 0.5*(y - t)^2",
        f"  GPU 0, stage 0: {', '.join(r['stages'][0])} (w1 = {g(w[0])}, w2 = {g(w[1])})   "
        f"GPU 1, stage 1: {', '.join(r['stages'][1])} and the loss (w3 = {g(w[2])}, w4 = {g(w[3])})",
        *wrap("  one data-parallel rank, 2 micro-batches (Megatron's num_microbatches): seed 004's samples "
              + ", ".join(f"x = {_vec(s['x'])}, t = {_vec(s['t'])}" for s in r["samples"]), "    "),
        "  the schedule's table (torch 2.13 Schedule1F1B; 0F1 is stage 0's forward of micro-batch 1, -- an idle time "
        "step):",
        *[f"    GPU {k}: {' '.join(a or '--' for a in row)}" for k, row in enumerate(r["table"])],
        "",
        "The step, action by action, in the order the run made them (a rank's action waits for what it receives;",
        "every value from the run's compute events and sends)",
    ]
    sends = {(s["micro"], s["src"]): s for s in r["sends"]}
    for a in r["actions"]:
        lines.append(f"  GPU {a['gpu']} {a['kind']:8s} micro-batch {a['micro']}: {_values(a)}")
        s = sends.get((a["micro"], a["gpu"]))
        if s is not None and (s["src"] == a["gpu"]) and (a["kind"] == "forward") == (s["dst"] > s["src"]):
            what = "activation a" if s["dst"] > s["src"] else "gradient da"
            lines.append(f"    -> sends its {what} = {_vec(s['values'])} to GPU {s['dst']}: {s['bytes']} B of "
                         f"{s['dtype']}, point to point over the {s['tier']} link (send_pairs, call {s['call']})")
    m = r["masters"]
    lines += [
        "",
        f"The step's end: each stage averages its weights' gradients over the 2 micro-batches and runs Adam "
        f"(lr {g(r['lr'])}) on them:",
        f"  masters [w1, w2 | w3, w4] = [{g(m[0])}, {g(m[1])} | {g(m[2])}, {g(m[3])}]"
        + (", seed 004's: its two GPUs averaged" if r["lr"] == SEED_LR else ""),
        *(["  two samples' gradients by a reduce-scatter; here each stage sums two micro-batches' on the GPU that "
           "holds the weights."] if r["lr"] == SEED_LR else []),
        f"  loss (the mean over the micro-batches, from the last stage) = {g(r['loss'])}",
        f"  activations held at the peak: GPU 0 {r['peak_activations'][0]} B (both micro-batches in flight: 1F1B's "
        f"P - r = 2), GPU 1 {r['peak_activations'][1]} B (one)",
        "  (docs/pipeline-parallelism.md: schedules, the bubble, memory)",
    ]
    return "\n".join(lines)
