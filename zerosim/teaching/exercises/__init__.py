"""Exercises: a learner writes one small function, and the package's own checks grade it.

    from zerosim import exercises
    print(exercises.get("ring_chunk").stub)                  # what to fill in
    print(exercises.check("ring_chunk", my_chunk_sent))      # a function, its source, or a file's path

or from a shell: `zerosim exercise list`, `zerosim exercise show NAME`, `zerosim exercise check NAME
--file my_solution.py`. Each exercise puts the learner's function where the package's own piece goes
(the ring's chunk index, the shard arithmetic, the stage-2 free, the refresh all-gather, the averaging,
the unscaling), runs cases smallest first against the oracle or the naive twin, and reports the first
counterexample. Each has planted bugs the grader catches and a reference solution that passes: shipped, except
for the four assignment 2 grades (shard_offset, stage2_free, average_dtype, refresh_params), whose reference stays
with the instructor (course/instructor/a2/solution.py) so that no student-facing command prints it.

    ring_chunk      which chunk rank r sends at step k of a ring reduce-scatter         _ring_chunk.py
    shard_offset    a shard's [start, stop) with padding                                _shard_offset.py
    stage2_free     reduce-scatter a layer's gradients, keep your piece, free them      _stage2_free.py
    refresh_params  the all-gather after the update                                     _refresh_params.py
    average_dtype   divide by N in fp32, after the cast                                 _average_dtype.py
    unscale_once    divide by N·K and by the loss scale once, in fp32                   _unscale_once.py

A learner's file runs in a process of its own, each case under a time limit, with only what the exercise's handout
offers (_sandbox.py): a loop, sys.exit, a syntax error or a call of zerosim's own implementation of what the exercise
grades is a failing grade with one line saying what happened, never a hung or crashed grader; the checks run in the
grader, on what the file's function returned.
"""

from __future__ import annotations

import os

from zerosim.teaching.exercises import (
    _average_dtype,
    _refresh_params,
    _ring_chunk,
    _shard_offset,
    _stage2_free,
    _unscale_once,
)
from zerosim.teaching.exercises._grading import (
    OFFERS,
    Counterexample,
    Exercise,
    LearnerRaised,
    Result,
    describe,
    first_difference,
    load,
    through,
)
from zerosim.teaching.exercises._sandbox import TIME_LIMIT, Learner, NoFunction, grade_file, read
from zerosim.teaching.sandbox import NotRunnable

EXERCISES = {
    m.EXERCISE.name: m.EXERCISE
    for m in (_ring_chunk, _shard_offset, _stage2_free, _refresh_params, _average_dtype, _unscale_once)
}


def get(name: str) -> Exercise:
    """The exercise called `name` (a ValueError listing them otherwise)."""
    try:
        return EXERCISES[name]
    except KeyError:
        raise ValueError(f"no exercise {name!r}; there are: {', '.join(EXERCISES)}") from None


def check(name: str, solution, time_limit: float = TIME_LIMIT) -> Result:
    """Grade `solution` for exercise `name`: a function, the source of a file defining it, or a file's path.

    A file is graded in a process of its own, each case under `time_limit` seconds, with only what the exercise's
    handout offers (_sandbox.py): a loop, a `sys.exit`, a crash or a call of zerosim's own implementation of what the
    exercise grades becomes a failing grade with one line saying so. A function or source is graded here, in this
    process, unpoliced (a notebook's own cell, for practice; interrupt the kernel to stop a loop); a file or source
    that does not compile, fails to import or calls sys.exit also gives a failing grade, not a traceback."""
    ex = get(name)
    if callable(solution):
        fn = solution
    elif isinstance(solution, (str, os.PathLike)) and str(solution).endswith(".py") and "\n" not in str(solution):
        return grade_file(ex.name, str(solution), time_limit)
    elif isinstance(solution, str):
        try:
            fn = load(solution, ex.function)
        except NotRunnable as e:
            return Result(ex.name, False, 0, str(e))
    else:
        raise TypeError(f"a solution is a function, its source, or a .py file's path; got {type(solution).__name__}")
    return ex.grade(fn)


__all__ = ["Counterexample", "EXERCISES", "Exercise", "NotRunnable", "Result", "TIME_LIMIT", "check",
           "first_difference", "get", "grade_file", "load", "Learner", "LearnerRaised", "NoFunction", "OFFERS",
           "describe", "read", "through"]
