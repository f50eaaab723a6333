"""A week-sized assignment: a handout, a starter file, and graded tests, visible and hidden.

Each test is an `Exercise` (zerosim/teaching/exercises/_grading.py): a function the student's file defines, cases
smallest first, the first counterexample as its one line of output. A test is visible (the student runs it with `zerosim
assignment check`) or hidden (only the instructor's `zerosim assignment grade` runs it; Gradescope shows it after
the grades are published). The autograder (_autograde.py) runs every test on the student's file in a process of its
own, under a time limit, through the exercises' sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.teaching.exercises._grading import Exercise

VISIBILITY = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's four


@dataclass(frozen=True)
class GradedTest:
    """One line of the grade: an exercise, its points, who sees it, and where the child process finds it."""

    exercise: Exercise
    points: float
    visibility: str  # "visible" (the student runs it too) or "after_published" (hidden until grades are out)
    where: str  # "module:attribute" of the exercise, for the grading process (teaching/exercises/_sandbox.py)

    @property
    def visible(self) -> bool:
        return self.visibility == "visible"


@dataclass(frozen=True)
class Assignment:
    number: int
    title: str
    handout: str  # markdown: predict -> run -> explain
    starter: str  # the file a student starts from: every function's signature and docstring
    tests: tuple  # GradedTest, in the order the grade lists them
    files: str  # the name the student's file takes ("a1_ring.py")
    parts: tuple = ()  # _parts.Part: the handout's parts, each with its tests, hours and points

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)


def cases_of(exercise: Exercise, which: slice, name: str) -> Exercise:
    """`exercise` with only the cases `which` picks (the visible few, or the hidden rest), named `name`."""
    every = exercise.cases
    return replace(exercise, name=name, cases=lambda: list(every())[which])
