"""`zerosim memory` and `zerosim figures`: the numbers printed are the ledgers', beside the formulas."""

import json

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
    code, out, _ = run(capsys, "figures", "--out", str(tmp_path))
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
