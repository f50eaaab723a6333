"""`zerosim replay` as a newcomer reads it: compact by default (`--exact` for the exact twins), the lost update
printed beside half an fp16 ulp, the loss scaler's overflow as 11 x 65536 > 65504, stage 3's gathers before the
compute that uses them, no recompute without checkpointing, and every ledger name in plain words.

Independent yardsticks: NumPy's float16 and float32 (np.nextafter, np.finfo), seed 004's numbers (local gradient
-11 for w1 on GPU 1), and the words and counts the docs quote (docs/getting-started.md, "What the replay shows").
"""

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from zerosim.cli.main import main

README = (Path(__file__).resolve().parent.parent / "docs" / "getting-started.md").read_text()  # the replay


def replay_text(*args) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["replay", *args]) == 0
    return out.getvalue()


def test_the_default_is_compact_and_exact_prints_the_twins():
    compact, exact = replay_text("--steps", "3"), replay_text("--steps", "3", "--exact")
    assert "(exactly" not in compact and "np.float64" not in compact
    # 188 lines before the compact form; the page quotes both counts
    said = re.search(r"`--steps 3`: (\d+) lines, (\d+) with `--exact`", README).groups()
    assert (len(compact.splitlines()), len(exact.splitlines())) == tuple(map(int, said))
    assert len(compact.splitlines()) < 188 / 2
    # fp32's 2.1 is 2.0999999046325684 (NumPy's float32): the twin, only with --exact
    twin = repr(float(np.float32(2.1)))
    assert f"new fp32 master = 2.1 ({'exactly'} {twin}); its fp16 copy is really 2.099609375" in exact
    assert "new fp32 master = 2.1; its fp16 copy is really 2.099609375" in compact
    # every step told in full with --exact; later steps in brief by default, with the same numbers
    assert exact.count("1. Each GPU computes") == 3 and compact.count("1. Each GPU computes") == 1
    masters = re.search(r"fp32 masters after 3 step\(s\): (.*)", exact).group(1)
    short = re.sub(r" \(exactly [^)]*\)", "", masters)
    assert f"fp32 masters after 3 step(s): {short}" in compact


def half_ulp(w: float, toward: float) -> float:
    """Half the fp16 gap from w to its neighbour in the direction of `toward` (NumPy's float16 nextafter)."""
    w16 = np.float16(w)
    return abs(float(np.nextafter(w16, np.float16(toward))) - float(w16)) / 2


def test_a_lost_update_is_printed_beside_half_an_ulp_of_its_weight():
    text = " ".join(replay_text("--precision", "fp16-pure", "--lr", "1e-5", "--steps", "3").split())  # (wrapped)
    # seed 004: every weight's gradient is negative, so Adam's update w - lr * m_hat / (sqrt(v_hat) + eps) moves
    # each weight up by 1e-05 (fp32 of lr * 5.5 / (5.5 + 1e-8) prints as 1e-05)
    for w in (2.0, -3.0, 1.0, 0.5):
        half = half_ulp(w, np.inf)
        assert 1e-5 < half  # below half an ulp: lost (the reason the replay must show)
        line = (f"w - update = {w:g} + 1e-05 lands on the fp16 weight itself; half an fp16 ulp at {w:g}"
                if w != 2.0 else "w - update = 2 + 1e-05 lands on the fp16 weight itself; half an fp16 ulp at 2 (")
        assert line in text, line
        assert re.search(rf"at {w:g}[^;]*?is {half!r}, more than 1e-05: it rounds back to {w:g}, the update is lost",
                         text), (w, half)
    assert "fp16 weights (there is no master copy) after 3 step(s): w1 = 2, w2 = -3, w3 = 1, w4 = 0.5" in text
    assert f"(`2 + 1e-05` against {half_ulp(2.0, np.inf)!r})" in README  # the README quotes w1's line


