"""Tell a replay (the dict from `replay()`) in seed 004's order, as plain text for a terminal.

Compact by default: each value prints as its own format prints it (fp32's 2.1), a step that tells nothing new is
told in brief, and each buffer name the ledgers use is put in plain words where it first appears. `exact=True`
(`zerosim replay --exact`) adds every fp32 value's exact twin ("2.1 (exactly 2.0999999046325684)") and tells every
step in full.
"""

from __future__ import annotations

from zerosim.prose import wrap
from zerosim.replay._legend import fp32, half_gap, is_lost, legend, num, vec
from zerosim.replay._scaling import say_skip, say_unscale


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
    return f"{head} carrying {what} {vec(h['values'])}"


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


class _Teller:
    """The narration's state: the lines so far, whether values get their exact twins, the names explained."""

    def __init__(self, r: dict, exact: bool):
        self.r, self.exact, self.out, self.explained = r, exact, [], set()
        self.told = set()  # the kinds of step told in full so far: "updated", "skipped"
        self.memory_told = None  # the last step whose memory was told in full, and its peaks

    def say(self, line: str) -> None:
        self.out.append(line)

    def say_wrapped(self, line: str, indent: str) -> None:
        """`line` at the page's width (zerosim/prose.py), the lines after the first at `indent`."""
        self.out += wrap(line, indent)

    def upd(self, x: float) -> str:
        """A value in the update format (fp32 with a master or the fp32 optimizer math): short, or with its twin."""
        return fp32(x, self.exact) if self.r["update"] == "fp32" else num(x)

    def explain(self, names, calls: dict, indent: str) -> None:
        """Plain words for each name not explained yet, under the line that first used it."""
        for name in names:
            words = legend(name, calls, self.r["world_size"], self.r["compute"])
            key = "callN.staged" if name.endswith(".staged") else name
            if words and key not in self.explained:
                self.explained.add(key)
                self.say_wrapped(f"{indent}({name}: {words})", indent + " ")


def _say_setup(t: _Teller) -> None:
    r = t.r
    names, stage, compute, upd = r["weights"], r["stage"], r["compute"], r["update"]
    t.say(f"zerosim replay: {r['example']}")
    t.say_wrapped(f"  ZeRO stage {stage}, {r['precision']}, Adam lr {r['optimizer']['lr']}, betas "
                  f"{tuple(r['optimizer']['betas'])}, eps {r['optimizer']['eps']}, activation checkpointing "
                  f"{'on' if r['checkpoint'] else 'off'}", "  ")
    t.say("")
    t.say("Setup")
    t.say("  model: h = w1*x1 + w2*x2, a = ReLU(h), y = w3*a + w4, loss = 0.5*(y - t)^2")
    t.say(f"  weights [{', '.join(names)}] = {vec(r['initial_params'])} in {compute}")
    for g, owns in enumerate(r["owners"]):
        keeps = f"the {upd} master, m and v" if r["has_master"] else "m and v"
        if stage == 0:
            t.say(f"  GPU {g} keeps everything for {', '.join(owns)}: the {compute} weights and gradients, {keeps} "
                  "(plain data parallel)")
            continue
        t.say(f"  GPU {g} owns {', '.join(owns)}: it keeps {keeps}" + (f" and the {compute} weights" if stage == 3
                                                                         else "") + " for them")
    for inp in r["inputs"]:
        t.say(f"  GPU {inp['gpu']} gets x = {vec(inp['x'])}, t = {num(inp['target'])}")
    if not t.exact and upd == "fp32":
        t.say_wrapped("  fp32 values print as fp32 prints them (2.1); `--exact` adds each one's exact value "
                      "(2.0999999046325684) and tells every step in full", "    ")


def _gather_line(hops: list) -> str:
    """One parameter all-gather of stage 3: who sends what."""
    sends = [f"GPU {h['src']} -> GPU {h['dst']} " + (vec(h["values"]) if h["elements"] else "nothing (it owns none "
                                                     "of this layer)") for h in hops]
    return f"  all-gather [{hops[0]['tag']}]: " + "; ".join(sends)


