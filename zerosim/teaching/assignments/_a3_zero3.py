"""Assignment 3 (a week, ~9 h): ZeRO-3 with prefetch. Predict how many gathers a step makes and the peak of gathered
parameters with and without prefetch; gather one layer's parameters from every rank's shard; compute a forward
pass's exposed communication with and without prefetch; explain.

Graded against the engine itself: the gathers against its trace, the peak against the meta backend's ledger (the
engine's own ZeRO-3 step), the gather against zerosim's all-gather, the exposed communication against zerosim's
timeline (_a3_exposed.py). A wrong answer that equals what a known misconception gives (seed 003's "2L − 1", the
two largest layers, one gather per rank, ...) is named.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.teaching.assignments import _a3_exposed as a3_exposed
from zerosim.teaching.assignments._assignment import Assignment
from zerosim.teaching.assignments._parts import Misconception, Part, diagnose, handout_points, tests_of, wrong
from zerosim.teaching.exercises import Counterexample, Exercise, first_difference

STARTER = '''\
"""Assignment 3: ZeRO-3. See `zerosim assignment show 3`."""
import numpy as np


def gather_layer(shards, start, stop, all_gather):
    """shards: N (s,) arrays, rank r's shard of the padded flat parameter buffer. The layer is [start, stop) of
    that buffer. all_gather(arrays) -> one array per rank, the concatenation. Return N arrays of stop - start."""
    raise NotImplementedError


def predict_gathers(layers, checkpoint):
    """How many all-gathers one ZeRO-3 step makes for an MLP of `layers` linear layers (ReLU between them, no
    parameters there), with activation checkpointing on (True) or off (False)."""
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
        named = (GATHER_MISCONCEPTIONS[1] if not calls else GATHER_MISCONCEPTIONS[0] if len(calls) == n and n > 1
                 else None)
        raise wrong(f"all_gather was called {len(calls)} times; one call gathers the layer", named)
    want = flat[case["start"]:case["stop"]]
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, g in enumerate(got):
        problem = first_difference(np.asarray(g), want, f"rank {r}'s layer")
        if problem:
            raise wrong(problem, diagnose(list(got), case, GATHER_MISCONCEPTIONS[1:], _same_lists))


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
        raise wrong(f"you predicted {got!r} bytes; rank 0's ledger peaked at {want} bytes of params",
                    next((m for m in PEAK_MISCONCEPTIONS if m.output(case) == got), None))




def _same_lists(a, b) -> bool:
    if not isinstance(a, (list, tuple)) or len(a) != len(b):
        return False
    return all(np.asarray(x).shape == np.asarray(y).shape and np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(a, b))


def _own_shard_only(case):
    """What a learner who slices each rank's own shard (no gather) returns."""
    n, s, flat = case["n"], case["s"], case["flat"]
    return [flat[r * s:(r + 1) * s][max(0, case["start"] - r * s):max(0, case["stop"] - r * s)] for r in range(n)]


GATHER_MISCONCEPTIONS = (
    Misconception("gathers_per_rank", "you called all_gather once per rank: it is one collective over every rank at "
                  "once (each rank's call is the same call)", lambda case: None),
    Misconception("own_shard_only", "each rank sliced its own shard instead of gathering: right only while a layer "
                  "lies inside one rank's shard; a layer may straddle two or more", _own_shard_only),
)


def _peak_of(sizes, n, live):
    return 2 * (-(-sum(sizes) // n) + live)


PEAK_MISCONCEPTIONS = (
    Misconception("prefetch_two_largest", "with prefetch you held the two largest layers; the ledger holds a layer "
                  "and its neighbour (the next in forward, the previous in backward): the largest *neighbouring* pair",
                  lambda c: _peak_of(c["sizes"], c["N"], sum(sorted(c["sizes"])[-2:])) if c["prefetch"] else None),
    Misconception("no_padding", "you left out the padding: the shard is ceil(P / N), the flat buffer padded to a "
                  "multiple of N",
                  lambda c: 2 * (sum(c["sizes"]) // c["N"] + (max(c["sizes"]) if not c["prefetch"] else max(
                      [c["sizes"][0]] + [a + b for a, b in zip(c["sizes"], c["sizes"][1:])])))),
)


