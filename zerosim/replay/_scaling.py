"""The replay's loss scaling in words: the scaled and unscaled gradients of a step that updates, and for a step the
dynamic scaler skips, which S x g passed the 16-bit format's largest value (from the step's float64 gradients).

`t` is the narration (replay_text._Teller): its replay dict `t.r` and `t.say(line)`.
"""

from __future__ import annotations

from zerosim.precision import get_format
from zerosim.prose import wrap
from zerosim.replay._legend import num, vec

_SCALERS = {"torch": "torch's GradScaler", "deepspeed": "DeepSpeed's DynamicLossScaler", "static": "the static scale"}


def say_unscale(t, s: dict, ls: dict) -> None:
    """Loss scaling, told from the step's numbers: scaled gradients, the reduced sum, the unscaled average."""
    r, S = t.r, ls["scale"]
    t.say(f"  Loss scaling ({_SCALERS[ls['scaler']]}): the loss was multiplied by S = {num(S)} before backward, so "
          "every gradient")
    t.say(f"  above is S x dL/dw, rounded to {r['compute']}: small ones no longer flush to zero.")
    how = (f"multiplied by fl32(1/S) = {num(ls['inverse'])}, as torch's GradScaler and DeepSpeed do"
           if ls["unscale"] == "reciprocal" else f"divided by S = {num(S)}")
    for g in s["gpus"]:
        t.say(f"  GPU {g['gpu']} reduced (still scaled, {r['reduce']}): {vec(g['reduced_shard'])} -> cast to "
              f"{r['update']}, divided by 2, {how}: {vec(g['averaged_shard'])}")
    if ls["scaler"] != "static" and ls["scale_after"] != S:
        t.say(f"  No overflow; the scaler grows S to {num(ls['scale_after'])} for the next step")


def _largest(t, s: dict, ls: dict):
    """(GPU, weight index, |g|) of the largest unscaled local gradient (float64), when S x |g| passed the 16-bit
    format's largest finite value; else None."""
    grads = s.get("unscaled_grads")
    if not grads:
        return None
    g, j = max(((g, j) for g, row in enumerate(grads) for j in range(len(row))), key=lambda p: abs(grads[p[0]][p[1]]))
    big = abs(grads[g][j])
    return (g, j, big) if big * ls["scale"] > get_format(t.r["compute"]).max else None


def _overflow_why(t, s: dict, ls: dict) -> list:
    """Which S x g passed the 16-bit format's largest value: the largest unscaled gradient (float64), times S."""
    fmt, S, found = get_format(t.r["compute"]), ls["scale"], _largest(t, s, ls)
    if found is None:
        return []
    g, j, big = found
    lines = wrap(f"  Why: GPU {g}'s gradient for {t.r['weights'][j]} is {num(s['unscaled_grads'][g][j])} (float64, "
                 f"before scaling), and {num(big)} x {num(S)} = {num(big * S)} > {num(fmt.max)}, {fmt.name}'s largest "
                 f"finite value: backward in {fmt.name} made it inf.", "    ")
    if ls["scale_after"] == S / 2:  # a halving scaler: how many skips until the largest gradient fits
        fit = S
        while big * fit > fmt.max:
            fit /= 2
        lines += wrap(f"  Halving S each skipped step, the first S that fits is {num(fit)}: {num(big)} x {num(fit)} = "
                      f"{num(big * fit)} <= {num(fmt.max)}.", "    ")
    return lines


def say_skip(t, s: dict, ls: dict, full: bool) -> None:
    """A step the dynamic loss scaler skipped."""
    if not full:
        found, fmt = _largest(t, s, ls), get_format(t.r["compute"])
        why = (
            f": {num(found[2])} x {num(ls['scale'])} = {num(found[2] * ls['scale'])} > {num(fmt.max)}" if found else ""
        )
        t.say(f"  Overflow again at S = {num(ls['scale'])}{why}; skipped, S goes to {num(ls['scale_after'])}")
        return
    t.say(f"  Overflow: at S = {num(ls['scale'])} some reduced gradient holds inf or NaN. Every GPU checked its own "
          "part and")
    t.say("  they agreed through a MAX all-reduce of a one-element flag (DeepSpeed's has_overflow).")
    for line in _overflow_why(t, s, ls):
        t.say(line)
    t.say(f"  {_SCALERS[ls['scaler']]} skips the step: no master, m, v or weight changes, and Adam's step count stays;")
    t.say(f"  S goes from {num(ls['scale'])} to {num(ls['scale_after'])} for the next step."
          + (f"\n  {ls['message']}" if ls["message"] else ""))
    t.say("")