def _say_compute(t: _Teller, s: dict) -> None:
    """Section 1: forward, loss, recompute and backward, both GPUs on one line per op; at stage 3 each parameter
    all-gather where it ran, before the compute that uses it (the trace's order)."""
    r, gpus, names = t.r, s["gpus"], t.r["weights"]
    t.say("1. Each GPU computes a full gradient on its own sample (both GPUs on each line)")
    if r["stage"] == 3:
        t.say("  Stage 3: no GPU holds a whole layer, so each use of a layer gathers it first (from the trace)")
    gathers = {}
    for h in s["stage3_gathers"]:
        gathers.setdefault(h["call"], []).append(h)
    before = {"forward": 0, "recompute": 0, "backward": 0}  # gathers counted by the compute they serve
    pending = 0
    for kind, i in s["order"]:
        if kind == "gather":
            t.say(_gather_line(gathers[i]))
            pending += 1
            continue
        before[kind if kind in before else "forward"] += pending
        pending = 0
        if kind == "loss":
            t.say("  loss = 0.5*(y - t)^2 -> " + ", ".join(f"GPU {g['gpu']} {num(g['loss'])}" for g in gpus))
        elif kind == "backward":
            parts = [", ".join(f"d{k} {vec(_flat(v))}" for k, v in g["backward"][i]
                               ["grads"].items()) for g in gpus]
            if any(parts):
                t.say(f"  backward  {gpus[0]['backward'][i]['name']:<6} -> "
                      + "; ".join(f"GPU {g['gpu']} {p}" for g, p in zip(gpus, parts)))
        else:
            ops = [g[kind][i] for g in gpus]
            why = "  (checkpointing dropped it in forward; backward needs it)" if kind == "recompute" else ""
            t.say(f"  {kind:<9} {ops[0]['name']:<6} -> "
                  + ", ".join(f"GPU {g['gpu']} {vec(_flat(op['out']))}" for g, op in zip(gpus, ops)) + why)
    t.say(f"  local gradient [{', '.join(names)}]: " + ", ".join(f"GPU {g['gpu']} {vec(g['local_grads'])}"
                                                                 for g in gpus))
    if r["stage"] == 3:
        counted = ", ".join(f"{k} {n}" for k, n in before.items() if n)
        t.say(f"  {len(gathers)} all-gathers of parameters ({counted}): each use of a layer gathers it again")


def _flat(x) -> list:
    while isinstance(x, list) and x and isinstance(x[0], list):
        x = [v for row in x for v in row]
    return x if isinstance(x, list) else [x]


def _say_reduce(t: _Teller, s: dict, ls: dict) -> None:
    """Section 2: the gradient reduction hop by hop, then what each GPU ends with."""
    r, stage = t.r, t.r["stage"]
    label = "reduce-scatter per layer during backward" if stage >= 2 else ("all-reduce" if stage == 0 else
                                                                            "reduce-scatter")
    t.say(f"2. Gradients: {label}, ring in NCCL's order, chunk by chunk (from the trace)")
    for h in s["reduce_scatter"]:
        t.say(f"  {_hop_line(h)}")
    if ls["skipped"]:
        return
    scaled = ls["scale"] != 1 or ls["scaler"] != "static"
    for g in s["gpus"]:
        how = f"summed in {r['reduce']}, cast to {r['update']}, divided by 2" + (", unscaled" if scaled else "")
        t.say(f"  GPU {g['gpu']} ends with the averaged gradient for {', '.join(g['owns'])}: "
              f"{vec(g['averaged_shard'])} ({how})")
    if scaled:
        say_unscale(t, s, ls)


def _weight_words(t: _Teller, s: dict, g: dict, j: int, brief: bool = False) -> str:
    """What Adam's update did to one weight without a master copy: the update beside half the spacing it must
    beat."""
    r, compute = t.r, t.r["compute"]
    w = s["params_before"][r["weights"].index(g["owns"][j])]
    step = -g["adam"]["update"][j]  # w_new = w - update (optim/_adam.py)
    half, new, lost = half_gap(w, step, compute), g["compute_shard"][j], is_lost(w, step, compute)
    moved = f"{num(w)} {'+' if step >= 0 else '-'} {t.upd(abs(step))}"
    if brief:
        return (f"{moved} rounds back to {num(new)}: lost (half an ulp there is {num(half)})" if lost else
                f"{moved} -> {num(new)} (half an ulp there is {num(half)})")
    ulp = f"half an {compute} ulp at {num(w)}"
    if "ulp" not in t.explained:
        t.explained.add("ulp")
        ulp += f" (the gap from {num(w)} to the next {compute} number that way, halved)"
    head = f"no master copy: w - update = {moved} lands on the {compute} weight itself"
    if lost:
        return (f"{head}; {ulp} is {num(half)}, more than {t.upd(abs(step))}: it rounds back to {num(new)}, the "
                "update is lost")
    return f"{head}, now {num(new)}: {t.upd(abs(step))} is more than {ulp}, {num(half)}"


