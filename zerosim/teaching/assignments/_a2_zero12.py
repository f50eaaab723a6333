"""Assignment 2 (a week): ZeRO-1/2. Shard, reduce, average, refresh — each the engine's own piece, replaced through
its extension points (`zerosim.parallel.data.Hooks`) and graded against the single-device oracle bit for bit; then
predict the memory each rank holds and check it against the meta backend's ledgers.

The four pieces are the exercises of zerosim/teaching/exercises (their early cases visible, the rest hidden); the memory
prediction is graded against `measure_stage` (analysis/costs/_measured.py), the run `zerosim memory` makes.
"""

from __future__ import annotations

from zerosim.teaching.assignments._assignment import Assignment, GradedTest, cases_of
from zerosim.teaching.exercises import (
    _average_dtype as average_dtype,
)
from zerosim.teaching.exercises import (
    _refresh_params as refresh_params,
)
from zerosim.teaching.exercises import (
    _shard_offset as shard_offset,
)
from zerosim.teaching.exercises import (
    _stage2_free as stage2_free,
)
from zerosim.teaching.exercises._grading import Counterexample, Exercise

HANDOUT = """\
# Assignment 2: ZeRO-1 and ZeRO-2, piece by piece

You will write the four pieces that make data parallelism ZeRO — where each rank's shard starts, how a layer's
gradients are reduced and freed, how the sum becomes an average, how the updated shards are made whole again —
and the engine will run with yours in place of its own. Then you predict how many bytes each rank holds.

**Read first:** notebook 01 (seed 004's worked example), notebook 03 (memory by stage), docs/architecture.md.

## 1. Predict
For a model of P parameters on N ranks, fp16 weights and gradients, an fp32 master and Adam's m and v: how many
bytes of each kind does one rank hold at rest after a step, at stages 0, 1 and 2? Mind the padding: every flat
buffer is padded to a multiple of N. Write it as `predict_memory(P, N, stage)`.

## 2. Run: write the pieces (the engine calls yours)
* `shard_bounds(length, world_size, rank)` — the real [start, stop) a rank owns of a padded flat buffer.
* `reduce_layer_grads(held, reduce_scatter, add_to_shard)` — ZeRO-2: reduce-scatter one layer's fresh gradients,
  add your piece to your shard, **free** the full gradients (the ledger checks you did, and not too early).
* `average(summed, world_size)` — the summed fp16 gradient shard to the fp32 average the optimizer reads.
* `refresh(params, shard_size, all_gather)` — after the update, all-gather the shards so every rank is whole.

`zerosim assignment check 2 --file a2_zero12.py` runs the visible tests; `zerosim exercise show NAME` gives each
piece's full task.

## 3. Explain
Run `zerosim memory --params 7.5e9 --ranks 64` and compare its ledger column with your formula at P = 7.5e9,
N = 64. Why does stage 1 save 12P(1 - 1/N) bytes and stage 2 another 2P(1 - 1/N)? Where does the fp32 gradient
shard (grad32) live, and why is it not in the resting bytes?
"""

STARTER = '''\
"""Assignment 2: ZeRO-1/2. See `zerosim assignment show 2`."""
import numpy as np


def shard_bounds(length, world_size, rank):
    """(start, stop): the real (unpadded) elements rank `rank` owns of a flat buffer of `length` elements cut
    into `world_size` equal padded shards."""
    raise NotImplementedError


def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    """One layer after its backward on every rank (ZeRO-2). held: one ledger Buffer per rank with the layer's
    gradients (held[r].array; held[r].free()). reduce_scatter(arrays): one array per rank in, rank r's piece of
    the sum out. add_to_shard(r, piece): add rank r's piece into its gradient shard."""
    raise NotImplementedError


def average(summed, world_size):
    """summed: this rank's shard of the gradient summed over world_size ranks (fp16). Return the average as the
    fp32 optimizer reads it."""
    raise NotImplementedError


def refresh(params, shard_size, all_gather):
    """After the update (ZeRO-1/2): params[r] is rank r's whole (N*s,) 16-bit model, of which it just updated
    params[r][r*s:(r+1)*s]; all_gather(shards) -> one (N*s,) array per rank. Write the result into params[r]."""
    raise NotImplementedError


def predict_memory(P, N, stage):
    """{kind: bytes} one rank holds at rest after a step at ZeRO `stage` (0, 1 or 2), fp16 weights and gradients,
    fp32 master, Adam: kinds "params", "grads", "master", "optim:m", "optim:v"."""
    raise NotImplementedError
'''


