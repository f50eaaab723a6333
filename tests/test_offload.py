"""Offload (zerosim/parallel/offload/): every stage with every placement equals its oracle bit for bit, DPU equals an
oracle applying the same stale update, the ledgers' device / host / NVMe bytes equal the hand formulas, and each step's
copies move the bytes the hand formulas say, on the link they say."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.models import make_regression
from zerosim.parallel.offload import PLACEMENTS, Offload, get_placement, offload_memory
from zerosim.precision import get_precision
from zerosim.reference import StaleReference

OPTIMIZERS = {  # DeepSpeed's CPU Adam (its tail makes the calls matter), and the seeds' Adam
    "cpu-adamw": ("adamw", dict(lr=1e-2, weight_decay=0.1, formula="deepspeed-cpu")),
    "cpu-adam": ("adam", dict(lr=1e-2, formula="deepspeed-cpu")),
    "adam": ("adam", dict(lr=1e-2)),
}


def _pair(widths, n, stage, placement, precision, opt, k, clip, loss_scale, seed, dpu=False, warmup=0, steps=3):
    rng = np.random.default_rng(seed)
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed + 1))
    data = make_regression(rng, n * k * steps, 3, widths)
    policy = get_precision(precision).with_(loss_scale=loss_scale)
    name, hyper = OPTIMIZERS[opt]
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer(name, **hyper), policy, params=params,
                        accumulation_steps=k, clip_grad=clip,
                        parallelisms=(Offload(placement=PLACEMENTS[placement], dpu=dpu, dpu_warmup=warmup),))
    ref = Reference(model, get_optimizer(name, **hyper), policy, world_size=n, params=params, accumulation_steps=k,
                    reduce_every_micro_step=stage >= 2, clip_grad=clip,
                    optimizer_calls="shards" if stage else "whole")
    ref = StaleReference(ref, warmup) if dpu else ref
    for s in range(steps):
        per_rank = [data[(s * n + r) * k:(s * n + r + 1) * k] for r in range(n)]
        batches = [b if k > 1 else b[0] for b in per_rank]
        assert engine.step(batches) == ref.step(batches)  # the same losses, per rank
    return engine, ref


def _same_as_oracle(engine, ref, stage):
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
    want16 = ref.compute_params()
    if stage < 3:
        assert np.array_equal(bits(engine.full_params()[: len(want16)]), bits(want16))
    else:
        assert np.array_equal(bits(engine.full_params()), bits(want16))


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    n=st.integers(1, 5),
    data=st.data(),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed", "fp32"]),
    opt=st.sampled_from(sorted(OPTIMIZERS)),
    k=st.integers(1, 2),
    clip=st.sampled_from([None, 0.5]),
    loss_scale=st.sampled_from([1.0, 2.0**10, "dynamic"]),
    seed=st.integers(0, 2**16),
)
def test_every_stage_with_offload_equals_its_oracle_bitwise(widths, n, data, precision, opt, k, clip, loss_scale,
                                                            seed):
    placement = data.draw(st.sampled_from(sorted(PLACEMENTS)), label="placement")
    stage = data.draw(st.sampled_from(PLACEMENTS[placement].stages), label="stage")
    loss_scale = loss_scale if precision == "fp16-mixed" else 1.0
    engine, ref = _pair(widths, n, stage, placement, precision, opt, k, clip, loss_scale, seed)
    _same_as_oracle(engine, ref, stage)


@pytest.mark.parametrize("stage", PLACEMENTS["optimizer-cpu"].stages)
def test_offload_changes_no_bit_against_the_same_run_on_the_device(stage):
    """The placement moves buffers and adds copies; the arithmetic is the plan's and the optimizer's."""
    runs = []
    for offload in ((), (Offload("cpu"),)):
        model = MLP([5, 7, 3])
        engine = ZeroEngine(model, Cluster(3), stage, get_optimizer("adamw", formula="deepspeed-cpu"), "bf16-mixed",
                            parallelisms=offload)
        for s in range(3):
            engine.step(make_regression(np.random.default_rng(s), 3, 4, [5, 7, 3]))
        runs.append((bits(engine.full_master()), bits(engine.full_params())))
    assert all(np.array_equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("stage", PLACEMENTS["optimizer-cpu"].stages)
@pytest.mark.parametrize("warmup", [0, 2])
def test_dpu_equals_an_oracle_applying_the_same_stale_update(stage, warmup):
    engine, ref = _pair([4, 6, 3], 3, stage, "optimizer-cpu", "bf16-mixed", "cpu-adamw", 1, None, 1.0, 11,
                        dpu=True, warmup=warmup, steps=5)
    _same_as_oracle(engine, ref, stage)


def test_dpu_is_really_stale():
    """Without the delay the same run ends elsewhere: DPU changes the trajectory, by design."""
    delayed, _ = _pair([4, 6, 3], 2, 2, "optimizer-cpu", "bf16-mixed", "adam", 1, None, 1.0, 5, dpu=True, steps=4)
    plain, _ = _pair([4, 6, 3], 2, 2, "optimizer-cpu", "bf16-mixed", "adam", 1, None, 1.0, 5, steps=4)
    assert not np.array_equal(bits(delayed.full_master()), bits(plain.full_master()))


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("precision", ["fp16-mixed", "bf16-mixed"])
@pytest.mark.parametrize("dpu", [False, True])
def test_the_pinned_16_bit_copy_holds_the_update_as_the_host_cast_it(stage, precision, dpu):
    """DeepSpeed 0.19.8 stage_1_and_2.py: the pinned 16-bit buffer is born zeros (`torch.full(..., fill_value=0.0)`);
    each step casts the updated fp32 partition into it (`bit16_partition_buffer.copy_(fp32_partition)`) and copies it
    to the device. So after every step it holds the master cast once to 16 bits (zerosim.precision.cast, round to
    nearest even), and without DPU the device's region holds the same bits (with DPU, from its first delayed step, the
    device has the step before's)."""
    from zerosim.precision import cast

    fmt = get_precision(precision).compute_format
    engine = ZeroEngine(MLP([7, 11, 5]), Cluster(3), stage, get_optimizer("adamw", formula="deepspeed-cpu"),
                        get_precision(precision).with_(loss_scale=1.0), parallelisms=(Offload("cpu", dpu=dpu),))
    pinned = [r.ledger_of("host").get("offload.bit16").array for r in engine.cluster.ranks]
    assert all(not bits(p).any() for p in pinned)  # zeros, not whatever memory held
    for step in range(3):
        engine.step(make_regression(np.random.default_rng(step), 3, 4, [7, 11, 5]))
        for rank, p in zip(engine.cluster.ranks, pinned):
            assert np.array_equal(bits(p), bits(cast(rank.master.array, fmt))), (step, rank.index)
            device = rank.params.array[engine.layout.own(rank.index)]
            assert np.array_equal(bits(device), bits(p)) != dpu, (step, rank.index)  # DPU: w_{t-1} on the device


