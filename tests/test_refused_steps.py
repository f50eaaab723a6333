"""Issue 35, item 3: a refused or skipped step leaves nothing behind that the frameworks would not (_carried.py).

On main one overflowing step with ZeRO++ qgZ and LoCo left inf in the error-feedback buffers: every later step
overflowed too, and with DeepSpeed's dynamic scaler (whose first steps overflow by design) the run never took a
step and ended in LossScaleAtMinimum. DeepSpeed deletes the buffers on an overflow (runtime/zero/stage3.py,
`_loco_err_buf_update`, v0.19.5 and the 0.19.6 head), and rescales them when the scale changes.

The property, over every feature that carries state from step to step: an engine E and its fresh twin T run the same
clean steps; E is then handed an overflowing batch. If E's scaler skips the step, T is given by hand what the
frameworks' skip does (the scaler's new state, the iteration counted, LoCo's errors dropped, the forward's fp8 amax
recorded) and nothing else; if E refuses it (a static scale raises), T is given nothing. Then both run the same good
step, and everything either holds is equal bit for bit: params, fp32 master, optimizer state, t, the scaler, LoCo's
errors and counter, the fp8 histories, DDP's bucket state. A refused step is also checked to leave every one of those
as it was, before the good step."""

import numpy as np
import pytest
from helpers import bits, same, snapshot

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.parallel.data import CommSchedule, LocoParams, Wire
from zerosim.precision import LossScaleAtMinimum, get_precision

WIDTHS = [16, 32, 8]  # weights of (32, 16) and (8, 32): qgZ groups of 16 and 8 elements, which its kernels load
STATIC = 1.0  # a static scale: an overflow is refused (FloatingPointError)
DYNAMIC = {"torch": {"init_scale": 256.0}, "deepspeed": {"init_scale": 256.0, "hysteresis": 1}}  # a skip lowers S

# name -> (ranks, GPUs a node, stage, precision preset, optimizer, engine options): each carries state across steps
FEATURES = {
    "adam, stage 2": (2, None, 2, "fp16-mixed", "adam", {}),
    "adam, stage 1, K = 2, clipping": (3, None, 1, "fp16-mixed", "adam", {"accumulation_steps": 2, "clip_grad": 1.0}),
    "qgZ with LoCo (DeepSpeed ZeRO++)": (4, 2, 3, "fp16-mixed", "adam", {
        "recipe": "deepspeed-zero3", "wire": Wire(zero_quantized_gradients=True, loco=LocoParams(0.8, 1024))}),
    "qgZ with LoCo, reset_T 0": (4, 2, 3, "fp16-mixed", "adam", {
        "recipe": "deepspeed-zero3", "wire": Wire(zero_quantized_gradients=True, loco=LocoParams(0.5, 0))}),
    "fp8 all-gather, delayed scaling": (2, None, 3, "fp16-mixed", "adam", {"wire": Wire(fp8_all_gather="delayed")}),
    "fp8 all-gather, current scaling": (2, None, 3, "fp16-mixed", "adam", {"wire": Wire(fp8_all_gather="current")}),
    "DDP buckets (stage 0)": (2, None, 0, "fp16-mixed", "adam", {"recipe": "ddp", "comm": CommSchedule(
        bucket_cap_mb=1e-4, first_bucket_mb=5e-5)}),
    "DeepSpeed's bucket all-reduce (stage 1)": (3, None, 1, "fp16-mixed", "adam", {
        "recipe": "deepspeed-zero12", "comm": CommSchedule(reduce_bucket_size=40)}),
    "Adam state stored in bf16": (2, None, 2, "fp16-mixed", "adam", {"optim_state": "bf16"}),  # (fp16 flushes v)
    "HSDP on 2 x 2": (4, 2, "hsdp", "fp16-mixed", "adam", {}),
    "hpZ on 2 x 2": (4, 2, "hpz", "fp16-mixed", "adam", {}),
    "MiCS on 2 x 2": (4, 2, "mics", "fp16-mixed", "adam", {}),
    "stochastic rounding (fp16, no master)": (2, None, 2, "fp16-pure-sr", "adam", {}),
    "Muon (stage 1)": (2, None, 1, "fp16-mixed", "muon", {}),
    "Lion": (2, None, 2, "fp16-mixed", "lion", {}),
    "ZeRO-Offload (optimizer on the host)": (2, None, 2, "fp16-mixed", "adam", {"offload": {}}),
    "ZeRO-Offload with DPU's delayed update": (2, None, 2, "fp16-mixed", "adam", {"offload": {"dpu": True}}),
}


