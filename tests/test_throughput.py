"""One throughput, one MFU (issue 57, must-show 1): `timeline`, `plan`, `validate` and their JSON give the tokens/s
per GPU and the MFU of the job's tokens / step / GPUs, at TP 1, 2 and 8, with and without sequence parallelism.

The expected numbers are computed here by hand from what each command states (its step time, the global batch, the
GPU count) and from the model's config file (Llama 3 8B: d 4096, 32 layers, 32 heads of 128, vocabulary 128,256,
untied), never by the function under test: tokens per step = global batch × L (a TP group's GPUs share one batch
rank's sequences); tokens/s per GPU = that / step / GPUs; MFU = (6·(Ψ − V·d) + 12·layers·H·d_h·L) × tokens/s per GPU
/ the H100 SXM's dense bf16 peak (989.4 TFLOP/s, NVIDIA's H100 datasheet: 1,979 with sparsity).
"""

import json
import subprocess
import sys

import pytest

from zerosim.analysis.costs import tokens_per_s_per_gpu, tokens_per_step
from zerosim.parallel import ParallelDims

PSI_8B = 8_030_261_248  # Llama 3 8B's parameters (its config.json's shapes; zerosim plan prints Ψ)
V, D, LAYERS, HEADS, HEAD_DIM = 128_256, 4096, 32, 32, 128
H100_BF16 = 989.4e12  # dense bf16 FLOP/s, H100 SXM (zerosim.analysis.timeline DEVICES["h100"])
REL = 1e-12  # the same numbers through a different order of float operations


def flops_per_token(L: int) -> float:
    return 6 * (PSI_8B - V * D) + 12 * LAYERS * HEADS * HEAD_DIM * L  # torchtitan's / PaLM's, by hand


def zerosim(*argv) -> dict:
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# (dims, tokens of one batch rank per step, step s, tokens/s per GPU): a hand table, a comment per row
TABLE = [
    (ParallelDims(8), 4 * 8192, 2.0, 4 * 8192 / 2.0),  # 8 data-parallel GPUs: each its own 4 sequences
    (ParallelDims(256, tp=8), 16 * 8192, 19.0, 32 * 16 * 8192 / 256 / 19.0),  # torchtitan's FSDP 32 x TP 8: 32 batch
    #                                                                        ranks, 8 GPUs each
    (ParallelDims(64, tp=8, pp=4), 8 * 8192, 10.0, 2 * 8 * 8192 / 64 / 10.0),  # dp 2: TP and PP share a micro-batch
    (ParallelDims(16, cp=4), 1 * 131072, 4.0, 4 * 131072 / 16 / 4.0),  # CP 4 splits one 128k sequence over 4 GPUs
    (ParallelDims(32, dp_replicate=2, tp=4), 2 * 4096, 1.0, 8 * 2 * 4096 / 32),  # HSDP 2 x 4, TP 4: 8 batch ranks
]


@pytest.mark.parametrize("dims, tokens, step, want", TABLE, ids=[repr(r[0]) for r in TABLE])
def test_the_one_definition_reads_the_jobs_degrees(dims, tokens, step, want):
    assert tokens_per_s_per_gpu(dims, tokens, step) == pytest.approx(want, rel=REL)
    assert tokens_per_step(dims, tokens) == dims.dp * tokens


PLAN = ["--model", "llama-3-8b", "--gpus", "16", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len", "2048",
        "--global-batch", "32", "--stages", "3", "--strategies", "block-flash", "--micro-batches", "1,2"]
DEGREES = [(1, False), (2, False), (8, False), (2, True), (8, True)]


@pytest.mark.slow  # a plan and the timeline its top row prints, per degree: ~5 s each
@pytest.mark.parametrize("tp, sp", DEGREES, ids=[f"TP {t}" + (" + SP" if s else "") for t, s in DEGREES])
def test_plan_and_the_timeline_it_prints_agree_with_tokens_over_step_over_gpus(tp, sp):
    plan = zerosim("plan", *PLAN, "--tp", str(tp), *(["--sp"] if sp else []), "--json")
    row = plan["fitting"][0]
    want = 32 * 2048 / row["step_s"] / 16  # the job's tokens / step / GPUs
    assert row["tokens_per_s_per_gpu"] == pytest.approx(want, rel=REL)
    assert row["mfu"] == pytest.approx(flops_per_token(2048) * want / H100_BF16, rel=REL)
    # the timeline command the plan prints for that row gives the same numbers from its own (fully simulated) step
    r = zerosim(*plan["reproduce"][1].split()[1:], "--json")
    assert r["step_s"] == pytest.approx(row["step_s"], rel=1e-9)  # K = 1 or 2: simulated either way
    got = 32 * 2048 / r["step_s"] / 16
    assert r["tokens_per_s_per_gpu"] == pytest.approx(got, rel=REL)
    assert r["mfu"] == pytest.approx(flops_per_token(2048) * got / H100_BF16, rel=REL)
    assert (r.get("tensor_parallel") or {"tp": 1})["tp"] == tp


@pytest.mark.slow  # the validation table's two TP points: ~2 s
def test_validate_json_gives_the_tp_rows_tokens_over_step_over_gpus():
    rows = {x["key"]: x for x in zerosim("validate", "--json")["rows"]}
    for key in ("tt-h100-256-70b-2d", "tt-h100-256-70b-2d-async", "tt-h100-8-eager"):
        x = rows[key]
        batch_ranks = x["gpus"] // x["tp"]  # FSDP 32 x TP 8 on 256 GPUs; FSDP 8 alone
        want = batch_ranks * x["micro_batch"] * x["seq_len"] * x["accumulation"] / x["step_s"] / x["gpus"]
        assert x["predicted_tokens_per_s"] == pytest.approx(want, rel=REL)