def test_deepspeed_runs_its_offload_keys_by_stage():
    """What DeepSpeed 0.19.8 runs for offload_optimizer / offload_param at each stage (stage_1_and_2.py: any optimizer
    device but none is CPU offload, offload_param is not read; engine.py: no ZeRO optimizer, so no offload, at stage
    0), against the placements the keys name."""
    from zerosim.parallel.offload import deepspeed_placement

    table = [  # (stage, offload_optimizer.device, offload_param.device) -> the placement DeepSpeed runs, notes
        (1, "cpu", None, "optimizer-cpu", 0),
        (2, "nvme", None, "optimizer-cpu", 1),  # NVMe at stage 2: CPU offload, said in a note
        (2, "cpu", "cpu", "optimizer-cpu", 1),  # offload_param ignored at stage 2, said
        (1, "nvme", "nvme", "optimizer-cpu", 2),
        (3, "nvme", None, "optimizer-nvme", 0),
        (3, "cpu", "nvme", "params-nvme-optimizer-cpu", 0),
        (3, "nvme", "cpu", "params-cpu-optimizer-nvme", 0),
        (3, "none", "none", "none", 0),
        (0, None, None, "none", 0),
    ]
    for stage, opt, par, want, notes in table:
        got, said = deepspeed_placement(stage, opt, par)
        assert (got.name, len(said)) == (want, notes), (stage, opt, par)
    with pytest.raises(ValueError, match="at stage 0 nothing is offloaded"):
        deepspeed_placement(0, "cpu")
    with pytest.raises(ValueError, match="offload_param without offload_optimizer"):
        deepspeed_placement(3, None, "cpu")
    with pytest.raises(ValueError, match="'cpu', 'nvme' or None"):
        deepspeed_placement(2, "disk")


