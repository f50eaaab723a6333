"""How a week-sized assignment is scored: parts of a handout, each worth points, each point a test of a small group
of cases of which every case earns its share (partial credit: a test half right scores half; _autograde.py), and
feedback that names a misconception where a wrong answer is what that misconception produces.

    Misconception("round_once", "you summed exactly and rounded once at the end; NCCL rounds at every hop", output)
    tests_of(module_name, globals(), "RS", exercise, [(slice(0, 1), 0.5, "visible"), ...])

A misconception's `output(case)` computes, from zerosim's own functions (never from a reference solution), what a
learner who holds it would return on that case; `diagnose` compares. The planted wrong solutions of the instructor
kit (course/instructor/aN/planted/NAME.py) are named after the misconception each one holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.teaching.assignments._assignment import GradedTest, cases_of
from zerosim.teaching.exercises import Counterexample


@dataclass(frozen=True)
class Misconception:
    name: str  # short, and the planted file that holds it (course/instructor/aN/planted/<name>.py)
    says: str  # what the learner did and why it is wrong, one sentence
    output: object  # case -> what a learner with this misconception returns (None: does not apply to the case)


@dataclass(frozen=True)
class Part:
    letter: str
    title: str
    hours: float  # what a student should plan for it
    tests: tuple  # GradedTest, the part's points (none for a written part)
    written: bool = False  # graded by hand against the instructor kit's rubric (not in results.json)


def diagnose(got, case, table, same) -> Misconception | None:
    """The first misconception of `table` whose output on `case` is `got` (`same(got, theirs)` decides), else None."""
    for m in table:
        try:
            theirs = m.output(case)
        except Exception:  # a misconception that cannot be evaluated on this case does not apply
            continue
        if theirs is not None and same(got, theirs):
            return m
    return None


def wrong(problem: str, misconception: Misconception | None) -> Counterexample:
    """The counterexample to raise: the first difference, and the misconception it matches when one does."""
    if misconception is None:
        return Counterexample(problem)
    return Counterexample(f"{problem}. Misconception '{misconception.name}': {misconception.says}")


def tests_of(module: str, namespace: dict, stem: str, exercise, groups) -> tuple:
    """GradedTests of `exercise`, one per group (slice of its cases, points, visibility), each exported as
    `namespace[f"{stem}_{i}"]` so that the grading process finds it as "module:STEM_i"."""
    out = []
    every = list(exercise.cases())
    for i, (which, points, visibility) in enumerate(groups):
        picked = every[which]
        what = "; ".join(c["what"] for c in picked)
        hidden = "" if visibility == "visible" else " (hidden until grades are published)"
        ex = replace(cases_of(exercise, which, f"{exercise.name} {i + 1}{hidden}"), title=what)
        namespace[f"{stem}_{i}"] = ex
        out.append(GradedTest(ex, points, visibility, f"{module}:{stem}_{i}"))
    return tuple(out)


def handout_points(parts) -> str:
    """The handout's table of parts: letter, title, hours, points (visible / hidden)."""
    lines = ["| part | what | plan for | points (visible + hidden) |", "|---|---|---|---|"]
    for p in parts:
        seen = sum(t.points for t in p.tests if t.visible)
        rest = sum(t.points for t in p.tests if not t.visible)
        points = "by hand (the rubric is the instructor's)" if p.written else f"{seen:g} + {rest:g}"
        lines.append(f"| {p.letter} | {p.title} | {p.hours:g} h | {points} |")
    total = sum(p.hours for p in parts)
    lines.append(f"| | **all** | **{total:g} h** | **{sum(t.points for p in parts for t in p.tests):g}** |")
    return "\n".join(lines)
