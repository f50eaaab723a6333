"""The three assignments and their autograder (zerosim/teaching/assignments; course/instructor holds the solutions).

For each assignment: the reference solution scores 100 %; each planted wrong solution (one mistake each, named after
the misconception it holds) scores partial credit — more than nothing, less than everything — and its feedback names
that misconception; a submission that loops, exits, fails to import or kills the interpreter scores 0 with one line,
and the grader goes on; results.json holds to Gradescope's format; the parts add up to a week (8-10 hours).
Planted and reference solutions are graded here in this process (the same cases and checks); the autograder's own
path, a process per test with a time limit, is exercised end to end on assignment 1 and the misbehaving files.
"""

import ast
import json
import re
from pathlib import Path

import pytest
from helpers import InProcess

from zerosim.cli.main import main
from zerosim.teaching import assignments, exercises
from zerosim.teaching.assignments import check_results, get, grade, results

COURSE = Path(__file__).resolve().parent.parent / "course" / "instructor"
PLANTED = {n: sorted((COURSE / f"a{n}" / "planted").glob("*.py")) for n in (1, 2, 3)}


def score_here(a, path: Path) -> tuple:
    """(points, [(test name, its output when it failed, else None)]) grading `path` in this process, case by case, as
    the autograder scores it (each case its share of its test's points)."""
    r = results(a, InProcess(path))
    return r["score"], [(t["name"].split(":")[0], None if t["status"] == "passed" else t["output"]) for t in r["tests"]]


@pytest.mark.parametrize("number", [1, 2, 3])
def test_the_reference_solution_scores_100_percent(number):
    a = get(number)
    points, lines = score_here(a, COURSE / f"a{number}" / "solution.py")
    assert points == a.max_score and all(f is None for _, f in lines), lines


PLANTED_CASES = [(n, p) for n in (1, 2, 3) for p in PLANTED[n]]


@pytest.mark.parametrize("number, path", [pytest.param(n, p, marks=pytest.mark.slow) if n == 2 else (n, p)
                                          for n, p in PLANTED_CASES],  # 2 runs engines (~1.5 s each)
                         ids=[f"a{n}-{p.stem}" for n, p in PLANTED_CASES])
def test_a_planted_solution_earns_partial_credit_case_by_case_and_its_misconception_is_named(number, path):
    a = get(number)
    r = results(a, InProcess(path))
    failed = [t for t in r["tests"] if t["status"] == "failed"]
    assert 0 < r["score"] < a.max_score and failed, (path.name, r["score"])
    # a test's score is its share of the cases that passed (it says how many): the other cases still earn theirs
    for t in failed:
        passed = re.match(r"(\d+) of (\d+) cases passed: ", t["output"])
        k, n = (int(passed[1]), int(passed[2])) if passed else (0, 1)
        assert t["score"] == pytest.approx(t["max_score"] * k / n) and k < n, t
    # every failing test is one readable line: each way its cases failed, what the student's code did against the
    # oracle / ledger / ring (up to three ways, each a sentence or two)
    assert all("\n" not in t["output"] and len(t["output"]) < 1500 for t in failed), [t["output"] for t in failed]
    # and the mistake is named: by the planted file's own name (the grader's misconception table), or, for a
    # prediction, by the judge's "The misconception: ..." line
    named = f"Misconception '{path.stem}'"
    outputs = [t["output"] for t in failed]
    assert any(named in f for f in outputs) or any("The misconception: " in f for f in outputs), outputs