@pytest.mark.pinned
def test_cpu_adam_tails_make_the_optimizer_calls_matter():
    """DeepSpeed's CPU Adam steps each call's last (n mod 16) elements with other roundings: an oracle calling it once
    over the whole vector differs from stage 2's per-shard calls, where the shards do not end on 16."""
    model = MLP([9, 13, 3])  # 172 params: 3 shards of 58, not a multiple of 16
    params = model.init_params(np.random.default_rng(1))
    data = make_regression(np.random.default_rng(0), 3 * 4, 3, [9, 13, 3])
    opt = lambda: get_optimizer("adam", lr=1e-2, formula="deepspeed-cpu")  # noqa: E731
    engine = ZeroEngine(model, Cluster(3), 2, opt(), "fp32", params=params, parallelisms=(Offload("cpu"),))
    whole = Reference(model, opt(), "fp32", world_size=3, params=params, reduce_every_micro_step=True)
    shards = Reference(model, opt(), "fp32", world_size=3, params=params, reduce_every_micro_step=True,
                       optimizer_calls="shards")
    differed = []  # the tails' roundings part the two oracles at some steps; they may meet again (portable: step 4)
    for s in range(4):
        b = data[3 * s:3 * s + 3]
        engine.step(b), whole.step(b), shards.step(b)
        assert np.array_equal(bits(engine.full_master()), bits(shards.master()))
        differed.append(not np.array_equal(bits(shards.master()), bits(whole.master())))
    assert any(differed), differed


# -- memory: the ledgers against the hand formulas ------------------------------------------------------------------

# Every configuration the frameworks run: a placement at each of its stages, with DPU where the optimizer is offloaded
# (DPU delays the CPU's update). The others are refused, once each, below.
RUNS = [(name, stage, dpu) for name, p in sorted(PLACEMENTS.items()) for stage in p.stages
        for dpu in ((False, True) if p.offloads_optimizer else (False,))]
REFUSED = [(name, stage, dpu) for name in sorted(PLACEMENTS) for stage in (0, 1, 2, 3) for dpu in (False, True)
           if (name, stage, dpu) not in RUNS]


