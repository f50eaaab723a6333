"""The bytes a pipeline rank sends in a step, by hand, beside the trace's (`zerosim memory --pp`'s "sent" and
"formula"): the messages between stages, ZeRO's collectives in a step of M micro-steps, TP's and CP's over a rank's
own blocks. The trace is the independent answer (tests/test_pipeline_closed_form.py holds it to the NumPy backend's
rings, send by send); the formulas here are the reports' (analysis/reports/_pipeline.py pp_sent).

Until 2026-11-27 `zerosim memory --pp` printed "—" for both; and beside context parallelism with TP the formula
counted the K/V of every key-value head on each TP rank (a TP rank holds G/T of them) and TP's activations over the
whole sequence (a CP rank holds L/C of it): `zerosim memory --cp 2 --tp 2` printed a formula 1.6 % over the trace.
"""

import json

import pytest
from helpers import run_cli

from zerosim.analysis.costs import comm_volume
from zerosim.parallel.pipeline import stage_messages

GPT2 = ["--model", "gpt2-small", "--seq-len", "64", "--batch", "2", "--precision", "bf16-mixed"]
LLAMA = ["--model", "llama-2-7b", "--seq-len", "64", "--batch", "1", "--precision", "bf16-mixed"]


def memory(*argv) -> dict:
    code, out, err = run_cli("memory", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("P, V, M, want", [
    # rank r holds stages r, r + P, ...; (forward, backward) messages: on from every stage but the last, back from
    # every stage but the first, each once a micro-batch
    (4, 1, 3, [(3, 0), (3, 3), (3, 3), (0, 3)]),  # 1F1B: the first sends only on, the last only back
    (2, 2, 5, [(10, 5), (5, 10)]),  # stages 0, 2 on rank 0 (2 sends on, 1 back), 1, 3 on rank 1 (1 on, 2 back)
    (3, 2, 1, [(2, 1), (2, 2), (1, 2)]),  # stages 0, 3 / 1, 4 / 2, 5
    (2, 1, 1, [(1, 0), (0, 1)]),  # one boundary: one message each way
])
def test_a_ranks_messages_between_stages_by_hand(P, V, M, want):
    assert [stage_messages(P, V, M, r) for r in range(P)] == want


PSI, N, W = 1200, 4, 2  # parameters, ranks, bytes on the wire: a 1/N of Ψ·w is 600 bytes, (N−1)/N·Ψ·w 1,800


@pytest.mark.parametrize("stage, K, want", [
    (0, 1, 2 * 1800),  # all-reduce: 2 phases
    (0, 3, 2 * 1800),  # the gradients accumulate: one all-reduce a step
    (1, 3, 2 * 1800),  # reduce-scatter at the step's end + the refresh's all-gather, once each
    (2, 1, 2 * 1800),
    (2, 3, 4 * 1800),  # the gradients reduce-scattered each micro-step (3) + the refresh once
    (3, 1, 3 * 1800),  # gathered for forward and backward, reduce-scattered
    (3, 3, 9 * 1800),  # ... each micro-step
    ("no_reshard", 3, 6 * 1800),  # kept gathered from forward to backward: one gather and one reduce-scatter each
    ("no_reshard_no_sync", 3, 2 * 1800),  # FSDP2 beside a pipeline: one gather and one reduce-scatter a step
])
def test_zeros_volume_in_a_step_of_k_micro_steps_by_hand(stage, K, want):
    from zerosim.parallel.data import get_plan

    plan = get_plan(stage) if isinstance(stage, str) else stage
    assert comm_volume(PSI, N, plan, grad_wire_bytes=W, param_wire_bytes=W, micro_steps=K) == want


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zeros_volume_in_k_micro_steps_is_what_the_engine_sends(stage):
    """The rule of `micro_steps` against the rings a data-parallel step of 3 micro-batches runs, send by send (every
    unit's parameters divide by the 4 ranks: nothing padded)."""
    import numpy as np

    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression

    widths, K = [64, 96, 32], 3
    cluster = Cluster(4)
    engine = ZeroEngine(MLP(widths), cluster, stage, Adam(), "bf16-mixed", accumulation_steps=K)
    rng = np.random.default_rng(0)
    engine.step([[make_regression(rng, 4, 2, widths)[r] for _ in range(K)] for r in range(4)])
    assert cluster.trace.sent_totals(4) == [comm_volume(MLP(widths).num_params, 4, stage, micro_steps=K)] * 4


CASES = {  # name -> the flags beside --ranks 8 and --pp 2 (dp 4, or dp 2 beside TP or CP)
    "1f1b": [*GPT2, "--accumulation-steps", "3"],
    "tp": [*GPT2, "--tp", "2", "--accumulation-steps", "2"],
    "tp and sp": [*GPT2, "--tp", "2", "--sp", "--accumulation-steps", "2"],
    "interleaved": [*GPT2, "--pp-schedule", "interleaved-1f1b", "--virtual-stages", "2", "--accumulation-steps", "2"],
    "zero-bubble": [*GPT2, "--pp-schedule", "zero-bubble", "--accumulation-steps", "2"],
    "gpipe, fp32": [*GPT2[:-1], "fp32", "--pp-schedule", "gpipe", "--accumulation-steps", "3"],
    "fsdp": [*GPT2, "--comm", "fsdp", "--accumulation-steps", "2"],  # stage 3 as no_reshard_no_sync
    "cp": [*LLAMA, "--cp", "2", "--checkpoint", "flash", "--accumulation-steps", "2"],
    "cp and tp": [*LLAMA, "--cp", "2", "--tp", "2", "--checkpoint", "flash", "--accumulation-steps", "2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_pipeline_ranks_formula_is_what_the_trace_counts(case):
    """Every ZeRO stage, every pipeline rank: the formula by hand equals the bytes the trace counted (none of these
    recompute a gathered unit, the one thing the formula leaves out: its module docstring)."""
    r = memory("--ranks", "8", "--gpus-per-node", "4", "--pp", "2", *CASES[case])
    for row in r["stages"]:
        assert [x["sent"] for x in row["pipeline"]] == [x["sent_formula"] for x in row["pipeline"]], row["stage"]
        assert row["sent"] == row["sent_formula"] == max(x["sent"] for x in row["pipeline"])


@pytest.mark.slow
def test_with_checkpointing_zero_3_sends_more_than_the_formula_and_the_other_stages_what_it_says():
    """A checkpointed block recomputes its forward in backward: ZeRO-3 gathers its unit once more (the formula's
    textbook 3Ψ leaves it out, as the data-parallel report's does); stages 0-2 gather nothing for it."""
    r = memory("--ranks", "8", "--pp", "2", "--tp", "2", *GPT2, "--checkpoint", "block", "--accumulation-steps", "2")
    for row in r["stages"]:
        sent, formula = [x["sent"] for x in row["pipeline"]], [x["sent_formula"] for x in row["pipeline"]]
        if row["stage"] < 3:
            assert sent == formula, row["stage"]
        else:
            assert all(a > b for a, b in zip(sent, formula))


def test_beside_context_and_tensor_parallelism_the_formula_is_what_the_trace_counts():
    r = memory("--ranks", "8", *LLAMA, "--cp", "2", "--tp", "2", "--checkpoint", "flash")
    for row in r["stages"]:  # no recomputation: stage 3's gathers are the formula's too
        assert row["sent"] == row["sent_formula"], row["stage"]


def test_memory_prints_each_pipeline_ranks_bytes_beside_the_formula():
    code, out, err = run_cli("memory", "--ranks", "8", "--pp", "2", *GPT2, "--accumulation-steps", "2")
    assert code == 0, err
    assert "GB each pipeline rank sent in the step (the trace's), beside the formula" in out
    assert "—" not in out.split("Per pipeline rank")[0]  # the table's sent and formula columns are filled
