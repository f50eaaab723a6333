"""`zerosim replay --cp 2` (issue 60, Build 5): one hop of ring attention's online-softmax merge on two GPUs, every
number the run's — against the hand: rank 1's query over its own key (score 0) then the key that arrived (score 1),
the bf16 row of tests/test_context_merge.py's hand table: lse = fp32(1 + log1p(e⁻¹)), the ring 1.015625 where one pass
of flash attention and the float64 value's nearest bf16 give 1.0078125."""

import json
import subprocess
import sys

from test_context_merge import LSE_01_F32

from zerosim.replay import cp_replay, narrate_cp


def test_the_replay_tells_the_runs_numbers_and_they_are_the_hands():
    r = cp_replay("bf16-mixed")
    # the message GPU 0 sent at hop 0, read from the trace: its K then its V (one bf16 each)
    assert r["message"]["src"] == 0 and r["message"]["dst"] == 1 and r["message"]["values"] == [1.0, 1.015625]
    assert r["message"]["bytes"] == 4
    # one key a step: out_i is that key's value, lse_i its score (log of one exponential)
    assert [(h["out"], h["lse"]) for h in r["hops"]] == [([1.0], [0.0]), ([1.015625], [1.0])]
    assert r["lse"] == [LSE_01_F32]  # fp32(1 + log1p(e⁻¹)): the hand table's constant
    # the hand table's row (s0, s1, v0, v1) = (0, 1, 1, 1.015625): the first term bf16(0.2689414) rounds UP to
    # 0.26953125, the sum 1.0120126 goes past the midpoint 1.01171875: the ring 1.015625, one pass 1.0078125
    assert r["first_term"] == [0.26953125]
    assert r["output"] == [1.015625] and r["single_pass"] == [1.0078125] and r["nearest"] == [1.0078125]
    assert r["gpu0"]["out"] == [1.015625]  # GPU 0's query sees only its own token
    text = narrate_cp(r)
    for said in ("out_0 = 1 (bf16), lse_0 = 0 (fp32)", "['1', '1.015625']  (from the trace)",
                 "= 1.31326175", "bf16(0.268941402) = 0.26953125", "= 1.015625", "One pass of flash attention over "
                 "both keys: 1.0078125", "lands 0.0078125 away"):
        assert said in text, said


def test_the_command_prints_it_and_its_json():
    text = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", "--cp", "2"], capture_output=True,
                          text=True).stdout
    assert text.startswith("zerosim replay --cp 2: one hop of ring attention's online-softmax merge, two GPUs, bf16")
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", "--cp", "2", "--precision", "fp16-mixed",
                          "--json"], capture_output=True, text=True)
    r = json.loads(out.stdout)
    # fp16 keeps 3 more mantissa bits: the first term 0.26904297 and the ring, one pass and float64's nearest agree
    assert r["compute"] == "fp16" and r["output"] == r["single_pass"] == r["nearest"] == [1.01171875]
