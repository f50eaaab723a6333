"""Predict, then run (zerosim/teaching/_predict.py, _questions.py): a typed number is judged against the run's own
answer, a known wrong answer is named as its misconception, and every notebook's prediction cell works as a learner
uses it — run with a right answer, a wrong one and none, in this process (the cells import only zerosim).
"""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from zerosim.teaching import QUESTIONS, judge, predict

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def prediction_cells():
    """(notebook, cell index, question name, source) for every cell tagged "predict", read from the notebooks' JSON
    (nbformat 4: a cell's source a string or its lines, as nbformat.read joins them) when the suite is collected:
    nbformat's import is ~1.9 s of collecting the whole suite, which the README's test command does in a test of its
    own (tests/test_readme_commands.py)."""
    out = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if "predict" in cell.get("metadata", {}).get("tags", []):
                source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                name = re.search(r'predict\("([^"]+)", my_answer\)', source).group(1)
                out.append((path.name, i, name, source))
    return out


CELLS = prediction_cells()


def run_cell(source: str, answer) -> str:
    """The cell as a learner runs it after typing `answer` into my_answer: what it shows (its last value)."""
    typed = re.sub(r"^my_answer = None.*$", f"my_answer = {answer!r}", source, flags=re.M)
    assert typed != source, "the cell has no `my_answer = None` line to type into"
    *body, last = typed.rstrip().split("\n")
    scope = {}
    exec("\n".join(body), scope)
    return repr(eval(last, scope))


def test_every_notebook_asks_at_least_one_prediction_and_every_question_is_asked():
    asked = {name for *_, name, _ in CELLS}
    without = {p.name for p in NOTEBOOKS} - {nb for nb, *_ in CELLS}
    assert without == set()
    assert asked == set(QUESTIONS) and len(asked) >= 20  # every question is asked somewhere


@pytest.mark.slow  # each answer is a run (a replay, a meta step, a timeline; torch's DDP for one): ~50 s in all
@pytest.mark.parametrize("notebook, index, name, source", CELLS, ids=[f"{c[0]}:{c[2]}" for c in CELLS])
def test_a_prediction_cell_judges_a_right_a_wrong_and_no_answer(notebook, index, name, source):
    q = QUESTIONS[name]
    if not q.available():
        assert "needs torch" in run_cell(source, 1)  # says what to install, and raises nothing
        pytest.skip(f"{name}'s answer needs {q.needs}")
    right = run_cell(source, q.value())
    assert right.startswith("Right: ") and "\nWhy: " in right, right
    value, misconception = q.wrong[0]
    value = value() if callable(value) else value
    wrong = run_cell(source, value)
    assert wrong.startswith("Not quite: ") and "The misconception: " in wrong and misconception in wrong, wrong
    far = run_cell(source, q.value() * 5 + 7.25)  # nothing anyone should say: off, by how much and which way
    assert far.startswith("Off: ") and ("above it" if q.value() * 5 + 7.25 > q.value() else "below it") in far, far
    assert run_cell(source, None).startswith("No prediction yet.")


def test_a_verdict_says_how_far_and_which_way_within_the_tolerance():
    v = judge(40, 46, unit="B", why="because.")
    assert (v.right, v.misconception) == (False, None) and "yours is 13.0% below it" in v.message
    assert judge(31.0, 31.40625, tolerance=0.02, unit="GB").right  # 1.3 % off, inside 2 %
    assert not judge(30.5, 31.40625, tolerance=0.02, unit="GB").right  # 2.9 % off
    assert judge(2.099609375, 2.099609375).right and not judge(2.1, 2.099609375).right  # exact means exact
    named = judge(48, 46, wrong=((48, "stage 1's peak."),), unit="B")
    assert named.misconception == "stage 1's peak." and named.message.startswith("Not quite: you said 48 B")


@pytest.mark.parametrize("typed, says", [("forty", "should be a number"), (math.nan, "finite number"),
                                         (math.inf, "finite number"), (None, "No prediction yet"),
                                         ([46], "should be a number")])
def test_what_a_learner_types_never_raises(typed, says):
    assert says in predict("seed004-stage2-peak", typed).message


def test_a_cell_run_as_shipped_runs_no_answer(monkeypatch):
    """No guess yet: the verdict shows no answer, so the answer's run (100 GPT steps for copy-task-fp16) is not made;
    a number typed makes it."""
    runs = []
    shipped = QUESTIONS["copy-task-fp16"]
    counted = dataclasses.replace(shipped, answer=lambda: runs.append(1) or 1.0, _cache={})
    monkeypatch.setitem(QUESTIONS, "copy-task-fp16", counted)
    for typed in (None, ...):
        verdict = predict("copy-task-fp16", typed)
        assert verdict.message.startswith("No prediction yet.") and math.isnan(verdict.answer) and runs == []
    assert predict("copy-task-fp16", 1.0).right and runs == [1]


@pytest.mark.bad_input("teaching", unchanged=True)
def test_an_unknown_question_names_the_known_ones():
    with pytest.raises(KeyError, match="no question 'nope'; there are seed004-fp16-w1, "):
        predict("nope", 1)


@pytest.mark.slow  # every answer computed (~40 s)
def test_each_answer_is_the_runs_and_each_misconception_is_a_different_number():
    for q in QUESTIONS.values():
        if not q.available():
            continue
        answer = q.value()
        for value, text in q.wrong:
            v = value() if callable(value) else value
            assert not judge(v, answer, tolerance=q.tolerance).right, (q.name, v)  # a wrong answer is wrong
            assert text.endswith(".") and q.why
    # a few answers against their sources (the rest are asserted by the notebooks that ask them)
    assert QUESTIONS["seed004-stage2-peak"].value() == 46 and QUESTIONS["seed004-stage3-sent"].value() == 16
    assert QUESTIONS["ring-2048"].value() == 2052 and QUESTIONS["seed004-fp16-w1"].value() == 2.099609375
    assert QUESTIONS["ddp-aggregate"].value() == pytest.approx(896, abs=0.01)  # seed 001 §7
    assert QUESTIONS["zero-paper-stage1"].value() == pytest.approx(31.4, abs=0.05)  # the ZeRO paper's Figure 1


def test_the_fp32_slowdown_is_the_commands_on_the_a100s_own_nvlink_and_the_seeds_page_quotes_it(capsys):
    """Notebook 05's question times Llama-2-7B on 8 A100 80GB at peak rates: the ratio `zerosim timeline --gpu
    a100-80gb --efficiency peak` prints (the command picks the A100's own link, NVLink 3, from its device preset), and
    the one docs/seeds.md's row 002.11 quotes. It once rang the A100s over NVLink 4, 13.9× against the command's
    13.2×."""
    from zerosim.cli.main import main

    steps = {}
    for precision in ("bf16-mixed", "fp32"):
        main(["timeline", "--model", "llama-2-7b", "--ranks", "8", "--stage", "3", "--precision", precision,
              "--seq-len", "4096", "--batch", "1", "--gpu", "a100-80gb", "--checkpoint", "block", "--efficiency",
              "peak", "--json"])
        report = json.loads(capsys.readouterr().out)
        assert report["link"] == "NVLink 3"
        steps[precision] = report["step_s"]
    ratio = steps["fp32"] / steps["bf16-mixed"]
    assert QUESTIONS["fp32-slowdown"].value() == pytest.approx(ratio, rel=1e-12)
    seeds = (Path(__file__).resolve().parent.parent / "docs" / "seeds.md").read_text()
    assert f"the simulated step is {ratio:.1f}×" in seeds and f"{ratio:.1f}" == "13.2"