def _gathers_cases():
    yield {"what": "2 layers, no checkpointing", "layers": 2, "checkpoint": False}
    yield {"what": "2 layers, checkpointing", "layers": 2, "checkpoint": True}
    yield {"what": "3 layers, checkpointing", "layers": 3, "checkpoint": True}
    yield {"what": "5 layers, no checkpointing", "layers": 5, "checkpoint": False}
    yield {"what": "6 layers, checkpointing", "layers": 6, "checkpoint": True}


def _gathers(layers: int, checkpoint: bool, stage: int = 3) -> int:
    """All-gather calls in one step of an MLP of `layers` linear layers on 2 ranks (the engine's trace)."""
    from zerosim.cluster import Call, Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine

    widths = [4] * (layers + 1)
    cluster = Cluster(2)
    engine = ZeroEngine(MLP(widths), cluster, stage, Adam(), "fp16-mixed", checkpoint=checkpoint)
    engine.step(make_regression(np.random.default_rng(0), 2, 2, widths))
    return sum(c.collective == "all_gather" for c in cluster.trace.of_type(Call))


def _check_gathers(fn, case):
    from zerosim.teaching._predict import judge

    L, ck = case["layers"], case["checkpoint"]
    verdict = judge(fn(L, ck), _gathers(L, ck), why="each linear layer is gathered before its forward and again "
                    "before its backward (2L); checkpointing re-runs every layer's forward but the last's in "
                    "backward, and each re-run gathers again (3L − 1). A ReLU has no parameters: nothing to gather",
                    wrong=((2 * L - 1, "seed 003's 2·L − 1: that counts the gathers ZeRO-3 adds over ZeRO-2 (which "
                            "makes one, its refresh), not all of them."),
                           (3 * L, "every layer recomputed, the last one too: its input is kept, it is not re-run."),
                           (2 * L if ck else 3 * L - 1, "the other setting's count: with checkpointing every layer but "
                            "the last is gathered a third time, for its recompute.")))
    if not verdict.right:
        raise Counterexample(verdict.message.replace("\n", " "))

# What answers each part's cases in zerosim, refused to a submission: the engine and its all-gather for the gather;
# the engine's trace, the ledgers' run (`measure_stage`) and the timeline for the predictions
ENGINE = ("zerosim.parallel", "zerosim.collectives", "zerosim.reference")
COSTS = ("zerosim.analysis", "zerosim.parallel", "zerosim.reference")
GATHER = Exercise("gather_layer", "gather one layer from every rank's shard, in one all-gather", "gather_layer", "",
                  STARTER, "", cases=_gather_cases, check=_check_gather, grades=ENGINE)
PEAK = Exercise("predict_params_peak", "the peak of parameters with and without prefetch, measured",
                "predict_params_peak", "", STARTER, "", cases=_peak_cases, check=_check_peak, grades=COSTS)
GATHERS = Exercise("predict_gathers", "how many all-gathers a ZeRO-3 step makes, counted in the trace",
                   "predict_gathers", "", STARTER, "", cases=_gathers_cases, check=_check_gathers, grades=COSTS)
EXPOSED = Exercise("exposed_comm", "the exposed communication of a forward pass with and without prefetch, timed",
                   "exposed_comm", "", STARTER, "", cases=a3_exposed.cases, check=a3_exposed.check,
                   grades=("zerosim.analysis",))

