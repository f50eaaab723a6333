"""Tell a replay (the dict from `replay()`) in seed 004's order, as plain text for a terminal."""

from __future__ import annotations

import numpy as np


def _num(x: float) -> str:
    """Shortest decimal that reads back to the same float64 (so fp16 2.099609375 prints in full)."""
    return np.format_float_positional(x, trim="-") if abs(x) < 1e6 else repr(x)


def _vec(xs) -> str:
    return "[" + ", ".join(_num(x) for x in xs) + "]"


def _fp32(x: float) -> str:
    """An fp32 value as fp32 prints it, with its exact value: '2.1 (exactly 2.0999999046325684)'."""
    short = np.format_float_positional(np.float32(x), trim="-")
    exact = _num(x)
    return short if short == exact else f"{short} (exactly {exact})"


def _kinds(holds: dict) -> str:
    return ", ".join(f"{k} {v} B" for k, v in holds.items()) or "nothing"


def _hop_line(h: dict) -> str:
    """One send of a gradient reduction, saying what it carries: a rank's own gradients, a partial sum, or the sum."""
    name = h["collective"].replace("_", "-")
    tag = f" [{h['tag']}]" if h["tag"] else ""
    phase = f", {h['phase']} phase," if h["collective"] == "all_reduce" else ""
    head = (f"{name}{tag}{phase} step {h['step']}: GPU {h['src']} -> GPU {h['dst']}, chunk {h['chunk']}, "
            f"{h['elements']} x {h['dtype']} = {h['bytes']} B")
    if not h["elements"]:
        return f"{head} (nothing: GPU {h['chunk']} owns none of this layer)"
    if h["values"] is None:
        return head
    if h["phase"] == "all-gather":
        what = "the summed chunk"
    elif h["step"] == 0:
        what = f"GPU {h['src']}'s own gradients"
    else:
        what = f"the partial sum of {h['step'] + 1} GPUs' gradients"
    return f"{head} carrying {what} {_vec(h['values'])}"


def _when_sharding_grads_pays(phases: list, at_start: list, n: int) -> str:
    """What sharding gradients saves and what it costs at the peak, from this run's own buffers."""
    shard = at_start[-1]["holds"].get("grads", 0)  # the resting (s,) gradient shard
    top = max(phases, key=lambda p: p["peak_bytes"])
    fresh = sum(b["bytes"] for b in top["at_peak"] if b["kind"] == "grads" and b["name"] != "grads")
    saved = shard * (n - 1)  # stage 1 holds all N shards' worth of 16-bit gradients
    return (f"  Sharding gradients keeps a {shard} B shard instead of the whole {shard * n} B gradient ({saved} B less "
            "at rest);\n"
            f"  the peak also holds one layer's fresh gradients ({fresh} B) while they are reduce-scattered. So "
            "sharding\n"
            "  gradients lowers the peak when 2Ψ(N−1)/N is larger than one unit's gradients — not by itself with 4 "
            "weights, by\n"
            f"  far at scale: 7.5B parameters in 64 layers on 64 ranks save 14.8 GB per rank against 0.23 GB for one\n"
            f"  layer's fp16 gradients (zerosim memory --params 7.5e9 --ranks 64).")


def _say_memory(say, s: dict, r: dict, stage: int) -> None:
    say("Memory per GPU, phase by phase (from each rank's ledger)")
    for g, phases in enumerate(s["memory"]):
        say(f"  GPU {g}:")
        for p in phases:
            say(f"    {p['phase']:<18} peak {p['peak_bytes']:>4} B; holds at the end: {_kinds(p['holds'])}")
        top = max(phases, key=lambda p: p["peak_bytes"])
        say(
            f"    the {top['peak_bytes']} B peak ({top['phase']}) is: "
            + ", ".join(f"{b['name']} {b['bytes']} B" for b in top["at_peak"])
        )
    say("  bytes sent this step: " + ", ".join(f"GPU {g} {b} B" for g, b in enumerate(s["bytes_sent"])))
    if stage >= 2:
        say(_when_sharding_grads_pays(s["memory"][0], r["memory_at_start"][0], r["world_size"]))


_SCALERS = {"torch": "torch's GradScaler", "deepspeed": "DeepSpeed's DynamicLossScaler", "static": "the static scale"}


