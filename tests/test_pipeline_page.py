"""The numbers docs/pipeline-parallelism.md quotes are the package's: each read from the page and checked here against
a hand value (the closed forms, seed 004's arithmetic in float64) and against a run (the commands the page prints are
run by tests/test_readme_commands.py, which checks what they print)."""

import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "pipeline-parallelism.md").read_text()
PAGE = " ".join(TEXT.split())  # the page's sentences, wherever its lines break


def quoted(pattern: str) -> tuple:
    match = re.search(pattern, PAGE)
    assert match, pattern
    return match.groups()


def percent(x: Fraction) -> str:
    return f"{100 * float(x):.1f} %"  # as the page writes a fraction: 3/11 = 27.3 %


# -- the bubble table --------------------------------------------------------------------------------------------
P, M = 4, 8  # the table's column: "P = 4, M = 8"
T_F, T_B, T_W = 1, 2, 1  # the zero-bubble row's "T_B = 2 T_F = 2 T_W" (a stage's times; only their ratios matter)
BY_HAND = {  # the page's row -> (schedules, V, the fraction by hand, with the formula the row prints)
    "GPipe, 1F1B": (("gpipe", "1f1b"), 1, Fraction(P - 1, M + P - 1)),  # (P − 1) / (M + P − 1) = 3/11
    "interleaved 1F1B": (("interleaved-1f1b",), 2, Fraction(P - 1, 2 * M + P - 1)),  # (P − 1) / (V·M + P − 1) = 3/19
    # idle (P − 1)(T_F + T_B − 2·T_W)/V = 3·1/2 a rank, of M·(T_F + T_B) + idle = 24 + 3/2: 1/17
    "zero bubble": (("zero-bubble",), 2, Fraction(3, 2) / (M * (T_F + T_B) + Fraction(3, 2))),
}


def table_row(name: str) -> tuple:
    """(the fraction, its percent, the V it names) of the bubble table's row `name`."""
    row = re.search(rf"^\| {re.escape(name)} \| [^|]+ \| (\d+)/(\d+) = ([\d.]+ %)(?: \(V = (\d)[,)])?", TEXT, re.M)
    assert row, name
    return Fraction(int(row.group(1)), int(row.group(2))), row.group(3), int(row.group(4) or 1)


def test_the_bubble_table_is_the_closed_forms():
    from zerosim.parallel.pipeline._costs import bubble_fraction

    assert "| schedule | bubble | P = 4, M = 8 |" in TEXT
    for name, (schedules, V, hand) in BY_HAND.items():
        fraction, said, v = table_row(name)
        assert (fraction, said, v) == (hand, percent(hand), V), name
        for schedule in schedules:  # the package's closed form, as _costs.py writes it (a stage's times)
            t_w = T_W if schedule == "zero-bubble" else 0
            assert bubble_fraction(schedule, P, M, V, T_F, T_B, t_w) == hand, schedule


@pytest.mark.slow  # four pipeline runs placed on the timeline: ~1.5 s on a busy machine
def test_the_bubble_table_is_what_the_timeline_measures():
    from zerosim.viz import measure_schedule

    for name, (schedules, V, hand) in BY_HAND.items():
        for schedule in schedules:  # the run the figure draws: each rank's idle share of the span, exactly
            run = measure_schedule(schedule, P, M, V)
            assert run["bubbles"] == [hand] * P, (schedule, run["bubbles"])
    # the figure's caption: "a forward costing 1 unit and a backward 2": GPipe's boxes on the run's timeline
    assert "a forward costing 1 unit and a backward 2" in PAGE
    rows = measure_schedule("gpipe", P, M, 1)["rows"]
    widths = {kind: {end - start for row in rows for start, end, k, *_ in row if k == kind}
              for kind in ("forward", "backward")}
    assert widths == {"forward": {1.0}, "backward": {2.0}}


def test_interleaving_sends_what_the_page_says():
    from zerosim import Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.pipeline import PipelineEngine

    interleaved, one_f_one_b = (int(x) for x in quoted(r"P·V − 1 stage boundaries each way instead of P − 1: (\d+) "
                                                        r"sends a step against 1F1B's (\d+) here"))
    for schedule, V, said in (("interleaved-1f1b", 2, interleaved), ("1f1b", 1, one_f_one_b)):
        widths = [4] * (P * V + 1)  # one Linear a stage
        cluster = Cluster(P)
        engine = PipelineEngine(MLP(widths), cluster, 1, Adam(lr=1e-2), "fp32", pp=P, schedule=schedule,
                                micro_batches=M, virtual_stages=V)
        engine.step([[make_regression(np.random.default_rng(k), 1, 2, widths)[0] for k in range(M)]])
        sends = [c for c in cluster.trace.calls if c.collective == "send_recv"]
        assert len(sends) == said == 2 * M * (P * V - 1), schedule  # each micro-batch, each boundary, both ways