def test_the_loss_scalers_overflow_is_shown_as_numbers():
    text = " ".join(replay_text("--loss-scale", "torch", "--steps", "5").split())  # its words wrap at 116 columns
    assert "np.float64" not in text and "nan" in text  # 0 x inf in GPU 0's backward, printed as a number would be
    biggest, top = 11, float(np.finfo(np.float16).max)  # seed 004: GPU 1's local gradient for w1 is -11; 65504
    assert f"GPU 1's gradient for w1 is -{biggest}" in text
    assert f"{biggest} x 65536 = {biggest * 65536} > {top:g}, fp16's largest finite value" in text
    for s in (32768, 16384, 8192):  # the skips after the first, in brief, each with its own product
        assert f"Overflow again at S = {s}: {biggest} x {s} = {biggest * s} > {top:g}" in text
    assert f"the first S that fits is 4096: {biggest} x 4096 = {biggest * 4096} <= {top:g}" in text
    assert f"(`{biggest} x 65536 = {biggest * 65536} > {top:g}`)" in README  # the README quotes it


def section_one(text: str) -> list:
    return text.split("1. Each GPU computes", 1)[1].split("\n2. ", 1)[0].splitlines()


@pytest.mark.parametrize("checkpoint", [[], ["--no-checkpoint"]])
def test_stage_3_gathers_a_layer_before_each_compute_that_uses_it(checkpoint):
    lines = section_one(replay_text("--stage", "3", *checkpoint))
    last_gathered, uses = None, 0
    for line in lines:
        gathered = re.match(r"  all-gather \[(\w+) params\]", line)
        if gathered:
            last_gathered = gathered.group(1)
        used = re.match(r"  (forward|recompute|backward)\s+(layer\d)", line)  # the layers with parameters
        if used:
            assert last_gathered == used.group(2), line  # the most recent gather is this layer's
            uses += 1
    assert uses == (5 if not checkpoint else 4)  # forward 2, recompute 1 (checkpointing), backward 2


@pytest.mark.parametrize("stage", ["0", "1", "2", "3"])
def test_no_recompute_is_mentioned_without_checkpointing(stage):
    assert "recomput" not in replay_text("--stage", stage, "--no-checkpoint").lower()
    assert "recompute" in replay_text("--stage", stage)  # with checkpointing (the default) it is there


@pytest.mark.parametrize("args, names", [
    ([], ["loss.y - t", "layer1.block input", "m", "v"]),
    (["--loss-scale", "torch"], ["call1.staged", "overflow flag"]),
    (["--precision", "fp16-pure"], ["grad32", "update scratch"]),
    (["--stage", "3"], ["layer 2 params (gathered)", "layer 2 grads"]),
])
def test_every_ledger_name_is_put_in_plain_words_where_it_first_appears(args, names):
    text = re.sub(r"\n {6,}(?=[^ (])", " ", replay_text(*args))  # a peak line's wrapped names joined to it
    lines = text.splitlines()
    for name in names:
        first = next(i for i, line in enumerate(lines)  # the first peak line that lists it
                     if "B peak (" in line and re.search(rf"(: |, ){re.escape(name)} \d+ B", line))
        legend = [line for line in lines[first + 1 : first + 12] if line.strip().startswith(f"({name}: ")]
        assert len(legend) == 1 and len(legend[0]) > len(name) + 30, (name, lines[first:first + 12])
    peaks = [line for line in lines if "B peak (" in line]
    shown = {n.rsplit(" ", 2)[0] for line in peaks for n in line.split(" is: ", 1)[1].split(", ")}
    plain = {"params", "grads"}  # said in the setup; everything else gets its words
    assert all(any(line.strip().startswith(f"({n}: ") for line in lines) for n in shown - plain), shown


@pytest.mark.bad_input("command line")
def test_exact_with_the_mesh_replay_is_refused_by_name(capsys):
    assert main(["replay", "--mesh", "2x2", "--exact"]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert "not --tp, --cp, --pp, --stage, --steps, --no-checkpoint, --loss-scale or --exact" in err
