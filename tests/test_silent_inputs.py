"""Issue 56, item 3: every flag and field changes the result or is refused in a line naming it; non-finite or absurd
rates are refused where they are born; the manifest is checksummed (tests/test_checkpoint_safety.py); a resume on
other data is refused.

Each row says what main did with the input (accepted it, rc 0, and ignored it, or printed a 300-digit time).
"""

import math
import os

import numpy as np
import pytest
from helpers import files_of, run_cli

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import Efficiency, Link, parse_efficiency
from zerosim.analysis.timeline import Device, Hardware
from zerosim.analysis.timeline._cost import compute_time
from zerosim.models import GPT
from zerosim.optim import Muon
from zerosim.parallel.offload import Offload
from zerosim.parallel.tensor import TensorParallel
from zerosim.train import TrainConfig

MEM = ("memory", "--model", "gpt2-small", "--ranks", "8")
TL = ("timeline", "--model", "gpt2-small", "--ranks", "8")
PLAN = ("plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "128", "--global-batch",
        "16")
TRAIN = ("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--print-every", "100")


def refused(argv, *words):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out[-300:], err)
    for w in words:
        assert w in err, err
    return err


HOST_FLAGS = [("--host", "dgx-a100"), ("--host-memory", "100"), ("--host-nvme", "5"), ("--pcie", "pcie4"),
              ("--host-bandwidth", "10")]


@pytest.mark.bad_input("offload flags")
@pytest.mark.parametrize("command, flag", [(c, f) for c in (MEM, TL, PLAN) for f in HOST_FLAGS
                                           if c != MEM or f[0] not in ("--pcie", "--host-bandwidth")],  # memory: none
                         ids=lambda x: x[0])
def test_host_flags_without_offload_are_refused(command, flag):
    # was: rc 0, the flag read by nothing (memory has no --pcie or --host-bandwidth: argparse refuses them)
    refused((*command, *flag), f"{flag[0]} describes the host an offloaded run", "add --offload-optimizer")


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("optimizer", ["muon", "adam"])
def test_muon_sharding_at_stage_0_is_refused(optimizer):
    # was (muon): rc 0, the flag ignored: at stage 0 every rank holds whole matrices
    refused((*TRAIN, "--stage", "0", "--optimizer", optimizer, "--muon-sharding", "owner"), "--muon-sharding owner",
            "stage 0")


@pytest.mark.bad_input("optimizers")
def test_a_muon_with_a_sharding_at_stage_0_is_refused_by_the_engine():
    with pytest.raises(ValueError, match=r"sharding='owner' \(--muon-sharding\) says how ZeRO stages 1-3"):
        ZeroEngine(MLP([4, 6, 3]), Cluster(2), 0, Muon(sharding="owner"), "fp32")


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("command", [TL, PLAN], ids=["timeline", "plan"])
@pytest.mark.parametrize("flag, value, words", [
    ("--efficiency", "1e-300", "--efficiency 1e-300: a fraction of the datasheet peaks must lie in [0.001, 1]"),
    ("--efficiency", "nan", "--efficiency nan"),
    ("--efficiency", "eager:gemm=1e-9", "gemm=1e-9 must lie in [0.001, 1]"),
    ("--link-bandwidth", "1e-300", "--link-bandwidth must lie between 0.001 and 1e+06 GB/s"),
    ("--link-bandwidth", "1e300", "--link-bandwidth must lie between"),
    ("--link-bandwidth", "nan", "--link-bandwidth must lie between"),
    ("--link-bandwidth", "inf", "--link-bandwidth must lie between"),
    ("--link-alpha", "1e300", "--link-alpha must lie between 0 and 1e+06 µs"),
    ("--call-latency", "inf", "--call-latency must lie between"),
])
def test_rates_below_a_physical_floor_or_not_finite_are_refused(command, flag, value, words):
    # was: --efficiency 1e-300 and --link-bandwidth 1e-300 printed a 300-digit step time, rc 0
    refused((*command, flag, value), words)


@pytest.mark.bad_input("command line")
def test_the_floors_themselves_are_accepted():
    for flag, value in (("--efficiency", "0.001"), ("--link-bandwidth", "0.001"), ("--link-alpha", "0")):
        code, out, _ = run_cli(*TL, flag, value)
        assert code == 0 and "step time" in out


