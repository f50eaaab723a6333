"""Assignment 1 (a week): collectives and rounding. Write the ring reduce-scatter and all-gather with per-hop
rounding, in NCCL's order, then predict 2048 + 1 + 1 + 1 in fp16 and bf16 and explain it.

Graded against zerosim's own ring (collectives/_calls.py `reduce_scatter`, `all_gather`), bit for bit.
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.assignments._assignment import Assignment, GradedTest, cases_of
from zerosim.teaching.exercises._grading import Counterexample, Exercise, first_difference

HANDOUT = """\
# Assignment 1: the ring, and where 16 bits lose information

You will write the two halves of a ring all-reduce exactly as NCCL orders them, with every hop rounding to the
format on the wire, and then explain why four ranks summing 2048 + 1 + 1 + 1 in fp16 do not all agree.

**Read first:** notebook 02 (`notebooks/02_ring_and_rounding.ipynb`), DESIGN.md "Ring order is NCCL's".

## 1. Predict (before writing any code)
Rank 0 holds 2048 in each of its 4 elements, ranks 1-3 hold 1. After a ring reduce-scatter in fp16, what does
each rank own? And in bf16? Write your four numbers for each format into `predict_2048()`. (fp16 keeps 11
significant bits, bf16 8; ties round to even.)

