"""A week-sized assignment: a handout, a starter file, and graded tests, visible and hidden.

Each test is an `Exercise` (zerosim/teaching/exercises/_grading.py): a function the student's file defines, a few
cases smallest first, each case earning its share of the test's points, each failing case one line (its first
difference, and the misconception it matches). A test is visible (the student runs it with `zerosim assignment
check`) or hidden (only the instructor's `zerosim assignment grade` runs it; Gradescope shows it after the grades are
published). The autograder (_autograde.py) runs every test on the student's file through the exercises' sandbox:
the file in a confined child, under a time limit per case, with only what the handout offers (`Assignment.offers`)
and never zerosim's own implementation of what a test grades (its exercise's `grades`); the checks in the grader.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.teaching.exercises import OFFERS, Exercise
from zerosim.teaching.sandbox import Policy

VISIBILITY = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's four


@dataclass(frozen=True)
class GradedTest:
    """One line of the grade: an exercise, its points, who sees it, and where the child process finds it."""

    exercise: Exercise
    points: float
    visibility: str  # "visible" (the student runs it too) or "after_published" (hidden until grades are out)
    where: str  # "module:attribute" of the exercise: where it is defined

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
    offers: tuple = OFFERS  # what the handout gives a solution beside numpy (the sandbox loads only these of zerosim)

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    def policy(self) -> Policy:
        """What the sandbox lets a submission use: for each function, zerosim's modules that answer its cases are
        refused; what the handout offers is loaded (zerosim/teaching/sandbox/_policy.py)."""
        grades: dict = {}
        for t in self.tests:
            grades[t.exercise.function] = tuple(dict.fromkeys(grades.get(t.exercise.function, ())
                                                              + tuple(t.exercise.grades)))
        harnesses = tuple(dict.fromkeys(h for t in self.tests for h in t.exercise.harnesses))
        return Policy(grades, tuple(self.offers), f"assignment {self.number}'s handout", harnesses)


def cases_of(exercise: Exercise, which: slice, name: str) -> Exercise:
    """`exercise` with only the cases `which` picks (the visible few, or the hidden rest), named `name`."""
    every = exercise.cases
    return replace(exercise, name=name, cases=lambda: list(every())[which])
