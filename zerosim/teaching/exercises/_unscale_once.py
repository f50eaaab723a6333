"""Exercise: unscaling once — from the reduced, loss-scaled, accumulated gradient to what Adam reads.

Graded inside real ZeRO-1 and ZeRO-2 engines with fp16, a static loss scale S = 1024 and gradient
accumulation over K = 1 or 2 micro-steps; some input features are tiny, so some gradients are smaller
than fp16's smallest normal number once unscaled (they survive in fp32, not in fp16). Each answer must
equal the package's (parallel/data/recipes/_averaging.py) bit for bit, and the run must end equal to the oracle's.
"""

from __future__ import annotations

from zerosim.precision import get_precision
from zerosim.teaching.exercises._engine_cases import describe, run_case
from zerosim.teaching.exercises._finish_cases import finish_with
from zerosim.teaching.exercises._grading import ENGINE, Exercise

TASK = """\
With fp16 and a loss scale S, backward makes gradients of S times the loss, so small ones stay above
fp16's underflow (seed 002). They are summed over K micro-steps and N ranks, still scaled, in fp16. The
optimizer wants the average gradient of the loss itself, in fp32: divide by N*K and by S — each once,
and only after the cast to fp32, where the small values are safe. Write finish(summed, world_size,
micro_steps, loss_scale)."""

STUB = '''\
import numpy as np


def finish(summed, world_size, micro_steps, loss_scale):
    """summed: this rank's shard of the reduced gradient: the sum over world_size ranks and micro_steps
    micro-batches of the gradients of loss * loss_scale, in fp16.
    Return the average gradient of the (unscaled) loss as the fp32 optimizer reads it."""
    raise NotImplementedError
'''

SOLUTION = '''\
import numpy as np


def finish(summed, world_size, micro_steps, loss_scale):
    g = summed.astype(np.float32)  # exact: every fp16 number is an fp32 number
    return g / np.float32(world_size * micro_steps) / np.float32(loss_scale)
'''

PLANTED = {
    "unscales twice": '''\
import numpy as np


def finish(summed, world_size, micro_steps, loss_scale):
    g = summed.astype(np.float32) / np.float32(loss_scale)
    return g / np.float32(world_size * micro_steps) / np.float32(loss_scale)
''',
    "unscales in fp16": '''\
import numpy as np


def finish(summed, world_size, micro_steps, loss_scale):
    g = (summed / loss_scale).astype(np.float32)
    return g / np.float32(world_size * micro_steps)
''',
    "forgets the micro-steps": '''\
import numpy as np


def finish(summed, world_size, micro_steps, loss_scale):
    return summed.astype(np.float32) / np.float32(world_size) / np.float32(loss_scale)
''',
}

SCALED = get_precision("fp16-mixed").with_(loss_scale=1024.0)
CASES = [
    {"stage": 1, "n": 2, "widths": (3, 4, 2)},
    {"stage": 1, "n": 2, "k": 2, "widths": (3, 4, 2)},
    {"stage": 2, "n": 3, "k": 2, "widths": (3, 5, 2)},
]
TINY_FEATURES = (1.0, 1e-3, 1e-5)  # input scales: the last feature's weight gradients unscale below 6.1e-5


def cases():
    for case in CASES:
        yield {**case, "precision": "fp16-mixed", "what": describe(case) + ", loss scale S = 1024"}


def _call(fn, reduced, policy, world_size, micro_steps):
    return fn(reduced, world_size, micro_steps, policy.loss_scale)


def _applies(reduction: str, policy, micro_steps) -> bool:
    return reduction == "seeds"


def check(fn, case) -> None:
    run_case(case, hooks=finish_with(fn, _call, _applies), precision=SCALED, data_scale=TINY_FEATURES)


EXERCISE = Exercise("unscale_once", "unscaling once: from the reduced, loss-scaled, accumulated gradient to Adam's",
                    "finish", TASK, STUB, SOLUTION, PLANTED, cases, check, grades=ENGINE)