## 2. Run: write the ring
* `ring_reduce_scatter(xs, wire)`: N ranks, each with a 1-D array of L values. Pad to a multiple of N with
  zeros, cut into N equal chunks of s = ceil(L / N); rank r ends owning chunk r (only its real elements). Step k
  (k = 0..N-2): rank i sends its partial of chunk (i - k - 1) mod N to rank i + 1, which adds its own copy. So
  the sum for chunk c starts at rank c + 1 and is `((x[c+1] + x[c+2]) + ...) + x[c]`. Cast the inputs to `wire`
  first; **every add rounds to `wire`** (as NCCL's kernels do).
* `ring_all_gather(shards)`: rank r holds shard r; every rank ends with all of them, in rank order.

Check yourself: `zerosim assignment check 1 --file a1_ring.py` runs the visible tests.

## 3. Explain
Run `zerosim figures` and open `ring_steps.png`, or use `RingExplorer()` in a notebook. In a few sentences (in
your write-up, not graded here): which hops rounded, why chunks 0 and 1 end at 2052 while 2 and 3 end at 2048,
and why the exact sum 2051 is on no rank. What changes in bf16, and what would an fp32 wire give?
"""

STARTER = '''\
"""Assignment 1: the ring reduce-scatter and all-gather, with per-hop rounding. See `zerosim assignment show 1`."""
import numpy as np


def ring_reduce_scatter(xs, wire):
    """xs: N 1-D arrays of L values (one per rank). wire: the numpy dtype on the wire (np.float16,
    ml_dtypes.bfloat16, np.float32). Returns N arrays: rank r's chunk r of the sum, in `wire`, real elements only."""
    raise NotImplementedError


def ring_all_gather(shards):
    """shards: N 1-D arrays of s values (rank r's shard r). Returns N arrays of N*s values: the shards in order."""
    raise NotImplementedError


def predict_2048():
    """Your prediction, by hand: {"fp16": [4 numbers], "bf16": [4 numbers]}, what ranks 0-3 own after a ring
    reduce-scatter when rank 0 holds 2048 in each of 4 elements and ranks 1-3 hold 1."""
    raise NotImplementedError
'''


def _dtype(name: str):
    from zerosim.precision import get_format

    return get_format(name).dtype


def _rs_cases():
    rng = np.random.default_rng(24)
    yield {"what": "N = 2, L = 4, fp32, small integers (every sum exact)", "n": 2, "L": 4, "wire": "fp32",
           "xs": [np.arange(4, dtype=np.float32) * (r + 1) for r in range(2)]}
    yield {"what": "N = 4, L = 4, fp16: rank 0 holds 2048, ranks 1-3 hold 1", "n": 4, "L": 4, "wire": "fp16",
           "xs": [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]}
    yield {"what": "N = 3, L = 9, fp32 in, fp16 on the wire (cast the inputs first)", "n": 3, "L": 9, "wire": "fp16",
           "xs": [(rng.standard_normal(9) * 1000).astype(np.float32) for _ in range(3)]}
    # the hidden ones from here: padding, more ranks, bf16
    yield {"what": "N = 4, L = 6 (padded to 8: rank 3 owns no real element)", "n": 4, "L": 6,
           "wire": "fp32", "xs": [np.arange(6, dtype=np.float32) + r for r in range(4)]}
    yield {"what": "N = 4, L = 2 (fewer elements than ranks)", "n": 4, "L": 2, "wire": "fp16",
           "xs": [np.array([1.5, -2], np.float16) * (r + 1) for r in range(4)]}
    yield {"what": "N = 8, L = 37, fp16, random values: every hop's rounding matters", "n": 8, "L": 37,
           "wire": "fp16", "xs": [(rng.standard_normal(37) * 300).astype(np.float16) for _ in range(8)]}
    yield {"what": "N = 5, L = 23, bf16, random values", "n": 5, "L": 23, "wire": "bf16",
           "xs": [(rng.standard_normal(23) * 50).astype(np.float32) for _ in range(5)]}
    yield {"what": "N = 1, L = 3 (one rank: nothing moves)", "n": 1, "L": 3, "wire": "fp16",
           "xs": [np.array([1, 2, 3], np.float16)]}


def _check_rs(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    want = reduce_scatter(Cluster(case["n"]), [x.copy() for x in case["xs"]], wire=case["wire"])
    got = fn([x.copy() for x in case["xs"]], _dtype(case["wire"]))
    if not isinstance(got, (list, tuple)) or len(got) != case["n"]:
        raise Counterexample(f"returned {type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}"
                             f"; want a list of {case['n']} arrays, one per rank")
    for r, (g, w) in enumerate(zip(got, want)):
        problem = first_difference(np.asarray(g), w, f"rank {r}'s chunk")
        if problem:
            raise Counterexample(problem)


def _ag_cases():
    yield {"what": "N = 2, shards of 2 (fp16)", "shards": [np.array([1, 2], np.float16), np.array([3, 4], np.float16)]}
    yield {"what": "N = 4, shards of 3 (fp32)", "shards": [np.arange(3, dtype=np.float32) + 10 * r for r in range(4)]}
    yield {"what": "N = 3, shards of 1 (bf16)",
           "shards": [np.array([r + 0.5]).astype(_dtype("bf16")) for r in range(3)]}
    yield {"what": "N = 8, shards of 5 (fp16)", "shards": [np.arange(5, dtype=np.float16) * r for r in range(8)]}


def _check_ag(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather

    n = len(case["shards"])
    want = all_gather(Cluster(n), [s.copy() for s in case["shards"]])
    got = fn([s.copy() for s in case["shards"]])
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, (g, w) in enumerate(zip(got, want)):
        problem = first_difference(np.asarray(g), w, f"rank {r}'s gathered buffer")
        if problem:
            raise Counterexample(problem)


def _predict_cases():
    yield {"what": "fp16", "fmt": "fp16"}
    yield {"what": "bf16", "fmt": "bf16"}


def _check_predict(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    dt = _dtype(case["fmt"])
    xs = [np.full(4, 2048, dt)] + [np.ones(4, dt) for _ in range(3)]
    want = [float(s[0]) for s in reduce_scatter(Cluster(4), xs)]
    got = fn()
    said = got.get(case["fmt"]) if isinstance(got, dict) else None
    if said is None or [float(v) for v in said] != want:
        raise Counterexample(f"your {case['fmt']} prediction {said!r} is not what the ring gives; run your "
                             "ring_reduce_scatter on it, then explain the difference")


RS = Exercise("reduce_scatter", "ring reduce-scatter, NCCL's order, every hop rounded", "ring_reduce_scatter",
              "", STARTER, "", cases=_rs_cases, check=_check_rs)
AG = Exercise("all_gather", "ring all-gather: every rank ends with every shard", "ring_all_gather", "", STARTER, "",
              cases=_ag_cases, check=_check_ag)
PREDICT = Exercise("predict_2048", "2048 + 1 + 1 + 1 predicted by hand", "predict_2048", "", STARTER, "",
                   cases=_predict_cases, check=_check_predict)

RS_VISIBLE = cases_of(RS, slice(0, 3), "reduce_scatter (visible)")
RS_HIDDEN = cases_of(RS, slice(3, None), "reduce_scatter (hidden: padding, N = 1 and 8, bf16)")
AG_VISIBLE = cases_of(AG, slice(0, 2), "all_gather (visible)")
AG_HIDDEN = cases_of(AG, slice(2, None), "all_gather (hidden: bf16, N = 8)")

ASSIGNMENT = Assignment(1, "collectives and rounding", HANDOUT, STARTER, (
    GradedTest(RS_VISIBLE, 3, "visible", f"{__name__}:RS_VISIBLE"),
    GradedTest(AG_VISIBLE, 1, "visible", f"{__name__}:AG_VISIBLE"),
    GradedTest(RS_HIDDEN, 3, "after_published", f"{__name__}:RS_HIDDEN"),
    GradedTest(AG_HIDDEN, 1, "after_published", f"{__name__}:AG_HIDDEN"),
    GradedTest(PREDICT, 2, "after_published", f"{__name__}:PREDICT"),
), "a1_ring.py")
