"""Assignment 3 (a week): ZeRO-3 with prefetch. Gather one layer's parameters from every rank's shard, then predict
the peak of gathered parameters a rank holds with and without prefetching the next layer, graded against the meta
backend's ledger (the engine's own ZeRO-3 step), and the exposed communication of a forward pass with and without
prefetch, graded against zerosim's timeline (_a3_exposed.py).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.teaching.assignments import _a3_exposed as a3_exposed
from zerosim.teaching.assignments._assignment import Assignment, GradedTest, cases_of
from zerosim.teaching.exercises._grading import Counterexample, Exercise, first_difference

HANDOUT = """\
# Assignment 3: ZeRO-3, one layer at a time, and what prefetching costs

At ZeRO-3 no rank holds the whole model: before a layer runs, every rank all-gathers it from the shards, and
frees it after. Prefetching gathers the next layer while this one computes — it hides communication, and costs
memory. You will write the gather, then predict the memory it costs, then measure the time it saves.

**Read first:** notebook 05 (time and overlap), seed 003, `zerosim timeline --help`.

## 1. Predict
A model of layers with n_1, ..., n_L parameters (fp16, 2 bytes each) is flattened into one buffer, padded to a
multiple of N and cut into N equal shards; a layer may straddle two shards. During a ZeRO-3 step, what is the most
fp16 parameter memory one rank holds at once — its own shard plus what is gathered — (a) gathering one layer at a
time, (b) gathering the next layer ahead in forward and backward (prefetch 1)? Write
`predict_params_peak(layer_sizes, N, prefetch)`.
""" + a3_exposed.HANDOUT + """
## 2. Run
* `gather_layer(shards, start, stop, all_gather)`: `shards[r]` is rank r's (s,) shard of the padded flat buffer;
  the layer is elements [start, stop) of that buffer. Use **one** `all_gather` call (it takes one array per rank
  and gives each rank the concatenation) and return, for every rank, the layer's `stop - start` values.
* Measure: `zerosim timeline --model llama-2-7b --ranks 64 --stage 3 --gpus-per-node 8` and the same with
  `--forward-prefetch --backward-prefetch pre`; and `zerosim memory` for the peaks. Check your prediction of (a)
  and (b) against rank 0's peak of params.

