"""Replay seed 004's worked example on the live cluster and collect every number it narrates.

Nothing here is typed in: every number is read from the typed events the engine wrote into the
cluster's trace (the cluster keeps values): the forward values and gradients from each rank's
`Compute` events, the chunks from the collective calls' hops, m, v, m̂, v̂ and the new weights from
the `OptimizerStep` events, and memory from each rank's ledger. `replay()` returns plain
data (JSON-ready); `replay_text.narrate()` tells it in the article's order.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.cluster import Call, Cluster, Compute, LossScaleUpdate, OptimizerStep
from zerosim.models.mlp import TinyNet
from zerosim.optim import Adam
from zerosim.parallel.data import ZeroEngine
from zerosim.precision import get_precision
from zerosim.progress import progress


def _f(x) -> float | list:
    """Exact value(s) of a float array of any format, as Python floats (fp16/bf16/fp32 widen exactly)."""
    a = np.asarray(x).astype(np.float64)
    return float(a) if a.ndim == 0 else a.tolist()


def _phase(call) -> str:
    """Which ring phase a call is: an all-reduce is recorded as two calls, its reduce-scatter and its all-gather."""
    if call.collective == "broadcast":
        return "broadcast"
    return "all-gather" if call.op == "gather" else "reduce-scatter"


def _hops(trace, calls: list) -> list:
    out = []
    for e in trace.events:
        if e.call in calls:
            out.append({
                "call": e.call, "collective": e.collective, "phase": _phase(trace.call(e.call)), "tag": e.tag,
                "step": e.step, "src": e.src, "dst": e.dst,
                "chunk": e.chunk, "elements": e.elements, "bytes": e.bytes, "dtype": e.dtype,
                "values": _f(e.values) if e.values is not None else None,
            })
    return out


def _model_events(events: list) -> dict:
    """One GPU's `Compute` events as forward / recompute / backward entries with plain numbers."""
    out = {"forward": [], "recompute": [], "backward": [], "loss": None}
    for ev in events:
        v = ev.values
        if ev.kind == "loss":
            out["loss"] = float(v["loss"])
            out["prediction"] = _f(v["out"])
        elif ev.kind == "backward":
            out["backward"].append(
                {
                    "layer": ev.layer,
                    "name": ev.name,
                    "grads": {k: _f(g) for k, g in v["grads"].items()},
                    "dx": _f(v["dx"]),
                }
            )
        else:  # forward or recompute
            out[ev.kind].append({"layer": ev.layer, "name": ev.name, "out": _f(v["out"])})
    return out


def _memory(ledger, since: int = 0) -> list:
    """Per phase: its peak, what was live at that moment (by buffer name), and what it ends holding."""
    at_peak = dict(ledger.live_at_peaks(since))
    return [{"phase": phase, "peak_bytes": int(peak), "holds": {k: int(v) for k, v in holds.items()},
             "at_peak": [{"name": n, "kind": k, "bytes": int(b)} for n, k, b in at_peak[phase]]}
            for phase, peak, holds in ledger.by_phase(since)]


def _check_no_overflow(lr: float, steps: int, betas, fmt) -> None:
    """Refuse, before running, a learning rate whose Adam steps could push a weight past `fmt`'s largest value.

    Adam's step is bounded per weight (Kingma & Ba 2015, §2.1): |Δ| <= lr·(1−β1)/√(1−β2) when
    1−β1 > √(1−β2), else |Δ| <= lr. The seed's weights start within |w| <= 3, so after `steps` steps
    |w| <= 3 + steps·bound: if that can pass fmt.max, the 16-bit copies could become inf.
    """
    b1, b2 = betas
    bound = lr * max(1.0, (1 - b1) / math.sqrt(1 - b2))
    if not math.isfinite(lr) or 3 + steps * bound > fmt.max:
        raise ValueError(f"--lr {lr:g} could move a weight by up to {bound:g} per step, past {fmt.name}'s largest "
                         "finite "
                         f"value {fmt.max:g} within {steps} step(s): its {fmt.name} weights would become inf; use a "
                         "smaller --lr")


def _scale_record(policy, scale: float, decided: list) -> dict:
    """The step's loss scaling: S, how the fp32 gradient is unscaled (the reciprocal fl32(1/S) both frameworks
    multiply by), and, with a dynamic scaler, whether an inf/NaN made it skip the step and the next S."""
    d = decided[-1] if decided else None
    return {
        "scale": scale,
        "scaler": d.scaler if d else "static",
        "unscale": policy.unscale,
        "inverse": float(np.float32(1.0 / scale)),
        "found_inf": bool(d and d.found_inf),
        "skipped": bool(d and d.skipped),
        "scale_after": d.scale_after if d else scale,
        "message": d.message if d else "",
    }


