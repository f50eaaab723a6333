"""Assignment 4 (zerosim/teaching/assignments/_a4_torch.py): DDP with ZeRO-1 on real torch.distributed, gloo on CPU
processes, graded bit for bit against zerosim's recipe. The instructor's reference scores every point; each planted
wrong solution (course/instructor/a4/planted/NAME.py) loses exactly the tests its mistake shows in, each failure
naming the misconception NAME and the first message that differs from zerosim's ring. Graded as `zerosim assignment
grade` grades: the file in the sandbox's child, whose harness (zerosim/teaching/_gloo_ranks.py) forks the gloo ranks
there and returns plain data, judged in the grader; and, in a notebook's way, with plain functions in this process.

torch is the parity lane's (`pip install -e ".[test,parity]"` in a venv of its own, torch first): these tests skip
without it, except the ones that check what a student without torch is told, and that the handout and starter ship.
"""

import functools
import importlib.util
import json
import runpy
import sys
from pathlib import Path

import pytest

from zerosim.cli.main import main
from zerosim.teaching.assignments import get, results
from zerosim.teaching.exercises._sandbox import Learner

KIT = Path(__file__).resolve().parent.parent / "course" / "instructor" / "a4"
A4 = get(4)
NAMES = [f"{t.exercise.name}" for t in A4.tests]
LIMIT = 600  # seconds a case may take in the sandbox: an upper bound only (a correct case takes about a second)
# planted -> {test name: why it fails}; every other test passes. The mistakes, by hand:
PLANTED = {
    # fp32 partial sums, one rounding at the end: fp32 inputs come out the same; fp16 ones do not (2048 + 1 + 1 + 1
    # gives 2052 on rank 2, whose chunk the ring leaves at 2048)
    "round_once": {"ring_reduce_scatter 2": "round_once",
                   "ring_reduce_scatter 4 (hidden until grades are published)": "round_once"},
    # x/N summed instead of the sum divided by N: exact at N = 2 and 4 (powers of two), not at N = 3
    "divides_first": {"zero1_step 3 (hidden until grades are published)": "divides_first",
                      "zero1_step 4 (hidden until grades are published)": "divides_first"},
    # own chunk first: every ring of 2 or more ranks ends a chunk on the wrong rank — except where a rank's chunks are
    # all equal (2048 + 1 + 1 + 1: rank 0 holds 2048 in every element), and the 1-rank case, which sends nothing; the
    # all-gather and the prediction are the reference's
    "wrong_start": {"ring_reduce_scatter 1": "wrong_start",
                    "ring_reduce_scatter 3 (hidden until grades are published)": "wrong_start",
                    "ring_reduce_scatter 4 (hidden until grades are published)": "wrong_start",
                    "zero1_step 1": "wrong_start", "zero1_step 2": "wrong_start",
                    "zero1_step 3 (hidden until grades are published)": "wrong_start",
                    "zero1_step 4 (hidden until grades are published)": "wrong_start"},
}


def functions(path: Path) -> dict:
    """The functions a solution file defines (run in this process: the in-process twin of the sandbox's load)."""
    return runpy.run_path(str(path), run_name="a4_solution")


def grades(path: Path) -> dict:
    """{test name: Result} of every test of assignment 4 on the file at `path`, in this process, as in a notebook
    (each case still runs its ranks as gloo processes of their own)."""
    defined = functions(path)
    return {t.exercise.name: t.exercise.grade(defined[t.exercise.function]) for t in A4.tests}


def sandboxed(path: Path, only=None) -> dict:
    """results.json's dict for the file at `path`, graded as `zerosim assignment grade` does: in the sandbox."""
    with Learner(path.read_bytes(), str(path), A4.policy(), LIMIT) as learner:
        return results(A4, learner, only=only)


@functools.lru_cache(maxsize=None)
def graded(path: Path) -> tuple:
    """(score, {test name: None when it passed, else its output}) of `sandboxed(path)`: each file graded once."""
    r = sandboxed(path)
    return r["score"], {t["name"].split(": ")[0]: None if t["status"] == "passed" else t["output"] for t in r["tests"]}


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="assignment 4 runs real torch.distributed: the parity lane "
                               "(pip install torch, then pip install -e '.[test,parity]')")


@pytest.mark.slow
def test_the_reference_scores_every_point_in_the_sandbox(torch):
    r = sandboxed(KIT / "solution.py")
    assert {t["name"]: t["output"] for t in r["tests"] if t["status"] != "passed"} == {}
    assert r["score"] == sum(t.points for t in A4.tests) == 13
    # the ranks the harness forks are its own processes, not the submission's: nothing for the lecturer to read
    assert "started a process" not in r["output"], r["output"]