def build(feature: str, scale):
    n, d, stage, preset, opt, options = FEATURES[feature]
    options = dict(options)
    policy = get_precision(preset).with_(optim_state=options.pop("optim_state", None))
    if "offload" in options:  # ZeRO-Offload: the optimizer on the host (parallel/offload)
        from zerosim.parallel.offload import Offload

        options["parallelisms"] = (Offload("cpu", **options.pop("offload")),)
    if isinstance(scale, str):
        policy = policy.with_(loss_scale=scale, loss_scale_options=tuple(DYNAMIC[scale].items()))
    else:
        policy = policy.with_(loss_scale=scale)
    model = MLP(WIDTHS)
    cluster = Cluster(n, gpus_per_node=d) if d else Cluster(n)
    return ZeroEngine(model, cluster, stage, get_optimizer(opt, lr=1e-3), policy,
                      params=model.init_params(np.random.default_rng(3)),
                      shard_group=2 if stage in ("hsdp", "mics", "hpz") else None, **options)


def batches(engine, seed: int, overflow: bool = False):
    rng = np.random.default_rng(seed)
    k = engine.accumulation_steps
    out = []
    for _ in range(engine.cluster.world_size):
        micro = [(rng.standard_normal((2, WIDTHS[0])) * (3e4 if overflow else 1), rng.standard_normal((2, WIDTHS[-1])))
                 for _ in range(k)]
        out.append(micro if k > 1 else micro[0])
    return out


# Host rows that are not carried: "grads" is the offloaded reduced gradient, which every step overwrites before reading
# it — so between a refused or skipped step and the next it holds that step's gradient (compared after the next step
# only). The pinned 16-bit copy ("offload.bit16") is carried: each update writes it (zeros before the first).
NOT_CARRIED = {"grads": "between steps"}


def carried(engine, between_steps: bool = False) -> dict:
    """Everything a step hands on, as bits: the model states, the scaler, LoCo's errors, fp8 histories, DDP's flag,
    offload's host buffers (the offloaded states, DPU's pending params and step counter)."""
    state = {**snapshot(engine), "scaler": engine.scaler.state_dict(), "ddp_rebuilt": engine.ddp_rebuilt}
    skip = {n for n, when in NOT_CARRIED.items() if when == "always" or between_steps}
    host = [rank.ledger_of("host").live.items() for rank in engine.cluster.ranks]
    state["offload"] = [{n: bits(np.asarray(b.array)).tobytes() for n, b in rows if n not in skip} for rows in host]
    wire = engine.ctx.wire
    if wire is not None and wire.loco is not None:
        state["loco"] = {key: {r: tuple((bits(q.payload).tobytes(), bits(q.scales).tobytes()) for q in pair)
                               for r, pair in per.items()} for key, per in wire.loco.buffers.items()}
        state["loco counter"] = wire.loco.idx
    if wire is not None:
        state["fp8"] = {x: {k: (v.tobytes() if isinstance(v, np.ndarray) else v) for k, v in r.state_dict().items()}
                        for x, r in wire.recipes.items() if hasattr(r, "state_dict")}
    return state


def what_a_skip_does(twin, engine) -> None:
    """The frameworks' skip, applied to the twin by hand: the scaler's new state and the iteration counted (DeepSpeed's
    global_steps); LoCo's errors dropped (DeepSpeed's `_loco_err_buf_update(overflow=True)`: `del p.intra_ef_buf`);
    each unit's fp8 amax of the unchanged weights recorded, as the skipped step's forward recorded it (Transformer
    Engine's DelayedScaling); DDP's buckets rebuilt after that backward (torch's Reducer)."""
    from zerosim.parallel.data._carried import _drop_rows
    from zerosim.precision import loss_scaler_from_state_dict

    twin.scaler = loss_scaler_from_state_dict(engine.scaler.state_dict())
    twin.iteration += 1
    twin.ddp_rebuilt = engine.ddp_rebuilt
    wire = twin.ctx.wire
    if wire is not None and wire.loco is not None:
        wire.loco.buffers.clear()
        _drop_rows(twin.cluster.ranks)
    if wire is not None and wire.wire.fp8_all_gather is not None:
        master = twin.full_master()
        for x in range(len(twin.model.layers)):  # every unit, one without weights too (its amax is 0)
            a, b = twin.model.layer_window(x)
            amax = np.float32(np.max(np.abs(master[a:b]))) if b > a else np.float32(0)
            if wire.recipe(x).kind == "delayed":
                wire.recipe(x).record("forward", amax)
            wire.recipe(x).update("forward", amax)


