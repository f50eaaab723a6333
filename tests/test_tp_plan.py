"""The planner plans tensor parallelism (issue 57, must-show 5): `zerosim plan ... --tp 2` and `--tp 1,2,4,8` run with
the default strategies for Llama 3 8B and 70B; strategies TP cannot combine with are left out with a line that says
why; TP degrees are ranked beside the stages; every command a plan prints runs as printed and agrees with it;
`--optimizer muon` plans at TP 1 and is refused by name beside TP before anything is measured.
"""

import json
import subprocess
import sys

import pytest

from zerosim.analysis.planner import plan
from zerosim.models import read_hf_config, shipped_config

LEFT_OUT = {"subblock", "subblock-flash", "op-sac"}  # parallel/tensor REFUSED_CHECKPOINTS: what TP's units cannot run


def zerosim(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)


def plan_json(*argv) -> dict:
    out = zerosim("plan", *argv, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def check_printed_commands_agree(r: dict) -> None:
    """The two commands the plan prints for its top row, run as printed, give its peak, step and tokens/s."""
    top = r["fitting"][0]
    memory_cmd, timeline_cmd = r["reproduce"]
    memory = json.loads(zerosim(*memory_cmd.split()[1:], "--json").stdout)
    stage = next(x for x in memory["stages"] if x["stage"] == top["stage"])
    assert stage["peak"] == top["peak"]
    timeline = json.loads(zerosim(*timeline_cmd.split()[1:], "--json").stdout)
    assert timeline["step_s"] == pytest.approx(top["step_s"], rel=1e-9)  # K > 2: the plan's line, 1e-12 in fact
    assert timeline["peak"] == top["peak"]
    assert timeline["tokens_per_s_per_gpu"] == pytest.approx(top["tokens_per_s_per_gpu"], rel=1e-9)
    assert (timeline.get("tensor_parallel") or {"tp": 1})["tp"] == top.get("tp", 1)


EIGHT_B = ["--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-80gb", "--seq-len", "2048", "--global-batch", "16"]


@pytest.mark.slow  # a plan of two stages, every default strategy, at TP 2, and the two commands it prints: ~15 s
def test_llama_3_8b_plans_tp_2_with_the_default_strategies():
    r = plan_json(*EIGHT_B, "--tp", "2", "--stages", "1,3")
    tried = {x["strategy"] for x in r["fitting"] + r["did_not_fit"]}
    assert tried and not tried & LEFT_OUT and tried | LEFT_OUT >= set(r["settings"]["strategies"])
    assert {s for x in r["left_out"] for s in x["strategies"]} == LEFT_OUT and all(x["tp"] == [2]
                                                                                  for x in r["left_out"])
    assert all(x["tp"] == 2 for x in r["fitting"])
    check_printed_commands_agree(r)
    text = zerosim("plan", *EIGHT_B, "--tp", "2", "--stages", "3", "--micro-batches", "1").stdout
    assert "Left out beside TP 2: subblock, subblock-flash (checkpoint='subblock' keeps each sub-block's input" in text
    assert "Left out beside TP 2: op-sac (" in text


@pytest.mark.slow  # TP 1, 2, 4 and 8 ranked together, stage 3, one micro-batch: ~10 s
def test_llama_3_8b_ranks_tp_1_2_4_8_beside_the_stages():
    r = plan_json(*EIGHT_B, "--tp", "1,2,4,8", "--sp", "--stages", "3", "--micro-batches", "1")
    degrees = {x["tp"] for x in r["fitting"]}
    assert degrees == {1, 2, 4, 8}
    steps = [x["step_s"] for x in r["fitting"]]
    assert steps == sorted(steps)  # one ranking over every degree and stage
    # TP 1 tries every default strategy; above it the three TP cannot run are left out, each degree named
    at_one = {x["strategy"] for x in r["fitting"] + r["did_not_fit"] if x["tp"] == 1}
    assert at_one & LEFT_OUT == LEFT_OUT
    assert all(x["tp"] == [2, 4, 8] for x in r["left_out"])
    check_printed_commands_agree(r)


@pytest.mark.slow  # 70B at four degrees (stage 3, one micro-batch) and the two commands it prints: ~20 s (~35 s on a
# busy 2-core machine: the one case the issue names that cannot be made smaller)
def test_llama_3_70b_plans_tp_1_2_4_8_and_its_commands_run_as_printed():
    r = plan_json("--model", "llama-3-70b", "--gpus", "64", "--gpu", "h100-80gb", "--seq-len", "4096",
                  "--global-batch", "64", "--tp", "1,2,4,8", "--stages", "3", "--micro-batches", "1")
    assert {x["tp"] for x in r["fitting"] + r["did_not_fit"]} == {1, 2, 4, 8}
    assert r["fitting"], "something fits on 64 H100s"
    check_printed_commands_agree(r)


def test_configurations_that_did_not_fit_line_up_with_and_without_tp(capsys):
    """Rows beside TP 2 and rows without it in one column: each line's "B =" where the others' is (the label used to
    be padded to the strategy's width alone, so "TP 2" pushed its rows to the right)."""
    from zerosim.cli.main import main

    assert main(["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-80gb", "--seq-len", "4096",
                 "--global-batch", "256", "--strategies", "flash", "--tp", "1,2", "--stages", "3",
                 "--micro-batches", "4,8"]) == 0
    text = capsys.readouterr().out
    rows = text.split("Tried and did not fit")[1].split("\n\n")[0].splitlines()[1:]
    assert [r.split(" B = ")[0].strip() for r in rows] == ["ZeRO-3 flash", "ZeRO-3 TP 2 flash"]
    assert len({r.index(" B = ") for r in rows}) == 1


@pytest.mark.bad_input("planner")
def test_muon_beside_tp_is_refused_by_name_before_anything_is_measured():
    measured = []
    config = read_hf_config(shipped_config("llama-3-8b"))
    with pytest.raises(ValueError, match=r"muon updates whole matrices; beside tp 2 a rank holds a slice of each"):
        plan(config, 16, 8, "h100-80gb", 2048, 16, optimizer="muon", tps=(1, 2), progress=measured.append)
    assert measured == []  # refused up front
    out = zerosim("plan", *EIGHT_B, "--optimizer", "muon", "--tp", "2")
    assert out.returncode == 2 and "muon updates whole matrices; beside tp 2" in out.stderr


@pytest.mark.slow  # one stage, one strategy: ~3 s
def test_muon_plans_at_tp_1():
    r = plan_json(*EIGHT_B, "--optimizer", "muon", "--stages", "3", "--strategies", "flash")
    assert r["fitting"] and r["settings"]["optimizer"] == "muon"
    check_printed_commands_agree(r)  # Muon's Newton-Schulz is timed as GEMM FLOPs on the timeline too


def test_a_degree_whose_data_parallel_ranks_do_not_split_the_batch_is_left_out_and_the_others_planned():
    # 16 sequences on 32 GPUs: at TP 1 the 32 data-parallel ranks cannot share them, at TP 2 its 16 take one each. The
    # planner once handed its report the refused combination's spec where the report reads {degree: value}: a
    # traceback (found by a random walk over plan's flags)
    out = zerosim("plan", "--model", "llama-3-8b", "--gpus", "32", "--gpu", "h100-80gb", "--seq-len", "1024",
                  "--global-batch", "16", "--tp", "1,2", "--strategies", "block", "--stages", "3")
    assert out.returncode == 0, out.stderr
    assert "16 sequences of 1,024 tokens per step = 0.5 per GPU" in out.stdout  # a TP pair's GPUs share one
    assert ("Left out: TP 1 (a global batch of 16 sequences does not split over 32 ranks (each rank takes "
            "micro-batch × accumulation sequences per step))") in " ".join(out.stdout.split())  # wrapped at 116
    r = plan_json("--model", "llama-3-8b", "--gpus", "32", "--gpu", "h100-80gb", "--seq-len", "1024",
                  "--global-batch", "16", "--tp", "1,2", "--strategies", "block", "--stages", "3")
    assert [row["tp"] for row in r["fitting"]] == [2]
    assert [(x["tp"], x["strategies"]) for x in r["left_out"]] == [([1], [])]
