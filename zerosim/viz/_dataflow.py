"""The mixed-precision step as a loop of boxes, with each cast where the run made it (seeds 000/002).

`observe(precision)` runs one step of seed 004's example (TinyNet, two ranks, ZeRO-1, Adam) and reads
the format of every stage of the loop from what the run recorded: the micro-batch and the forward
activations and gradients from the `Compute` events, the wire from the gradient `Call`, the fp32
gradient, optimizer state, master and the new 16-bit weights from the `OptimizerStep` event, the
loss scale the step used and its scaler from the `LossScaleUpdate` event, how it unscaled from the
policy, the all-gather that hands every rank the others' updated weights from the "refresh params" `Call`
(ZeRO-1/2: each rank updates only its 1/N), and what an inf/NaN in a reduced gradient does from the
loss scaler: skip the step and lower S (a dynamic scaler: the overflow flag all-reduced with MAX), or
raise on every rank with nothing changed (a static scale). `dataflow_figure` draws one loop per
precision with that branch under it, and writes "cast a → b" on exactly the arrows where the format
changed — none at all for plain fp32.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import get_format, get_precision
from zerosim.viz._palette import LOSS, format_colour


def _fmt(array) -> str:
    return get_format(np.asarray(array).dtype).name


def observe(precision) -> dict:
    """The formats one step of seed 004's example really used, read from its events (see the module)."""
    from zerosim.cluster import Call, Cluster, Compute, LossScaleUpdate, OptimizerStep
    from zerosim.models.mlp import TinyNet
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine, skips_steps

    policy = get_precision(precision)
    cluster = Cluster(2, keep_values=True)
    engine = ZeroEngine(TinyNet(), cluster, 1, Adam(lr=0.1), policy, checkpoint=True)
    batches = TinyNet.seed_batches()
    trace = cluster.trace
    for _ in range(64):  # a dynamic scaler may skip the first steps (an overflow): draw the first step that updated
        engine.step(batches)
        if trace.of_type(OptimizerStep):
            break
    forward = next(e for e in trace.of_type(Compute) if e.rank == 0 and e.kind == "forward")
    backward = next(e for e in trace.of_type(Compute) if e.rank == 0 and e.kind == "backward" and e.values["grads"])
    wire = next(c for c in trace.of_type(Call) if c.purpose == "reduce grads")
    opt = next(e.values for e in trace.of_type(OptimizerStep) if e.rank == 0)
    scaled = trace.of_type(LossScaleUpdate)
    refresh = next((c for c in trace.of_type(Call) if c.purpose == "refresh params"), None)
    # seed 001 §6 all-reduces the gradients at stage 1: the same buffer all-reduced on its own ring, for its bytes
    from zerosim.collectives import all_reduce

    ring = Cluster(wire.world_size)
    fmt = get_format(wire.dtype).dtype
    all_reduce(ring, [np.zeros(wire.elements, fmt) for _ in range(wire.world_size)])
    return {
        "name": precision if isinstance(precision, str) else repr(policy),
        "data": _fmt(batches[0][0]),
        "master": _fmt(opt["master"]) if cluster.ranks[0].master is not None else None,  # None: "pure", no master
        "update": _fmt(opt["master"]),  # the weights the optimizer updates (the master, or a widened scratch copy)
        "params": _fmt(opt["compute_after"]),
        "activations": _fmt(forward.values["out"]),
        "grads": _fmt(next(iter(backward.values["grads"].values()))),
        "wire": wire.dtype,
        "grad32": _fmt(opt["grad32"]),
        "state": _fmt(opt["m"]),
        # what this step's loss was multiplied by
        "loss_scale": scaled[-1].scale_before if scaled else engine.scaler.scale,
        "scaler": scaled[-1].scaler if scaled else "static",
        "unscale": engine.precision.unscale,  # "reciprocal": × fl32(1/S), as torch and DeepSpeed; or "divide"
        "stage": engine.stage_number,
        # how the updated shards reach every rank: (collective, format on the wire), or None (stages 0 and 3)
        "refresh": (refresh.collective, refresh.dtype) if refresh is not None else None,
        "overflow": "skip" if skips_steps(engine.scaler) else "raise",  # what an inf/NaN in a reduced gradient does
        # the steps this run skipped before the drawn one: (scale used, scale after), from the LossScaleUpdate events
        "skipped": tuple((u.scale_before, u.scale_after) for u in scaled if u.skipped),
        # bytes rank 0 sent to reduce its gradients, and what an all-reduce of the same buffer sends (seed 001 §6)
        "reduce": (wire.collective, trace.bytes_sent(0, call=wire.call), ring.trace.bytes_sent(0)),
    }