def _say_update(t: _Teller, s: dict) -> None:
    """Section 3: Adam on each GPU's own weights."""
    r, upd, compute = t.r, t.r["update"], t.r["compute"]
    # pure 16-bit training keeps no master: saying only "in fp32" read as if fp32 weights were kept (issue 24)
    how = (f", in {upd}" if r["has_master"] or compute == upd else
           f": its {compute} weights widened to {upd}, m and v in {upd}, the result rounded straight back to "
           f"{compute} (no {upd} master is kept)")
    t.say_wrapped(
        "3. Each GPU updates "
        f"{'every weight (the same update everywhere)' if r['stage'] == 0 else 'only its own weights'} with Adam{how}",
        "   ")
    for g in s["gpus"]:
        a = g["adam"]
        for j, name in enumerate(g["owns"]):
            t.say(f"  GPU {g['gpu']} {name}: g = {num(g['averaged_shard'][j])}, m = {t.upd(a['m'][j])}, v = "
                  f"{t.upd(a['v'][j])}, m_hat = {t.upd(a['m_hat'][j])}, v_hat = {t.upd(a['v_hat'][j])}")
            if r["has_master"]:
                t.say(f"       new {r['update']} master = {t.upd(g['master'][j])}; its {r['compute']} copy is really "
                      f"{num(g['compute_shard'][j])}")
            else:
                t.say_wrapped(f"       {_weight_words(t, s, g, j)}", "         ")


def _say_refresh(t: _Teller, s: dict) -> None:
    """Section 4: the all-gather of the new weights (stages 1 and 2), or why there is none."""
    r, names, compute = t.r, t.r["weights"], t.r["compute"]
    if r["stage"] == 3:
        t.say(f"4. No all-gather: each GPU keeps only its own {compute} shard; the next forward gathers layers again")
        for g in s["gpus"]:
            t.say(f"  GPU {g['gpu']} holds {', '.join(g['owns'])} = {vec(g['params_after'])}")
        return
    if r["stage"] == 0:
        t.say("4. No all-gather: every GPU ran the same update on the whole model")
        for g in s["gpus"]:
            t.say(f"  GPU {g['gpu']} holds {vec(g['params_after'])}")
        return
    t.say(f"4. All-gather of the new {compute} weights (from the trace)")
    t.say("  Before it, the model is inconsistent: each GPU has updated only its own weights")
    for g in s["gpus"]:
        t.say(f"  GPU {g['gpu']} holds {', '.join(names)} = {vec(g['params_before_refresh'])} (new "
              f"{', '.join(g['owns'])}, the rest from before)")
    for h in s["all_gather"]:
        vals = f" carrying {vec(h['values'])}" if h["values"] is not None else ""
        t.say(f"  step {h['step']}: GPU {h['src']} -> GPU {h['dst']}, shard {h['chunk']}, {h['bytes']} B{vals}")
    for g in s["gpus"]:
        t.say(f"  GPU {g['gpu']} now holds {', '.join(names)} = {vec(g['params_after'])}")


def _say_memory(t: _Teller, s: dict) -> None:
    """Memory per GPU, phase by phase; a later step whose peaks are the same says so in one line."""
    r, stage = t.r, t.r["stage"]
    peaks = [[(p["phase"], p["peak_bytes"], p["holds"]) for p in phases] for phases in s["memory"]]
    if not t.exact and t.memory_told is not None and t.memory_told[1] == peaks:
        t.say(f"  memory per GPU: as in step {t.memory_told[0]} (peak "
              + ", ".join(f"GPU {g} {max(p[1] for p in ph)} B" for g, ph in enumerate(peaks)) + ")")
        return
    t.memory_told = (s["step"], peaks)
    t.say("Memory per GPU, phase by phase (from each rank's ledger)")
    for g, phases in enumerate(s["memory"]):
        t.say(f"  GPU {g}:")
        for p in phases:
            holds = ", ".join(f"{k} {v} B" for k, v in p["holds"].items()) or "nothing"
            t.say(f"    {p['phase']:<18} peak {p['peak_bytes']:>4} B; holds at the end: {holds}")
        top = max(phases, key=lambda p: p["peak_bytes"])
        t.say_wrapped(f"    the {top['peak_bytes']} B peak ({top['phase']}) is: "
                      + ", ".join(f"{b['name']} {b['bytes']} B" for b in top["at_peak"]), "      ")
        t.explain([b["name"] for b in top["at_peak"]], s["calls"], "      ")
    t.say("  bytes sent this step: " + ", ".join(f"GPU {g} {b} B" for g, b in enumerate(s["bytes_sent"])))
    if stage == 3 and len(set(s["bytes_sent"])) > 1:
        t.say(_why_bytes_differ(s))
    if stage >= 2:
        t.say(_when_sharding_grads_pays(s["memory"][0], r["memory_at_start"][0], r["world_size"]))