@pytest.mark.parametrize("number, stem, test, points", [
    # assignment 3's peak with prefetch, cases 5 and 6: on 1 rank with no prefetch the two largest layers are not
    # held, so the planted answer is right; with prefetch on (3000, 100, 2900, 2800) it holds 3000 + 2900 where the
    # ledger's largest neighbouring pair is 2900 + 2800: one case of two, half the point (before: 0)
    (3, "prefetch_two_largest", "predict_params_peak 4", 0.5),
    # assignment 2's shards, the ten visible cases: L = 0 on 1-5 ranks and L = 1 on 1 rank are right with floor as
    # with ceil; L = 1 on 2-5 ranks is not: 6 of 10 (before: 0)
    (2, "floor_instead_of_ceil", "shard_offset 1", 0.6),
])
def test_each_case_earns_its_own_credit(number, stem, test, points):
    r = results(get(number), InProcess(COURSE / f"a{number}" / "planted" / f"{stem}.py"), only={
        t.exercise.function for t in get(number).tests if t.exercise.name.startswith(test)})
    graded = next(t for t in r["tests"] if t["name"].startswith(test + ":") or t["name"].startswith(test + " ("))
    assert graded["score"] == pytest.approx(points) and graded["status"] == "failed"
    assert f"Misconception '{stem}'" in graded["output"]


@pytest.mark.parametrize("number", [1, 2, 3])
def test_each_assignment_is_a_week_in_parts_with_partial_credit(number):
    a = get(number)
    hours = sum(p.hours for p in a.parts)
    assert 8 <= hours <= 10, hours
    assert tuple(t for p in a.parts for t in p.tests) == a.tests
    assert all(p.tests or p.written for p in a.parts) and any(p.written for p in a.parts)  # a written part, by hand
    assert len(a.tests) >= 12 and max(t.points for t in a.tests) <= 1  # no test is worth more than a point
    predict = a.parts[0]  # part A: the predictions, every one visible (checked at submission)
    assert predict.letter == "A" and "Predict" in predict.title and all(t.visible for t in predict.tests)
    assert "| part | what | plan for |" in a.handout and "A wrong answer that matches a known mistake is named" in \
        a.handout


# The looping file spins each test's process until the limit (47 tests over the three assignments). Any limit shows
# what this checks (the grader ends a loop, scores 0 with one line and goes on), and the clock starts only once the
# child has imported (sandbox._follow), so a loaded machine cannot make a loop pass: 0.25 s, not 1 s (~35 s less).
# The other files end on their own; they keep 1 s, so that a busy machine's pause is not mistaken for a loop.
@pytest.mark.slow  # a process per test, each waiting out its limit where the file loops (~40 s for the three)
@pytest.mark.parametrize("number", [1, 2, 3])
@pytest.mark.parametrize("name, limit, says", [
    ("loops", 0.25, "did not finish within 0.25 s"),
    ("exits", 1, "called sys.exit(3) while it was loaded"),
    ("does_not_import", 1, "No module named 'numpy_but_faster'"),
    ("kills_itself", 1, "exit status"),
])
def test_a_misbehaving_submission_scores_0_with_one_line_and_the_grader_goes_on(name, limit, says, number):
    r = grade(get(number), str(COURSE / "misbehaving" / f"{name}.py"), time_limit=limit)
    check_results(r)
    assert r["score"] == 0 and len(r["tests"]) == len(get(number).tests)
    assert all(t["status"] == "failed" and "\n" not in t["output"] and says in t["output"] for t in r["tests"])


@pytest.mark.slow  # the whole autograder through the CLI on assignment 1 (~20 s: a process per test)
def test_zerosim_assignment_grade_writes_a_valid_results_json(tmp_path, capsys):
    out = tmp_path / "results" / "results.json"
    code = main(["assignment", "grade", "1", "--file", str(COURSE / "a1" / "solution.py"), "--results", str(out)])
    assert code == 0
    r = json.loads(out.read_text())
    check_results(r)
    assert r["score"] == get(1).max_score and {t["visibility"] for t in r["tests"]} == {"visible", "after_published"}
    assert [t["max_score"] for t in r["tests"]] == [t.points for t in get(1).tests]
    assert f"{get(1).max_score:g} of {get(1).max_score:g} points" in capsys.readouterr().out


@pytest.mark.slow  # the autograder's own path (a process per test) on assignments 2 and 3's references (~1 min)
@pytest.mark.parametrize("number", [2, 3])
def test_the_autograder_gives_the_reference_every_point_in_a_valid_results_json(number):
    r = grade(get(number), str(COURSE / f"a{number}" / "solution.py"))
    check_results(r)
    assert r["score"] == get(number).max_score, [t["output"] for t in r["tests"] if t["status"] == "failed"]


