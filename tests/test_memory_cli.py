"""`zerosim memory` and `zerosim figures`: the numbers printed are the ledgers', beside the formulas."""

import json
import re
from pathlib import Path

import pytest

from zerosim.cli.main import main

GB = 10**9


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_memory_prints_the_papers_figure_1(capsys):
    code, out, _ = run(capsys, "memory", "--params", "7.5e9", "--ranks", "64")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    # stage: ledger total and formula side by side, GB to 3 decimals (the paper prints 120 / 31.4 / 16.6 / 1.9)
    for stage, total in {"0": "120.000", "1": "31.406", "2": "16.641", "3": "1.875"}.items():
        assert rows[stage].split("|")[1].split() == [total, total]
    assert "ZeRO paper (2+2+K)Ψ, K=12" in out and "DeepSpeed estimators" in out  # the conventions table


def test_memory_says_seed001s_printed_table_is_an_erratum(capsys):
    _, out, _ = run(capsys, "memory", "--params", "7e9", "--ranks", "8", "--no-step")
    assert "21.5 GB (ZeRO-1) and 15.75 GB (ZeRO-2)" in out
    assert "give 38.5 and 26.25 GB" in out and "erratum" in out
    assert "ERRATUM" in out  # the conventions table's own row for seed 001's printed numbers (7B, N = 8)
    totals = [line.split("|")[1].split()[0] for line in out.splitlines() if line[:1].isdigit()]
    assert totals == ["112.000", "38.500", "26.250", "14.000"]


def test_memory_json_is_the_ledgers_in_bytes(capsys):
    code, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "7", "--json")
    assert code == 0
    r = json.loads(out)
    assert (r["model"], r["params"], r["ranks"]) == ("gpt2-small", 124_439_808, 7)
    for row in r["stages"]:
        assert row["ledger_total"] == row["formula_total"] == sum(row["resting"].values())
        assert row["resting"] == row["formula"] and row["ranks_agree"]
        assert row["formula_unpadded_total"] <= row["formula_total"]  # 7 does not divide Ψ: padding is real
    assert r["stages"][3]["peak"] > r["stages"][3]["ledger_total"]  # a gathered block on top of the shards
    assert r["seed001_erratum"]["stages"] == [1, 2]
    assert len(r["conventions"]) >= 7


def test_memory_with_lion_has_one_optimizer_state(capsys):
    _, out, _ = run(capsys, "memory", "--params", "1e6", "--ranks", "4", "--optimizer", "lion", "--json")
    kinds = set(json.loads(out)["stages"][0]["resting"])
    assert kinds == {"params", "grads", "master", "optim:m"}


@pytest.mark.parametrize("argv, message", [
    (("--params", "1.5"), "whole number"),
    (("--ranks", "0"), "at least 1"),
])
@pytest.mark.bad_input("command line")
def test_memory_bad_arguments_are_clear_errors(capsys, argv, message):
    code, _, err = run(capsys, "memory", *argv)
    assert code == 2 and message in err


@pytest.mark.slow
def test_figures_writes_the_memory_png(capsys, tmp_path):
    # its own figure alone: every figure at once (~10 s) is the docs' `zerosim figures`, run by CI's heavy lane
    # (tests/test_readme_commands.py HEAVY)
    code, out, _ = run(capsys, "figures", "--out", str(tmp_path), "--only", "memory_by_stage")
    path = tmp_path / "memory_by_stage.png"
    assert code == 0 and str(path) in out
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_pure_fp32_gives_seed_002s_row_for_gpt3(capsys):
    # Seed 002: pure fp32 keeps params 4 + grads 4 + Adam m 4 + v 4 = 16 bytes per parameter "on every
    # replica": 175B x 16 = 2800 GB. The preset has 174,604,259,328 parameters: 16 x that = 2793.668 GB,
    # on every replica, whatever N (8 here: 174,604,259,328 = 8 x 21,825,532,416, so no padding).
    code, out, _ = run(capsys, "memory", "--model", "gpt3-175b", "--ranks", "8", "--precision", "fp32", "--json")
    r = json.loads(out)
    stage0 = r["stages"][0]
    assert code == 0 and stage0["ledger_total"] == stage0["formula_total"] == 16 * 174_604_259_328
    assert stage0["sent"] == stage0["sent_formula"]  # fp32 on the wire: 4 bytes per element
    row = next(c for c in r["conventions"] if c["name"].startswith("seed 002 pure fp32"))
    assert row["bytes"][0] == 16 * 174_604_259_328 and row["bytes"][1:] == [None, None, None]