def _why_bytes_differ(s: dict) -> str:
    """Stage 3's unequal bytes, from the step's gathers: each layer's window lies in one GPU's shard, so its owner
    sends it whole at every gather, and a layer is gathered once more for checkpointing's recompute."""
    sent = {}  # (GPU, layer's tag) -> (calls, bytes a call)
    for h in s["stage3_gathers"]:
        if h["bytes"]:
            calls, size = sent.get((h["src"], h["tag"]), (set(), h["bytes"]))
            sent[(h["src"], h["tag"])] = (calls | {h["call"]}, size)
    parts = ", ".join(f"GPU {g} its {tag} {len(calls)} × {size} B" for (g, tag), (calls, size) in sorted(sent.items()))
    import textwrap

    why = ("why they differ: each layer lies in one GPU's shard, and its owner sends it whole at every gather ("
           + parts + "; a checkpointed layer is gathered again for its recompute), beside the other GPU's layer "
           "gradients in the reduce-scatters; 3Ψ(N−1)/N counts two gathers a layer over equal chunks")
    return textwrap.fill(why, 110, initial_indent="  ", subsequent_indent="  ")


def _say_brief(t: _Teller, s: dict) -> None:
    """A step like one told already: losses, gradients, what Adam did and the weights after, in a few lines."""
    r, gpus = t.r, s["gpus"]
    t.say("  loss " + ", ".join(f"GPU {g['gpu']} {num(g['loss'])}" for g in gpus) + "; local gradient "
          + ", ".join(f"GPU {g['gpu']} {vec(g['local_grads'])}" for g in gpus))
    averaged = [v for g in gpus for v in g["averaged_shard"]]
    owned = [n for g in gpus for n in g["owns"]]
    t.say(f"  averaged gradient [{', '.join(owned)}] = {vec(averaged)}")
    for g in gpus:
        for j, name in enumerate(g["owns"]):
            if r["has_master"]:
                t.say(f"  GPU {g['gpu']} {name}: {r['update']} master {t.upd(g['master'][j])}, its {r['compute']} "
                      f"copy {num(g['compute_shard'][j])}")
            else:
                t.say(f"  GPU {g['gpu']} {name}: {_weight_words(t, s, g, j, brief=True)}")


def narrate(r: dict, exact: bool = False) -> str:
    """The replay's numbers (the dict `replay()` returns) as text, in seed 004's order; `exact` adds every fp32
    value's exact twin and tells every step in full."""
    t = _Teller(r, exact)
    _say_setup(t)
    for s in r["steps"]:
        ls = s.get("loss_scale") or {"scale": 1.0, "scaler": "static", "skipped": False}
        kind = "skipped" if ls["skipped"] else "updated"
        full = exact or kind not in t.told
        t.told.add(kind)
        t.say("")
        t.say(f"=== Step {s['step']} ===" + ("" if full else " (in brief, like an earlier step; --exact tells it in "
                                                              "full)"))
        if not full and ls["skipped"]:
            say_skip(t, s, ls, full=False)
            continue
        if not full:
            _say_brief(t, s)
            _say_memory(t, s)
            continue
        _say_compute(t, s)
        t.say("")
        _say_reduce(t, s, ls)
        if ls["skipped"]:
            say_skip(t, s, ls, full=True)
            _say_memory(t, s)
            continue
        t.say("")
        _say_update(t, s)
        t.say("")
        _say_refresh(t, s)
        t.say("")
        _say_memory(t, s)
    t.say("")
    what = f"{r['update']} masters" if r["has_master"] else f"{r['compute']} weights (there is no master copy)"
    t.say(f"{what} after {len(r['steps'])} step(s): " + ", ".join(f"{n} = {t.upd(v) if r['has_master'] else num(v)}"
                                                                  for n, v in zip(r["weights"], r["master"])))
    return "\n".join(t.out)
