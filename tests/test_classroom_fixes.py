"""Small things a learner met on the way (issue 62's list), each checked where it is said: the memory report names
gpt2-small's 15 units as units, not blocks; `zerosim replay --stage 3` says why GPU 0 sends 16 B and GPU 1 12 B; the
2 × 2 mesh replay says why GPUs 1 and 3 own padding; assignment 1's feedback on a bf16 prediction cites bf16's spacing;
the seeds' page quotes the L² term block checkpointing keeps as the run measures it; the explorer's verdict counts
what no ledger sees, as `zerosim memory --gpu` does.
"""

import contextlib
import io
import re
from pathlib import Path

import numpy as np

from zerosim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def printed(argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_the_memory_header_counts_units_not_blocks():
    from zerosim.analysis.costs import get_preset

    line = printed(["memory", "--model", "gpt2-small", "--ranks", "8"]).splitlines()[0]
    # GPT-2 small: 12 blocks (its config's n_layer), and the embeddings, final norm and head as units of their own
    assert get_preset("gpt2-small").config.n_layers == 12
    assert "(gpt2-small, 15 units: its blocks and the layers outside them)" in line and "blocks)" not in line


def test_replay_stage_3_says_why_the_two_gpus_send_16_and_12_bytes():
    text = " ".join(printed(["replay", "--stage", "3"]).split())
    assert "bytes sent this step: GPU 0 16 B, GPU 1 12 B" in text
    # by hand: layer 1 (w1, w2: 4 B) lies in GPU 0's shard and is gathered in forward, in checkpointing's recompute
    # and in backward; layer 2 (w3, w4) in GPU 1's, gathered in forward and backward
    assert "GPU 0 its layer1 params 3 × 4 B, GPU 1 its layer2 params 2 × 4 B" in text


def test_the_mesh_replay_says_why_two_gpus_own_padding():
    text = printed(["replay", "--mesh", "2x2", "--strategy", "hsdp"])
    assert "owns padding, padding, padding, padding" in text
    assert "why padding: FSDP2 cuts each parameter along its first dimension, Shard(0)" in text
    assert "(1, 2), (1, 1), (1,)" in text  # TinyNet's weights: one row each


def test_a_bf16_prediction_is_told_bf16s_spacing():
    from zerosim.teaching.assignments import get

    exact = {"fp16": [2051.0] * 4, "bf16": [2051.0] * 4}  # the exact sum, which neither format holds
    said = {}
    for t in get(1).tests:
        if t.exercise.function == "predict_2048":
            for case in t.exercise.cases():
                try:
                    t.exercise.check(lambda: exact, case)
                except Exception as e:  # the Counterexample: the feedback a student reads
                    said[case["fmt"]] = str(e)
    # spacing above 2048: fp16 keeps 11 significant bits (2**11 / 2**10 = 2), bf16 8 (2**11 / 2**7 = 16)
    assert "bf16 cannot hold (its spacing above 2048 is 16)" in said["bf16"]
    assert "fp16 cannot hold (its spacing above 2048 is 2)" in said["fp16"]


def test_the_seeds_page_quotes_the_l2_term_block_checkpointing_keeps():
    from zerosim.analysis.costs import strategy_costs

    (row,) = strategy_costs(4, 2048, vocab=50257, d_model=4096, n_heads=32, n_layers=32, strategies=("block",))
    one_p = 4 * 32 * 2048 * 2048 * 2  # B·H·L² fp16 values: the rebuilt block's P
    page = " ".join((ROOT / "docs" / "seeds.md").read_text().split())
    quoted = re.search(r"\| 001\.75 \|[^|]*keeps its P \(B·H·L², ([\d.]+) GB of block checkpointing's ([\d.]+) GB",
                       page)
    assert quoted and (float(quoted[1]), float(quoted[2])) == (round(one_p / 1e9, 2), round(row["peak"] / 1e9, 2))


def test_the_notebook_explorers_verdict_counts_the_estimates():
    from zerosim.analysis.costs import GPUS
    from zerosim.explore import Settings, explore

    n = explore(Settings())  # Llama-2-7B on 8 H100s at ZeRO-3, L = 4096, block checkpointing
    # CUDA context (pytorch#86509), NCCL's buffers on an 8xH100 node (NVIDIA/nccl#1685), the allocator's 5 %
    assert n["estimates"] == 287_047_680 + 1_060_000_000 + n["peak"] * 5 // 100
    assert n["total"] == n["peak"] + n["estimates"] and n["fits"] == (n["total"] <= GPUS["h100-80gb"].capacity)
    assert np.isclose(n["total"] / 1e9, 19.04, atol=0.005)


def test_a_wide_table_scrolls_on_a_phone_instead_of_running_off_it():
    """The learning path's six-column table ran past a 390-px screen's right edge on the docs site (Material's table
    wrapper let it overflow unseen). The site's stylesheet keeps the wrapper to the screen and lets it scroll; seen in
    Chromium at 390 px after `mkdocs build`: the table 356 px wide, its 529 px scrolled to."""
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^extra_css:\n  - stylesheets/extra\.css", config, re.M)
    css = re.sub(r"/\*.*?\*/", "", (ROOT / "docs" / "stylesheets" / "extra.css").read_text(), flags=re.S)
    rule = re.search(r"\.md-typeset__table\s*\{([^}]*)\}", css)
    assert rule and "max-width: 100%" in rule[1] and "overflow-x: auto" in rule[1]