@pytest.mark.bad_input("cost formulas")
@pytest.mark.parametrize("make, words", [
    (lambda: compute_time(1e12, 1e9, 0, 1e12), "compute_time needs a rate"),  # was: ZeroDivisionError
    (lambda: compute_time(1e12, 1e9, 1e12, math.nan), "compute_time needs a rate and an HBM bandwidth"),
    # NaN refused; inf is an ideal link (no time for any bytes), which a test of compute alone builds
    (lambda: Link("x", math.nan, 0.0, ""), "the bandwidth .bytes/s. of link 'x' must be a number > 0"),
    (lambda: Link("x", 0.0, 0.0, ""), "the bandwidth"),
    (lambda: Link("x", 1e9, math.inf, ""), "the alpha .s. of link 'x' must be a finite number >= 0"),
    (lambda: Link("x", 1e9, -1e-6, ""), "the alpha"),
    (lambda: Device("d", 1.0, 1.0, math.nan, None, 1.0, ""), "the fp16 rate of device 'd'"),
    (lambda: Device("d", 1.0, 1.0, 1.0, 0.0, 1.0, ""), "the fp8 rate of device 'd'"),
    (lambda: Hardware(host_bandwidth=math.nan), "host_bandwidth"),
    (lambda: Efficiency("x", flat=math.inf), "efficiency's flat fraction"),
    (lambda: Efficiency("x", framework=0.0), "efficiency's framework factor"),
    (lambda: Efficiency("x", overrides=(("gemm", math.nan),)), "efficiency's gemm"),
    (lambda: parse_efficiency("1e-300"), "must lie in"),
])
def test_non_finite_or_zero_rates_are_refused_where_they_are_born(make, words):
    with pytest.raises(ValueError, match=words):
        make()


@pytest.mark.bad_input("optimizers")
@pytest.mark.parametrize("coefficients", [(math.nan, 0, 0), (1.5, math.inf, 0.0), ("3", 0, 0), (True, 0, 0)])
def test_muon_coefficients_that_are_not_finite_numbers_are_refused(coefficients):
    # was: Muon(ns_coefficients=(nan, 0, 0)) accepted; its first step turned every master NaN
    with pytest.raises(ValueError, match="ns_coefficients must be three finite numbers"):
        Muon(ns_coefficients=coefficients)


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("make, words", [
    (lambda: Offload(dpu_warmup=5), "dpu_warmup=5 counts the steps taken before DPU's delay starts"),  # was: accepted
    (lambda: Offload(dpu="yes"), "dpu must be True or False, got 'yes'"),
    (lambda: Offload(fsdp2="no"), "fsdp2 must be True or False, got 'no'"),  # was: bool("no") -> FSDP2's policy
    (lambda: TensorParallel(GPT(8, 16, 2, 1, 6), 2, sequence_parallel="yes"),
     "sequence_parallel must be True or False, got 'yes'"),  # was: bool("yes") -> on
    (lambda: TensorParallel(GPT(8, 16, 2, 1, 6), 2, async_tp=1), "async_tp must be True or False"),
    (lambda: TrainConfig(model="gpt", tp=2, sp="yes"), "sp must be True or False, got 'yes'"),
])
def test_options_that_would_change_nothing_or_are_not_booleans_are_refused(make, words):
    with pytest.raises(ValueError, match=words):
        make()


@pytest.mark.bad_input("offload flags")
@pytest.mark.parametrize("flags, words", [
    (("--offload-policy", "cpu", "--reduction", "deepspeed-zero3"), "offload 'fsdp2-cpu' is FSDP2's"),
    (("--offload-optimizer", "cpu", "--reduction", "fsdp2"), "offload 'optimizer-cpu' is DeepSpeed's"),
])
def test_one_frameworks_offload_under_the_others_recipe_is_refused(flags, words):
    # was: both ran, rc 0 (DeepSpeed offloads only inside its ZeRO optimizers; FSDP2's policy is fully_shard's)
    err = refused((*TRAIN, "--stage", "3", *flags), words, "neither framework runs the other's offload")
    assert "--offload" in err and "fsdp2" in err and "deepspeed" in err


@pytest.mark.bad_input("engine arguments")
def test_the_engine_refuses_the_mismatch_before_any_state_is_born():
    cluster = Cluster(2)
    with pytest.raises(ValueError, match="offload 'fsdp2-cpu' is FSDP2's"):
        ZeroEngine(MLP([4, 6, 3]), cluster, 3, get_optimizer("adam"), "bf16-mixed", recipe="deepspeed-zero3",
                   parallelisms=(Offload(fsdp2=True),))
    assert all(not r.ledger.live for r in cluster.ranks)
    for recipe in ("seeds", "fsdp2"):  # the seeds' own protocol takes either offload; FSDP2's its own
        ZeroEngine(MLP([4, 6, 3]), Cluster(2), 3, get_optimizer("adam"), "bf16-mixed", recipe=recipe,
                   parallelisms=(Offload(fsdp2=True),))


