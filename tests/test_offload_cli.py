"""Offload where users look: `zerosim memory`, `timeline`, `plan` and `train` with --offload-optimizer /
--offload-params (DeepSpeed's keys), --offload-policy cpu (FSDP2's CPUOffloadPolicy) and --ds-config's offload keys
(cli/offload_args.py):
every tier the ledgers hold equal to its hand formula, the bytes each link carries per step, the planner's offload rows,
and the refusals, each naming what is wrong."""

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from zerosim.cli.main import main


def _json(*argv) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


def _refused(*argv) -> str:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert main(list(argv)) == 2
    return err.getvalue()


CONFIGS = [  # (flags, the placement at each stage measured)
    (("--offload-optimizer", "cpu"), {1: "optimizer-cpu", 2: "optimizer-cpu", 3: "optimizer-cpu"}),
    (("--offload-optimizer", "nvme"), {1: "optimizer-cpu", 2: "optimizer-cpu", 3: "optimizer-nvme"}),
    (("--offload-optimizer", "cpu", "--offload-params", "nvme"),
     {1: "optimizer-cpu", 2: "optimizer-cpu", 3: "params-nvme-optimizer-cpu"}),
    (("--offload-optimizer", "nvme", "--offload-params", "nvme", "--dpu"),
     {1: "optimizer-cpu", 2: "optimizer-cpu", 3: "params-nvme"}),
    (("--offload-policy", "cpu"), {3: "fsdp2-cpu"}),
]


@pytest.mark.parametrize("flags, placements", CONFIGS)
@pytest.mark.parametrize("precision", ["bf16-mixed", "fp32"])
def test_memory_measures_every_tier_equal_to_its_hand_formula(flags, placements, precision):
    """GPT-3 175B's shapes on 64 ranks (the meta backend): at each stage DeepSpeed offloads at, the device, host and
    NVMe ledgers at rest equal parallel/offload's offload_memory kind by kind; stage 0 is not measured (DeepSpeed
    offloads through its ZeRO optimizers only)."""
    r = _json("memory", "--model", "gpt3-175b", "--ranks", "64", "--precision", precision, *flags)
    assert {row["stage"]: row["offload"]["placement"] for row in r["stages"]} == placements
    for row in r["stages"]:
        hand = row["offload"]["formula"]
        assert row["resting"] == hand["device"] == row["formula"], row["stage"]
        assert row["host"]["resting"] == hand["host"] and row["nvme"]["resting"] == hand["nvme"], row["stage"]
        assert row["ledger_total"] == row["formula_total"]
    assert r["offload"]["dpu"] == ("--dpu" in flags)


def test_a_deepspeed_configs_offload_is_what_memory_measures(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}))
    r = _json("memory", "--model", "llama-2-7b", "--ranks", "8", "--ds-config", str(path))
    (row,) = r["stages"]
    assert (row["stage"], row["offload"]["placement"]) == (3, "params-cpu") and row["resting"] == {}
    keys = {k["key"]: status for status, ks in r["ds_config"]["keys"].items() for k in ks}
    assert keys["zero_optimization.offload_optimizer.device"] == "modelled"
    assert "--offload-optimizer" in _refused("memory", "--model", "llama-2-7b", "--ranks", "8", "--ds-config",
                                             str(path), "--offload-optimizer", "cpu")