def clean_steps(engine, steps: int = 2) -> None:
    for s in range(steps):
        engine.step(batches(engine, 10 + s))


@pytest.mark.parametrize("before", [0, 2])  # the overflow first (DDP's buckets not rebuilt yet), or after two steps
@pytest.mark.parametrize("scale", ["torch", "deepspeed"])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_after_a_skipped_step_the_next_good_step_equals_a_fresh_twins(feature, scale, before):
    engine, twin = build(feature, scale), build(feature, scale)
    clean_steps(engine, before), clean_steps(twin, before)
    assert same(carried(engine), carried(twin))  # the twins are twins
    t = engine.t
    engine.step(batches(engine, 99, overflow=True))
    assert engine.t == t, "the overflow was not skipped: the test's overflow batch must overflow"
    what_a_skip_does(twin, engine)
    # (LoCo's counter counted the skipped step's calls; with no errors left, the next call resets it, in both)
    assert same({**carried(engine, True), "loco counter": None}, {**carried(twin, True), "loco counter": None})
    good = batches(engine, 7)
    assert engine.step(good) == twin.step(good)
    assert engine.t == t + 1 and same(carried(engine), carried(twin))


@pytest.mark.bad_input("engine steps", unchanged=True)
@pytest.mark.parametrize("before", [0, 2])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_a_refused_step_leaves_no_trace_and_the_next_good_step_is_the_twins(feature, before):
    engine, twin = build(feature, STATIC), build(feature, STATIC)
    clean_steps(engine, before), clean_steps(twin, before)
    before = carried(engine, True)
    with pytest.raises(FloatingPointError, match="no parameter or optimizer state was changed"):
        engine.step(batches(engine, 99, overflow=True))
    assert same(carried(engine, True), before) and same(before, carried(twin, True))
    good = batches(engine, 7)
    assert engine.step(good) == twin.step(good)
    assert same(carried(engine), carried(twin))


def test_qgz_with_loco_trains_through_deepspeeds_first_overflows():
    """The issue's run: a dynamic scaler started high (here 2**24, initial_scale_power 24) overflows its first steps
    by design; with LoCo poisoned by them no step was ever taken (LossScaleAtMinimum)."""
    engine = build("qgZ with LoCo (DeepSpeed ZeRO++)", "deepspeed")
    engine.scaler = type(engine.scaler)(init_scale=2.0**24, hysteresis=1, min_scale=1.0)
    taken = []
    for s in range(20):
        try:
            engine.step(batches(engine, 20 + s))
        except LossScaleAtMinimum as e:  # main's end: the poisoned errors overflowed every later step
            pytest.fail(f"step {s + 1}: {e}")
        taken.append(engine.t)
    assert taken[-1] >= 5 and engine.scaler.scale < 2.0**24  # it backed off, then trained
    loco = engine.ctx.wire.loco
    assert loco.buffers and all(np.isfinite(q.scales).all() for per in loco.buffers.values()
                                for pair in per.values() for q in pair)


def test_a_scale_change_rescales_locos_errors_as_deepspeed_does():
    """A clean step after which the scale grows (growth_interval 1: 16 -> 32) multiplies both buffers' scales by
    new / old = 2 (`p.intra_ef_buf[1] *= scale`); a twin at the static scale 16 computes the same errors and keeps
    them as they are."""
    engine, twin = build("qgZ with LoCo (DeepSpeed ZeRO++)", "torch"), build("qgZ with LoCo (DeepSpeed ZeRO++)", 16.0)
    engine.scaler = type(engine.scaler)(init_scale=16.0, growth_interval=1)
    good = batches(engine, 1)
    assert engine.step(good) == twin.step(good)
    assert engine.scaler.scale == 32.0  # grew after the step
    grown, kept = engine.ctx.wire.loco.buffers, twin.ctx.wire.loco.buffers
    assert set(grown) == set(kept) and grown
    for key in kept:
        for r, pair in kept[key].items():
            for g, k in zip(grown[key][r], pair):
                assert bits(g.payload).tobytes() == bits(k.payload).tobytes()
                assert bits(g.scales).tobytes() == bits(k.scales * np.float32(2)).tobytes()