def _memory_cases():
    yield {"what": "P = 1000, N = 4, stage 0", "P": 1000, "N": 4, "stage": 0}
    yield {"what": "P = 1000, N = 4, stage 1", "P": 1000, "N": 4, "stage": 1}
    yield {"what": "P = 1000, N = 4, stage 2", "P": 1000, "N": 4, "stage": 2}
    # hidden: padding, one rank, many ranks
    yield {"what": "P = 1001, N = 4, stage 2 (padded to 1004)", "P": 1001, "N": 4, "stage": 2}
    yield {"what": "P = 12345, N = 1, stage 1", "P": 12345, "N": 1, "stage": 1}
    yield {"what": "P = 1_000_003, N = 64, stage 1", "P": 1_000_003, "N": 64, "stage": 1}
    yield {"what": "P = 7, N = 8, stage 2 (fewer parameters than ranks)", "P": 7, "N": 8, "stage": 2}


def _check_memory(fn, case):
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel

    row, _, _ = measure_stage(MetaModel.from_params(case["P"], layers=min(4, case["P"])), case["N"], case["stage"])
    want = row["resting"]
    got = fn(case["P"], case["N"], case["stage"])
    got = {k: v for k, v in (got or {}).items() if v} if isinstance(got, dict) else got
    if got != want:
        raise Counterexample(f"you predicted {got!r}; the ledger of rank 0 holds {want!r}")


SHARD, REDUCE, AVERAGE, REFRESH = (shard_offset.EXERCISE, stage2_free.EXERCISE, average_dtype.EXERCISE,
                                   refresh_params.EXERCISE)
MEMORY = Exercise("predict_memory", "bytes per rank at rest, stages 0-2, measured by the ledgers", "predict_memory",
                  "", STARTER, "", cases=_memory_cases, check=_check_memory)

SHARD_VISIBLE = cases_of(SHARD, slice(0, 10), "shard_bounds (visible)")
SHARD_HIDDEN = cases_of(SHARD, slice(10, None), "shard_bounds (hidden: every length up to 16 on up to 5 ranks)")
REDUCE_VISIBLE = cases_of(REDUCE, slice(0, 2), "reduce_layer_grads (visible)")
REDUCE_HIDDEN = cases_of(REDUCE, slice(2, None), "reduce_layer_grads (hidden: padding, more ranks)")
AVERAGE_VISIBLE = cases_of(AVERAGE, slice(0, 2), "average (visible)")
AVERAGE_HIDDEN = cases_of(AVERAGE, slice(2, None), "average (hidden)")
REFRESH_VISIBLE = cases_of(REFRESH, slice(0, 1), "refresh (visible)")
REFRESH_HIDDEN = cases_of(REFRESH, slice(1, None), "refresh (hidden: padding, stage 2 on 4 ranks)")
MEMORY_VISIBLE = cases_of(MEMORY, slice(0, 3), "predict_memory (visible)")
MEMORY_HIDDEN = cases_of(MEMORY, slice(3, None), "predict_memory (hidden: padding, N = 1 and 64)")

ASSIGNMENT = Assignment(2, "ZeRO-1/2: shard, reduce, average, refresh; predict the memory", HANDOUT, STARTER, tuple(
    GradedTest(ex, pts, vis, f"{__name__}:{name}") for name, ex, pts, vis in (
        ("SHARD_VISIBLE", SHARD_VISIBLE, 1, "visible"),
        ("REDUCE_VISIBLE", REDUCE_VISIBLE, 2, "visible"),
        ("AVERAGE_VISIBLE", AVERAGE_VISIBLE, 1, "visible"),
        ("REFRESH_VISIBLE", REFRESH_VISIBLE, 1, "visible"),
        ("MEMORY_VISIBLE", MEMORY_VISIBLE, 1, "visible"),
        ("SHARD_HIDDEN", SHARD_HIDDEN, 1, "after_published"),
        ("REDUCE_HIDDEN", REDUCE_HIDDEN, 1, "after_published"),
        ("AVERAGE_HIDDEN", AVERAGE_HIDDEN, 1, "after_published"),
        ("REFRESH_HIDDEN", REFRESH_HIDDEN, 1, "after_published"),
        ("MEMORY_HIDDEN", MEMORY_HIDDEN, 2, "after_published"),
    )), "a2_zero12.py")
