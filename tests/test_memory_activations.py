"""`zerosim memory --seq-len`: activations measured by the ledgers join the model states, as seed 001 §6 adds them.

The numbers are checked against seed 001's (7B-class shape: gpt3-6.7b, d = 4096, H = 32, 32 layers; L = 2048,
B = 4, fp16) and against the model-state columns of the same command without --seq-len, which must not move.
Seed 001 counts what fused kernels keep: the commands here say --kernels fused (the CLI's default, eager, keeps
what PyTorch eager's autograd keeps: tests/test_eager_kernels.py).
"""

import json

import pytest

from zerosim.cli.main import main

GB = 10**9
B, L, D, H, V = 4, 2048, 4096, 32, 50257
BLD2, STAT = B * L * D * 2, B * L * 4  # one fp16 (B, L, d) tensor; one fp32 LayerNorm statistic
LAYER = 14 * BLD2 + B * H * L * L * 2 + 4 * STAT  # 2,013,396,992: one block, seed 001 §5e's tensors + LN statistics
OUTSIDE = B * L * 8 + BLD2 + 2 * STAT + B * L * V * 4 + B * L * 8  # ids, final LN input and statistics, loss's cache


def run_json(capsys, *argv):
    fused = ("--kernels", "fused") if "--seq-len" in argv else ()
    assert main(["memory", *argv, *fused, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_seed_001s_grand_total_through_the_command(capsys):
    r = run_json(capsys, "--model", "gpt3-6.7b", "--ranks", "1", "--seq-len", "2048", "--batch", "4")
    a = r["activations"]
    assert a["per_block"] == {"block input": BLD2, "LN1 mean": STAT, "LN1 rstd": STAT, "Q": BLD2, "K": BLD2, "V": BLD2,
                              "P": B * H * L * L * 2, "attention output": BLD2, "pre-FFN input": BLD2,
                              "LN2 mean": STAT, "LN2 rstd": STAT, "x1": 4 * BLD2, "x2": 4 * BLD2}
    # LN stats: +131,072
    assert a["per_block_total"] == LAYER and a["seed001_per_layer"] == 14 * BLD2 + B * H * L * L * 2
    assert a["peak"] == 32 * LAYER + OUTSIDE == 66_142_830_592 and a["peak_at"] == "loss.labels"  # when the loss runs
    stage0 = r["stages"][0]
    P = r["params"]
    assert P == 6_658_404_352  # GPT-3 6.7B in GPT-2 layout, tied head; seed 001 rounds to 7e9
    # "Grand total on a single GPU: ≈ 176 GB" = 16 × 7e9 + 64 GB. Here 16P = 106.53 GB (P < 7e9: −5.47 GB) and
    # 66.14 GB of activations (+1.71 GB outside the 32 layers): 172.68 GB, which is also the step's peak.
    assert (
        stage0["activations"] == a["peak"]
        and stage0["total"] == 16 * P + a["peak"] == stage0["peak"] == 172_677_300_224
    )


def test_activations_leave_the_model_states_as_they_were(capsys):
    plain = run_json(capsys, "--model", "gpt2-small", "--ranks", "3")
    acts = run_json(
        capsys, "--model", "gpt2-small", "--ranks", "3", "--seq-len", "64", "--batch", "2", "--checkpoint", "block"
    )
    assert plain["activations"] is None and acts["activations"]["checkpoint"] == "block"
    for a, b in zip(plain["stages"], acts["stages"]):
        assert a["resting"] == b["resting"] and a["ledger_total"] == b["ledger_total"] == b["formula_total"]
        assert b["total"] == b["ledger_total"] + b["activations"] and b["activations"] == acts["activations"]["peak"]
        assert b["peak"] >= b["total"] - b["activations"]


@pytest.mark.parametrize("strategy, peak", [
    ("none", 32 * LAYER + OUTSIDE),  # every layer's tensors when the loss runs
    # 31 block inputs + block 31 rebuilt (tests/test_meta_gpt.py derives each)
    ("block", B * L * 8 + 31 * BLD2 + LAYER),
    ("selective", 32 * (LAYER - B * H * L * L * 2) + OUTSIDE),  # no P
    ("flash", 32 * (LAYER - B * H * L * L * 2 + B * H * L * 4) + OUTSIDE),  # an fp32 LSE (B, H, L) instead of P
])
def test_each_checkpoint_strategy_at_7b(capsys, strategy, peak):
    r = run_json(
        capsys, "--model", "gpt3-6.7b", "--ranks", "8", "--seq-len", "2048", "--batch", "4", "--checkpoint", strategy
    )
    assert all(row["activations"] == peak for row in r["stages"])  # every stage: activations are per rank, unsharded


def test_the_l_8192_row_with_a_shape_of_its_own(capsys):
    # gpt3-6.7b's position table holds 2048 tokens; a --d-model GPT takes any length (its table grows with L)
    r = run_json(
        capsys,
        "--d-model",
        "4096",
        "--heads",
        "32",
        "--layers",
        "32",
        "--seq-len",
        "8192",
        "--batch",
        "4",
        "--ranks",
        "1",
    )
    a = r["activations"]
    assert a["per_block"]["P"] == 4 * 32 * 8192**2 * 2 == 17_179_869_184  # "≈ 17.2 GB per layer"
    assert 32 * a["per_block"]["P"] == 549_755_813_888  # "× 32 layers ≈ 550 GB"
    assert 32 * a["per_block_total"] == 670_031_675_392  # "the activation cost alone exceeds 550 GB"


def test_the_table_shows_the_activation_columns(capsys):
    assert main(["memory", "--model", "gpt3-6.7b", "--ranks", "8", "--seq-len", "2048", "--batch", "4",
                 "--kernels", "fused"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("stage"))
    assert "activ." in header and "total" in header
    row0 = next(line for line in out.splitlines() if line.startswith("0 "))
    assert row0.split("|")[2].split() == ["66.143", "172.677"]  # GB: activations, model states + activations
    assert "P                            1073.742" in out and "(seed 001's 14·B·L·d + B·H·L²: 2013.266)" in out
    assert "Activations are not counted" not in out
    assert main(["memory", "--params", "1e6", "--ranks", "2"]) == 0
    assert "Activations are not counted: add --seq-len" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (("--params", "7e9", "--seq-len", "2048"), "--seq-len needs a transformer shape"),
    (("--model", "llama-7b", "--seq-len", "4096"), "longer than llama-7b's max_position_embeddings of 2048 tokens"),
    (("--model", "gpt2-small", "--seq-len", "2048"), "longer than gpt2-small's position table (n_positions) of 1024"),
    (("--model", "gpt2-small", "--seq-len", "0"), "--seq-len and --batch must be at least 1"),
    (("--model", "gpt2-small", "--seq-len", "8", "--batch", "0"), "--seq-len and --batch must be at least 1"),
    (("--model", "gpt2-small", "--batch", "4"), "--batch describe activations: add --seq-len"),
    (("--model", "gpt2-small", "--checkpoint", "block"), "--checkpoint describe activations: add --seq-len"),
    (("--model", "gpt2-small", "--seq-len", "8", "--unit", "module"), "measured per transformer block"),
    (("--model", "gpt2-small", "--seq-len", "8", "--unit", "block", "--checkpoint", "subblock"), "drop --unit block"),
    (("--model", "gpt2-small", "--seq-len", "8", "--no-step"), "--no-step skips it"),
    (("--model", "gpt2-small", "--seq-len", "8", "--heads", "4"), "--heads and --vocab go with --d-model"),
    (("--model", "gpt2-small", "--seq-len", "8", "--d-model", "64", "--heads", "4", "--layers", "2"), "drop --params / "
                                                                                                      "--model"),
    (("--d-model", "64", "--seq-len", "8", "--layers", "2"), "--d-model needs --heads"),
    (("--d-model", "64", "--heads", "5", "--layers", "2", "--seq-len", "8"), "must split evenly into n_heads = 5"),
    (("--d-model", "64", "--heads", "4", "--layers", "2"), "--d-model, --heads describe activations"),
    (("--model", "gpt2-small", "--seq-len", "8", "--checkpoint", "all"), "invalid choice"),
])
@pytest.mark.bad_input("command line")
def test_bad_activation_flags_are_clear_errors(capsys, argv, message):
    try:
        code = main(["memory", *argv])
    except SystemExit as e:  # argparse's own refusals (an unknown --checkpoint) exit with 2 too
        code = e.code
    assert code == 2 and message in capsys.readouterr().err