def test_memory_counts_the_quantized_gathers_bytes_and_what_lands(capsys):
    """GPT-2 small on 8 ranks: Ψ = 124,439,808 = 8 · 15,554,976 (s), 15 units, the largest the embedding's
    38,597,376 elements, over the shards of ranks 0, 1 (s each) and 2 (7,487,424). Stage 3 sends two gathers and
    one reduce-scatter, each (N−1)·s elements a rank:
      fp16:           3 · 2 B · 7s                                   = 653,308,992
      fp8 (torchao):  2 · 1 B · 7s + 2 B · 7s + the amax all-reduce of 15 fp32 (2 · 7 · ceil(15/8) · 4 = 112)
                                                                     = 435,539,440
    and while the embedding lands, before it is dequantized (kind "comm"):
      fp8:            its 38,597,376 e4m3 bytes + the amax all-reduce's staged 8 · ceil(15/8) fp32 (64 B)
      qwZ, 64:        int8 padded to whole groups, 2 · 15,555,008 + 7,487,424 (243,047 + 243,047 + 116,991
                      groups), and 4 B a group = 38,597,440 + 2,412,340 = 41,009,780"""
    rows = {}
    for name, flags in [("fp16", ()), ("fp8", ("--fp8-all-gather",)),
                        ("qwZ", ("--zero-quantized-weights", "--weight-groups", "64"))]:
        code, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "8", "--json", *flags)
        assert code == 0
        rows[name] = json.loads(out)
    s = 15_554_976
    three = {k: r["stages"][3] for k, r in rows.items()}
    assert three["fp16"]["sent"] == 3 * 2 * 7 * s == 653_308_992
    assert three["fp8"]["sent"] == 2 * 7 * s + 2 * 7 * s + 112
    assert "comm" not in three["fp16"]["peak_by_kind"]
    assert three["fp8"]["peak_by_kind"]["comm"] == 38_597_376 + 64
    assert three["qwZ"]["peak_by_kind"]["comm"] == 2 * 15_555_008 + 7_487_424 + 4 * (2 * 243_047 + 116_991)
    for k in ("fp8", "qwZ"):  # stages 0-2 gather no weights: their rows are the unquantized run's
        assert rows[k]["stages"][:3] == rows["fp16"]["stages"][:3]
    assert rows["fp8"]["wire"] == "e4m3, one scale a unit (torchao's enable_fsdp_float8_all_gather)"
    code, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "8", "--fp8-all-gather")
    assert "Stage 3 gathers its weights as e4m3, one scale a unit (torchao's enable_fsdp_float8_all_gather)." in out
    assert "dequantized (kind 'comm') peaks at 0.039 GB a rank." in out


@pytest.mark.parametrize("argv, message", [
    (("--weight-groups", "64"), "--weight-groups sets qwZ's group size: add --zero-quantized-weights"),
    (("--zero-quantized-weights", "--fp8-all-gather"), "--zero-quantized-weights (DeepSpeed's int8 gathers) and "
                                                        "--fp8-all-gather (torchao's e4m3 gathers) both quantize"),
    (("--zero-quantized-weights", "--weight-groups", "0"), "--weight-groups is qwZ's group size in elements"),
])
@pytest.mark.bad_input("command line")
def test_memory_wire_flags_refused_clearly(capsys, argv, message):
    code, _, err = run(capsys, "memory", "--params", "1e6", "--ranks", "4", *argv)
    assert code == 2 and message in err


