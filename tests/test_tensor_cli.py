"""`--tp T` and `--sp` where a user looks (issue 38): zerosim memory, timeline, train and plan run every stage beside
tensor parallelism (--ranks stays the GPU count, dp = ranks / tp), their numbers the library's; bad flags are refused
with the problem named, before anything runs."""

import json
import subprocess
import sys

import pytest

from zerosim.analysis.costs import measure_stage
from zerosim.models import MetaLlama, read_hf_config, shipped_config


def zerosim(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)


LLAMA_8B = ["--model", "llama-3-8b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "1024", "--batch", "1"]


def test_memory_reports_one_tp_ranks_slice_over_its_data_parallel_ranks():
    out = zerosim("memory", *LLAMA_8B, "--tp", "4", "--sp", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    tp = r["tensor_parallel"]
    assert (tp["tp"], tp["dp"], tp["sp"]) == (4, 4, True)
    # the same numbers the library measures
    model = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), seq_len=1024)
    row, _, engine = measure_stage(model, 16, 3, "adam", "fp16-mixed", micro_batch=(1, 1024), gpus_per_node=8, tp=4,
                                   sp=True)
    three = next(x for x in r["stages"] if x["stage"] == 3)
    assert three["resting"] == row["resting"] and tp["local_params"] == engine.model.num_params
    assert three["ledger_total"] == three["formula_total"]  # ZeRO's formula with Ψ = Ψ_tp and N = dp
    a = r["activations"]
    assert a["per_block_total"] == a["formula_per_layer"]  # the Llama's named tensors at tp 4 with SP


def test_memory_pads_a_vocabulary_that_does_not_split_as_megatron_does():
    out = zerosim("memory", "--model", "gpt2-small", "--ranks", "8", "--gpus-per-node", "4", "--tp", "2",
                  "--seq-len", "64", "--batch", "2")
    assert out.returncode == 0, out.stderr
    assert "padded to 50,432 tokens as Megatron pads it" in out.stdout  # GPT-2's 50,257 up to a multiple of 256