@pytest.mark.slow
def test_torch_is_loaded_before_the_submission_runs(torch, tmp_path):
    """The sandbox's child has torch loaded (with the harness, before it arms the policy) when a submission's first
    line imports it: a CUDA build's import starts a process (`ldconfig -p`), which the policy would otherwise note as
    the learner's (torch 2.12.1 and 2.14.1 from PyPI). Checked on any build: a submission that asserts it at its top
    still scores every point."""
    solution = tmp_path / "solution.py"
    solution.write_text('import sys\nassert "torch" in sys.modules, "torch was not loaded before this file ran"\n'
                        + (KIT / "solution.py").read_text())
    r = sandboxed(solution, only=["ring_all_gather"])
    assert r["score"] > 0 and "torch was not loaded" not in json.dumps(r), r


@pytest.mark.slow
def test_in_a_notebook_the_same_checks_take_plain_functions(torch):
    failed = {name: r.counterexample for name, r in grades(KIT / "solution.py").items() if not r.passed}
    assert failed == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_solution_loses_exactly_its_mistakes_tests_and_is_told_which(torch, name):
    score, outputs = graded(KIT / "planted" / f"{name}.py")
    failed = {test: said for test, said in outputs.items() if said is not None}
    assert sorted(failed) == sorted(PLANTED[name])
    for test, said in failed.items():
        assert f"Misconception '{PLANTED[name][test]}'" in said, said
        assert "the first hop that differs" in said, said  # the message that went wrong
    assert score == sum(t.points for t in A4.tests if t.exercise.name not in failed)
    assert 0 < score < 13  # partial credit


@pytest.mark.slow
def test_round_once_is_told_the_hop_and_the_2048(torch):
    said = graded(KIT / "planted" / "round_once.py")[1]["ring_reduce_scatter 2"]
    # rank 2's chunk: ((x3 + x0) + x1) + x2 = ((1 + 2048) + 1) + 1, every add rounded to fp16 (spacing 2 at 2048):
    # 2049 -> 2048 (tie to even), 2049 -> 2048, 2049 -> 2048; held in fp32 it is 2051 -> 2052 once rounded
    assert "rank 2's chunk[0] is 2052.0; zerosim's ring gives 2048.0" in said
    assert "ring step 0, rank 0 → rank 1 (chunk 3): what rank 0 sent is float32, zerosim's ring sends float16" in said


def _ring_calling_zerosim(caught: bool) -> str:
    """The reference with a ring_reduce_scatter that calls zerosim's own reduce_scatter on the rank (and, `caught`,
    catches what that raises, starts a process, and then runs the reference's ring)."""
    source = (KIT / "solution.py").read_text()
    head = "def ring_reduce_scatter(x):\n"
    assert head in source
    call = "    reduce_scatter(Cluster(1), [np.ones(2, np.float32)])  # zerosim's own ring\n"
    if caught:
        call = ("    try:\n    " + call + "    except Exception:  # refused in the grader: carry on with my own ring\n"
                "        subprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    return ("import subprocess, sys\nimport numpy as np\nfrom zerosim.cluster import Cluster\n"
            "from zerosim.collectives import reduce_scatter\n" + source.replace(head, head + call, 1))


@pytest.mark.slow
@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught"])
def test_a_ring_that_calls_zerosims_reduce_scatter_on_a_rank_scores_0_with_the_policys_line(torch, tmp_path, caught):
    """The call happens in a gloo rank the harness forked in the sandbox's child: the policy refuses it there, and
    the rank's record comes back with its result, so the case fails with the policy's line even where the learner's
    code caught the refusal and answered right with its own ring (the same file in this process, where nothing
    refuses it, passes every case)."""
    path = tmp_path / "a4_torch.py"
    path.write_text(_ring_calling_zerosim(caught))
    r = sandboxed(path, only={"ring_reduce_scatter"})
    tests = [t for t in r["tests"] if t["name"].startswith("ring_reduce_scatter")]
    assert len(tests) == 5 and r["score"] == 0, [t["output"] for t in tests]
    line = ("this case grades your ring_reduce_scatter; calling zerosim.collectives.reduce_scatter, zerosim's own "
            "implementation of what it grades, is not allowed here (the grader runs your file with what assignment "
            "4's handout offers: zerosim.precision, zerosim.cluster, zerosim.backends)")
    for t in tests:
        case = t["name"].split(": ", 1)[1]
        assert t["output"] == f"{case}: {line}", t["output"]
    if caught:  # the process the learner's code started on a rank is the lecturer's to read; the harness's are not
        assert r["output"].endswith("; while it was graded your code started a process (subprocess.Popen)"), \
            r["output"]
    mine = functions(path)["ring_reduce_scatter"]
    here = [t.exercise.grade(mine) for t in A4.tests if t.exercise.function == "ring_reduce_scatter"]
    assert len(here) == 5 and all(g.passed for g in here), here