def _say_unscale(say, s: dict, ls: dict, wire: str, upd: str, compute: str) -> None:
    """Loss scaling, told from the step's numbers: scaled gradients, the reduced sum, the unscaled average."""
    S = ls["scale"]
    say(f"  Loss scaling ({_SCALERS[ls['scaler']]}): the loss was multiplied by S = {_num(S)} before backward, so "
        "every gradient")
    say(f"  above is S x dL/dw, rounded to {compute}: small ones no longer flush to zero.")
    how = (
        f"multiplied by fl32(1/S) = {_num(ls['inverse'])}, as torch's GradScaler and DeepSpeed do"
        if ls["unscale"] == "reciprocal"
        else f"divided by S = {_num(S)}"
    )
    for g in s["gpus"]:
        say(f"  GPU {g['gpu']} reduced (still scaled, {wire}): {_vec(g['reduced_shard'])} -> cast to {upd}, divided by "
            f"2, {how}: "
            f"{_vec(g['averaged_shard'])}")
    if ls["scaler"] != "static" and ls["scale_after"] != S:
        say(f"  No overflow; the scaler grows S to {_num(ls['scale_after'])} for the next step")


def _say_skip(say, ls: dict) -> None:
    """A step the dynamic loss scaler skipped."""
    say(f"  Overflow: at S = {_num(ls['scale'])} some reduced gradient holds inf or NaN. Every GPU checked its own "
        "part and")
    say("  they agreed through a MAX all-reduce of a one-element flag (DeepSpeed's has_overflow).")
    say(f"  {_SCALERS[ls['scaler']]} skips the step: no master, m, v or weight changes, and Adam's step count stays;")
    say(
        f"  S goes from {_num(ls['scale'])} to {_num(ls['scale_after'])} for the next step."
        + (f"\n  {ls['message']}" if ls["message"] else "")
    )
    say("")