def test_timeline_puts_tp_on_nvlink_and_zero_across_nodes():
    out = zerosim("timeline", *LLAMA_8B, "--tp", "8", "--sp", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    # a TP group is a node's 8 GPUs, a data-parallel group one GPU of each node: every NVLink call is TP's
    assert r["tiers"]["intra-node"]["calls"] == r["by_purpose"]["tensor parallel"]["calls"] > 0
    assert r["tiers"]["inter-node"]["calls"] == sum(v["calls"] for k, v in r["by_purpose"].items()
                                                    if k != "tensor parallel") > 0
    bound = json.loads(zerosim("timeline", *LLAMA_8B, "--tp", "8", "--sp", "--async-tp", "--json").stdout)
    assert bound["step_s"] < r["step_s"]  # async TP as a bound: no compute waits for TP's collectives


def test_train_learns_beside_tensor_parallelism():
    out = zerosim("train", "--model", "gpt", "--stage", "3", "--ranks", "4", "--tp", "2", "--sp", "--steps", "40",
                  "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["losses"][-1] < r["losses"][0] and r["accuracy"][-1][1] > r["chance"]


@pytest.mark.slow
def test_plan_ranks_tp_degrees_with_the_stages():
    out = zerosim("plan", "--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-80gb", "--seq-len", "2048",
                  "--global-batch", "32", "--tp", "1,4", "--stages", "3", "--strategies", "block", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert {row["tp"] for row in r["fitting"]} == {1, 4}
    top = r["fitting"][0]
    assert ("--tp 4" in r["reproduce"][0]) == (top["tp"] == 4)


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
@pytest.mark.parametrize("argv, said", [
    (["memory", *LLAMA_8B, "--tp", "3"], "--tp 3 does not divide --ranks 16"),
    (["memory", *LLAMA_8B, "--sp"], "--sp cuts the sequence over the TP group: give --tp T > 1"),
    (["memory", "--model", "llama-3-8b", "--ranks", "16", "--tp", "4"], "--tp splits a transformer's heads"),
    (["memory", *LLAMA_8B, "--tp", "16"], "n_kv_heads = 8 does not split over tp = 16"),
    (["timeline", *LLAMA_8B, "--async-tp"], "--async-tp overlaps TP's collectives: give --tp T > 1"),
    (["train", "--model", "mlp", "--tp", "2"], "tensor parallelism splits a transformer's heads"),
    (["train", "--model", "gpt", "--ranks", "4", "--tp", "2", "--save", "x"], "checkpoints of tensor-parallel slices"),
    (["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-80gb", "--seq-len", "2048", "--global-batch",
      "32", "--sp"], "--sp cuts the sequence over a TP group"),
    (["replay", "--tp", "4"], "--tp replays seed 004's two-weight first layer over 2 GPUs"),
    # --strategy chooses --mesh's strategy: beside --tp it was taken and never used
    (["replay", "--tp", "2", "--strategy", "hsdp"],
     "it takes --precision and --json, not --cp, --pp, --mesh, --strategy"),
    # a layer's forward and backward, and one hop of ring attention, take no optimizer step: --lr was taken and the
    # output byte for byte the same (a walk adding each flag alone)
    # Megatron's layout keeps Megatron's fused kernels' tensors and its vocabulary-parallel loss whatever was asked:
    # memory took --kernels and --loss and printed the same (a walk adding each flag alone)
    (["memory", *LLAMA_8B, "--tp", "2", "--kernels", "eager"],
     "--kernels eager: beside --tp 2 in Megatron's layout every layer runs Megatron's own fused kernels"),
    (["timeline", *LLAMA_8B, "--tp", "2", "--loss", "chunked"], "--loss chunked: beside --tp 2 in Megatron's layout"),
    # a plan's TP rows are reproduced by `timeline --tp`, which refuses them: the plan refuses them first
    (["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-80gb", "--seq-len", "1024", "--global-batch",
      "32", "--tp", "1,2", "--kernels", "eager"], "--kernels eager: beside --tp 2 in Megatron's layout"),
    (["replay", "--tp", "2", "--lr", "0.2"],
     "it takes --precision and --json, not --cp, --pp, --mesh, --strategy, --lr"),
    (["replay", "--cp", "2", "--lr", "0.2"],
     "it takes --cp-style, --precision and --json, not --tp, --pp, --mesh, --strategy, --lr"),
])
def test_bad_tp_flags_are_clear_errors(argv, said):
    out = zerosim(*argv)
    assert out.returncode != 0 and said in out.stderr, out.stderr


def test_memory_strategies_beside_tp_count_data_parallel_ranks():
    out = zerosim("memory", *LLAMA_8B, "--tp", "2", "--strategy", "full_shard,hsdp", "--shard-group", "4", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["strategy"]: r for r in json.loads(out.stdout)["strategies"]}
    assert rows["full_shard"]["replicas"] == 1  # FULL_SHARD over all 8 data-parallel ranks
    assert (rows["hsdp"]["group"], rows["hsdp"]["replicas"]) == (4, 2)  # 16 GPUs / tp 2 = 4 x 2
    assert all(r["resting_total"] == r["formula_total"] for r in rows.values())


@pytest.mark.parametrize("narrow", [("--mesh", "2x2"), ("--pp", "2"), ()])
def test_the_replays_that_step_an_optimizer_take_lr_and_default_to_the_seeds(narrow):
    # seed 004's Adam steps at lr 0.1 (its worked example); the replays that take a step read --lr, and leaving it
    # out is giving 0.1
    default, seeds, other = (zerosim("replay", *narrow, *lr, "--json") for lr in ((), ("--lr", "0.1"), ("--lr", "0.2")))
    assert default.returncode == seeds.returncode == other.returncode == 0
    assert default.stdout == seeds.stdout != other.stdout


def test_beside_megatrons_tp_the_kernels_are_megatrons_fused_ones_and_torchtitans_layout_takes_eager():
    # Megatron-LM's layers run its own fused kernels: a step beside --tp in its layout is timed as fused (the compiled
    # preset), as the twin keeps (parallel/tensor/_meta.py); it was timed as torch eager's while its memory was fused
    def step(*flags):
        out = zerosim("timeline", *LLAMA_8B, "--tp", "2", "--stage", "3", *flags, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["step_s"]

    default, fused = step(), step("--kernels", "fused", "--loss", "probabilities")
    assert default == fused == step("--efficiency", "compiled")
    assert step("--tp-layout", "torchtitan", "--kernels", "eager") != step("--tp-layout", "torchtitan", "--kernels",
                                                                           "fused")
