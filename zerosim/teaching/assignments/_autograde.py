"""The autograder: every test of an assignment on a student's file, written as Gradescope's results.json.

    results = grade(get(1), "a1_ring.py")                  # a dict in Gradescope's format
    zerosim assignment grade 1 --file a1_ring.py --results results/results.json

Gradescope runs an autograder's `run_autograder` script in a container and reads /autograder/results/results.json:
{"score", "output", "tests": [{"name", "score", "max_score", "status", "output", "visibility"}], ...}
(https://gradescope-autograders.readthedocs.io/en/latest/specs/, "Output format"). `check_results` holds a
results dict to that format. Each test runs in the sandbox, each case under a time limit
(teaching/exercises/_sandbox.py): a student's loop, flood of output, sys.exit, crash or import error scores 0 on that
test with one line, and the grader goes on; where the sandbox cannot confine a solution and the grader is root,
nothing is graded (CannotConfine).
"""

from __future__ import annotations

import json
import os
import time

from zerosim.outputs import check_file, write_atomic
from zerosim.teaching.assignments._assignment import VISIBILITY, Assignment
from zerosim.teaching.exercises._sandbox import grade_file
from zerosim.teaching.sandbox import CannotConfine, check_confinable

TIME_LIMIT = 60.0  # seconds per case, as `zerosim exercise check`
OUTPUT_FORMATS = ("text", "html", "simple_format", "md", "ansi")


def grade(a: Assignment, path: str, time_limit: float = TIME_LIMIT, hidden: bool = True) -> dict:
    """Grade the student's file at `path`: every test (only the visible ones when `hidden` is False)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    check_confinable()  # as root where nothing confines a solution: refused before any test, not one by one
    started, tests, unrunnable = time.monotonic(), [], None
    for n, t in enumerate(a.tests, 1):
        if not (hidden or t.visible):
            continue
        if unrunnable is not None:  # the file did not load for the first test: it will not for the others
            passed, out = False, unrunnable
        else:
            try:
                r = grade_file(t.exercise.name, path, time_limit, where=t.where)
            except CannotConfine:  # the grader's machine, not the student's file: no results.json at all
                raise
            except ValueError as e:  # the file defines no such function: the student's own usage mistake, one line
                passed, out = False, str(e)
            except OSError as e:  # the grader could not start the test (no process, no pipe): still a result, said
                passed, out = False, (f"the grader could not run this test ({type(e).__name__}: {e}), through no "
                                      "fault of yours")
            else:
                passed = r.passed
                out = f"passed all {r.cases} cases" if passed else r.counterexample.replace("\n", " ")
                if r.cases == 0:  # a syntax error, an import that fails, sys.exit while loading
                    unrunnable = out
        tests.append({"name": f"{t.exercise.name}: {t.exercise.title}", "number": str(n),
                      "score": t.points if passed else 0.0, "max_score": t.points,
                      "status": "passed" if passed else "failed", "output": out, "visibility": t.visibility})
    score, most = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    said = f"assignment {a.number} ({a.title}): {score:g} of {most:g} points"
    return {"score": score, "execution_time": round(time.monotonic() - started, 3), "output_format": "text",
            "output": said + (f"; your file could not be run: {unrunnable}" if unrunnable else ""),
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


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