@pytest.mark.bad_input("offload flags")
@pytest.mark.parametrize("argv, match", [
    (("memory", "--offload-params", "cpu"), "add --offload-optimizer cpu or nvme"),
    (("memory", "--offload-optimizer", "gpu"), "--offload-optimizer takes cpu or nvme"),
    (("memory", "--offload-optimizer", "cpu,nvme"), "take one device here"),
    (("memory", "--offload-policy", "cpu", "--offload-optimizer", "cpu"), "give one or the other"),
    (("memory", "--dpu"), "--dpu delays the CPU's update of an offloaded optimizer"),
    (("memory", "--offload-optimizer", "cpu", "--dpu", "-1"), "--dpu's warm-up is a number of steps >= 0"),
    (("memory", "--offload-optimizer", "cpu", "--host-memory", "0"), "--host-memory is GB"),
    (("memory", "--offload-optimizer", "cpu", "--strategy", "hsdp", "--gpus-per-node", "8"),
     "offload is measured on the ZeRO stages' table"),
    (("timeline", "--offload-optimizer", "cpu", "--stage", "0"), "at stage 0 nothing is offloaded"),
    (("timeline", "--offload-policy", "cpu", "--stage", "2"), "FSDP2's fully_shard, which shards the parameters"),
    (("timeline", "--offload-optimizer", "cpu", "--host-bandwidth", "-3"), "--host-bandwidth must lie between"),
    (("train", "--offload-optimizer", "nvme", "--stage", "2", "--steps", "1"), "at ZeRO-2: DeepSpeed 0.19.8's"),
    (("train", "--offload-optimizer", "cpu", "--optimizer", "sgd", "--steps", "1"), "'sgd' does not run offloaded"),
    (("train", "--offload-optimizer", "cpu", "--save", "/nonexistent/x", "--steps", "1"),
     "checkpoints of an offloaded run are not modelled"),
    (("train", "--offload-optimizer", "cpu", "--stage", "0", "--steps", "1"), "at stage 0 nothing is offloaded"),
    # offload beside tensor parallelism is not modelled: each command says so rather than run half of it
    (("memory", "--model", "llama-2-7b", "--seq-len", "128", "--ranks", "8", "--tp", "2", "--offload-optimizer", "cpu"),
     "drop --strategy, --tp/--sp"),
    (("timeline", "--model", "llama-2-7b", "--seq-len", "128", "--ranks", "8", "--stage", "2", "--tp", "2",
      "--offload-optimizer", "cpu"), "offload beside tensor parallelism is not modelled"),
    (("train", "--model", "gpt", "--tp", "2", "--offload-optimizer", "cpu", "--steps", "1"),
     "offload beside tensor parallelism is not modelled"),
])
def test_bad_offload_flags_are_refused_by_name(argv, match):
    assert match in _refused(*argv)


def test_timeline_reports_the_offloaded_steps_streams_and_bytes():
    """13B on one V100 (ZeRO-2, N = 1): per step one rank sends 4Ψ of fp32 gradients down and gets 2Ψ of fp16 params
    back; the CPU step takes (bytes DeepSpeedCPUAdam streams) / (the DGX-2's DRAM peak, the rank alone on it)."""
    from zerosim.analysis.costs import get_host
    from zerosim.analysis.timeline._cost import host_optimizer_time

    argv = ("timeline", "--params", "13e9", "--layers", "40", "--ranks", "1", "--stage", "2", "--gpu", "v100-32gb",
            "--tokens", "16384", "--offload-optimizer", "cpu")
    plain, dpu = _json(*argv), _json(*argv, "--dpu")
    psi = 13 * 10**9
    for r in (plain, dpu):
        o = r["offload"]
        assert o["bytes"] == {"d2h": 4 * psi, "h2d": 2 * psi} and o["pcie"] == "PCIe 3.0 x16"
        assert o["host_bandwidth"] == get_host("dgx-2").dram_bandwidth
        assert o["busy_s"]["cpu"] == pytest.approx(host_optimizer_time(psi, 2, o["host_bandwidth"]), rel=1e-12)
    assert (plain["offload"]["steps_simulated"], dpu["offload"]["steps_simulated"]) == (1, 2)
    assert plain["compute_s"] == pytest.approx(dpu["compute_s"], rel=1e-9)  # one step's compute, not two
    assert dpu["step_s"] < plain["step_s"] - 0.99 * plain["offload"]["busy_s"]["cpu"]  # DPU hides the CPU step


def test_the_planner_ranks_offload_beside_the_others():
    """Llama-2-13B on 8 A100 40GB: ZeRO-1 and ZeRO-2 do not fit without offload; with the optimizer on the host ZeRO-2
    does (its device keeps the 16-bit params, 26 GB) and ZeRO-1 still does not (+ the whole 16-bit gradient: 52 GB,
    pruned by its model states); every row says where its states live, the host rows fit the DGX's nodes, and the top
    row's commands carry its flags."""
    r = _json("plan", "--model", "llama-2-13b", "--gpus", "8", "--gpu", "a100-40gb", "--seq-len", "1024",
              "--global-batch", "16", "--stages", "1,2,3", "--strategies", "block", "--micro-batches", "1",
              "--offload-optimizer", "cpu")
    rows = r["fitting"]
    assert {x["offload"] for x in rows} == {"none", "optimizer-cpu"}
    assert {x["stage"] for x in rows if x["offload"] == "none"} == {3}  # ZeRO-1/2 need offload here
    assert {x["stage"] for x in rows if x["offload"] == "optimizer-cpu"} == {2, 3}
    assert {(p["stage"], p.get("offload")) for p in r["pruned"]} == {(1, None), (2, None), (1, "optimizer-cpu")}
    assert [p["model_states"] for p in r["pruned"] if p.get("offload")] == [4 * 13_015_864_320]  # 2Ψ + 2Ψ, padded
    assert all(x["host_fits"] and (x["host_peak"] > 0) == (x["offload"] != "none") for x in rows)
    assert [x["step_s"] for x in rows] == sorted(x["step_s"] for x in rows)
    top = rows[0]
    assert all(("--offload-optimizer cpu" in c) == (top["offload"] != "none") for c in r["reproduce"])
    small = _json("plan", "--model", "llama-2-13b", "--gpus", "8", "--gpu", "a100-40gb", "--seq-len", "1024",
                  "--global-batch", "16", "--stages", "2", "--strategies", "block", "--micro-batches", "1",
                  "--offload-optimizer", "cpu", "--host-memory", "50")  # 8 ranks x ~25 GB: not on a 50 GB node
    assert small["fitting"] == [] and all(not x["host_fits"] for x in small["did_not_fit"] if x["offload"] != "none")