V, H = "visible", "after_published"
PARTS = (
    Part("A", "Predict: the gathers a step makes and the peak of gathered params (checked when you submit)", 2.5,
         tests_of(__name__, globals(), "GATHERS", GATHERS, [(slice(0, 2), 1, V), (slice(2, 5), 1, V)])
         + tests_of(__name__, globals(), "PEAK", PEAK, [(slice(0, 1), 1, V), (slice(1, 2), 1, V), (slice(2, 4), 1, V),
                                                        (slice(4, 6), 1, V)])),
    Part("B", "Gather a layer from the shards, in one all-gather", 2.0,
         tests_of(__name__, globals(), "GATHER", GATHER, [(slice(0, 5), 1, V), (slice(5, 9), 1, H),
                                                          (slice(9, None), 1, H)])),
    Part("C", "The exposed communication of a forward pass, with and without prefetch", 3.0,
         tests_of(__name__, globals(), "EXPOSED", EXPOSED,
                  [(slice(0, 1), 1, V), (slice(1, 2), 1, V), (slice(2, 4), 1, H), (slice(4, None), 1, H)])),
    Part("D", "Measure and explain (a page, graded by hand)", 1.5, (), written=True),
)

HANDOUT = f"""\
# Assignment 3: ZeRO-3, one layer at a time, and what prefetching costs

At ZeRO-3 no rank holds the whole model: before a layer runs, every rank all-gathers it from the shards, and
frees it after. Prefetching gathers the next layer while this one computes — it hides communication, and costs
memory. You will predict how many gathers a step makes and the memory they cost, write the gather, then compute the
time prefetching saves. Plan on about nine hours.

**Read first:** notebook 01's stage 3 (`notebooks/01_worked_example.ipynb`: its 46 B and the 16 B / 12 B each GPU
sends), notebook 05 (time and overlap), `docs/glossary.md` (unit, prefetch, exposed), `zerosim timeline --help`;
the seeds' claims this assignment tests are rows of `docs/seeds.md`.

{handout_points(PARTS)}

Start with `zerosim assignment starter 3 > a3_zero3.py`; `zerosim assignment check 3 --file a3_zero3.py` runs the
visible tests. A wrong answer that matches a known mistake is named: "Misconception 'prefetch_two_largest': ...".

## A. Predict
* `predict_gathers(layers, checkpoint)`: how many all-gathers does one ZeRO-3 step make for an MLP of `layers` linear
  layers, with and without activation checkpointing? Seed 003 says "ZeRO-3 requires 2·num_layers − 1 additional calls
  to all_gather": additional to what?
* `predict_params_peak(layer_sizes, N, prefetch)`: a model of layers with n_1, ..., n_L parameters (fp16, 2 bytes
  each) is flattened into one buffer, padded to a multiple of N and cut into N equal shards; a layer may straddle two
  shards. During a ZeRO-3 step, what is the most fp16 parameter memory one rank holds at once — its own shard plus
  what is gathered — (a) gathering one layer at a time, (b) gathering the next layer ahead in forward and backward
  (prefetch 1)?

## B. Gather a layer
`gather_layer(shards, start, stop, all_gather)`: `shards[r]` is rank r's (s,) shard of the padded flat buffer; the
layer is elements [start, stop) of that buffer. Use **one** `all_gather` call (it takes one array per rank and gives
each rank the concatenation) and return, for every rank, the layer's `stop - start` values.
{a3_exposed.HANDOUT}
## D. Measure and explain (a page, in your write-up)
Run `zerosim timeline --model llama-2-7b --ranks 64 --stage 3 --gpus-per-node 8` and the same with
`--forward-prefetch --backward-prefetch pre`, and `zerosim memory` for the peaks. How much exposed communication
did prefetch hide, and how many bytes did it cost? When does it stop paying (`zerosim timeline --sweep`)? Why does
GPU 0 of seed 004 send 16 B at stage 3 while GPU 1 sends 12 B, when the formula 3Ψ(N − 1)/N says 12 B each?
"""

ASSIGNMENT = Assignment(3, "ZeRO-3 with prefetch: predict the gathers and the peak; gather a layer; time the overlap",
                        HANDOUT, STARTER, tuple(t for p in PARTS for t in p.tests), "a3_zero3.py", parts=PARTS)