@pytest.mark.bad_input("offload flags")
def test_fsdp2s_policy_beside_a_deepspeed_config_is_refused(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}')
    refused((*MEM, "--ds-config", ds, "--offload-policy", "cpu"), "--offload-policy cpu is FSDP2's", "--ds-config")


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resume") / "A"
    assert run_cli(*TRAIN, "--save", folder, "--save-every", "1")[0] == 0
    return folder


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
@pytest.mark.parametrize("flag, value, saved", [("--seed", "7", "0"), ("--batch", "8", "16"),
                                                ("--task", "classification", "'regression'")])
def test_a_resume_on_other_data_is_refused(saved_run, flag, value, saved):
    # was: --resume A --seed 7 went on as the same run (same run id, same folder) on seed 7's data
    before = files_of(saved_run)
    refused(("train", "--widths", "4,6,3", "--steps", "3", "--resume", saved_run, "--save", saved_run, flag, value),
            f"({flag} {value})", f"trained with {flag[2:]} {saved}", "its manifest's data")
    assert files_of(saved_run) == before


@pytest.mark.bad_input("checkpoint commands")
def test_a_resume_that_names_the_saved_data_or_none_goes_on(saved_run, tmp_path):
    os.symlink(saved_run, tmp_path / "A")  # (a link to the folder itself is the user's name for it: followed)
    for extra in ((), ("--seed", "0", "--batch", "16")):
        code, out, _ = run_cli("train", "--widths", "4,6,3", "--steps", "3", "--resume", tmp_path / "A", "--json",
                               *extra)
        assert code == 0 and '"first_step": 3' in out
    with pytest.raises(ValueError, match="seed 7 .--seed 7.: the checkpoint in"):
        TrainConfig(widths=(4, 6, 3), steps=3, resume=str(saved_run), seed=7)
    assert TrainConfig(widths=(4, 6, 3), steps=3, resume=str(saved_run)).seed == 0
    assert np.isfinite(TrainConfig().lr)


