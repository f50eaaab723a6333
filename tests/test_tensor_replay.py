"""`zerosim replay --tp 2`: seed 004's first layer as a 2-way row-parallel linear, every number from the TP units'
GEMMs and the TP group's ring (zerosim/replay/_tensor.py), against seed 004's own numbers
(docs/explanation/design.md, "Facts to check against")."""

import json
import subprocess
import sys

from zerosim.replay import narrate_tensor, tensor_replay

SEED_AVERAGED = [-5.5, -2.75, -2.75, -5.0]  # seed 004's two GPUs' gradients averaged (docs/explanation/design.md)


def test_one_tp_group_reaches_seed_004s_averaged_gradient():
    r = tensor_replay("fp16-mixed")
    assert r["partials"] == [[2.0, 4.0], [-9.0, -3.0]]  # w1·x1 on GPU 0, w2·x2 on GPU 1, per sample
    assert r["h"] == [-7.0, 1.0]  # seed 004's two h (GPU 0's sample, GPU 1's)
    assert [*r["dw"], r["dw3"], r["db4"]] == SEED_AVERAGED
    # the forward all-reduce's hops, as the trace holds them: chunk c's sum starts at GPU c + 1
    rs = [(h[3], h[4], h[5], h[6]) for h in r["forward_hops"] if h[1] == "reduce-scatter"]
    assert sorted(rs) == [(0, 1, 1, [4.0]), (1, 0, 0, [-9.0])]
    gathered = [(h[3], h[4], h[6]) for h in r["forward_hops"] if h[1] == "all-gather"]
    assert sorted(gathered) == [(0, 1, [-7.0]), (1, 0, [1.0])]


def test_the_narration_and_the_command():
    text = narrate_tensor(tensor_replay("bf16-mixed"))
    assert "[-5.5, -2.75, -2.75, -5]" in text and "reduce_from_tensor_model_parallel_region" in text
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", "--tp", "2", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["dw"] == [-5.5, -2.75]
