"""The numbers docs/tensor-parallelism.md quotes in issue 57's sections are the package's: each read from the page
and recomputed here (the commands the page runs are checked by tests/test_readme_commands.py)."""

import re
from pathlib import Path

import pytest

PAGE = " ".join((Path(__file__).resolve().parents[1] / "docs" / "tensor-parallelism.md").read_text().split())


def quoted(pattern: str) -> tuple:
    match = re.search(pattern, PAGE)
    assert match, pattern
    return match.groups()


def test_the_layout_table_is_zerosims_and_torchs():
    from test_tp_activations import MIB, TORCH_MIB, zerosim_block

    for tp in (2, 4, 8):
        row = rf"\| {tp} \| ([\d.]+) MiB \| ([\d.]+) MiB \| ([\d.]+) MiB \|"
        torch, titan, megatron = (float(x) for x in quoted(row))
        assert torch == round(TORCH_MIB[tp], 2) == titan == round(zerosim_block(tp, "torchtitan") / MIB, 2)
        assert megatron == round(zerosim_block(tp, "megatron", kernels="fused") / MIB, 2)


@pytest.mark.slow  # two 70B steps at TP 8: ~4 s
def test_the_fp8_section_is_the_timelines():
    from test_tp_fp8 import SEVENTY, zerosim

    without, with_fp8 = quoted(r"compute ([\d.]+) s without fp8, ([\d.]+) s with it")
    for flags, said in (([], without), (["--fp8-gemms"], with_fp8)):
        value, unit = re.search(r"^  compute\s+([\d.]+) (m?s)", zerosim("timeline", *SEVENTY, *flags), re.M).groups()
        assert f"{float(value) / (1e3 if unit == 'ms' else 1):.3f}" == said


@pytest.mark.slow  # two 405B steps: ~6 s
def test_the_overlap_section_is_the_timelines(tmp_path):
    from test_tp_overlap import DP, hidden_share, step

    said = (r"FSDP's all-gathers and reduce-scatters take ([\d.]+) s of the step and compute hides \*\*(\d+) %\*\* of "
            r"them, as it hides \*\*(\d+) %\*\* of the same model's ([\d.]+) s at TP 1")
    seconds8, share8, share1, seconds1 = quoted(said)
    one, eight = step(tmp_path, 1), step(tmp_path, 8)
    for r, seconds, share in ((eight, seconds8, share8), (one, seconds1, share1)):
        assert round(sum(r.by_purpose[p]["seconds"] for p in DP), 1) == float(seconds)
        assert round(100 * hidden_share(r)) == int(share)


@pytest.mark.slow  # the 70B row twice and the validation table's two TP points: ~3 s
def test_the_70b_tables_are_the_predictions():
    from zerosim.analysis.costs._validation_points import POINTS
    from zerosim.analysis.planner import TORCHTITAN_70B, predict_published_run
    from zerosim.analysis.planner._validate import validate

    plain, bound = (predict_published_run(r) for r in TORCHTITAN_70B)
    memory, ledger, estimates, error = quoted(r"\| memory per GPU \(peak reserved\) \| 71.9 GiB \| ([\d.]+) GiB "
                                              r"\(([\d.]+) ledger \+ ([\d.]+) estimates\) \| −([\d.]+) % \|")
    assert (round(plain["memory_gib"], 1), round(plain["ledger_peak_gib"], 1)) == (float(memory), float(ledger))
    assert round(sum(plain["estimates_gib"].values()), 1) == float(estimates)
    assert round(-100 * plain["memory_error"], 1) == float(error)
    for row, p in (("tokens/s/GPU", plain), ("tokens/s/GPU with async TP", bound)):
        tokens, err = quoted(rf"\| {re.escape(row)} \| 8\d\d \| ([\d,]+) \((?:the dense-peak ceiling|a bound)[^|]*\| "
                             r"\+([\d.]+) % \|")
        assert (round(p["tokens_per_s_per_gpu"]), round(100 * p["throughput_error"], 1)) == (
            int(tokens.replace(",", "")), float(err))
    rows = {r.point.key: r for r in validate([p for p in POINTS if p.tp > 1])}
    two_d, async_tp = rows["tt-h100-256-70b-2d"], rows["tt-h100-256-70b-2d-async"]
    signed = lambda x: f"{x:+.1f}".replace("-", "−")  # noqa: E731 (the page's minus sign)
    assert quoted(r"\| tokens/s/GPU \| 829 \| ([\d,]+) \| ([+−][\d.]+) % \|") == (
        f"{two_d.tokens_per_s:,.0f}", signed(100 * two_d.error))
    assert quoted(r"\| tokens/s/GPU with async TP \| 876 \| ([\d,]+) \(async TP as a bound\) \| ([+−][\d.]+) % \|") == (
        f"{async_tp.tokens_per_s:,.0f}", signed(100 * async_tp.error))
    assert quoted(r"\| 71.9 / 67.6 GiB \| ([\d.]+) GiB \| −(\d+) % / −(\d+) % \|") == (
        f"{two_d.reserved / 2**30:.1f}", f"{-100 * two_d.memory_error:.0f}", f"{-100 * async_tp.memory_error:.0f}")


@pytest.mark.slow  # one 70B step at TP 8 in Megatron's layout: ~3 s
def test_megatrons_layout_sends_what_the_page_says():
    from zerosim.analysis.reports import Workload, timeline_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models import MetaLlama, read_hf_config, shipped_config
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.parallel.data.multinode import DataMesh

    gb, calls = quoted(r"In Megatron's layout \(`--tp-layout megatron`[^)]*\)\) backward all-gathers each column "
                       r"GEMM's input again: ([\d,]+) GB in ([\d,]+) calls")
    model = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-70b")), 8192, checkpoint="block",
                                  kernels="eager")
    work = Workload(model, (16, 8192), get_comm_schedule("fsdp"), "bf16-mixed", "bf16-mixed", "adam")
    r = timeline_step(work, DataMesh.of(3, 256, 8, tp=8), Hardware("h100", "nvlink4", "bf16", inter_link="ib_ndr"),
                      sp=True, layout="megatron")
    intra = r.tiers["intra-node"]
    assert (f"{intra['bytes_per_rank'] / 1e9:,.0f}", f"{intra['calls']:,}") == (gb, calls)


@pytest.mark.slow  # every validation point once: ~5 s
def test_the_validation_page_quotes_the_tp_rows_and_the_summary():
    from zerosim.analysis.planner._validate import summary, validate

    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "validation.md").read_text().split())
    rows = validate()
    by_key = {r.point.key: r for r in rows}
    for key in ("tt-h100-256-70b-2d", "tt-h100-256-70b-2d-async"):
        r = by_key[key]
        sign = lambda x: ("+" if x >= 0 else "−") + f"{abs(x):.1f}"  # noqa: E731
        error = re.escape(sign(100 * r.error))
        row = (rf"\| held-out \| `{key}` \|[^|]*\| [\d,]+ \| {r.tokens_per_s:,.0f} \| {error} % \| "
               rf"[\d.]+ \| {r.reserved / 2**30:.1f} \| −{-100 * r.memory_error:.0f} % \|")
        assert re.search(row, page), row
    stats = summary(rows)
    median = f"{100 * stats['held-out']['median_abs_error']:.1f}"
    assert f"| median \\|predicted / measured − 1\\| | ≤ 15 % | **{median} %** |" in page
    assert f"largest {100 * stats['memory']['max_abs_error']:.1f} % (nothing fitted)" in page
