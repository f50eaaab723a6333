"""Four week-sized assignments with an autograder, in the shape of CS336's and the LLM-training puzzles'.

    zerosim assignment list                           # the four
    zerosim assignment show 1                          # the handout: predict -> run -> explain
    zerosim assignment starter 1 > a1_ring.py           # the file to fill in
    zerosim assignment check 1 --file a1_ring.py        # the visible tests (what a student runs)
    zerosim assignment grade 1 --file a1_ring.py --results results/results.json   # every test, Gradescope's format

    _a1_ring.py     1: collectives and rounding — the ring reduce-scatter and all-gather, 2048 + 1 + 1 + 1
    _a2_zero12.py   2: ZeRO-1/2 — shard, reduce, refresh on the engine's extension points; predict the memory
    _a3_zero3.py    3: ZeRO-3 — gather a layer from its shards; predict the peak with and without prefetch
    _a4_torch.py    4: DDP with ZeRO-1 on real torch.distributed (gloo): the ring by messages, a sharded Adam step
    _assignment.py  what an assignment is (tests: exercises, points, visibility)
    _autograde.py   the autograder and Gradescope's results.json

Reference solutions and planted wrong ones are not in the package: they live in the repository's course/
folder (course/instructor/), which `zerosim exercise show` and these commands never print.
"""

from zerosim.teaching.assignments import _a1_ring, _a2_zero12, _a3_zero3, _a4_torch
from zerosim.teaching.assignments._assignment import Assignment, GradedTest
from zerosim.teaching.assignments._autograde import check_results, grade, results, write_results

ASSIGNMENTS = {m.ASSIGNMENT.number: m.ASSIGNMENT for m in (_a1_ring, _a2_zero12, _a3_zero3, _a4_torch)}


def get(number: int) -> Assignment:
    """Assignment `number` (a ValueError listing them otherwise)."""
    if number not in ASSIGNMENTS:
        raise ValueError(f"no assignment {number!r}; there are {', '.join(map(str, ASSIGNMENTS))}")
    return ASSIGNMENTS[number]


__all__ = ["ASSIGNMENTS", "Assignment", "GradedTest", "check_results", "get", "grade", "results", "write_results"]
