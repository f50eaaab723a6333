"""The autograder: every test of an assignment on a student's file, written as Gradescope's results.json.

    results = grade(get(1), "a1_ring.py")                  # a dict in Gradescope's format
    zerosim assignment grade 1 --file a1_ring.py --results results/results.json

Gradescope runs an autograder's `run_autograder` script in a container and reads /autograder/results/results.json:
{"score", "output", "tests": [{"name", "score", "max_score", "status", "output", "visibility"}], ...}
(https://gradescope-autograders.readthedocs.io/en/latest/specs/, "Output format"). `check_results` holds a
results dict to that format.

Each case earns its own share of its test's points: a test of two cases with one right scores half (before, a test
scored all or nothing, and a group with one case of two right scored 0). A test's output says how many cases passed
and, for each failing one, its first difference and the misconception it matches (up to `SAID` of them; then how
many more). The file is loaded once, in the sandbox (teaching/exercises/_sandbox.py), with the assignment's policy:
a call of zerosim's own implementation of what a test grades fails that case and says why; a loop, a flood of
output, sys.exit or a crash fails its case with one line (and that function's later cases), and the grader goes on;
a file that cannot be loaded (a syntax error, an import that fails) scores 0 with that line. Where the sandbox cannot
confine a solution and the grader is root, nothing is graded (CannotConfine).
"""

from __future__ import annotations

import json
import re
import time

from zerosim.outputs import check_file, write_atomic
from zerosim.teaching.assignments._assignment import VISIBILITY, Assignment
from zerosim.teaching.exercises import Learner, NoFunction, describe, read
from zerosim.teaching.sandbox import check_confinable

TIME_LIMIT = 60.0  # seconds per case, as `zerosim exercise check`
OUTPUT_FORMATS = ("text", "html", "simple_format", "md", "ansi")
SAID = 3  # ways of failing a test's output describes in full (each with the cases that failed that way)


def grade(a: Assignment, path: str, time_limit: float = TIME_LIMIT, hidden: bool = True) -> dict:
    """Grade the student's file at `path` in the sandbox: every test (only the visible ones when `hidden` is False),
    case by case."""
    source = read(path)
    check_confinable()  # as root where nothing confines a solution: refused before any test, not one by one
    started = time.monotonic()
    with Learner(source, path, a.policy(), time_limit) as learner:
        return results(a, learner, hidden, started=started)


def results(a: Assignment, learner, hidden: bool = True, only=None, started: float | None = None) -> dict:
    """results.json's dict for the file `learner` holds: `learner.loaded()` (None, or the line saying why the file
    cannot run) and `learner.judge(exercise, case)` (None, or the case's line) — the sandbox's Learner, or the same
    two on a function in this process. `only`: the functions whose tests to run (None: all)."""
    started = time.monotonic() if started is None else started
    unrunnable, tests = learner.loaded(), []
    for n, t in enumerate(a.tests, 1):
        if not (hidden or t.visible) or only is not None and t.exercise.function not in only:
            continue
        passed, of, out = _test(learner, t.exercise)
        tests.append({"name": f"{t.exercise.name}: {t.exercise.title}", "number": str(n),
                      "score": t.points if passed == of else t.points * passed / of, "max_score": t.points,
                      "status": "passed" if passed == of else "failed", "output": out, "visibility": t.visibility})
    score, most = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    said = f"assignment {a.number} ({a.title}): {score:g} of {most:g} points"
    if unrunnable:
        said += f"; your file could not be run: {unrunnable}"
    noted = getattr(learner, "noted", [])
    if noted:  # not a refusal: what a lecturer reading the feedback should know the file did
        said += f"; while it was graded your code {', '.join(noted)}"
    return {"score": score, "execution_time": round(time.monotonic() - started, 3), "output_format": "text",
            "output": said, "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def _test(learner: Learner, exercise) -> tuple:
    """(cases passed, cases, the test's one-line output): every case judged, each on its own."""
    cases = list(exercise.cases())
    why = learner.loaded()
    if why is not None:
        return 0, len(cases), why
    failed: dict = {}  # what a failing case says (its case left out) -> the cases that said it
    for case in cases:
        try:
            line = learner.judge(exercise, case)
        except NoFunction as e:  # the file defines no such function: the student's own usage mistake, one line
            return 0, len(cases), str(e)
        if line is not None:
            what = describe(case)
            said = line[len(what) + 2:] if line.startswith(what + ": ") else line
            failed.setdefault(" ".join(said.split("\n")), []).append(what)
    passed = len(cases) - sum(map(len, failed.values()))
    if not failed:
        return passed, len(cases), f"passed all {len(cases)} case{'s' if len(cases) > 1 else ''}"
    lines, explained = [], set()
    for said, whats in failed.items():  # one line per way of failing; a misconception explained once
        named = re.search(r"Misconception '[^']+': ", said)
        if named and named.group() in explained:
            said = said[:named.start()] + named.group()[:-2] + " (above)"
        elif named:
            explained.add(named.group())
        lines.append(f"{'; '.join(whats)}: {said}")
    more = f"; and {len(lines) - SAID} more" if len(lines) > SAID else ""
    head = f"{passed} of {len(cases)} cases passed: " if len(cases) > 1 else ""
    return passed, len(cases), head + "; ".join(lines[:SAID]) + more


def write_results(results: dict, path: str, flag: str = "") -> None:
    """Write `results` (checked first) as JSON at `path`, whole or not at all (checked as an output first:
    zerosim/outputs.py; `assignment grade --results` checks it before grading too)."""
    check_results(results)
    check_file(path, flag)

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)

    write_atomic(path, write, flag)


def check_results(r: dict) -> None:
    """A ValueError naming the first field of `r` that Gradescope's results.json format does not allow."""
    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"results.json: {what}")

    number = (int, float)
    top = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
           "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
    need(isinstance(r, dict), "the top level must be an object")
    need(set(r) <= top, f"unknown top-level keys {sorted(set(r) - top)}")
    need("score" in r or all("score" in t for t in r.get("tests", [])) and r.get("tests"),
         "a score is needed at the top level or on every test")
    need(not isinstance(r.get("score", 0), bool) and isinstance(r.get("score", 0), number), "score must be a number")
    for key in ("visibility", "stdout_visibility"):
        need(r.get(key, "visible") in VISIBILITY, f"{key} must be one of {VISIBILITY}")
    for key in ("output_format", "test_output_format"):
        need(r.get(key, "text") in OUTPUT_FORMATS, f"{key} must be one of {OUTPUT_FORMATS}")
    need(isinstance(r.get("tests", []), list), "tests must be a list")
    fields = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
              "visibility", "extra_data"}
    for i, t in enumerate(r.get("tests", [])):
        need(isinstance(t, dict) and set(t) <= fields, f"tests[{i}] has unknown keys {sorted(set(t) - fields)}")
        for key in ("score", "max_score"):
            need(key not in t or (isinstance(t[key], number) and not isinstance(t[key], bool)),
                 f"tests[{i}].{key} must be a number")
        need(t.get("status", "passed") in ("passed", "failed"), f"tests[{i}].status must be passed or failed")
        need(t.get("visibility", "visible") in VISIBILITY, f"tests[{i}].visibility must be one of {VISIBILITY}")
        need(all(isinstance(t.get(k, ""), str) for k in ("name", "number", "output")),
             f"tests[{i}]: name, number and output are strings")
    json.dumps(r, allow_nan=False)  # NaN is not JSON