def test_every_other_configuration_is_refused_before_any_state_is_born():
    """The configurations RUNS leaves out: a placement at a stage its framework does not offload at (DeepSpeed offloads
    only through its ZeRO optimizers, stages 1-3; offload_param and NVMe at stage 3; FSDP2 is stage 3), or DPU with
    nothing offloaded to delay. Each is refused by name, and the cluster's ledgers stay empty."""
    stages = {  # read from the frameworks, not from PLACEMENTS: DeepSpeed 0.19.8 offloads only in its ZeRO optimizers
        "none": (0, 1, 2, 3),  # (engine.py _configure_optimizer: stage > 0); its NVMe swappers and offload_param are
        "optimizer-cpu": (1, 2, 3),  # stage3.py's; FSDP2's fully_shard shards the params: stage 3
        **{name: (3,) for name in ("optimizer-nvme", "params-cpu", "params-nvme", "params-cpu-optimizer-nvme",
                                   "params-nvme-optimizer-cpu", "fsdp2-cpu")},
    }
    assert {name: p.stages for name, p in PLACEMENTS.items()} == stages
    assert len(RUNS) == 4 + 3 * 2 + 6 * 2 and len(RUNS) + len(REFUSED) == len(PLACEMENTS) * 4 * 2  # DPU: offloaded only
    for name, stage, dpu in REFUSED:
        cluster = Cluster(3)
        why = "needs the optimizer offloaded" if stage in PLACEMENTS[name].stages else f"not ZeRO-{stage}"
        with pytest.raises(ValueError, match=why):
            ZeroEngine(MLP([7, 11, 5]), cluster, stage, get_optimizer("adam"), "bf16-mixed",
                       parallelisms=(Offload(placement=PLACEMENTS[name], dpu=dpu),))
        assert all(r.ledger_of(t).peak() == 0 for r in cluster.ranks for t in ("device", "host", "nvme"))


@pytest.mark.parametrize("placement, stage, dpu", RUNS)
def test_ledgers_hold_what_the_hand_formulas_say_on_every_tier(placement, stage, dpu):
    p = PLACEMENTS[placement]
    model = MLP([7, 11, 5])  # 148 params: 3 ranks hold 50 each (padded to 150)
    engine = ZeroEngine(model, Cluster(3), stage, get_optimizer("adam", formula="deepspeed-cpu"), "bf16-mixed",
                        parallelisms=(Offload(placement=p, dpu=dpu),))
    engine.step(make_regression(np.random.default_rng(0), 3, 4, [7, 11, 5]))
    want = offload_memory(model.num_params, 3, stage, p, dpu=dpu)
    for rank in engine.cluster.ranks:
        for tier in ("device", "host", "nvme"):
            assert rank.ledger_of(tier).by_kind() == want.tiers[tier], (tier, rank.index)


def test_zero_offload_stage2_by_hand_at_seven_billion_on_eight_ranks():
    """Ψ = 7e9, N = 8 (s = 875e6), Adam, 16-bit: the device keeps 2Ψ = 14 GB of params; the host 2s grads + 4s master
    + 8s states + 2s pinned 16-bit copy = 16s = 14 GB; nothing on NVMe. ZeRO-Infinity (params-nvme, stage 3) keeps
    nothing on the device and 2s + 4s + 8s = 14s = 12.25 GB on NVMe, the reduced 16-bit grads (2s) on the host."""
    psi, s = 7_000_000_000, 875_000_000
    off = offload_memory(psi, 8, 2, get_placement("cpu"))
    assert off.total("device") == 2 * psi and off.total("host") == 16 * s and off.total("nvme") == 0
    inf = offload_memory(psi, 8, 3, get_placement("nvme", "nvme"))
    assert inf.total("device") == 0 and inf.total("nvme") == 14 * s and inf.total("host") == 2 * s


@pytest.mark.slow
def test_the_meta_backend_accounts_offload_at_175b():
    """GPT-3 175B's shapes on 64 ranks, stage 3 with params and optimizer on NVMe: the ledgers' tiers at rest equal the
    hand formulas, with no array allocated."""
    from zerosim.analysis.costs import get_preset
    from zerosim.models import MetaModel

    model = MetaModel.from_preset(get_preset("gpt3-175b")) if hasattr(MetaModel, "from_preset") else None
    if model is None:
        pytest.skip("no MetaModel.from_preset")
    cluster = Cluster(64, backend="meta")
    p = get_placement("nvme", "nvme")
    engine = ZeroEngine(model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(Offload(placement=p),))
    engine.step(model.batches(cluster))
    want = offload_memory(model.num_params, 64, 3, p)
    rank = cluster.ranks[0]
    for tier in ("device", "host", "nvme"):
        assert rank.ledger_of(tier).by_kind() == want.tiers[tier], tier