@pytest.mark.slow  # the autograder on a planted file: partial credit and the named misconception in results.json
def test_results_json_carries_partial_credit_and_the_named_misconception(tmp_path):
    r = grade(get(1), str(COURSE / "a1" / "planted" / "round_once.py"))
    check_results(r)
    assert 0 < r["score"] < get(1).max_score
    failed = [t for t in r["tests"] if t["status"] == "failed"]
    assert failed and all("Misconception 'round_once'" in t["output"] for t in failed if "ring_" in t["name"])


@pytest.mark.slow  # a grading process per visible test (~10 s)
def test_check_runs_only_the_visible_tests_and_the_starter_fails_them(tmp_path, capsys):
    starter = tmp_path / "a3_zero3.py"
    assert main(["assignment", "starter", "3"]) == 0
    starter.write_text(capsys.readouterr().out)
    assert main(["assignment", "check", "3", "--file", str(starter), "--time-limit", "30"]) == 1
    out = capsys.readouterr().out
    visible = [t for t in get(3).tests if t.visible]
    assert "(hidden" not in out and out.count("FAIL") == len(visible) and "is not written yet" in out


def test_assignment_3_grades_the_exposed_communication_visible_and_hidden():
    a = get(3)
    graded = {t.exercise.name: t for t in a.tests if t.exercise.function == "exposed_comm"}
    assert {t.visibility for t in graded.values()} == {"visible", "after_published"}
    assert "exposed_comm(compute_s, gather_s, prefetch)" in a.handout and "def exposed_comm(" in a.starter
    # the grader's yardstick (zerosim's timeline) against the schedule worked by hand on the visible cases:
    # no prefetch, every gather waits for the compute before it, so all of them are exposed; prefetch 1, gather 0
    # is exposed whole, gather 1 (issued at 0, queued behind gather 0) hides under compute 0 only, and gather 2
    # (issued as compute 0 ends) runs wholly under compute 1, which is longer
    from zerosim.analysis.timeline import simulate
    from zerosim.teaching.assignments import _a3_exposed as a3_exposed

    none, one = list(a3_exposed.cases())[:2]
    timed = [float(simulate(c["log"], c["hardware"]).exposed_comm[0]) for c in (none, one)]
    (g0, g1, g2), (c0, c1, _) = one["gather_s"], one["compute_s"]
    assert g1 > c0 and c1 > g2  # the case is the one worked out above
    assert timed[0] == pytest.approx(sum(none["gather_s"]), rel=1e-12)
    assert timed[1] == pytest.approx(g0 + g1 - c0, rel=1e-12)
    # a planted "prefetch hides all but the first gather" loses exactly the prefetch cases, and is named
    wrong = COURSE / "a3" / "planted" / "prefetch_hides_all_but_the_first.py"
    points, lines = score_here(a, wrong)
    failed = [(n, f) for n, f in lines if f]
    assert 0 < points < a.max_score and failed
    assert all(n.startswith("exposed_comm") and "Misconception 'prefetch_hides_all_but_the_first'" in f
               for n, f in failed)


def solution_lines() -> set:
    """Every assignment reference's lines of code long enough to be its own (comments and short lines left out)."""
    return {line.strip() for n in (1, 2, 3) for line in (COURSE / f"a{n}" / "solution.py").read_text().splitlines()
            if line.startswith("    ") and len(line.strip()) > 30 and not line.strip().startswith("#")}


def test_no_reference_solution_is_printed_or_shipped():
    """What a student can print (handouts, starters) and read (the package) holds none of the solutions' code, nor
    the planted wrong ones' (each is a solution less one line)."""
    package = Path(assignments.__file__).parent.parent
    shipped = "".join(p.read_text() for p in package.rglob("*.py"))
    shipped_lines = {line.strip() for line in shipped.splitlines()}
    for n in (1, 2, 3):
        a = get(n)
        for line in solution_lines():
            assert line not in a.handout and line not in a.starter
        assert all(t.exercise.solution == "" for t in a.tests)  # assignment 2's four exercises too
        tree = ast.parse(source := (COURSE / f"a{n}" / "solution.py").read_text())
        for f in (node for node in tree.body if isinstance(node, ast.FunctionDef)):  # no whole function ships
            assert ast.get_source_segment(source, f) not in shipped, f.name
    assert not solution_lines() & shipped_lines, sorted(solution_lines() & shipped_lines)[:3]
    for name in ("shard_offset", "stage2_free", "average_dtype", "refresh_params"):  # planted: names, no sources
        assert set(exercises.get(name).planted.values()) == {""}