# -- the 405B example ---------------------------------------------------------------------------------------------
@pytest.mark.slow  # the page's own block: 405B on the meta backend, 16 stages of 16 micro-batches: ~4 s
def test_the_405b_example_prints_what_the_page_says(tmp_path):
    from zerosim.parallel import ParallelDims
    from zerosim.parallel.pipeline import make_table
    from zerosim.parallel.pipeline._costs import in_flight

    (block,) = [code for code in re.findall(r"```python\n(.*?)```", TEXT, re.S) if "PipelineEngine(" in code]
    printed = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    first, activations, last = (float(x) for x in printed.stdout.split())
    said = quoted(r"its activations peak at ([\d.]+) GB of its ([\d.]+) GB; the last stage holds one micro-batch's, "
                  r"and peaks at ([\d.]+) GB")
    assert (activations, first, last) == tuple(float(x) for x in said)
    assert "# → 45.9 33.4" in block and "# → 17.7" in block  # the block's comments (test_readme_commands runs it too)
    # "16 micro-batches' checkpoints in flight (1F1B's P − r = 16)" on the first stage, "one" on the last: the table
    # the engine runs, and the hand formula
    table = make_table("1f1b", 16, 16)
    assert table.in_flight(0) == in_flight("1f1b", 16, 16, 1, 0) == 16 - 0
    assert table.in_flight(15) == in_flight("1f1b", 16, 16, 1, 15) == 16 - 15
    # the degrees and the tokens of a step: TP 8 × PP 16 × DP 128 = 16,384 GPUs, 16 sequences of 8,192 per data-
    # parallel rank = 16.8M tokens (the paper's "16M")
    assert "TP 8 × PP 16 × DP 128 on 16,384 GPUs, and its 16M tokens a step" in PAGE
    dims = ParallelDims(16384, pp=16, tp=8)
    assert dims.dp == 128 and round(dims.dp * 16 * 8192 / 2**20) == 16
    # the checkpoints alone, by hand: 7 blocks' inputs (the embedding is the first stage's eighth layer: 126 + 2
    # layers over 16 stages), one (1, 8192, 16384) bf16 tensor each, for 16 micro-batches: 30.1 GB of the 33.4
    assert activations >= 16 * 7 * 8192 * 16384 * 2 / 1e9


# -- the replay ---------------------------------------------------------------------------------------------------
W = [2.0, -3.0, 1.0, 0.5]  # seed 004's weights w1, w2, w3, w4
SAMPLES = [([1.0, 3.0], 5.0), ([2.0, 1.0], 7.0)]  # seed 004's two samples (x, t), one a micro-batch


def by_hand(x, t) -> dict:
    """Seed 004's network on one sample in float64: h = w1·x1 + w2·x2, a = ReLU(h), y = w3·a + w4, 0.5·(y − t)²."""
    h = W[0] * x[0] + W[1] * x[1]
    a = max(h, 0.0)
    dy = W[2] * a + W[3] - t
    da = dy * W[2]
    dh = da if h > 0 else 0.0
    return {"h": h, "a": a, "da": da, "grad": [dh * x[0], dh * x[1], dy * a, dy]}


@pytest.mark.pinned
def test_the_replay_paragraph_is_the_run_and_seed_004s_arithmetic():
    from zerosim.replay import pipeline_replay

    run = pipeline_replay()  # what `zerosim replay --pp 2` narrates (its default precision, fp16-mixed)
    said = quoted(r"reaches GPU 1 as the activation `\[(-?[\d.]+)\]` \(its h is (−?\d+), so the ReLU gives 0\), "
                  r"micro-batch 1 as `\[(-?[\d.]+)\]`")
    activations, h = [float(said[0]), float(said[2])], float(said[1].replace("−", "-"))
    gradients = [float(x) for x in quoted(r"sends back the gradients `\[(-?[\d.]+)\]` and `\[(-?[\d.]+)\]`")]
    (size,) = quoted(r"(\d+) bytes of fp16 each")
    masters = [float(x) for x in re.split(r"[,|]", quoted(r"the masters are seed 004's `\[([-\d., |]+)\]`")[0])]
    hand = [by_hand(x, t) for x, t in SAMPLES]
    # by hand: micro-batch 0's h is −7, so its activation is 0; the gradients dL/da = (y − t)·w3
    assert h == hand[0]["h"] and activations == [s["a"] for s in hand] and gradients == [s["da"] for s in hand]
    # the run: each activation forward and each gradient back, its values, its bytes and its format
    sent = {(s["src"], s["micro"]): s for s in run["sends"]}
    assert [sent[(0, k)]["values"] for k in (0, 1)] == [[a] for a in activations]
    assert [sent[(1, k)]["values"] for k in (0, 1)] == [[g] for g in gradients]
    assert all(s["bytes"] == int(size) and s["dtype"] == "fp16" and s["tier"] == "inter-node" for s in run["sends"])
    # Adam's first step moves each weight by lr·g/(|g| + eps): lr 0.1 against the sign of the step's mean gradient
    mean = np.mean([s["grad"] for s in hand], axis=0)
    assert masters == [round(w - 0.1 * np.sign(g), 1) for w, g in zip(W, mean)]
    assert [round(m, 1) for m in run["masters"]] == masters and run["lr"] == 0.1


# -- what the command line has -------------------------------------------------------------------------------------
def test_the_command_line_is_as_the_page_says():
    """The page: `memory`, `timeline` and `plan` take --pp, --pp-schedule, --virtual-stages and --pp-split; `train`
    refuses --pp by name; `replay --pp 2` tells one step."""
    from zerosim.cli.main import build_parser

    said = quoted(r"`(\w+)`, `(\w+)` and `(\w+)` take `(--pp) P`, `(--pp-schedule) \{[^}]*\}` \(1F1B by default\), "
                  r"`(--virtual-stages) V` and `(--pp-split) \{[^}]*\}`")
    commands, flags = said[:3], set(said[3:])
    assert "`train` refuses `--pp`" in PAGE and "`zerosim replay --pp 2` tells one step in full" in PAGE
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and "replay" in a.choices]
    options = {name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()}
    assert all(flags <= options[name] for name in commands), {n: flags - options[n] for n in commands}
    assert "--pp" in options["replay"]
    code, _, err = run_cli("train", "--pp", "2", "--ranks", "2")
    assert code != 0 and "--pp is not in `zerosim train` yet" in err