def narrate(r: dict) -> str:
    """The replay's numbers (the dict `replay()` returns) as text, in seed 004's order."""
    out = []
    say = out.append
    names, stage = r["weights"], r["stage"]
    say(f"zerosim replay: {r['example']}; ZeRO stage {stage}, {r['precision']}, "
        f"Adam lr {r['optimizer']['lr']}, betas {tuple(r['optimizer']['betas'])}, eps {r['optimizer']['eps']}, "
        f"activation checkpointing {'on' if r['checkpoint'] else 'off'}")
    say("")
    say("Setup")
    say("  model: h = w1*x1 + w2*x2, a = ReLU(h), y = w3*a + w4, loss = 0.5*(y - t)^2")
    compute, upd, wire = r["compute"], r["update"], r["reduce"]
    exact = _fp32 if upd == "fp32" else (lambda x: _num(x))  # how to print update-format values
    say(f"  weights {names} = {_vec(r['initial_params'])} in {compute}")
    for g, owns in enumerate(r["owners"]):
        what = (f"the {upd} master, m and v" if r["has_master"] else "m and v") + (
            f" and the {compute} weights" if stage == 3 else ""
        )
        if stage == 0:
            say(f"  GPU {g} keeps everything for {', '.join(owns)}: the {compute} weights and gradients, "
                + (f"the {upd} master, m and v" if r["has_master"] else "m and v") + " (plain data parallel)")
            continue
        say(f"  GPU {g} owns {', '.join(owns)}: it keeps {what} for them")
    for inp in r["inputs"]:
        say(f"  GPU {inp['gpu']} gets x = {_vec(inp['x'])}, t = {_num(inp['target'])}")
    for s in r["steps"]:
        say("")
        say(f"=== Step {s['step']} ===")
        say("1. Each GPU computes a full gradient on its own sample")
        for g in s["gpus"]:
            say(f"  GPU {g['gpu']}:")
            for f in g["forward"]:
                say(f"    forward  {f['name']:<7} -> {_vec(np.ravel(f['out']))}")
            say(f"    loss = 0.5*(y - t)^2 = {_num(g['loss'])}")
            for f in g["recompute"]:
                say(
                    f"    recompute {f['name']:<6} -> {_vec(np.ravel(f['out']))}  (checkpointing dropped it in forward)"
                )
            for b in g["backward"]:
                grads = ", ".join(f"d{k} {_vec(np.ravel(v))}" for k, v in b["grads"].items())
                if grads:
                    say(f"    backward {b['name']:<7} -> {grads}")
            say(f"    local gradient {names} = {_vec(g['local_grads'])}")
        say("")
        if stage == 3:
            say("  Stage 3: no GPU holds a whole layer, so each use of a layer gathers it first (from the trace):")
            for h in s["stage3_gathers"]:
                what = f"{_vec(h['values'])}" if h["elements"] else "nothing (it owns none of this layer)"
                say(f"    all-gather [{h['tag']}] GPU {h['src']} -> GPU {h['dst']}: {what}")
            n_calls = len({h["call"] for h in s["stage3_gathers"]})
            say(f"  {n_calls} all-gathers: forward, recompute under checkpointing, and backward each gather again")
            say("")
        label = (
            "reduce-scatter per layer during backward"
            if stage >= 2
            else ("all-reduce" if stage == 0 else "reduce-scatter")
        )
        say(f"2. Gradients: {label}, ring in NCCL's order, chunk by chunk (from the trace)")
        for h in s["reduce_scatter"]:
            say(f"  {_hop_line(h)}")
        ls = s.get("loss_scale") or {"scale": 1.0, "scaler": "static", "skipped": False}
        if ls["skipped"]:
            _say_skip(say, ls)
            _say_memory(say, s, r, stage)
            continue
        scaled = ls["scale"] != 1 or ls["scaler"] != "static"
        for g in s["gpus"]:
            how = f"summed in {wire}, cast to {upd}, divided by 2" + (", unscaled" if scaled else "")
            say(f"  GPU {g['gpu']} ends with the averaged gradient for {', '.join(g['owns'])}: "
                f"{_vec(g['averaged_shard'])} ({how})")
        if scaled:
            _say_unscale(say, s, ls, wire, upd, compute)
        say("")
        # pure 16-bit training keeps no master: saying only "in fp32" read as if fp32 weights were kept (issue 24)
        how = (f", in {upd}" if r["has_master"] or compute == upd else
               f": its {compute} weights widened to {upd}, m and v in {upd}, the result rounded straight back to "
               f"{compute} (no {upd} master is kept)")
        say("3. Each GPU updates "
            f"{'every weight (the same update everywhere)' if stage == 0 else 'only its own weights'} with Adam{how}")
        for g in s["gpus"]:
            a = g["adam"]
            for j, name in enumerate(g["owns"]):
                say(f"  GPU {g['gpu']} {name}: g = {_num(g['averaged_shard'][j])}, m = {exact(a['m'][j])}, v = "
                    f"{exact(a['v'][j])}, "
                    f"m_hat = {exact(a['m_hat'][j])}, v_hat = {exact(a['v_hat'][j])}")
                if r["has_master"]:
                    say(f"       new {upd} master = {exact(g['master'][j])}; its {compute} copy is really "
                        f"{_num(g['compute_shard'][j])}")
                else:
                    say(f"       no master copy: the update lands on the {r['compute']} weight itself, now "
                        f"{_num(g['compute_shard'][j])}")
        say("")
        if stage == 3:
            say(f"4. No all-gather: each GPU keeps only its own {compute} shard; the next forward gathers layers again")
            for g in s["gpus"]:
                say(f"  GPU {g['gpu']} holds {', '.join(g['owns'])} = {_vec(g['params_after'])}")
        elif stage == 0:
            say("4. No all-gather: every GPU ran the same update on the whole model")
            for g in s["gpus"]:
                say(f"  GPU {g['gpu']} holds {_vec(g['params_after'])}")
        else:
            say(f"4. All-gather of the new {compute} weights (from the trace)")
            say("  Before it, the model is inconsistent: each GPU has updated only its own weights")
            for g in s["gpus"]:
                say(f"  GPU {g['gpu']} holds {', '.join(names)} = {_vec(g['params_before_refresh'])} (new "
                    f"{', '.join(g['owns'])}, the rest from before)")
            for h in s["all_gather"]:
                vals = f" carrying {_vec(h['values'])}" if h["values"] is not None else ""
                say(f"  step {h['step']}: GPU {h['src']} -> GPU {h['dst']}, shard {h['chunk']}, {h['bytes']} B{vals}")
            for g in s["gpus"]:
                say(f"  GPU {g['gpu']} now holds {', '.join(names)} = {_vec(g['params_after'])}")
        say("")
        _say_memory(say, s, r, stage)
    say("")
    what = f"{upd} masters" if r["has_master"] else f"{compute} weights (there is no master copy)"
    say(
        f"{what} after {len(r['steps'])} step(s): " + ", ".join(f"{n} = {exact(v)}" for n, v in zip(names, r["master"]))
    )
    return "\n".join(out)