SWEEP = ("timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "8,16")
STRATEGY_SWEEP = (*SWEEP, "--strategy", "full_shard,hsdp", "--gpus-per-node", "8")


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("sweep", [SWEEP, STRATEGY_SWEEP], ids=["stages", "strategies"])
@pytest.mark.parametrize("flag, words", [
    # was: rc 0 and the same table, byte for byte, as without the flag (a walk adding each flag to both sweeps)
    (("--link", "pcie5"), "--link: its links are its own (NVLink within a node, InfiniBand NDR across)"),
    (("--inter-link", "ib_hdr"), "--inter-link: its links"), (("--link-bandwidth", "100"), "--link-bandwidth: its"),
    (("--link-alpha", "10"), "--link-alpha: its"), (("--inter-link-bandwidth", "10"), "--inter-link-bandwidth: its"),
    (("--inter-link-alpha", "30"), "--inter-link-alpha: its"), (("--call-latency", "50"), "--call-latency: its"),
    (("--optimizer", "sgd"), "--optimizer: it keeps Adam's states"),
    (("--zero-quantized-weights",), "--zero-quantized-weights: its collectives carry the recipe's own formats"),
    (("--zero-quantized-gradients",), "--zero-quantized-gradients: its"), (("--fp8-all-gather",), "--fp8-all-gather"),
    (("--accumulation-steps", "2"), "--accumulation-steps: each cell is one micro-batch"),
    (("--offload-optimizer", "cpu"), "--offload-optimizer: nothing is offloaded"),
], ids=lambda x: x[0] if isinstance(x, tuple) else "")
def test_flags_a_sweep_does_not_read_are_refused(sweep, flag, words):
    refused((*sweep, *flag), "--sweep does not read " + flag[0], words, "drop it, or time one step without --sweep")


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("flag, words", [
    (("--stage", "2"), "--stage: it runs stages 1, 2 and 3 itself"),  # was: rc 0, the same table
    (("--gpus-per-node", "4"), "--gpus-per-node: every N runs on one link; nodes are --strategy's sweep"),
])
def test_flags_the_stages_sweep_does_not_read_are_refused(flag, words):
    refused((*SWEEP, *flag), words)
    refused((*SWEEP, *flag, "--optimizer", "sgd"), "--sweep does not read --optimizer, " + flag[0], "drop them")


def test_what_the_sweeps_read_still_changes_them():
    # the flags left to a sweep each change its table (the walk's other half): the refusals took nothing it reads
    base = {name: run_cli(*argv, "--json")[1] for name, argv in (("stages", SWEEP), ("strategies", STRATEGY_SWEEP))}
    for flag in (("--comm", "fsdp"), ("--precision", "bf16-mixed"), ("--efficiency", "peak"), ("--tokens", "4096"),
                 ("--gpu", "a100-80gb")):
        for name, argv in (("stages", SWEEP), ("strategies", STRATEGY_SWEEP)):
            code, out, err = run_cli(*argv, *flag, "--json")
            assert code == 0 and out != base[name], (name, flag, err)


# ------------------------------------------------------------------ found by probing every flag (issue 56, item 7)
@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv, words", [
    # was: rc 0 and fp32 masters all NaN (1/S overflows fp32)
    (("replay", "--loss-scale", "1e-300"), "scale 1e-300 is so small that its fp32 reciprocal"),
    ((*TRAIN, "--tp", "0"), "--tp must be a positive integer"),  # was: rc 0, run as --tp 1
    ((*MEM, "--layers", "4"), "--layers sizes a --params model"),  # was: rc 0, the preset's own layers
    ((*TL, "--layers", "4"), "--layers sizes a --params model"),
    ((*TL, "--sweep-ranks", "0"), "--sweep-ranks lists the rank counts of --sweep"),  # was: rc 0, one step on --ranks
    ((*TL, "--tokens", "99999999999999999999"), "--tokens 99,999,999,999,999,999,999 is more than 2,147,483,647"),
    # was: rc 0 and the same output: the reserve is read only by the verdict against a --gpu (2026-11-28 walk)
    ((*MEM, "--reserve", "0.3"), "--reserve estimates the allocator's reserve in the verdict against a GPU, and "
     "without --gpu there is none: add --gpu"),
    ((*TL, "--reserve", "0.3"), "without --gpu there is none"),
    # was: rc 0, the flag dropped (lint's measured runs set their own steps and write nothing): no file at --save
    (("lint", "--widths", "4,6,3", "--ranks", "2", "--save", "SCRATCH"), "--save: lint trains no run of its own"),
    (("lint", "--trace-log", "SCRATCH.log"), "--trace-log: lint trains no run of its own to save, log or print"),
    (("lint", "--steps", "7"), "--steps: lint trains no run"), (("lint", "--overwrite"), "--overwrite: lint"),
    (("lint", "--save-every", "2", "--print-every", "3"), "--print-every, --save-every: lint trains no run"),
    # was: rc 0, a flag of value 0 taken for one not given (0 == False: zerosim/cli/given.py), 2026-11-29 walk
    (("lint", "--steps", "0"), "--steps: lint trains no run"), (("lint", "--save-every", "0"), "--save-every: lint"),
    ((*SWEEP, "--link-alpha", "0"), "--sweep does not read --link-alpha"),
    # was: rc 0, an empty list taken for the flag left out (plan's --micro-batches, --pp-schedule, --virtual-stages)
    ((*PLAN, "--micro-batches="), "--micro-batches must be comma-separated integers, got ''"),
    ((*PLAN, "--pp-schedule="), "--pp-schedule says in which order a pipeline runs its micro-batches: give --pp"),
    ((*PLAN, "--pp", "2", "--pp-schedule="), "--pp-schedule takes comma-separated schedules of"),
    ((*PLAN, "--virtual-stages="), "--virtual-stages says how many stages each pipeline rank holds: give --pp"),
])
def test_flags_found_silent_by_probing_are_refused(argv, words, tmp_path):
    refused([str(tmp_path / a) if a.startswith("SCRATCH") else a for a in argv], words)
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("command", [MEM, TL], ids=["memory", "timeline"])
def test_the_reserve_moves_the_verdict_against_a_gpu(command):
    # the other half of the --reserve rule: with a --gpu it is read (the verdict's estimates grow with it)
    outs = [run_cli(*command, "--gpu", "h100-80gb", *extra, "--json") for extra in ((), ("--reserve", "0.3"))]
    assert all(code == 0 for code, _, _ in outs) and outs[0][1] != outs[1][1]


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("field, value", [
    ("widths", 1.5), ("widths", (4, 0, 3)), ("stage", []), ("stage", 1.5), ("lr", math.nan), ("lr", -1.0),
    ("clip_grad", -1.0), ("clip_grad", math.inf), ("kv_heads", 1.5), ("attention", "fast"), ("backend", "gpu"),
    ("muon_sharding", "everyone"), ("optimizer", []), ("precision", []), ("save", 3), ("resume", 3.5),
])
def test_a_train_config_field_is_checked_where_it_is_born(field, value):
    # was: TrainConfig(...) accepted each; a run failed later (a raw error, or none: widths=(4, 0, 3))
    with pytest.raises(ValueError, match=f"^{field}|{field} must be|unknown|ZeRO stage must be"):
        TrainConfig(**{field: value})


@pytest.mark.bad_input("optimizers")
def test_newton_schulz_steps_are_bounded():
    with pytest.raises(ValueError, match=r"ns_steps must be an integer in \[0, 1000\], got 10{30}"):
        Muon(ns_steps=10**30)  # was: accepted; its first step never ended
    assert Muon(ns_steps=1000).ns_steps == 1000