def _order(trace, since: int) -> list:
    """The step's forward/backward in the order it ran on GPU 0: ["gather", call] for each parameter all-gather
    (stage 3), ["forward" | "recompute" | "backward" | "loss", i] for GPU 0's i-th compute of that kind."""
    out, seen = [], {}
    for e in trace.log[since:]:
        if isinstance(e, Call) and e.purpose == "gather params":
            out.append(["gather", e.call])
        elif isinstance(e, Compute) and e.rank == 0:
            kind = "loss" if e.kind == "loss" else e.kind
            out.append([kind, seen.get(kind, 0)])
            seen[kind] = seen.get(kind, 0) + 1
    return out


def _full_params(engine, n_params: int) -> np.ndarray:
    """The 16-bit weights (P,) every GPU computes with: GPU 0's whole copy, or at stage 3 the shards put together."""
    if not engine.plan.shards("params"):
        return engine.compute_params(0)[:n_params]
    return np.concatenate([engine.compute_params(i) for i in range(engine.cluster.world_size)])[:n_params]


def _unscaled_grads(model, params, batches) -> list:
    """Each GPU's local gradient in float64 from the step's 16-bit weights, unscaled: what S multiplies (so the
    narration can say which S·g overflows the 16-bit format)."""
    from zerosim.models import loss_and_grad

    return [_f(loss_and_grad(model, params.astype(np.float64), x, t, "fp64")[1]) for x, t in batches]


SEED_LR = 0.1  # seed 004's Adam learning rate: every replay's default

# The replay keeps every hop's values and every ledger event, and narrates each step from them: 1000 steps take
# ~20 s and print ~60,000 lines; 100,000 steps ran for hours, silently when stdout was a pipe. Refused past this.
MAX_STEPS = 1000


def replay(stage: int = 1, precision="fp16-mixed", lr: float = SEED_LR, steps: int = 1, checkpoint: bool = True,
           betas=(0.9, 0.999), eps: float = 1e-8, show_progress: bool | None = False, loss_scale=None) -> dict:
    """Run seed 004's example (TinyNet, 2 GPUs, Adam) for `steps` steps at ZeRO `stage`; return every number.

    See `replay_live` for the arguments; this returns only the (JSON-ready) numbers.
    """
    return replay_live(stage, precision, lr, steps, checkpoint, betas, eps, show_progress, loss_scale)[1]


def replay_live(stage: int = 1, precision="fp16-mixed", lr: float = SEED_LR, steps: int = 1, checkpoint: bool = True,
                betas=(0.9, 0.999), eps: float = 1e-8, show_progress: bool | None = False, loss_scale=None) -> tuple:
    """(engine, numbers): the replay's live engine (its cluster, trace and ledgers) and every number it narrates.

    The seed's settings are the defaults: weights [2, -3, 1, 0.5], samples x=[1, 3] t=5 on GPU 0 and
    x=[2, 1] t=7 on GPU 1, Adam lr 0.1, betas 0.9/0.999, eps 1e-8, fp16 compute with fp32 masters,
    activation checkpointing on. Each step reuses the same two samples. `loss_scale` replaces the policy's:
    a number, or "torch" / "dynamic" / "deepspeed" (then a step whose gradients overflow is skipped).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be an integer from 1 to {MAX_STEPS}, got {steps!r}: the replay narrates every "
                         "step (about 60 lines each, with each step's ledger); `zerosim train` runs long trainings")
    policy = get_precision(precision)
    if loss_scale is not None:
        policy = policy.with_(loss_scale=loss_scale)
    _check_no_overflow(lr, steps, betas, policy.compute_format)
    model = TinyNet()
    cluster = Cluster(2, keep_values=True, keep_steps=None)  # reads each step by its log positions: hold them all
    engine = ZeroEngine(model, cluster, stage, Adam(lr=lr, betas=tuple(betas), eps=eps), policy, checkpoint=checkpoint)
    regions = [engine.region(r) for r in range(2)]  # what each GPU updates: its shard (all of it at stage 0)
    batches = TinyNet.seed_batches()
    result = _setting(engine, model, policy, regions, batches, stage, precision, checkpoint, lr, betas, eps)
    for step in progress(range(1, steps + 1), "replaying", enabled=show_progress, unit="step"):
        result["steps"].append(_replay_step(engine, model, policy, regions, result["owners"], batches, stage, step))
    result["master"] = _f(engine.full_master())
    result["final_params"] = [_f(engine.compute_params(i)) for i in range(2)]
    return engine, result


def _setting(engine, model, policy, regions, batches, stage, precision, checkpoint, lr, betas, eps) -> dict:
    """The replay's numbers before its first step: the settings, who owns which weight, the inputs, the memory."""
    names = list(TinyNet.NAMES)
    owners = [names[g.start : min(g.stop, model.num_params)] for g in regions]
    return {
        "example": "seed 004: four weights, two GPUs",
        "stage": stage, "precision": precision if isinstance(precision, str) else repr(policy),
        "world_size": 2, "checkpoint": checkpoint, "has_master": policy.master is not None, "compute": policy.compute,
        "update": policy.update_format.name, "reduce": policy.reduce_format.name,
        "optimizer": {"name": "adam", "lr": lr, "betas": list(betas), "eps": eps},
        "weights": names, "owners": owners,
        "initial_params": _f(engine.compute_params(0)[: model.num_params]) if stage < 3 else _f(model.init_params()),
        "inputs": [{"gpu": g, "x": _f(x[0]), "target": _f(t[0, 0])} for g, (x, t) in enumerate(batches)],
        "memory_at_start": [_memory(r.ledger) for r in engine.cluster.ranks],
        "steps": [],
    }