# -- the copies: bytes per link per step against hand formulas ------------------------------------------------------

def _link_bytes(engine) -> dict:
    trace = engine.cluster.trace
    out = {}
    for e in trace.events:
        if e.collective in ("d2h", "h2d", "nvme_read", "nvme_write"):
            out[e.collective] = out.get(e.collective, 0) + e.bytes
    return out


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_offload_moves_6_bytes_a_region_element_over_pcie(stage):
    """One step of ZeRO-Offload (K = 1), per rank: the fp32 gradient of its region to the host (4 B an element) and the
    updated 16-bit region back (2 B): 6s bytes over PCIe, none on NVMe (stage_1_and_2.py, _transfers.py). Stage 2 copies
    each unit's reduced shard as backward makes it, so the padding (N s - P elements) never travels: 4P in all."""
    model, n = MLP([7, 11, 5]), 3
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer("adam"), "bf16-mixed", parallelisms=(Offload("cpu"),))
    engine.step(make_regression(np.random.default_rng(0), n, 4, [7, 11, 5]))
    s, P = engine.layout.shard_size, model.num_params
    assert _link_bytes(engine) == {"d2h": 4 * (n * s if stage == 1 else P), "h2d": n * 2 * s}


def test_zero_infinity_moves_params_per_use_and_the_optimizer_both_ways_over_nvme():
    """Stage 3, params and optimizer on NVMe, no checkpointing, Adam: each unit's 16-bit shard read from NVMe and copied
    to the device for its forward and its backward (2 x 2 B an element over each of NVMe and PCIe), each unit's fp32
    gradient shard to the host (4 B), the optimizer's region swapped in and out (2 x (4 + 8)s), the updated 16-bit
    shard written back (2s). Unit copies move the P real elements; region copies the N s padded ones."""
    model, n = MLP([7, 11, 5]), 3
    engine = ZeroEngine(model, Cluster(n), 3, get_optimizer("adam"), "bf16-mixed",
                        parallelisms=(Offload("nvme", "nvme"),))
    engine.step(make_regression(np.random.default_rng(0), n, 4, [7, 11, 5]))
    s, P = engine.layout.shard_size, model.num_params
    assert _link_bytes(engine) == {"nvme_read": 2 * 2 * P + n * 12 * s, "h2d": 2 * 2 * P,
                                   "d2h": 4 * P, "nvme_write": n * (12 * s + 2 * s)}


def test_the_cpu_optimizer_step_waits_for_the_gradient_copy_and_runs_on_the_host():
    from zerosim.cluster import Call, OptimizerStep

    engine = ZeroEngine(MLP([4, 6, 3]), Cluster(2), 1, get_optimizer("adam"), "bf16-mixed",
                        parallelisms=(Offload("cpu"),))
    engine.step(make_regression(np.random.default_rng(0), 2, 4, [4, 6, 3]))
    log = engine.cluster.trace.log
    d2h = [e.call for e in log if isinstance(e, Call) and e.collective == "d2h"]
    steps = [e for e in log if isinstance(e, OptimizerStep)]
    assert steps and all(s.where == "host" and set(d2h) <= set(s.needs) for s in steps)


def test_bad_offload_configurations_are_refused_by_name():
    with pytest.raises(ValueError, match="stage 3"):
        ZeroEngine(MLP([3, 2]), Cluster(2), 2, get_optimizer("adam"), parallelisms=(Offload("cpu", "cpu"),))
    with pytest.raises(ValueError, match="'cpu', 'nvme' or None"):
        Offload("gpu")
    with pytest.raises(ValueError, match="offload_optimizer"):
        Offload(None, "cpu")
    with pytest.raises(ValueError, match="needs the optimizer offloaded"):
        ZeroEngine(MLP([3, 2]), Cluster(2), 2, get_optimizer("adam"),
                   parallelisms=(Offload(placement=PLACEMENTS["none"], dpu=True),))