@pytest.mark.slow
def test_a_deadlocked_ring_fails_its_case_saying_so(torch, tmp_path):
    """Every rank sending first with a blocking send: gloo's send of a small tensor may or may not return before its
    receive; a ring that never receives waits forever either way — the case ends at the runner's deadline."""
    source = (KIT / "solution.py").read_text().replace(
        "        got = torch.empty_like(chunks[back])\n        dist.recv(got, (i - 1) % n)\n",
        "        got = torch.empty_like(chunks[back])\n        dist.recv(got, (i + 1) % n)  # the wrong neighbour\n", 1)
    assert "(i + 1) % n)  # the wrong neighbour" in source
    (tmp_path / "stuck.py").write_text(source)
    import zerosim.teaching._gloo_ranks as ranks

    old, ranks.TIMEOUT = ranks.TIMEOUT, 5.0
    try:
        ex = next(t.exercise for t in A4.tests if t.exercise.name == "ring_reduce_scatter 2")  # 4 ranks
        r = ex.grade(functions(tmp_path / "stuck.py")["ring_reduce_scatter"])
    finally:
        ranks.TIMEOUT = old
    assert not r.passed and ("deadlock" in r.counterexample or "on rank" in r.counterexample), r.counterexample


def test_without_torch_every_case_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # a machine without the parity extra
    for t in A4.tests:
        if t.exercise.name.startswith("predict"):
            continue  # the prediction needs no torch
        r = t.exercise.grade(lambda *a: None)
        assert not r.passed and "pip install 'zerosim[parity]'" in r.counterexample, (t.exercise.name, r)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="what a student without torch is told: the default lane's")
def test_without_torch_the_sandbox_says_how_to_install_it(tmp_path):
    """The starter graded as `zerosim assignment grade` does, where torch is missing: the child imports the gloo
    harness before it arms the policy (nothing of zerosim's graded code comes with it, or the child would refuse to
    run), and the file's own import of torch says what to install."""
    path = tmp_path / A4.files
    path.write_text(A4.starter)
    r = sandboxed(path)
    assert r["score"] == 0 and "pip install 'zerosim[parity]'" in r["output"], r["output"]
    assert all("pip install 'zerosim[parity]'" in t["output"] for t in r["tests"])


def test_the_prediction_is_graded_against_the_trace_and_names_the_padding():
    ex = next(t.exercise for t in A4.tests if t.exercise.name == "predict_zero1_bytes 1")
    # P = 67 on 3 ranks: s = 23, 2 phases x 2 chunks x 23 x 4 B = 368 B; P = 1,000 on 4: 2 x 3 x 250 x 4 = 6,000 B
    assert ex.grade(lambda P, N: {(67, 3): 368, (1000, 4): 6000}[(P, N)]).passed
    r = ex.grade(lambda P, N: 2 * (N - 1) * P / N * 4)
    assert not r.passed and "without the padding" in r.counterexample


def test_the_handout_and_starter_ship_and_the_kit_holds_the_reference(tmp_path, capsys):
    assert main(["assignment", "show", "4"]) == 0
    handout = capsys.readouterr().out
    assert "torch.distributed" in handout and "| **all** | **9 h** | **13** |" in handout
    assert main(["assignment", "starter", "4", "--out", str(tmp_path / "a4")]) == 0
    starter = (tmp_path / "a4" / "a4_torch.py").read_text()
    assert starter.count("raise NotImplementedError") == 4
    assert sorted(p.name for p in (tmp_path / "a4" / "notebooks").iterdir()) == [
        "02_ring_and_rounding.ipynb", "15_torch_parity_lab.ipynb"]
    for f in ("solution.py", "rubric.md", "planted/round_once.py", "planted/divides_first.py",
              "planted/wrong_start.py"):
        assert (KIT / f).is_file(), f
    assert json.loads(json.dumps(A4.max_score)) == 13
