"""The harness for the exercises that write the last arithmetic before the optimizer
(parallel/data/recipes/_averaging.py).

The learner's function takes the place of `averaging.finish` in a ZeRO engine's step (its `Hooks.finish`). At
each call its
answer is compared with the package's own, bit for bit, on the same reduced gradient, so a counterexample
names the element, its reduced value, the right answer and the learner's; the run then goes on with the
learner's answer and must end equal to the oracle's (which runs first, unpatched).
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.exercises._grading import Counterexample, first_difference


def finish_with(fn, call, applies, explain=None):
    """Hooks whose `finish` stands in for `averaging.finish`: where `applies(recipe name, policy, micro_steps)`, the
    answer is `call(fn, reduced, policy, world_size, micro_steps)` checked against the package's; elsewhere the
    package's. `explain(got, reduced, world_size, i)`, when given, says in words what the learner's answer at the
    first differing element i did instead (a sentence, or "" when it recognises no known mistake)."""
    from zerosim.parallel.data import GradientRecipe, Hooks
    from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face

    def finish(reduced, policy, world_size, micro_steps=1, scale=None, recipe=None):
        want = averaging.finish(reduced, policy, world_size, micro_steps, scale, recipe=recipe)
        if not applies(GradientRecipe.of(policy, recipe).reduction, policy, micro_steps):
            return want
        got = call(fn, reduced.copy(), policy, world_size, micro_steps)
        if not isinstance(got, np.ndarray) or got.dtype != np.float32:
            raise Counterexample(f"it returned {type(got).__name__} {getattr(got, 'dtype', '')}; the optimizer reads "
                                 "an fp32 array")
        problem = first_difference(got, want, "your answer")
        if problem:
            i = int(np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))[0]) if got.shape == want.shape else 0
            raise Counterexample(f"the reduced gradient's element {i} is {float(reduced[i])!r} ({reduced.dtype}, N = "
                                 f"{world_size}"
                                 f"{', K = %d' % micro_steps if micro_steps > 1 else ''}"
                                 f"{', S = %g' % policy.loss_scale if policy.loss_scale != 1 else ''}): {problem}"
                                 + (f". {why}" if explain and (why := explain(got, reduced, world_size, i)) else ""))
        return got

    return Hooks(finish=finish)