# -- the timeline: the CPU step exposed without DPU, hidden with it (while the GPU step is the longer) --------------

def _offloaded_timeline(dpu: bool, host_bandwidth: float):
    from zerosim.analysis.timeline import Hardware, simulate

    widths = [64, 256, 64]
    engine = ZeroEngine(MLP(widths), Cluster(2), 2, get_optimizer("adam"), "bf16-mixed",
                        parallelisms=(Offload("cpu", dpu=dpu),))
    for s in range(3):
        engine.step(make_regression(np.random.default_rng(s), 2, 512, widths))
    return engine, simulate(engine.cluster.trace, Hardware("a100", "nvlink4", "bf16", pcie="pcie3",
                                                           host_bandwidth=host_bandwidth))


def test_the_timeline_puts_copies_on_pcie_and_the_optimizer_on_the_cpu():
    engine, tl = _offloaded_timeline(False, 25e9)
    s = engine.layout.shard_size
    pcie = tl.track(0, "pcie")
    assert [iv.event.collective for iv in pcie[:3]] == ["d2h", "d2h", "h2d"]  # two units' grads, then the params
    assert len(tl.track(0, "cpu")) == 3 and not tl.track(0, "nvme")  # one CPU step per step
    # bytes per link per step: 4P down (each unit's fp32 gradient shard), 2s x N up (the 16-bit region)
    step1 = [iv.event for iv in pcie if iv.event.step == 1]
    assert sum(tl.call_bytes[e.call] for e in step1 if e.collective == "h2d") == 2 * s  # the busiest rank's
    assert sum(e.bytes for e in engine.cluster.trace.events if e.collective == "d2h") == 3 * 4 * engine.model.num_params


def test_without_dpu_the_cpu_step_is_exposed_and_with_dpu_it_hides_until_it_is_the_longer():
    """The step time without DPU contains the CPU step (DeepSpeed's synchronous step()); with DPU the next step runs on
    the pending params, so a CPU step shorter than the GPU's work hides, and a longer one still sets the pace."""
    _, fast_cpu = _offloaded_timeline(False, 1e12)
    _, plain = _offloaded_timeline(False, 1e9)
    _, delayed = _offloaded_timeline(True, 1e9)
    took = [iv.end - iv.start for iv in (plain.track(0, "cpu")[-1], fast_cpu.track(0, "cpu")[-1])]
    # exposed: the CPU step adds to the step (what the fast CPU took aside); measured 0.99 of it: the fast run's
    # critical path has a few microseconds of copies the slow run overlaps with its CPU step
    assert plain.step_time - fast_cpu.step_time >= 0.95 * (took[0] - took[1])
    took = took[0]
    assert delayed.step_time < plain.step_time  # DPU hides what the GPU's own step covers
    assert delayed.step_time >= 0.99 * took  # but the CPU, slower than the GPU here, still sets the pace


def test_zero_offload_paper_13b_on_one_32gb_v100():
    """The ZeRO-Offload paper's headline: a 13B model trained on one 32 GB V100. One rank, stage 2 (N = 1: nothing to
    shard), Adam, fp16: on the device only the fp16 params, 2Ψ = 26 GB, under the V100's 32 GB (nvidia-smi: 32,510 MiB)
    with 8 GB left for activations and buffers; the host holds (2 + 4 + 8 + 2)Ψ = 208 GB (a DGX-2 has 1.5 TB).
    Without offload the same rank needs 16Ψ = 208 GB on the device: it does not fit."""
    psi, v100 = 13_000_000_000, 32_510 * 2**20
    off = offload_memory(psi, 1, 2, get_placement("cpu"))
    assert off.total("device") == 2 * psi < v100 and off.total("host") == 16 * psi
    on_device = offload_memory(psi, 1, 2, PLACEMENTS["none"])
    assert on_device.total("device") == 16 * psi > v100
