"""Issue 60, Must show 4: the Llama 3 paper's CP 16 row and torchtitan's 4-D rows (Table 6) expressed — context
parallelism beside TP, a pipeline and FSDP — beside their published numbers with the error, held out (nothing fitted
to them), every number docs/validation.md quotes of them checked here. Each is one 405B pipeline step on the
meta backend and its timeline: tens of seconds a row."""

import re
from pathlib import Path

import pytest

from zerosim.analysis.costs import LONG_CONTEXT, POINTS, model_flops_per_token
from zerosim.analysis.costs._validation_points import config_of
from zerosim.models.hf._config import read_hf_config

PAGE = " ".join((Path(__file__).resolve().parents[1] / "docs" / "validation.md").read_text().split())
BY_KEY = {p.key: p for p in LONG_CONTEXT}

# as the sources print them: (CP, sequence, tokens/s per GPU, reserved GiB), torchtitan b5bcd76
# benchmarks/llama3_h100_202412_torchtitan.md, Table 6 (TP 8, PP 8, FSDP 8 / CP, local batch 8)
TABLE_6 = [
    (1, 32768, 76, 75.3),  # 'FSDP 8, CP 1'
    (2, 65536, 47, 75.9),  # 'FSDP 4, CP 2'
    (4, 131072, 31, 77.1),  # 'FSDP 2, CP 4'
    (8, 262144, 16, 84.9),  # 'FSDP 1, CP 8'
]


def test_the_4d_rows_are_typed_in_as_published_and_held_out():
    assert not {p.key for p in POINTS} & set(BY_KEY)  # apart from issue 36's table and its statistics
    for cp, seq, tps, mem in TABLE_6:
        p = BY_KEY[f"tt-h100-512-405b-4d-cp{cp}"]
        assert (p.role, p.gpus, p.tp, p.pp, p.cp, p.seq_len, p.tokens_per_s, p.memory_gib) == (
            "held-out", 512, 8, 8, cp, seq, tps, mem)
        assert 512 // (p.tp * p.pp * p.cp) == 8 // cp  # the row's FSDP degree
        assert p.micro_batch * p.accumulation == 8  # local batch 8: the pp degree's 8 micro-batches of one sequence
        # torchtitan 9dec370 runs torch's context_parallel (context_parallel_rotate_method "allgather", head-tail)
        assert (p.cp_style, p.cp_split) == ("torch", "zigzag")
    llama = BY_KEY["llama3-h100-16k-405b-cp16"]
    # Table 4's row: 16,384 GPUs, TP 8, CP 16, PP 16, 131,072 tokens, 16 sequences a data-parallel rank, 380 TFLOPs
    assert (llama.role, llama.gpus, llama.tp, llama.cp, llama.pp, llama.seq_len) == (
        "held-out", 16384, 8, 16, 16, 131072)
    assert (llama.micro_batch * llama.accumulation, llama.model_tflops, llama.tokens_per_s) == (16, 380, None)
    dp = llama.gpus // (llama.tp * llama.cp * llama.pp)
    assert dp == 8 and dp * 16 * 131072 == 16_777_216  # the row's "16M" tokens a batch, which its "DP 4" would halve
    assert (llama.cp_style, llama.cp_split, llama.virtual_stages) == ("allgather", "zigzag", 8)
    # torchtitan's split at V = 8: 126 layers and the two ends over 16 · 8 = 128 stages, one piece each
    from zerosim.parallel.pipeline._stages import _torchtitan

    assert _torchtitan(126, 128, True, True) == [0] + [1] * 126 + [0]


def test_the_llama_3_rows_measured_tokens_come_from_its_tflops_by_the_one_flops_count():
    """380 TFLOP/s per GPU over 6·(Ψ − V·d) + 12·126·128·128·131,072 FLOPs a token (costs/_throughput.py)."""
    config = read_hf_config(config_of(BY_KEY["llama3-h100-16k-405b-cp16"]))
    dense = 6 * (405_853_388_800 - 128256 * 16384)  # the parameters but the token embedding, 2 + 4 FLOPs each
    attention = 12 * 126 * 128 * 128 * 131072  # QK^T and PV over the whole L × L, forward and backward
    assert model_flops_per_token(config, 131072) == dense + attention == 5_669_507_530_752
    assert f"{380e12 / (dense + attention):.0f}" == "67"
    for quoted in ("5.67 TFLOP a token", "its 380 TFLOPs are 67 tokens/s per GPU", "8 · 16 · 16 · 8 = 16,384",
                   "8 · 16 · 131,072 = 16.8M", "126 layers and the two ends over 128 stages, one each"):
        assert quoted in PAGE, quoted
    assert f"{(dense + attention) / 1e12:.2f}" == "5.67" and f"{8 * 16 * 131072 / 1e6:.1f}" == "16.8"


def sign(x: float, digits: int = 1) -> str:
    return ("+" if x >= 0 else "−") + f"{abs(x):.{digits}f}"


# a 405B pipeline step on 512 or 16,384 GPUs and its timeline: 0.6-2.3 s each here, in the README's test command
# since the sends of the ranks a stage's representative stands for are one record a CP ring's call (3-10 s each, in
# CI's heavy lane, while they were a hop each; 9-111 s while each stage's ring recorded every rank of the world)
@pytest.mark.slow
@pytest.mark.parametrize("key", list(BY_KEY))
def test_each_4d_row_is_the_prediction_the_page_quotes(key):
    from zerosim.analysis.planner._validate import validate

    (r,) = validate([BY_KEY[key]])
    p = r.point
    # tokens per GPU by hand: each of the N / (TP·CP·PP) data-parallel ranks' B·L·M tokens, over every GPU
    dp = p.gpus // (p.tp * p.cp * p.pp)
    assert r.tokens_per_s == pytest.approx(dp * p.micro_batch * p.seq_len * p.accumulation / r.step_s / p.gpus,
                                           rel=1e-12)
    measured = f"{r.measured_tokens_per_s:,.0f}"
    memory = (re.escape(f"{p.memory_gib} | {r.reserved / 2**30:.1f} | {sign(100 * r.memory_error, 0)} % |")
              if p.memory_gib else re.escape("| |"))
    row = (rf"\| `{key}` \|[^|]*" + re.escape(f"| {measured} | {r.tokens_per_s:,.0f} | {sign(100 * r.error)} % | ")
           + memory)
    assert re.search(row, PAGE), row
    if key.startswith("llama3"):
        quoted = (f"MFU {100 * r.mfu:.1f} % against the paper's {100 * r.measured_mfu:.1f} %",
                  f"Of zerosim's {r.step_s:.1f} s step, {r.exposed_s:.1f} s is communication no compute hid")
        for q in quoted:
            assert q in PAGE, q