def test_the_planner_names_each_placements_fastest_row_when_the_printed_ones_hold_none():
    """With --top 1 the printed row is ZeRO-3 without offload; below it the planner gives each placement's fastest
    row (of its two micro-batches) by its rank in the full list (the JSON's order) and its step time."""
    argv = ("plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-40gb", "--seq-len", "1024",
            "--global-batch", "16", "--stages", "3", "--strategies", "block", "--micro-batches", "1,2",
            "--offload-optimizer", "cpu", "--offload-params", "cpu")
    rows = _json(*argv)["fitting"]
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert main([*argv, "--top", "1"]) == 0
    text = out.getvalue()
    assert rows[0]["offload"] == "none" and "the fastest row of each placement not printed above" in text
    for label in ("optimizer-cpu", "params-cpu"):
        i, x = next((i, x) for i, x in enumerate(rows, 1) if x["offload"] == label)
        assert sum(y["offload"] == label for y in rows) == 2  # B = 1 and 2: the first in the list is the fastest
        assert f"{i:>2d}  host {x['host_peak'] / 1e9:8.2f} GB" in text and f"{label}: ZeRO-3 block " \
            f"{x['micro_batch']} × {x['accumulation']}, {x['step_s']:.2f} s a step" in text, label


def test_the_planner_tries_offload_beside_tp_1_only():
    """Offload beside tensor parallelism is not modelled: with --tp 1,2 the offload rows come at tp = 1 alone, and
    the rows without offload at both degrees."""
    r = _json("plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-40gb", "--seq-len", "1024",
              "--global-batch", "16", "--stages", "3", "--strategies", "block", "--micro-batches", "1", "--tp", "1,2",
              "--offload-optimizer", "cpu")
    assert sorted((x["tp"], x["offload"]) for x in r["fitting"]) == [(1, "none"), (1, "optimizer-cpu"), (2, "none")]


def test_train_offloads_and_says_so():
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["train", "--steps", "2", "--stage", "2", "--ranks", "2", "--offload-optimizer", "cpu",
                     "--dpu"]) == 0
    text = out.getvalue()
    assert "offloaded: optimizer-cpu with DPU after 0 steps (adam as DeepSpeedCPUAdam)" in text
    assert "host peak (B)" in text
    grouped = r"\d{1,3}(?:,\d{3})+"  # bytes in thousands, as every other command writes a count: 21,896
    assert re.search(rf"^   0\s+{grouped}\s+{grouped}\s+{grouped}$", text, re.M), text


def test_training_with_offload_changes_no_bit_beside_the_same_optimizer_on_the_device():
    """zerosim.train with Offload(fsdp2=True) (FSDP2 steps the user's optimizer, unchanged) gives the losses of the
    same run on the device, bit for bit; DeepSpeed's offload steps Adam and AdamW as DeepSpeedCPUAdam (engine.py
    _configure_basic_optimizer), Lion as DeepSpeedCPULion (zerosim's Lion), and refuses the rest."""
    from zerosim.parallel.offload import PLACEMENTS, Offload, host_optimizer
    from zerosim.train import TrainConfig, train

    base = dict(stage=3, ranks=2, steps=4, precision="bf16-mixed")
    on_device = train(TrainConfig(**base)).losses
    assert train(TrainConfig(**base, offload=Offload(fsdp2=True))).losses == on_device
    assert [host_optimizer(PLACEMENTS[p], "adamw") for p in ("optimizer-cpu", "params-nvme", "fsdp2-cpu", "none")] \
        == [{"formula": "deepspeed-cpu"}] * 2 + [{}] * 2
    assert host_optimizer(PLACEMENTS["optimizer-cpu"], "lion") == {}
