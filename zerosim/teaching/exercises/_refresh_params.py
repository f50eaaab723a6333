"""Exercise: the all-gather after the update — make every rank's 16-bit model whole and equal again.

Graded inside real ZeRO-1 and ZeRO-2 engines: the learner's function takes the place of the engine's
refresh (parallel/data/_gather.py, `refresh`, through the engine's `Hooks.refresh`) for two training steps, on shapes
with and without padding;
after every step each rank's 16-bit params and the fp32 masters must equal the single-device oracle's,
bit for bit (a rank left with a stale shard computes the second step's gradients from the wrong model).
"""

from __future__ import annotations

from zerosim.teaching.exercises._engine_cases import describe, run_case
from zerosim.teaching.exercises._grading import ENGINE, Exercise, WITHHELD

TASK = """\
At ZeRO stages 1 and 2 every rank keeps the whole 16-bit model, but updates only its own shard of it
(rank r: elements [r*s, (r+1)*s) of the padded flat buffer). Right after the update the copies disagree
(seed 004: GPU 0 holds new w1, w2 and old w3, w4). One all-gather of the updated shards makes every rank
whole again. Write refresh(params, shard_size, all_gather)."""

STUB = '''\
def refresh(params, shard_size, all_gather):
    """After the update, at ZeRO-1/2.

    params: one (N*s,) 16-bit array per rank: the whole flat model as that rank holds it; rank r has
        just updated its own shard params[r][r*s:(r+1)*s] (s = shard_size) and nothing else.
    all_gather(shards): one shard per rank in, one (N*s,) array per rank out: the shards in rank order.
    Write the result into params[r] itself (each rank's model lives in that buffer).
    """
    raise NotImplementedError
'''

# No reference solution ships: this function is one of assignment 2's, whose reference stays with the
# instructor (course/instructor/a2/solution.py, outside the package), so no student-facing command prints it.
SOLUTION = ""

# The planted bugs' sources are withheld with the reference (they are the reference less one line): the
# instructor kit has them (course/instructor/exercises/refresh_params/, `zerosim exercise check --planted`
# finds them there when the kit is installed). Their names stay: they say what the grader catches.
PLANTED = dict.fromkeys(['everyone sends shard 0', 'never writes back'], "")

CASES = [
    {"stage": 1, "n": 2, "widths": (3, 4, 2)},  # 26 params: 13 per rank
    {"stage": 1, "n": 3, "widths": (3, 5, 2)},  # 32 params on 3: padded to 33
    {"stage": 2, "n": 4, "widths": (4, 6, 3)},
]


def cases():
    for case in CASES:
        yield {**case, "what": describe(case)}


def _in_engine(fn):
    """The engine's refresh (parallel/data/_gather.py, refresh: its `Hooks.refresh`) with `fn` doing the work."""
    from zerosim.collectives import all_gather as ring_all_gather

    def refresh(ctx, allgather_bucket_size=None):
        cluster, handles = ctx.cluster, []

        def all_gather(shards):
            with cluster.trace.about(purpose="refresh params", layers=()):
                full = ring_all_gather(cluster, shards, tag="params")
            handles.append(full.handle)
            return full

        fn([rank.params.array for rank in ctx.ranks], ctx.layout.shard_size, all_gather)
        return sum(handles[1:], handles[0]) if handles else cluster.trace.handle()

    return refresh


def check(fn, case) -> None:
    from zerosim.parallel.data import Hooks

    run_case(case, hooks=Hooks(refresh=_in_engine(fn)))


EXERCISE = Exercise("refresh_params", "the all-gather after the update: every rank's 16-bit model whole again",
                    "refresh", TASK, STUB, SOLUTION, PLANTED, cases, check,
                    withheld=WITHHELD, grades=ENGINE)