@pytest.mark.bad_input("command line")
def test_no_student_facing_command_prints_an_assignments_reference(capsys):
    # `zerosim exercise show NAME --solution` printed assignment 2's reference function by function: the four
    # exercises it grades (shard_offset, stage2_free, average_dtype, refresh_params) now ship no solution.
    graded = {t.exercise.function for n in (1, 2, 3) for t in get(n).tests}
    names = list(exercises.EXERCISES)
    commands = ([["exercise", "list"], ["assignment", "list"]] + [["exercise", "show", x] for x in names]
                + [["exercise", "show", x, "--solution"] for x in names]
                + [["assignment", what, str(n)] for what in ("show", "starter") for n in (1, 2, 3)])
    lines, refused = solution_lines(), []
    for argv in commands:
        code = main(argv)
        out, err = capsys.readouterr()
        assert not lines & {line.strip() for line in out.splitlines()}, argv
        if argv[-1] == "--solution" and exercises.get(argv[2]).function in graded:
            assert code == 2 and not out and err.count("\n") == 1, argv
            assert f"{argv[2]}'s reference solution is not shipped: it is assignment 2's" in err
            refused.append(argv[2])
    assert sorted(refused) == ["average_dtype", "refresh_params", "shard_offset", "stage2_free"]
    assert main(["exercise", "check", "stage2_free", "--reference"]) == 2  # nor graded as "the shipped one"
    assert "not shipped" in capsys.readouterr().err
    # nor its planted bugs (the reference less one line): without the instructor kit, one line saying where they are
    assert main(["exercise", "check", "stage2_free", "--planted", "never frees"]) == 2
    assert "pip install ./course/instructor" in capsys.readouterr().err


def test_results_follow_gradescopes_format():
    good = {"score": 3.0, "output": "x", "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [{"name": "t", "number": "1", "score": 3.0, "max_score": 3.0, "status": "passed",
                       "output": "ok", "visibility": "after_published"}]}
    check_results(good)


@pytest.mark.bad_input("assignments")
@pytest.mark.parametrize("change, says", [
    ({"score": "3"}, "score must be a number"),
    ({"visibility": "secret"}, "visibility must be one of"),
    ({"grade": 3}, "unknown top-level keys"),
    ({"tests": [{"name": "t", "score": True}]}, "tests[0].score must be a number"),
    ({"tests": [{"name": "t", "score": 1, "status": "ok"}]}, "status must be passed or failed"),
    ({"tests": [{"name": "t", "score": 1, "visibility": "later"}]}, "tests[0].visibility"),
])
def test_a_results_dict_gradescope_would_refuse_is_named(change, says):
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        check_results({"score": 1.0, "tests": []} | change)


@pytest.mark.bad_input("assignments", unchanged=True)
def test_grading_a_missing_file_or_an_unknown_assignment_is_one_line(tmp_path, capsys):
    assert main(["assignment", "grade", "1", "--file", str(tmp_path / "nope.py"), "--results",
                 str(tmp_path / "r.json")]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
    assert main(["assignment", "show", "7"]) == 2
    assert "no assignment 7; there are 1, 2, 3" in capsys.readouterr().err


def test_a_hostile_file_defines_every_function_so_its_own_misbehaviour_is_what_the_grader_meets():
    asked = {t.exercise.function for n in (1, 2, 3) for t in get(n).tests}
    for name in ("loops", "kills_itself"):
        tree = ast.parse((COURSE / "misbehaving" / f"{name}.py").read_text())
        defined = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
        assert asked <= defined, (name, sorted(asked - defined))
