"""Predicted against measured on published runs (issue 36, Must show 1 and 4): the points are well formed, the
framework factors are what the calibration set alone gives, and the held-out errors meet the targets.

The predictions are deterministic float arithmetic on the meta backend (no BLAS, no random draws): the same on every
machine. The held-out statistics asserted here were computed once, after the factors were frozen
(docs/validation.md records the order), and are not fitted to.
"""

import json

import pytest

from zerosim.analysis.costs._calibration import FRAMEWORK
from zerosim.analysis.costs._comm import LINKS
from zerosim.analysis.costs._efficiency import PRESETS
from zerosim.analysis.costs._gpus import GPUS
from zerosim.analysis.costs._validation_points import POINTS, ROLES, TREND
from zerosim.cli.main import main
from zerosim.models.gpt import ALL_STRATEGIES

CALIBRATION = {"tt-h100-8-eager", "tt-h100-8-compile", "tt-h100-8-compile-fp8", "tt-a100-64-8b-op"}
HELD_OUT_MEDIAN, HELD_OUT_EVERY, TREND_POINTS = 0.15, 0.35, 0.10  # the targets


def test_every_point_names_its_source_and_conditions():
    assert len({p.key for p in POINTS}) == len(POINTS)
    assert {p.key for p in POINTS if p.role == "calibration"} == CALIBRATION
    for p in POINTS:
        assert p.role in ROLES and p.preset in PRESETS and p.strategy in ALL_STRATEGIES and p.gpu in GPUS
        assert "@" in p.source and (".md" in p.source)  # a file at a commit, and its table and row
        assert p.links[0] in LINKS and (p.links[1] in LINKS if p.gpus > p.gpus_per_node else p.links[1] is None)
        assert p.tokens_per_s > 0 and p.micro_batch >= 1 and p.accumulation >= 1
    assert set(TREND) <= {p.key for p in POINTS}


@pytest.mark.slow  # the fit reruns the calibration points ~25 times: ~15 s
def test_the_shipped_factors_are_what_the_calibration_points_alone_give():
    from zerosim.analysis.planner._validate import fit

    fitted = fit()
    assert fitted == pytest.approx(FRAMEWORK, abs=5e-4)  # the constants are the fit rounded to 3 places


@pytest.mark.slow  # every point once: ~5 s
def test_held_out_errors_meet_the_targets():
    """Held out (22 runs): median |predicted / measured − 1| 7.7 %, the largest 30.0 % (llm-foundry's MPT-13B on
    8 H100s); torchtitan's 8 -> 128 GPU trend measured −2.7 %, predicted −0.1 %. Reserved memory, 11 runs that
    published it: median |error| 8.1 %, the largest 29.4 % (torchtitan's 70B FSDP x TP run; the 9 FSDP runs within
    12.3 %). The two TP rows joined the held-out set after the factors were frozen (docs/validation.md); issue 57
    predicted them with their Float8 GEMMs and torchtitan's DTensor layout (time +3.9 % / +16.6 %, memory −29 % /
    −25 %, where they had been −16.4 % / −14.0 % and −52 % / −49 %)."""
    from zerosim.analysis.planner._validate import summary, validate

    rows = validate()
    stats = summary(rows)
    held = stats["held-out"]
    assert held["points"] == 22
    assert held["median_abs_error"] <= HELD_OUT_MEDIAN and held["max_abs_error"] <= HELD_OUT_EVERY
    assert held["within_35"] == 22
    assert abs(stats["trend"]["predicted"] - stats["trend"]["measured"]) <= TREND_POINTS
    assert (round(held["median_abs_error"], 3), round(held["max_abs_error"], 3)) == (0.077, 0.300)
    assert (round(stats["memory"]["median_abs_error"], 3), round(stats["memory"]["max_abs_error"], 3)) == (0.081, 0.294)
    fsdp_only = [abs(r.memory_error) for r in rows if r.memory_error is not None and r.point.tp == 1]
    assert (len(fsdp_only), round(max(fsdp_only), 3)) == (9, 0.123)


def test_validate_prints_each_point_beside_its_measurement(capsys):
    assert main(["validate", "--only", "tt-h100-8-eager", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    (row,) = r["rows"]
    assert row["key"] == "tt-h100-8-eager" and row["measured_tokens_per_s"] == 5762 and row["role"] == "calibration"
    assert abs(row["error"]) < 0.1 and "torchtitan" in row["source"]
    assert main(["validate", "--only", "tt-h100-8-eager"]) == 0
    text = capsys.readouterr().out
    assert "calib tt-h100-8-eager" in text and "framework factors (calibrated)" in text


@pytest.mark.bad_input("command line")
def test_validate_names_an_unknown_point(capsys):
    assert main(["validate", "--only", "nope"]) == 2
    assert "--only: unknown point 'nope'" in capsys.readouterr().err


def test_plans_default_mfu_for_torchtitans_8_gpu_run(capsys):
    """Must show 4: `zerosim plan` says what efficiency it assumed, and with the default (eager: torchtitan's run
    did not compile) its MFU for Table 1's FSDP row (Llama 3.1 8B, 8 GPUs, 2 × 8192, op-level SAC) is within ±15 %
    of the measured run's, both counted as torchtitan counts MFU (analysis/costs/_throughput.py) on the same peak."""
    from zerosim.analysis.costs._throughput import mfu
    from zerosim.analysis.costs._validation_points import LLAMA_3_1_8B
    from zerosim.analysis.timeline import DEVICES
    from zerosim.models.hf._config import read_hf_config

    argv = ["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-hbm2e", "--seq-len", "8192",
            "--global-batch", "16", "--stages", "3", "--strategies", "op-sac", "--micro-batches", "2",
            "--optimizer", "adamw", "--comm", "fsdp"]
    assert main(argv + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    (row,) = r["fitting"]
    measured = mfu(5762, read_hf_config(LLAMA_3_1_8B), 8192, DEVICES["h100-hbm2e"].fp16)
    assert row["mfu"] == pytest.approx(measured, rel=0.15)
    assert "efficiency preset 'eager'" in r["settings"]["time_model"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "time from: efficiency preset 'eager'" in text and "framework factor 0.840 (calibrated)" in text
