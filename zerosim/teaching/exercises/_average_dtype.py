"""Exercise: dividing by N in the right dtype — the averaged gradient the fp32 optimizer reads.

Graded inside a real ZeRO-1 engine (fp16 and bf16 on the wire, N = 2 to 5): the learner's function
takes the place of the engine's averaging for two training steps; each answer must equal the package's
(parallel/data/recipes/_averaging.py) bit for bit, and the run must end equal to the single-device oracle.
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.exercises._engine_cases import describe, run_case
from zerosim.teaching.exercises._finish_cases import finish_with
from zerosim.teaching.exercises._grading import ENGINE, Exercise, WITHHELD

TASK = """\
After the reduce-scatter a rank holds its shard of the *sum* of N ranks' gradients, in the 16-bit wire
format. The optimizer runs in fp32 on the *average*. The seeds' protocol (seed 000, ZeRO-1 step by step):
cast the sum to fp32 first, then divide by N there — in 16 bits, most quotients would round to 11 (fp16)
or 8 (bf16) significant bits. Write average(summed, world_size)."""

STUB = '''\
import numpy as np


def average(summed, world_size):
    """summed: this rank's shard of the reduced gradient, the sum over world_size ranks, in fp16 or bf16.
    Return the average gradient as the fp32 optimizer reads it (an np.float32 array)."""
    raise NotImplementedError
'''

# No reference solution ships: this function is one of assignment 2's, whose reference stays with the
# instructor (course/instructor/a2/solution.py, outside the package), so no student-facing command prints it.
SOLUTION = ""

# The planted bugs' sources are withheld with the reference (they are the reference less one line): the
# instructor kit has them (course/instructor/exercises/average_dtype/, `zerosim exercise check --planted`
# finds them there when the kit is installed). Their names stay: they say what the grader catches.
PLANTED = dict.fromkeys(['divides in 16 bits', 'sums, never divides'], "")

CASES = [
    {"stage": 1, "n": 2, "widths": (3, 4, 2)},
    {"stage": 1, "n": 3, "widths": (3, 4, 2)},
    {"stage": 1, "n": 3, "widths": (3, 4, 2), "precision": "bf16-mixed"},
    {"stage": 1, "n": 5, "widths": (4, 6, 3), "precision": "bf16-mixed"},
]


def cases():
    for case in CASES:
        yield {**case, "what": describe(case)}


def _call(fn, reduced, policy, world_size, micro_steps):
    return fn(reduced, world_size)


# the plain average: no loss scale, no accumulation (unscale_once has those)
def _applies(reduction: str, policy, micro_steps) -> bool:
    return reduction == "seeds" and micro_steps == 1 and policy.loss_scale == 1


def _explain(got, summed, world_size: int, i: int) -> str:
    """What the learner's answer at element i did instead, when it is one of the known other recipes: each is
    computed here on the same reduced gradient and compared bit for bit with the learner's element."""
    n, fmt = world_size, summed.dtype.name
    wide = summed.astype(np.float32)  # exact: every fp16/bf16 value is an fp32 value
    inverse = np.float32(1 / n)
    known = (
        (wide * inverse, f"You multiplied by fp32(1/{n}) = {float(inverse)!r}, as DDP does before its all-reduce "
                         "(parallel/data/recipes/_averaging.py, recipe ddp), where the expected recipe (seed 000) "
                         f"divides by {n} in "
                         f"fp32: 1/{n} was already rounded to fp32 and the product rounds again, so two roundings "
                         "can land one fp32 step away from the quotient's one"),
        ((summed / summed.dtype.type(n)).astype(np.float32),
         f"You divided by {n} in {fmt}, then cast: the quotient was rounded to {fmt}'s "
         f"{np.finfo(summed.dtype).nmant + 1} significant bits; cast to fp32 first (exact), then divide there"),
        (wide, f"You never divided by N = {n}: that is the sum of {n} ranks' gradients, not their average"),
    )
    for values, words in known:
        if np.asarray(values).view(np.uint32)[i] == np.asarray(got).view(np.uint32)[i]:
            return words
    return ""


def check(fn, case) -> None:
    run_case(case, hooks=finish_with(fn, _call, _applies, _explain))


EXERCISE = Exercise("average_dtype", "dividing by N in the right dtype: the averaged gradient the fp32 optimizer reads",
                    "average", TASK, STUB, SOLUTION, PLANTED, cases, check,
                    withheld=WITHHELD, grades=ENGINE)