def _box(ax, xy, text, fmt: str):
    return ax.text(*xy, text, ha="center", va="center", fontsize=8.5, zorder=3,
                   bbox=dict(boxstyle="round,pad=0.45", fc="white", ec=format_colour(fmt), lw=2.2))


# where an arrow leaves and enters a box, as fractions of the box: (from, to) per direction
SIDES = {
    "right": ((1, 0.5), (0, 0.5)),
    "left": ((0, 0.5), (1, 0.5)),
    "down": ((0.5, 0), (0.5, 1)),
    "up": ((0.5, 1), (0.5, 0)),
}


def _arrow(ax, a, b, way: str, src: str, dst: str, what: str = "") -> None:
    """An arrow from box a to box b; "cast src → dst" (gid "cast") beside it when the format changes there."""
    start, end = SIDES[way]
    ax.annotate("", xy=end, xycoords=b.get_bbox_patch(), xytext=start, textcoords=a.get_bbox_patch(), zorder=2,
                arrowprops=dict(arrowstyle="-|>", color="0.35", lw=1.3, shrinkA=2, shrinkB=2))
    cast = src != dst
    (xa, ya), (xb, yb) = a.get_position(), b.get_position()
    vertical = way in ("up", "down")
    for text, is_cast in ((f"cast {src} → {dst}" if cast else "", True), (what, False)):
        if not text:
            continue
        if vertical:  # beside the arrow, on its right
            mid, ha, va = ((xa + xb) / 2 + 0.2, (ya + yb) / 2), "left", "center"
        else:  # a cast above the arrow, a note under it
            mid, ha, va = ((xa + xb) / 2, (ya + yb) / 2 + (0.46 if is_cast else -0.3)), "center", "center"
        t = ax.text(*mid, text, ha=ha, va=va, fontsize=8, zorder=4, color=LOSS if is_cast else "0.3",
                    fontweight="bold" if is_cast else "normal")
        t.set_gid("cast" if is_cast else "note")