def _replay_step(engine, model, policy, regions, owners, batches, stage, step: int) -> dict:
    """Run one step and read its numbers back from the trace: each GPU's, the collectives' hops, the memory."""
    cluster = engine.cluster
    trace = cluster.trace
    first_event, first_log = len(trace.events), len(trace.log)
    timeline_start = [len(r.ledger.timeline) for r in cluster.ranks]
    scale = engine.scaler.scale  # the S this step's loss is multiplied by
    before = _full_params(engine, model.num_params)  # the 16-bit weights the step starts from
    engine.step(batches)
    computes, optim = trace.of_type(Compute, first_log), trace.of_type(OptimizerStep, first_log)
    decided = trace.of_type(LossScaleUpdate, first_log)  # dynamic scaling: skipped or not, and the next S
    calls = {
        p: [c.call for c in trace.of_type(Call, first_log) if c.purpose == p]
        for p in ("reduce grads", "gather params", "refresh params")
    }
    gpus = [_gpu_record(engine, model, regions, owners, stage, i, rank, computes, optim)
            for i, rank in enumerate(cluster.ranks)]
    return {
        "step": step,
        "params_before": _f(before),
        "loss_scale": _scale_record(policy, scale, decided),
        # what S multiplied, in float64: only when the loss was scaled
        "unscaled_grads": _unscaled_grads(model, before, batches) if policy.loss_scale != 1 or decided else None,
        "order": _order(trace, first_log),
        "calls": {str(c.call): f"{c.collective.replace('_', '-')} of the {c.tag}"
                  for c in trace.of_type(Call, first_log)},
        "gpus": gpus,
        "reduce_scatter": _hops(trace, calls["reduce grads"]),
        "all_gather": _hops(trace, calls["refresh params"]),
        "stage3_gathers": _hops(trace, calls["gather params"]),
        "memory": [_memory(r.ledger, start) for r, start in zip(cluster.ranks, timeline_start)],
        "bytes_sent": [sum(e.bytes for e in trace.events[first_event:] if e.src == r) for r in range(2)],
    }


def _gpu_record(engine, model, regions, owners, stage, i: int, rank, computes, optim) -> dict:
    """One GPU's step: its forward and backward, its local gradient, and its shard's reduced gradient, Adam moments
    and weights."""
    ev = _model_events([e for e in computes if e.rank == rank.index])
    local = np.zeros(model.num_params)
    for b in ev["backward"]:
        a, z = model.layer_window(b["layer"])
        local[a:z] = np.concatenate([np.ravel(v) for v in b["grads"].values()]) if b["grads"] else []
    # None: the loss scaler skipped the step
    opt = next((e.values for e in optim if e.rank == rank.index), None)
    own = regions[rank.index]
    real = slice(0, max(0, min(own.stop, model.num_params) - own.start))
    mine = (
        slice(own.start, own.start + real.stop)
        if opt is not None and len(opt["reduced"]) == engine.layout.padded
        else real
    )
    return {
        "gpu": rank.index,
        "loss": ev["loss"],
        "prediction": ev["prediction"],
        "forward": ev["forward"],
        "recompute": ev["recompute"],
        "backward": ev["backward"],
        "local_grads": local.tolist(),
        "owns": owners[rank.index],
        # summed, still loss-scaled, in the reduced format
        "reduced_shard": _f(opt["reduced"][mine]) if opt else None,
        "averaged_shard": _f(opt["grad32"][real]) if opt else None,
        "adam": {
            k: _f(np.asarray(opt[k])[real]) for k in ("m", "v", "m_hat", "v_hat", "update") if k in opt
        }
        if opt
        else None,
        "master": _f(engine.master_shards()[i][real]),
        "compute_shard": _f(opt["compute_after"][real]) if opt else None,
        "params_before_refresh": _f(opt["params_held"][: model.num_params])
        if opt and "params_held" in opt
        else None,
        "params_after": _f(engine.compute_params(i)[: model.num_params])
        if stage < 3
        else _f(engine.compute_params(i)[real]),
    }