def test_memory_without_a_step_prints_no_bytes_sent(capsys):
    """--no-step runs no step: nothing was sent, so the table and the per-pipeline-rank table print a dash (JSON null)
    beside the formula, which is what one step would send, and the header says when the ledgers were read."""
    _, out, _ = run(capsys, "memory", "--params", "7e9", "--ranks", "8", "--no-step")
    rows = [line for line in out.splitlines() if line[:1].isdigit()]
    # stage | ledger formula | peak sent 2Ψ-or-3Ψ: 2Ψ·(N−1)/N = 2·7e9·2 B·7/8 = 24.5 GB; 3Ψ at stage 3, 36.75 GB
    assert [row.split("|")[2].split()[1:] for row in rows] == [["—", "24.500"]] * 3 + [["—", "36.750"]]
    assert "after initialisation" in out and "No step was run (--no-step)" in out
    _, out, _ = run(capsys, "memory", "--params", "7e9", "--ranks", "8", "--no-step", "--json")
    assert [row["sent"] for row in json.loads(out)["stages"]] == [None] * 4
    _, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "8", "--pp", "2", "--no-step")
    ranks = out[out.index("GB each pipeline rank sent"):].splitlines()[2:4]
    assert [line.split()[1::2] for line in ranks] == [["—"] * 4] * 2  # rank, then (sent, formula) per ZeRO stage
    assert "recorded them after initialisation" in out
    _, out, _ = run(capsys, "memory", "--params", "7e9", "--ranks", "8")  # a step: the trace's bytes, as the formula
    assert [row.split("|")[2].split()[1:] for row in out.splitlines() if row[:1].isdigit()] == \
        [["24.500", "24.500"]] * 3 + [["36.750", "36.750"]]
    assert "No step was run" not in out


def test_stage_3s_sent_beside_3_psi_says_by_how_much_and_why(capsys):
    """GPT-2 small on 8 ranks, Ψ = 124,439,808 = 8 · 15,554,976 (s), the flat vector sharded rank by rank; 3Ψ sends
    3 · Ψ · 7/8 · 2 B = 653,308,992 a rank. Under each schedule, stage 3 with block checkpointing:
      seed 004's (a gather for every use): the transformer blocks (the flat range [39,383,808, Ψ − 1,536), the
      final LayerNorm's 1,536 after them: 85,054,464 elements; the embedding and the head are not recomputed) are
      gathered again for their recompute; a ring all-gather of a window sends from rank r all of it but rank r+1's
      part, and ranks 0 and 1 own none of that range, so ranks 7 and 0 send all of it: 85,054,464 · 2 B =
      170,108,928 more than 3Ψ, 0.78 of one gather of Ψ (217,769,664 below);
      DeepSpeed's (a unit used again within stage3_max_reuse_distance = 1e9 elements stays gathered): every unit is
      gathered once, for forward: one gather of Ψ less, 124,439,808 · 2 B · 7/8 = 217,769,664 (0.218 GB);
      FSDP's: 3Ψ (a unit freed after each use, but the next prefetched: a recompute and its backward share one
      gather): no line."""
    lines = {}
    for comm in ("seed", "deepspeed", "fsdp"):
        _, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "8", "--seq-len", "64", "--checkpoint",
                        "block", "--comm", comm)
        lines[comm] = " ".join(out[out.index("At stage 3"):].split("\n\n")[0].split()) if "At stage 3" in out else None
    assert lines["seed"].startswith("At stage 3 the busiest rank sent 0.170 GB more than 3Ψ (0.78 of one gather of "
                                    "Ψ): each unit its recompute reads is gathered again"), lines["seed"]
    assert lines["deepspeed"].startswith("At stage 3 the busiest rank sent 0.218 GB less than 3Ψ (1.00 of one "
                                         "gather of Ψ): a unit kept gathered"), lines["deepspeed"]
    assert lines["fsdp"] is None
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "explanation" / "memory.md").read_text().split())
    for comm, said in (("seed", "{} more on the busiest rank"), ("deepspeed", "one gather of Ψ less on a model that "
                                                                           "small ({})")):
        gb = re.search(r"sent ([\d.]+ GB)", lines[comm]).group(1)  # what the command prints, the page quotes
        assert said.format(gb) in page, (comm, gb)
    _, out, _ = run(capsys, "memory", "--model", "gpt2-small", "--ranks", "8", "--seq-len", "64", "--checkpoint",
                    "block", "--json")
    three = json.loads(out)["stages"][3]
    assert (three["sent"], three["sent_formula"]) == (653_308_992 + 170_108_928, 653_308_992)


