"""`zerosim replay --pp 2`: seed 004's network as 2 pipeline stages, its two samples as 2 micro-batches through 1F1B,
every number from the run (zerosim/replay/_pipeline.py), against seed 004's own numbers (docs/explanation/design.md,
"Facts to check against") and torch 2.13's Schedule1F1B table for 2 stages and 2 micro-batches."""

import json
import subprocess
import sys

import numpy as np
import pytest

from zerosim.replay import narrate_pipeline, pipeline_replay

SEED_LOCAL = ([0.0, 0.0, 0.0, -4.5], [-11.0, -5.5, -5.5, -5.5])  # seed 004's two GPUs' gradients [w1, w2, w3, w4]
SEED_MASTERS = [2.1, -2.9, 1.1, 0.6]  # after Adam, lr 0.1, as fp32 (docs/explanation/design.md)


def grads(r: dict, micro: int) -> list:
    """[dw1, dw2, dw3, dw4] of one micro-batch, from its two stages' backward compute events."""
    back = {a["gpu"]: a["layers"] for a in r["actions"] if a["kind"] == "backward" and a["micro"] == micro}
    return back[0]["layer1 backward"]["dw"] + back[1]["layer2 backward"]["dw"] + back[1]["layer2 backward"]["db"]


@pytest.mark.slow
def test_each_micro_batch_makes_seed_004s_gradient_of_its_sample():
    r = pipeline_replay("fp16-mixed")
    assert [grads(r, k) for k in (0, 1)] == list(SEED_LOCAL)  # micro-batch k is seed 004's GPU k's sample
    assert r["masters"] == np.array(SEED_MASTERS, np.float32).astype(np.float64).tolist()
    assert r["stages"] == [["layer1", "relu1"], ["layer2"]]
    # torch 2.13 Schedule1F1B, 2 stages, 2 micro-batches (_get_pipeline_order): stage 0 warms up with both forwards
    assert r["table"] == [["0F0", "", "", "0F1", "0B0", "", "0B1"], ["", "1F0", "1B0", "1F1", "1B1"]]
    # what crossed: each micro-batch's ReLU output forward, the gradient dL/da back; 2 B of fp16, across nodes
    sent = [(s["src"], s["dst"], s["micro"], s["values"], s["bytes"], s["tier"]) for s in r["sends"]]
    assert sent == [(0, 1, 0, [0.0], 2, "inter-node"), (0, 1, 1, [1.0], 2, "inter-node"),
                    (1, 0, 0, [-4.5], 2, "inter-node"), (1, 0, 1, [-5.5], 2, "inter-node")]
    # 1F1B's in flight: stage 0 holds both micro-batches' saved inputs (x: 2 fp16, h: 1 fp16 = 6 B each), stage 1 one
    assert r["peak_activations"] == [2 * 6, 1 * 2 + 4]  # stage 1: layer2's input a, the loss's input y (fp32)


@pytest.mark.slow
def test_the_narration_and_the_command():
    text = narrate_pipeline(pipeline_replay("bf16-mixed"))
    assert "GPU 0: 0F0 -- -- 0F1 0B0 -- 0B1" in text and "[2.1, -2.9 | 1.1, 0.6], seed 004's" in text
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", "--pp", "2", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["loss"] == 12.625  # (10.125 + 15.125) / 2: seed 004's two losses, 0.5·(0.5 - 5)², ...


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv", [["--pp", "3"], ["--pp", "2", "--tp", "2"], ["--pp", "2", "--stage", "3"],
                                  ["--pp", "2", "--strategy", "mics"]])  # --strategy was taken and not used
def test_pp_other_than_2_or_with_other_flags_is_refused(argv):
    done = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", *argv], capture_output=True, text=True)
    assert done.returncode != 0 and "--pp" in done.stderr and "Traceback" not in done.stderr