def _loop(ax, o: dict) -> None:
    """One precision's step as a loop: top row forward (left to right), bottom row backward (right to left), and
    under the overflow check the branch an inf/NaN takes."""
    s = o["loss_scale"]
    master = o["master"] or o["update"]
    top, bottom, branch = 2.3, 0.5, -0.95
    xs = (0.6, 2.6, 4.5, 6.4, 8.3)
    m = _box(ax, (xs[0], top), f"{master} {'master weights' if o['master'] else 'weights, widened'}\n(the "
                               "authoritative copy)", master)
    w = _box(ax, (xs[2], top), f"{o['params']} weights\n(the compute copy)", o["params"])
    f = _box(ax, (xs[3], top), f"forward\n{o['activations']} activations", o["activations"])
    loss = _box(ax, (xs[4], top), "loss" + (f" × S = {s:g}\n(scaled up: no underflow)" if s != 1 else "\n(no loss "
                                                                                                       "scaling)"),
                o["activations"])
    x = _box(ax, (xs[3], 3.6), f"micro-batch x\n({o['data']})", o["data"])
    bw = _box(ax, (xs[4], bottom), f"backward\n{o['grads']} gradients", o["grads"])
    rs = _box(ax, (xs[3], bottom), f"reduce-scatter\n{o['wire']} on the wire", o["wire"])
    check = _box(ax, (xs[2], bottom), "any inf / NaN in\na reduced shard?", o["wire"])
    check.set_gid("overflow check")
    unscale = "× 1/S" if o["unscale"] == "reciprocal" else "÷ S"  # S itself is in the loss box and the title
    g32 = _box(ax, (xs[1], bottom), f"{o['grad32']} gradient shard\n÷ N" + (f", {unscale}" if s != 1 else ""),
               o["grad32"])
    opt = _box(ax, (xs[0], bottom), f"Adam in {o['update']}\nm, v in {o['state']}", o["state"])
    if o["overflow"] == "skip":
        ran = ", ".join(f"{a:g}" for a, _ in o["skipped"])
        what = ("yes: skip the step (no weight or state changes), lower S;\nevery rank agrees (a MAX all-reduce of a "
                "flag)" + (f"\nthis run skipped {len(o['skipped'])} at S = {ran}" if o["skipped"] else ""))
    elif s == 1:
        what = "yes: FloatingPointError on every rank, no weight\nor state changed (unscaled: no S to lower)"
    else:
        what = ("yes: FloatingPointError on every rank, no weight or\nstate changed (a static scale; torch's and "
                "DeepSpeed's\ndynamic scalers skip the step and lower S instead)")
    skip = _box(ax, (xs[2], branch), what, o["wire"])
    skip.set_gid("overflow branch")
    if o["refresh"]:  # ZeRO-1/2: each rank updated its 1/N; the collective hands every rank the rest
        collective, wire = o["refresh"]
        ag = _box(ax, (xs[1], top), f"{collective.replace('_', '-')}\n{wire} on the wire", wire)
        ag.set_gid("refresh")
        _arrow(ax, m, ag, "right", master, wire, "" if o["master"] else "(rounded in place: no master)")
        _arrow(ax, ag, w, "right", wire, o["params"])
    else:
        _arrow(ax, m, w, "right", master, o["params"], "" if o["master"] else "(rounded in place: no master)")
    _arrow(ax, w, f, "right", o["params"], o["activations"])
    _arrow(ax, x, f, "down", o["data"], o["activations"])
    _arrow(ax, f, loss, "right", o["activations"], o["activations"])
    _arrow(ax, loss, bw, "down", o["activations"], o["grads"], "backward")
    _arrow(ax, bw, rs, "left", o["grads"], o["wire"])
    _arrow(ax, rs, check, "left", o["wire"], o["wire"])
    _arrow(ax, check, g32, "left", o["wire"], o["grad32"], "no")
    _arrow(ax, check, skip, "down", o["wire"], o["wire"])
    _arrow(ax, g32, opt, "left", o["grad32"], o["update"])
    _arrow(ax, opt, m, "up", o["update"], master, "update")
    ax.set_xlim(-0.5, 9.3)
    ax.set_ylim(-1.55, 4.1)
    ax.axis("off")
    kind = "static loss scale" if o["scaler"] == "static" else f"{o['scaler']}'s dynamic loss scale, this step"
    ax.set_title(f"{o['name']}, ZeRO-{o['stage']}" + (f", {kind} S = {s:g}" if s != 1 else ""), fontsize=10,
                 loc="left")


def dataflow_figure(precisions=None):
    """One loop per precision (default: fp16-mixed with torch's dynamic loss scale and bf16-mixed, seed 002's two
    pictures), from `observe`. Cast labels carry the gid "cast", the all-gather box "refresh", the overflow check and
    its branch "overflow check" / "overflow branch". Returns the Figure."""
    import matplotlib.pyplot as plt

    if precisions is None:
        precisions = [get_precision("fp16-mixed").with_(loss_scale="torch"), "bf16-mixed"]
    observed = [observe(p) for p in precisions]
    for o, p in zip(observed, precisions):
        if not isinstance(p, str):
            o["name"] = f"{get_precision(p).compute} compute, {get_precision(p).master or 'no'} master"
    fig, axes = plt.subplots(len(observed), 1, figsize=(12, 4.2 * len(observed)), dpi=120, squeeze=False)
    fig.suptitle("The mixed-precision step as the run did it (ZeRO-1 on 2 ranks): formats, casts, the all-gather "
                 "of the updated weights\nand the overflow branch, each read from the run's events", fontsize=10)
    for ax, o in zip(axes[:, 0], observed):
        _loop(ax, o)
    notes = {_reduce_note(o) for o in observed} - {""}
    if notes:
        fig.supxlabel("\n".join(sorted(notes)), fontsize=8.5).set_gid("reduce note")
    fig.tight_layout()
    return fig


def _reduce_note(o: dict) -> str:
    """Why ZeRO-1 reduce-scatters where seed 001 §6 writes an all-reduce, in this run's bytes ("" at other stages)."""
    collective, sent, all_reduced = o["reduce"]
    if o["stage"] != 1 or collective != "reduce_scatter":
        return ""
    return (f"ZeRO-1 reduce-scatters the gradients ({sent} B from each rank here): a rank updates only its 1/N, so the "
            f"all-reduce seed 001 §6 writes would also send the all-gather half nobody reads ({all_reduced} B).\n"
            "Seed 001 §10 and seed 003 reduce-scatter; DeepSpeed's default path all-reduces its buckets "
            "(stage_1_and_2.py, average_tensor): the recipe deepspeed-zero12, notebook 01.")