## 3. Explain
How much exposed communication did prefetch hide, and how many bytes did it cost? When does it stop paying
(`zerosim timeline --sweep`)? Seed 003 counts "2·L − 1 extra gathers": how many does the trace show, and why?
"""

STARTER = '''\
"""Assignment 3: ZeRO-3. See `zerosim assignment show 3`."""
import numpy as np


def gather_layer(shards, start, stop, all_gather):
    """shards: N (s,) arrays, rank r's shard of the padded flat parameter buffer. The layer is [start, stop) of
    that buffer. all_gather(arrays) -> one array per rank, the concatenation. Return N arrays of stop - start."""
    raise NotImplementedError


def predict_params_peak(layer_sizes, N, prefetch):
    """The most bytes of fp16 parameters (own shard + gathered layers) one rank holds during a ZeRO-3 step, with
    `prefetch` = 0 (one layer gathered at a time) or 1 (the next layer gathered ahead, forward and backward)."""
    raise NotImplementedError
''' + a3_exposed.STARTER


def _gather_cases():
    rng = np.random.default_rng(3)
    for what, sizes, n in (("2 ranks, one layer inside rank 0's shard", (3, 5), 2),
                           ("4 ranks, a layer straddling two shards", (5, 6, 2), 4),
                           # hidden: padding, a layer across three shards, one rank
                           ("3 ranks, the last layer ends in the padding's shard", (4, 3), 3),
                           ("5 ranks, a layer across three shards", (2, 11, 3), 5),
                           ("1 rank", (4, 4), 1)):
        total = sum(sizes)
        s = math.ceil(total / n)
        flat = np.zeros(n * s, np.float16)
        flat[:total] = rng.standard_normal(total).astype(np.float16)
        starts = np.cumsum((0,) + sizes)
        for i in range(len(sizes)):
            yield {"what": f"{what}: layer {i} of sizes {sizes}", "flat": flat, "n": n, "s": s,
                   "start": int(starts[i]), "stop": int(starts[i + 1])}


def _check_gather(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather

    n, s, flat = case["n"], case["s"], case["flat"]
    shards = [flat[r * s:(r + 1) * s].copy() for r in range(n)]
    calls = []

    def gather(arrays):
        calls.append(len(arrays))
        return all_gather(Cluster(n), arrays)

    got = fn(shards, case["start"], case["stop"], gather)
    if len(calls) != 1:
        raise Counterexample(f"all_gather was called {len(calls)} times; one call gathers the layer")
    want = flat[case["start"]:case["stop"]]
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, g in enumerate(got):
        problem = first_difference(np.asarray(g), want, f"rank {r}'s layer")
        if problem:
            raise Counterexample(problem)


def _peak_cases():
    yield {"what": "layers (1000, 3000, 2000, 500) on 4 ranks, no prefetch", "sizes": (1000, 3000, 2000, 500),
           "N": 4, "prefetch": 0}
    yield {"what": "layers (1000, 3000, 2000, 500) on 4 ranks, prefetch 1", "sizes": (1000, 3000, 2000, 500),
           "N": 4, "prefetch": 1}
    # hidden: padding, one layer, one rank, the largest pair not containing the largest layer
    yield {"what": "layers (4663, 517) on 3 ranks, prefetch 1", "sizes": (4663, 517), "N": 3, "prefetch": 1}
    yield {"what": "one layer of 4059 on 4 ranks, prefetch 1", "sizes": (4059,), "N": 4, "prefetch": 1}
    yield {"what": "layers (3110, 1720, 769, 3997) on 1 rank, no prefetch", "sizes": (3110, 1720, 769, 3997),
           "N": 1, "prefetch": 0}
    yield {"what": "layers (3000, 100, 2900, 2800) on 8 ranks, prefetch 1", "sizes": (3000, 100, 2900, 2800),
           "N": 8, "prefetch": 1}


def _check_peak(fn, case):
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule

    model = MetaModel([(f"layer{i}", n) for i, n in enumerate(case["sizes"])])
    p = case["prefetch"]
    row, _, _ = measure_stage(model, case["N"], 3, comm=CommSchedule(prefetch_forward=p, prefetch_backward=p))
    want = row["peak_by_kind"]["params"]
    got = fn(list(case["sizes"]), case["N"], p)
    if got != want:
        raise Counterexample(f"you predicted {got!r} bytes; rank 0's ledger peaked at {want} bytes of params")


GATHER = Exercise("gather_layer", "gather one layer from every rank's shard, in one all-gather", "gather_layer", "",
                  STARTER, "", cases=_gather_cases, check=_check_gather)
PEAK = Exercise("predict_params_peak", "the peak of parameters with and without prefetch, measured",
                "predict_params_peak", "", STARTER, "", cases=_peak_cases, check=_check_peak)
GATHER_VISIBLE = cases_of(GATHER, slice(0, 5), "gather_layer (visible)")
GATHER_HIDDEN = cases_of(GATHER, slice(5, None), "gather_layer (hidden: padding, three shards, one rank)")
EXPOSED = Exercise("exposed_comm", "the exposed communication of a forward pass with and without prefetch, timed",
                   "exposed_comm", "", STARTER, "", cases=a3_exposed.cases, check=a3_exposed.check)
PEAK_VISIBLE = cases_of(PEAK, slice(0, 2), "predict_params_peak (visible)")
PEAK_HIDDEN = cases_of(PEAK, slice(2, None), "predict_params_peak (hidden: padding, one layer, one rank)")
EXPOSED_VISIBLE = cases_of(EXPOSED, slice(0, 2), "exposed_comm (visible)")
EXPOSED_HIDDEN = cases_of(EXPOSED, slice(2, None), "exposed_comm (hidden: communication-bound, one layer, "
                                                   "compute-bound, a large gather, five layers)")

ASSIGNMENT = Assignment(3, "ZeRO-3 with prefetch: gather a layer; predict the peak and the exposed communication",
                        HANDOUT, STARTER, tuple(
    GradedTest(ex, pts, vis, f"{__name__}:{name}") for name, ex, pts, vis in (
        ("GATHER_VISIBLE", GATHER_VISIBLE, 2, "visible"),
        ("PEAK_VISIBLE", PEAK_VISIBLE, 2, "visible"),
        ("EXPOSED_VISIBLE", EXPOSED_VISIBLE, 2, "visible"),
        ("GATHER_HIDDEN", GATHER_HIDDEN, 2, "after_published"),
        ("PEAK_HIDDEN", PEAK_HIDDEN, 4, "after_published"),
        ("EXPOSED_HIDDEN", EXPOSED_HIDDEN, 3, "after_published"),
    )), "a3_zero3.py")