# GPT-2 small's parameters on one rank of TP 2, by hand (Megatron's layout: column-parallel weights and biases cut in
# two, row-parallel weights cut, their biases and the LayerNorms whole; the vocabulary padded to 128·tp):
TP2_RANK = (
    50_432 * 768 // 2  # wte, vocabulary-parallel: 50,257 padded to 50,432 (a multiple of 256), half the rows
    + 1_024 * 768  # wpe, whole
    + 12 * (
        2 * 768  # ln_1's weight and bias
        + 768 * 2_304 // 2 + 2_304 // 2  # c_attn: column-parallel Q, K, V and their bias
        + 768 * 768 // 2 + 768  # attention's c_proj: row-parallel, its bias whole
        + 2 * 768  # ln_2
        + 768 * 3_072 // 2 + 3_072 // 2  # c_fc: column-parallel, and its bias
        + 3_072 * 768 // 2 + 768  # the MLP's c_proj: row-parallel, its bias whole
    )
    + 2 * 768  # ln_f
)  # = 62,708,736


def test_stage_3s_note_beside_tensor_parallelism_counts_gathers_of_the_ranks_slice(capsys):
    """Beside TP the formula adds TP's activations to ZeRO's 3Ψ of a rank's slice: the note gives the difference from
    the formula (the trace's bytes less the formula's, as --json gives them) in GB and in gathers of that slice, and
    the same causes. GPT-2 small on 8 GPUs, TP 2 (dp 4), block checkpointing: one gather of the slice is its
    62,708,736 elements · 3/4 · 2 B = 94,063,104 B a rank. DeepSpeed keeps every unit gathered from forward to
    backward (the model is under stage3_max_reuse_distance): one gather less. The seed's schedule gathers the blocks
    (elements 20,152,320 to 62,707,200 of the slice: 42,554,880) again for their recompute, the embedding and the
    head not; a ring all-gather of that window sends from a rank all of it but its successor's part, and the rank
    whose successor holds the first quarter (elements 0 to 15,677,184, outside the window) sends it all:
    42,554,880 · 2 B = 85,109,760 B more, 0.90 of one gather."""
    argv = ("memory", "--model", "gpt2-small", "--ranks", "8", "--seq-len", "64", "--checkpoint", "block", "--tp", "2")
    one_gather = TP2_RANK * 3 // 4 * 2
    assert (TP2_RANK, one_gather) == (62_708_736, 94_063_104)
    for comm, word in (("seed", "more"), ("deepspeed", "less"), ("fsdp", None)):
        _, out, _ = run(capsys, *argv, "--comm", comm)
        _, js, _ = run(capsys, *argv, "--comm", comm, "--json")
        three = json.loads(js)["stages"][3]
        assert three["sent_formula_zero"] == 3 * one_gather
        note = " ".join(out[out.index("At stage 3"):].split()) if "At stage 3" in out else None
        if word is None:
            assert note is None and three["sent"] == three["sent_formula"]
            continue
        assert three["sent"] - three["sent_formula"] == (42_554_880 * 2 if word == "more" else -one_gather)
        gb = abs(three["sent"] - three["sent_formula"]) / 1e9
        assert note.startswith(f"At stage 3 the busiest rank sent {gb:.3f} GB {word} than its formula"), note
        gathers = "0.90" if word == "more" else "1.00"  # 85,109,760 / 94,063,104 = 0.905
        assert f"{gathers} of one gather of the rank's Ψ" in note.split("):")[0], note
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "explanation" / "memory.md").read_text().split())
    assert ("with `--tp 2` the same GPT-2 small sends 0.90 of one gather of a TP rank's slice more under seed 004's "
            "schedule" in page and "and one less under DeepSpeed's" in page)  # what the page says of it
